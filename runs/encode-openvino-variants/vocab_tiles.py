"""DupMAE's OT head alone (``representation.max_pool_logits``) on the real hidden states of the first 500 scifact
documents (``dupmae-minilm``, max length 256, the encoder's batches), fp32, 2 threads, its transform and decoder
packed for oneDNN as ``--compile`` runs them: (row tile, vocabulary tile) pairs around today's (256, 4096), four
interleaved rounds. Prints seconds, GFLOP/s and the largest difference to the first configuration's pooled logits.

    .venv/bin/python runs/encode-openvino-variants/vocab_tiles.py
"""
import json
import logging
import time
import warnings
from pathlib import Path

import torch

import retromae_ir.encode.representation as representation
from retromae_ir.encode import EncoderModel
from retromae_ir.encode.batching import length_batches
from retromae_ir.encode.packed_linear import PackedLinear

TILES = ((256, 2048), (256, 4096), (256, 3072), (128, 4096), (256, 1536), (512, 1024))  # (rows, vocabulary)
CORPUS = Path(__file__).resolve().parents[3] / "shared" / "data" / "beir" / "scifact" / "corpus.jsonl"


def main() -> None:
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(2)
    texts = [f"{row['title']} {row['text']}" for row in map(json.loads, CORPUS.open())][:500]
    model = EncoderModel.from_card("dupmae-minilm", device="cpu", bf16=False)
    ids = model.tokenizer(texts, truncation=True, max_length=256)["input_ids"]
    batches = []
    with torch.inference_mode():
        for rows in length_batches([len(row) for row in ids], 64, model.max_batch_tokens):
            batch = model.tokenizer.pad({"input_ids": [ids[i] for i in rows]}, return_tensors="pt")
            hidden = model.mlm.base_model(**batch).last_hidden_state
            mask = representation.ordinary_token_mask(batch["input_ids"], batch["attention_mask"], model.special_ids)
            batches.append((hidden, mask))
    head = model.lm_head.predictions
    head.decoder = PackedLinear.of(head.decoder)  # as --compile runs it
    head.transform.dense = PackedLinear.of(head.transform.dense)
    rows = sum(int(mask.sum()) for _, mask in batches)
    flops = rows * 2 * 384 * (30522 + 384)
    print(f"{len(texts)} documents, {len(batches)} batches, {rows} ordinary tokens")
    reference = None
    with torch.inference_mode():
        for round_ in range(4):
            for tile_rows, vocab_tile in TILES:
                start = time.perf_counter()
                pooled = torch.cat([representation.max_pool_logits(model.lm_head, hidden, mask, rows=tile_rows,
                                                                   vocab_tile=vocab_tile) for hidden, mask in batches])
                seconds = time.perf_counter() - start
                reference = pooled if reference is None else reference
                print(json.dumps({"round": round_, "rows": tile_rows, "vocab_tile": vocab_tile, "s": round(seconds, 3),
                                  "gflops_per_s": round(flops / seconds / 1e9, 1),
                                  "max_abs_difference": (pooled - reference).abs().max().item()}), flush=True)

if __name__ == "__main__":
    main()

"""DupMAE's OT head alone (``representation.max_pool_logits``) on the real hidden states of the first 500 scifact
documents (``dupmae-minilm``, max length 256, the encoder's own batches), fp32, 2 threads: row tiles of 512, 384,
256 and 128 packed rows, with the head's transform dense on MKL (``addmm``) or packed for oneDNN
(``PackedLinear``); rounds interleaved. Prints seconds, GFLOP/s (decoder and transform products) and the largest
difference to the first configuration's pooled logits.

    .venv/bin/python runs/encode-head-rows/head_rows.py > runs/encode-head-rows/head_rows.log
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
    transforms = {"addmm": head.transform.dense, "packed": PackedLinear.of(head.transform.dense)}
    rows = sum(int(mask.sum()) for _, mask in batches)
    flops = rows * 2 * 384 * (30522 + 384)
    print(f"{len(texts)} documents, {len(batches)} batches, {rows} ordinary tokens")
    reference = None
    with torch.inference_mode():
        for round_ in range(3):
            for tile_rows in (512, 384, 256, 128):
                for name, dense in transforms.items():
                    head.transform.dense = dense
                    start = time.perf_counter()
                    pooled = torch.cat([representation.max_pool_logits(model.lm_head, hidden, mask, rows=tile_rows)
                                        for hidden, mask in batches])
                    seconds = time.perf_counter() - start
                    reference = pooled if reference is None else reference
                    print(json.dumps({"round": round_, "rows": tile_rows, "transform": name, "s": round(seconds, 3),
                                      "gflops_per_s": round(flops / seconds / 1e9, 1),
                                      "max_abs_difference": (pooled - reference).abs().max().item()}), flush=True)


if __name__ == "__main__":
    main()

"""OpenVINO graph variants of one encoder under ``--compile openvino``, on the same slices, rounds alternating:
transformers' sdpa attention (what ``--compile openvino`` converts), eager attention (matmul + softmax: OpenVINO
fuses the output transpose into its attention subgraph, 6 Transpose nodes instead of 11 for MiniLM), and either
with a [B, 1, 1, L] mask given to the encoder instead of the [B, 1, L, L] one transformers builds. Prints the
dense vectors' agreement with the first variant, then docs/s and the fraction of the fp32 ceiling measured each
round (the work that runs, as benchmarks/encode_alone.py counts it).

    .venv/bin/python runs/encode-openvino-variants/attention_variants.py ENCODER ROUNDS VARIANT,VARIANT,...
"""
from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

import torch

from retromae_ir.encode import EncoderModel
from retromae_ir.encode import openvino_backbone

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO.parent / "shared" / "data" / "beir" / "scifact" / "corpus.jsonl"
sys.path.insert(0, str(REPO / "benchmarks"))
from encode_alone import flops  # noqa: E402
from encode_search import matmul_ceiling, model_flops_per_doc, token_counts  # noqa: E402

CONVERTED = openvino_backbone._LastHiddenState.forward  # what --compile openvino traces


def with_broadcast_mask(self, input_ids, attention_mask):
    """The traced forward with a [B, 1, 1, L] mask (additive for eager attention, boolean for sdpa)."""
    mask = attention_mask[:, None, None, :]
    if self.transformer.config._attn_implementation == "eager":
        mask = (1.0 - mask.float()) * torch.finfo(torch.float32).min
    return self.transformer(input_ids=input_ids, attention_mask=mask.bool() if mask.dtype == torch.long else mask
                            ).last_hidden_state


def compiled(encoder: str, variant: str, warm: list[str]) -> EncoderModel:
    attention, _, mask = variant.partition("+")
    openvino_backbone._LastHiddenState.forward = with_broadcast_mask if mask == "mask4" else CONVERTED
    model = EncoderModel.from_card(encoder, device="cpu", bf16=False)
    owner, name = model._backbone()
    getattr(owner, name).set_attn_implementation(attention)
    model.compile_backbone("openvino")
    model.encode_passage(warm)
    return model


def main() -> None:
    logging.disable(logging.WARNING)
    encoder, rounds, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
    torch.set_num_threads(2)
    texts = [f"{row['title']} {row['text']}" for row in map(json.loads, CORPUS.open())]
    models = {variant: compiled(encoder, variant, texts[-64:]) for variant in variants}
    reference = models[variants[0]].encode_passage(texts[:300])
    for variant, model in models.items():
        out = model.encode_passage(texts[:300])
        cosine = torch.nn.functional.cosine_similarity(torch.as_tensor(reference.dense), torch.as_tensor(out.dense))
        sparse = (f", sparse max abs difference {abs(reference.sparse - out.sparse).max():.2e}"
                  if reference.sparse is not None else "")
        print(f"{variant}: dense min cosine to {variants[0]} {cosine.min().item():.8f}{sparse}", flush=True)
    for round_ in range(rounds):
        ceiling = matmul_ceiling(2, dtypes=("fp32",))["fp32"]
        order = list(models.items()) if round_ % 2 == 0 else list(reversed(models.items()))
        part = texts[500 * (1 + round_ % 4):500 * (2 + round_ % 4)]
        for variant, model in order:
            start = time.perf_counter()
            model.encode_passage(part)
            seconds = time.perf_counter() - start
            gflops = flops(model, part, model_flops_per_doc, token_counts) / seconds / 1e9
            print(f"round {round_} {encoder} {variant}: {len(part) / seconds:.2f} docs/s {gflops:.1f} GFLOP/s "
                  f"{gflops / ceiling:.3f} of the ceiling {ceiling:.1f}", flush=True)


if __name__ == "__main__":
    main()

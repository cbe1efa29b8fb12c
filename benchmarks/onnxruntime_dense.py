"""ONNX Runtime against ``--compile`` and eager for the dense MiniLM pass: the lever issue #12 asked to measure.

    .venv/bin/pip install --target /tmp/ortpkgs onnxruntime onnx onnxscript   # not a dependency of the toolkit
    rm -rf /tmp/ortpkgs/numpy* /tmp/ortpkgs/packaging* /tmp/ortpkgs/typing_extensions*   # keep the venv's own
    PYTHONPATH=/tmp/ortpkgs .venv/bin/python benchmarks/onnxruntime_dense.py

The packaged MiniLM's encoder is exported to ONNX (opset 17, TorchScript exporter, [CLS] output), once as is and
once through ``onnxruntime.transformers.optimizer`` (BERT fusions: attention, LayerNorm, GELU); each runs in an
``InferenceSession`` (all graph optimisations, 2 intra-op threads) over the first 1,000 scifact documents in
batches of 64 sorted by length, then ours eager and ``compile_frozen`` over the same documents, in one process
(ours now also caps tokens per pass on a CPU, which it did not when docs/encoders.md's figures were measured). Prints docs/s and the smallest cosine of ONNX Runtime's [CLS] vectors to ours.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "beir" / "scifact" / "corpus.jsonl"
WORK = Path("/tmp/retromae_ir-onnx")
BATCH = 64


class ClsOutput(torch.nn.Module):
    """The encoder's [CLS] hidden state: what ``minilm-cls`` returns (no projection, no normalisation)."""

    def __init__(self, backbone):
        super().__init__()
        self.backbone = backbone

    def forward(self, input_ids, attention_mask):
        return self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state[:, 0]


def export(model, texts: list[str]) -> dict[str, Path]:
    """The ONNX graph as exported, and the one with ONNX Runtime's BERT fusions."""
    from onnxruntime.transformers import optimizer

    WORK.mkdir(exist_ok=True)
    plain, fused = WORK / "minilm.onnx", WORK / "minilm-bert-fusions.onnx"
    sample = model.tokenizer(texts[:2], padding=True, truncation=True, max_length=256, return_tensors="pt")
    axes = {"input_ids": {0: "batch", 1: "length"}, "attention_mask": {0: "batch", 1: "length"}, "cls": {0: "batch"}}
    torch.onnx.export(ClsOutput(model.backbone).eval(), (sample["input_ids"], sample["attention_mask"]), str(plain),
                      dynamo=False, input_names=["input_ids", "attention_mask"], output_names=["cls"],
                      dynamic_axes=axes, opset_version=17)
    config = model.backbone.config
    optimizer.optimize_model(str(plain), model_type="bert", num_heads=config.num_attention_heads,
                             hidden_size=config.hidden_size).save_model_to_file(str(fused))
    return {"onnxruntime": plain, "onnxruntime + BERT fusions": fused}


def session(path: Path, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def encode_with(sess, tokenizer, texts: list[str]) -> np.ndarray:
    """[CLS] vectors in input order, in ``EncoderModel.encode``'s length-sorted batches (without its CPU token
    cap, which came after this measurement)."""
    from retromae_ir.encode.batching import length_batches

    ids = tokenizer(texts, truncation=True, max_length=256)["input_ids"]
    out = np.zeros((len(texts), sess.get_outputs()[0].shape[-1] or 384), np.float32)
    for rows in length_batches([len(row) for row in ids], BATCH):  # no token cap: batches of 64, as measured
        batch = tokenizer.pad({"input_ids": [ids[i] for i in rows]}, return_tensors="np")
        out[rows] = sess.run(None, {name: batch[name].astype(np.int64) for name in ("input_ids", "attention_mask")})[0]
    return out


def docs_per_s(run, texts: list[str]):
    start = time.perf_counter()
    out = run(texts)
    return len(texts) / (time.perf_counter() - start), out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/onnxruntime_dense.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    from retromae_ir.encode.base import EncoderModel

    torch.set_num_threads(args.threads)
    texts = [f"{row['title']} {row['text']}" for row in map(json.loads, args.corpus.open())][:args.docs]
    model = EncoderModel.from_card("minilm-cls", device="cpu", bf16=False)
    model.encode_passage(texts[:BATCH])  # untimed, as every other row: start-up and first allocations
    speed, reference = docs_per_s(lambda t: model.encode_passage(t).dense, texts)
    results = {"ours, eager": speed}
    for name, path in export(model, texts).items():
        sess = session(path, args.threads)
        encode_with(sess, model.tokenizer, texts[:BATCH])  # untimed: session start-up
        results[name], vectors = docs_per_s(lambda t: encode_with(sess, model.tokenizer, t), texts)
        cosine = (vectors * reference).sum(1) / np.linalg.norm(vectors, axis=1) / np.linalg.norm(reference, axis=1)
        print(f"{name}: smallest cosine to ours {cosine.min():.7f}", flush=True)
    model.compile_frozen().encode_passage(texts[:BATCH])  # untimed: compilation
    results["ours, --compile"] = docs_per_s(lambda t: model.encode_passage(t).dense, texts)[0]
    for name, value in results.items():
        print(f"| {name} | {value:.2f} | {value / results['ours, --compile']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

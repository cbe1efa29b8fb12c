"""Where an encoder's time goes: ``torch.profiler``'s table of one encode pass, eager or ``--compile``d.

    .venv/bin/python benchmarks/profile_encode.py                              # minilm-cls, eager
    .venv/bin/python benchmarks/profile_encode.py --compile                    # compile_frozen
    .venv/bin/python benchmarks/profile_encode.py --compile --attention eager  # bmm + softmax attention, compiled
    .venv/bin/python benchmarks/profile_encode.py --compile openvino           # OpenVINO's own node times too

The first ``--docs`` scifact documents are encoded once untimed (compilation, warm-up), then once under the
profiler; prints the ops by self CPU time, and each op's share. Under ``--compile openvino`` the transformer is
one opaque call to torch's profiler, so OpenVINO's per-node times (``PERF_COUNT``) are summed too: by node type
and kernel, the fused attention's GFLOP/s, and the first layer's linear layers by name, with GFLOP/s over the
padded tokens they ran on.
"""
from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

import torch

from retromae_ir.cli import add_compile_argument

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "beir" / "scifact" / "corpus.jsonl"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/profile_encode.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--encoder", default="minilm-cls")
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--docs", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    add_compile_argument(parser)  # EncoderModel.compile_backbone
    parser.add_argument("--attention", choices=["sdpa", "eager"], default="sdpa",
                        help="transformers' attention: PyTorch's fused kernel (sdpa) or bmm + softmax (eager)")
    args = parser.parse_args(argv)
    from torch.profiler import ProfilerActivity, profile

    from retromae_ir.encode.base import EncoderModel

    torch.set_num_threads(args.threads)
    texts = [f"{row['title']} {row['text']}" for row in map(json.loads, args.corpus.open())][:args.docs]
    model = EncoderModel.from_card(args.encoder, device="cpu", bf16=False)
    owner, name = model._backbone()
    getattr(owner, name).set_attn_implementation(args.attention)
    nodes = None
    if args.compile == "openvino":
        model.compile_backbone("openvino", properties={"PERF_COUNT": True})
    elif args.compile:
        model.compile_backbone(args.compile)
    model.encode_passage(texts)  # untimed: compilation, allocator warm-up
    if args.compile == "openvino":
        nodes = openvino_node_times(getattr(owner, name))
    with profile(activities=[ProfilerActivity.CPU]) as profiled:
        model.encode_passage(texts)
    ids = model.tokenizer(texts, truncation=True, max_length=model.card.max_passage_length)["input_ids"]
    tokens = sum(map(len, ids))
    print(f"{args.encoder}, {args.docs} documents ({tokens} tokens), fp32, {args.threads} threads, attention "
          f"{args.attention}{', --compile ' + args.compile if args.compile else ''}")
    print(profiled.key_averages().table(sort_by="self_cpu_time_total", row_limit=10))
    if nodes is not None:
        print_openvino_nodes(nodes, model.backbone_config, model.first_token_last_layer)
    return 0


def openvino_node_times(backbone) -> dict:
    """From now on, sum OpenVINO's per-node times (and the padded tokens) over every call of ``backbone``."""
    nodes = {"types": collections.Counter(), "layer 0": collections.Counter(), "kernels": {}, "padded_tokens": 0,
             "attention_pairs": 0}
    forward = backbone.forward

    def counted(input_ids, attention_mask, **kwargs):
        out = forward(input_ids, attention_mask, **kwargs)
        nodes["padded_tokens"] += input_ids.numel()
        nodes["attention_pairs"] += input_ids.shape[0] * input_ids.shape[1] ** 2  # (query, key) pairs a head
        for node in backbone.request.profiling_info:
            seconds = node.real_time.total_seconds()
            nodes["types"][(node.node_type, node.exec_type)] += seconds
            if node.node_type == "FullyConnected" and ".layer.0." in node.node_name:
                nodes["layer 0"][node.node_name] += seconds
                nodes["kernels"][node.node_name] = node.exec_type
        return out

    backbone.forward = counted
    return nodes


def print_openvino_nodes(nodes: dict, config, first_token_last_layer: bool = False) -> None:
    total = sum(nodes["types"].values())
    print(f"\nOpenVINO nodes ({total:.3f} s in all, {nodes['padded_tokens']} padded tokens)")
    print("| node type | kernel | s | share |\n| --- | --- | --- | --- |")
    for (kind, kernel), seconds in nodes["types"].most_common(8):
        print(f"| {kind} | {kernel} | {seconds:.3f} | {seconds / total:.1%} |")
    d, f = config.hidden_size, config.intermediate_size
    attention = sum(seconds for (kind, _), seconds in nodes["types"].items() if kind == "Subgraph")
    full = config.num_hidden_layers - first_token_last_layer  # a trimmed last layer: one query row a document
    pairs = nodes["attention_pairs"] * full + (nodes["padded_tokens"] if first_token_last_layer else 0)
    flops = 4 * pairs * d  # QK^T and AV over every head
    print(f"\nthe fused attention (ScaledDotProductAttention, a Subgraph node): {flops / attention / 1e9:.0f} GFLOP/s "
          f"over the padded batches")
    print("\n| layer 0 linear | kernel | s | GFLOP/s |\n| --- | --- | --- | --- |")
    for node, seconds in nodes["layer 0"].items():
        width = (d, f) if "intermediate" in node else (f, d) if ".output.dense" in node and "attention" not in node \
            else (d, d)
        flops = 2 * nodes["padded_tokens"] * width[0] * width[1]
        print(f"| {node.split('layer.0.')[1].split('/')[0]} | {nodes['kernels'][node]} | {seconds:.3f} | "
              f"{flops / seconds / 1e9:.0f} |")


if __name__ == "__main__":
    raise SystemExit(main())

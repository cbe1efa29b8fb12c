"""Encoding and search benchmarks of retromae_ir against the Pyserini tools a user would otherwise run.

Both sides run in one invocation, same backbone (the packaged all-MiniLM-L6-v2), same documents, same threads:

1. the machine's matmul ceiling (fp32, bf16) on ``--device``, measured here;
2. encode throughput on the first ``--encode-docs`` documents: the loop of ``python -m pyserini.encode``
   (AutoDocumentEncoder, CLS, batches of 64 in corpus order) and the same loop with Pyserini's
   SpladeDocumentEncoder over the same checkpoint and MLM head (the sparse pass a user would add: dense + SPLADE
   is Pyserini's two-pass answer to DupMAE's one pass) vs our EncoderModel with the dense-only card and with
   the DupMAE card (what ``python -m retromae_ir.encode corpus`` runs), each in ``--dtype`` and, on the CPU,
   in int8 too, and the DupMAE card with the OT max-pool route its device does not take (on a CPU the naive one
   it had before #12, on a CUDA GPU the packed, tiled one); in one process, every system
   first given one untimed batch, then ``--rounds`` (at least 2) rounds in alternating order (odd rounds
   reversed, so none is always first or last), best of its rounds, max length 256, batches of 64 (ours split further on a CPU by the token cap of
   ``retromae_ir.encode.batching``); also as a fraction of the matmul ceiling of
   ``--device`` in ``--dtype``, the highest of the routes measured at the start, in each round and after the last
   (FLOPs from the real token counts: SPLADE's head over every token, ours over the
   ordinary tokens only, which is all it computes on a CPU; on CUDA over every position, its route there). ``--device cuda`` runs every encoder on the GPU (timings
   synchronised; no int8 rows, int8 is CPU only) and ``--dtype bf16`` runs every one under bf16 autocast (ours:
   ``EncoderModel(bf16=True)``; Pyserini's: its ``encode`` calls wrapped in ``torch.autocast``);
3. bf16 and int8 vs fp32 on the same documents, on the CPU: cosine of the dense vectors, overlap of the sparse
   top-k;
4. search on an index of ``--index`` (a ``retromae_ir.encode corpus`` output): queries/s of our exact hybrid,
   Pyserini's HybridSearcher (faiss + impact, pre-encoded queries) and faiss alone, each over all queries in one
   ``batch_search`` on ``--threads`` threads after an untimed pass; how often each hybrid's
   top-10 equals brute force's (Eq. 12 over every document) and recall@10 of the exact ranking; nDCG@10;
5. index sizes against a 768-d flat index of the same documents.

    python benchmarks/encode_search.py --index DIR --queries QDIR --topics T --qrels Q --corpus C --work W

The encode part alone needs only ``--corpus`` and ``--work`` (no index, no Lucene, no Java), e.g. in bf16 on a GPU:

    python benchmarks/encode_search.py --corpus ../shared/data/beir/scifact/corpus.jsonl --work W \\
        --device cuda --dtype bf16 --encode-docs 1000 --rounds 3 --skip precision search sizes

On an AMD CPU with AVX-512, run it once as it is and once with ``LD_PRELOAD=$(.venv/bin/python -m
retromae_ir.mkl_shim)`` (MKL's AVX-512 kernels for every system in the process, Pyserini's too); the table says
which it was.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from retromae_ir.cli import Repeatable
from retromae_ir.encode import fused_max_pool


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def clock(device: str | torch.device = "cpu") -> float:
    """``time.perf_counter()`` once the device's queued work is done (CUDA runs asynchronously)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def autocast(device: str | torch.device, dtype: str):
    """bf16 autocast on ``device`` for ``dtype`` "bf16", nothing for "fp32"."""
    if dtype == "bf16":
        return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def matmul_ceiling(threads: int, size: int | None = None, seconds: float = 0.5, device: str = "cpu",
                   dtypes: tuple[str, ...] = ("fp32", "bf16")) -> dict[str, float]:
    """GFLOP/s of a square product (2048 on the CPU, 8192 on a GPU) on ``device`` in each of ``dtypes``: the
    faster of :func:`matmul_paths`' two routes, each best of three rounds of about ``seconds``."""
    return {name: max(paths.values()) for name, paths in matmul_paths(threads, size, seconds, device, dtypes).items()}


def matmul_paths(threads: int, size: int | None = None, seconds: float = 0.5, device: str = "cpu",
                 dtypes: tuple[str, ...] = ("fp32", "bf16")) -> dict[str, dict[str, float]]:
    """GFLOP/s of a product by each route our encoders can take on ``device``: ``a @ b`` (MKL's gemm on a CPU,
    cuBLAS on a GPU; square, ``size``) and, on a CPU, an ``nn.Linear`` of ``size`` x ``size`` over ``size / 2``
    rows frozen into ``torch.compile`` (inductor pre-packs its weight for oneDNN) and through OpenVINO
    (``--compile openvino``). MKL's and oneDNN's differ by 2x on AMD's AVX-512 EPYC (about 220 and 490 GFLOP/s
    fp32 on 2 cores), so a ceiling from ``a @ b`` alone is no ceiling there: the compiled encoders exceed it. In
    fp32, where DupMAE's OT head runs on our fused kernel, that kernel's square product too: it ran the head above
    MKL's square product on an AVX2 EPYC (runs/ot-kernel/); and where ``--compile kernels`` runs, its linear
    layers' kernel on the square product."""
    torch.set_num_threads(threads)
    size = size or (8192 if torch.device(device).type == "cuda" else 2048)
    out = {}
    for name in dtypes:
        a, b = (torch.randn(size, size, dtype=DTYPES[name], device=device) for _ in range(2))
        out[name] = {"a @ b": gflops(lambda: a @ b, 2 * size ** 3, device, seconds)}
        if torch.device(device).type == "cpu":  # the route --compile's linear layers take (FrozenCompiled)
            from retromae_ir.encode.base import FrozenCompiled

            linear = torch.nn.Linear(size, size).eval()
            packed = FrozenCompiled(copy.deepcopy(linear).to(DTYPES[name]))
            rows = a[: size // 2]  # a batch of another size than the weight's: no duck-sized static shape
            with torch.no_grad():
                out[name]["oneDNN (frozen torch.compile Linear)"] = gflops(lambda: packed(rows), size ** 3, device,
                                                                            seconds)
            out[name]["OpenVINO Linear"] = gflops(openvino_linear(linear, rows), size ** 3, device, seconds)
            if name == "fp32" and fused_max_pool.chosen_here():  # our own product: it outran MKL's at the OT head
                out[name]["fused OT kernel"] = gflops(fused_kernel_product(a, b), 2 * size ** 3, device, seconds)
            if kernels_run_here(device, name):  # --compile kernels' linear layers
                from retromae_ir.encode.kernel_backbone import PackedProduct

                product = PackedProduct(linear)
                square = gflops(lambda: product(a), 2 * size ** 3, device, seconds)
                out[name]["BERT linear kernel (--compile kernels)"] = square
        del a, b
    return out


def kernels_run_here(device: str, dtype: str) -> bool:
    """Whether ``--compile kernels`` runs on ``device`` in ``dtype``: fp32 on a CPU with AVX2 and FMA."""
    from retromae_ir.c_library import avx2_missing

    return torch.device(device).type == "cpu" and dtype == "fp32" and avx2_missing() is None


def fused_kernel_product(a: torch.Tensor, b: torch.Tensor):
    """A call of the fused OT kernel (:mod:`retromae_ir.encode.fused_max_pool`) on the square product ``a`` x
    ``b``, every row one document's (the max over rows then costs one comparison per product row and column)."""
    from retromae_ir.encode.packed_linear import PackedLinear

    decoder, owner = PackedLinear(b.T.contiguous()), torch.zeros(a.shape[0], dtype=torch.int64)
    return lambda: fused_max_pool.fused_max_pool(a, decoder, owner, 1)


def openvino_linear(linear: torch.nn.Linear, rows: torch.Tensor):
    """A call of ``linear`` on ``rows`` through OpenVINO's CPU plugin (``--compile openvino``'s route), in the
    precision of ``rows``, on torch's thread count."""
    import openvino as ov

    from retromae_ir.encode.openvino_backbone import cpu_request

    graph = ov.convert_model(linear, example_input=rows.float())  # an fp32 Linear; the precision is OpenVINO's
    request = cpu_request(graph, torch.get_num_threads(), bf16=rows.dtype == torch.bfloat16)
    x = rows.float().numpy()
    return lambda: request.infer({0: x}, share_inputs=True)


def gflops(product, flops: int, device: str, seconds: float) -> float:
    """GFLOP/s of ``product()``: one untimed call (library start-up, kernel choice, compilation), then the best
    of three rounds of about ``seconds`` each (shared machine), synchronised on a GPU."""
    product()
    start = clock(device)
    product()
    repeats = max(1, int(seconds / (clock(device) - start)))
    best = float("inf")
    for _ in range(3):
        start = clock(device)
        for _ in range(repeats):
            product()
        best = min(best, clock(device) - start)
    return flops * repeats / best / 1e9


def model_flops_per_doc(config, tokens: np.ndarray, lm_head: bool, head_tokens: np.ndarray | None = None,
                        first_token_last_layer: bool = False) -> np.ndarray:
    """Forward FLOPs of a BERT encoder for documents of ``tokens`` tokens, plus its MLM head over ``head_tokens``
    of them (all ``tokens`` when None; ours runs it on the ordinary tokens only) when ``lm_head``. The work that
    runs: with ``first_token_last_layer`` (our [CLS]-pooled dense cards, ``encode/first_token.py``) the last
    layer's keys and values are computed for every token, its query, attention, output and FFN for the first."""
    d, f, layers, vocab = config.hidden_size, config.intermediate_size, config.num_hidden_layers, config.vocab_size
    projections = 2 * (4 * d * d + 2 * d * f)  # per token and layer: Q, K, V, O and the FFN
    attention = 2 * 2 * tokens * d  # per query token and layer: QK^T and AV
    body = tokens * layers * (projections + attention)
    if first_token_last_layer:
        body = body - (tokens - 1) * (projections - 2 * 2 * d * d + attention)
    head = 2 * (d * d + d * vocab) * (tokens if head_tokens is None else head_tokens) if lm_head else 0
    return body + head


def padded_lengths(tokens: np.ndarray, batch: int) -> np.ndarray:
    """Each document's length as a loop over batches of ``batch`` in corpus order runs it (Pyserini's encode):
    its batch's longest."""
    padded = tokens.copy()
    for start in range(0, len(tokens), batch):
        padded[start:start + batch] = tokens[start:start + batch].max()
    return padded


def token_counts(tokenizer, texts: list[str], max_length: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens of each text after truncation at ``max_length``, and how many of them are ordinary (not special)."""
    ids = tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]
    special = set(tokenizer.all_special_ids)
    return np.array([len(row) for row in ids]), np.array([sum(i not in special for i in row) for row in ids])


def splade_checkpoint(encoder, work: Path) -> Path:
    """Our DupMAE encoder's checkpoint (its backbone and the MLM head it runs: MiniLM's identity head) as a folder
    Pyserini's SpladeDocumentEncoder loads: ``AutoModelForMaskedLM.from_pretrained(use_safetensors=False)``
    reads ``pytorch_model.bin``, which transformers 5 no longer writes, so the state dict is saved by hand."""
    folder = work / "splade-checkpoint"
    if not (folder / "pytorch_model.bin").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        encoder.mlm.config.save_pretrained(folder)
        encoder.tokenizer.save_pretrained(folder)
        torch.save({key: value.cpu() for key, value in encoder.mlm.state_dict().items()},
                   folder / "pytorch_model.bin.tmp")
        (folder / "pytorch_model.bin.tmp").replace(folder / "pytorch_model.bin")
    return folder


def autocast_log_is_fp32(device: str | torch.device) -> bool:
    """Whether bf16 autocast on ``device`` runs ``torch.log`` in fp32 (CUDA's autocast does; the CPU's keeps bf16)."""
    with autocast(device, "bf16"):
        return torch.log(torch.ones(1, device=device, dtype=torch.bfloat16)).dtype == torch.float32


def fp32_logits(model: torch.nn.Module) -> None:
    """Have ``model`` return its logits in fp32. SpladeDocumentEncoder pools ``log(1 + relu(logits))`` and calls
    ``.numpy()`` on the result, which fails on bf16: under CUDA autocast its ``log`` runs in fp32 anyway, under the
    CPU's it does not, and there the logits are cast to fp32 first (one cast of [B, L, V], as CUDA's ``log`` does)."""
    forward = model.forward

    def forward_fp32_logits(*args, **kwargs):
        out = forward(*args, **kwargs)
        out["logits"] = out["logits"].float()
        return out

    model.forward = forward_fp32_logits


class Stopwatch:
    """Seconds spent in the wrapped methods since the last ``reset``."""

    def __init__(self):
        self.seconds = 0.0

    def reset(self):
        self.seconds = 0.0

    def wrap(self, method):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
        return timed


def write_corpora(source: Path, work: Path, n: int) -> tuple[Path, Path, list[str]]:
    """The first ``n`` documents as a BEIR corpus and as {"id","contents"} JSONL (what pyserini.encode reads)."""
    from retromae_ir.data.readers import iter_beir_corpus

    docs = []
    for doc in iter_beir_corpus(source):
        docs.append(doc)
        if len(docs) == n:
            break
    folder = work / f"docs{n}"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "corpus.jsonl", "w") as beir, open(folder / "pyserini.jsonl", "w") as flat:
        for doc in docs:
            beir.write(json.dumps({"_id": doc.docid, "title": doc.title, "text": doc.text}) + "\n")
            flat.write(json.dumps({"id": doc.docid, "contents": doc.contents}) + "\n")
    return folder / "corpus.jsonl", folder / "pyserini.jsonl", [d.contents for d in docs]


PYSERINI_DENSE = "pyserini.encode AutoDocumentEncoder (CLS, dense)"
PYSERINI_SPLADE = "pyserini.encode SpladeDocumentEncoder (sparse)"
OURS_DENSE = "retromae_ir minilm-cls (dense)"
OURS_DUPMAE = "retromae_ir dupmae-minilm (dense + sparse)"
OURS_DENSE_INT8 = "retromae_ir minilm-cls int8 (dense)"
OURS_DUPMAE_INT8 = "retromae_ir dupmae-minilm int8 (dense + sparse)"
OURS_DUPMAE_NAIVE = "retromae_ir dupmae-minilm (dense + sparse), naive OT max-pool"
OURS_DUPMAE_TILED = "retromae_ir dupmae-minilm (dense + sparse), packed+tiled OT max-pool (forced)"
OURS_DENSE_COMPILED = "retromae_ir minilm-cls --compile (dense)"
OURS_DUPMAE_COMPILED = "retromae_ir dupmae-minilm --compile (dense + sparse)"
OURS_DENSE_OPENVINO = "retromae_ir minilm-cls --compile openvino (dense)"
OURS_DUPMAE_OPENVINO = "retromae_ir dupmae-minilm --compile openvino (dense + sparse)"
OURS_DENSE_KERNELS = "retromae_ir minilm-cls --compile kernels (dense)"
OURS_DUPMAE_KERNELS = "retromae_ir dupmae-minilm --compile kernels (dense + sparse)"


def encode_benchmark(args, start_routes: dict | None = None) -> dict:
    """Documents/s of the encoders in one process, best of ``--rounds`` (the machine is shared), odd rounds in
    reverse order; the matmul ceiling of ``--device`` in ``--dtype`` is the highest of ``start_routes`` (main's
    measurement) and the routes measured before every round and after the last.

    Every encoder runs on ``--device`` in ``--dtype`` (bf16: autocast around Pyserini's ``encode`` calls, our
    EncoderModel with ``bf16=True``); the int8 rows run on the CPU only. Each system first encodes one untimed
    batch (library start-up, kernel choice, first allocations); on a GPU the clock is read after
    ``torch.cuda.synchronize()``.

    Pyserini's SPLADE encoder runs exactly as ``python -m pyserini.encode ... --encoder-class splade`` calls it
    (batches of 64, max length 256, autograd on as there: several [64, 256, 30522] fp32 tensors, 2 GB each, live
    at once), over a copy of the DupMAE card's checkpoint and head
    (:func:`splade_checkpoint`). Its output is a Python dict per document of every non-zero weight: with the
    untrained identity head most of the 30522 are non-zero, so that conversion is timed apart and a second row
    gives SPLADE without it (model, activation and max-pool only), the conservative anchor."""
    from pyserini.encode import AutoDocumentEncoder, SpladeDocumentEncoder
    from transformers import AutoConfig

    from retromae_ir.encode import EncoderModel
    from retromae_ir.encode.cards import load_card
    from retromae_ir.mkl_shim import loaded as mkl_shim_loaded

    device, dtype = args.device, args.dtype
    torch.set_num_threads(args.threads)
    minilm = load_card("minilm-cls").checkpoint_path()
    texts = write_corpora(args.corpus, args.work, args.encode_docs)[2]
    pyserini = AutoDocumentEncoder(minilm, device=device, pooling="cls")
    ours = {name: EncoderModel.from_card(name, device=device, bf16=dtype == "bf16")
            for name in ("minilm-cls", "dupmae-minilm")}
    splade = SpladeDocumentEncoder(str(splade_checkpoint(ours["dupmae-minilm"], args.work)), device=device)
    check = ours["minilm-cls"].tokenizer(texts[:1], truncation=True, max_length=256, return_tensors="pt").to(device)
    # the same checkpoint and head: SPLADE's logits are the ones our OT side pools (in fp32; on a GPU within a
    # looser tolerance, for kernels that may sum in another order: a wrong weight is off by far more)
    tolerance = {"rtol": 1e-4, "atol": 1e-3} if torch.device(device).type == "cuda" else {}
    with torch.no_grad():
        torch.testing.assert_close(splade.model(**check).logits, ours["dupmae-minilm"].mlm(**check).logits,
                                   **tolerance)
    if dtype == "bf16" and not autocast_log_is_fp32(device):
        fp32_logits(splade.model)
    int8 = ({name: EncoderModel.from_card(name, device="cpu", bf16=False).quantize_int8() for name in ours}
            if torch.device(device).type == "cpu" else {})
    dict_output = Stopwatch()  # Pyserini's conversion of the pooled [B, V] array to token -> weight dicts
    splade._output_to_weight_dicts = dict_output.wrap(splade._output_to_weight_dicts)
    splade._get_encoded_query_token_wight_dicts = dict_output.wrap(splade._get_encoded_query_token_wight_dicts)

    on_cuda = torch.device(device).type == "cuda"  # where the OT max-pool runs the padded route by default

    def other_max_pool(docs):  # the OT max-pool route this device does not take by default
        from unittest import mock

        import retromae_ir.encode.representation as representation

        if on_cuda:  # the packed, tiled route (CPU's), forced
            with mock.patch.object(representation, "padded_head_is_faster", lambda hidden: False):
                ours["dupmae-minilm"].encode_passage(docs, 64)
        else:  # the one before #12 item 2: the head over every position, [16, L, V] at a time (CUDA's default)
            with mock.patch("retromae_ir.encode.dupmae.max_pool_logits", representation.max_pool_logits_naive):
                ours["dupmae-minilm"].encode_passage(docs, 64)

    def pyserini_loop(encoder):  # the loop of `python -m pyserini.encode`: batches of 64 in corpus order
        def run(docs):
            for start in range(0, len(docs), 64):
                with autocast(device, dtype):
                    encoder.encode(texts=docs[start:start + 64], max_length=256)
        return run

    def ours_run(model):
        return lambda docs: model.encode_passage(docs, 64)

    def work(model):  # which count of ``flops`` below is the work our model runs
        if hasattr(model, "lm_head"):  # the OT head: packed ordinary tokens, or every position on CUDA
            return "all" if on_cuda else "ordinary"
        return "first token" if model.first_token_last_layer else None

    # name -> (run over a list of texts, the count of its work: None (the encoder), "first token" (the encoder
    # with the last layer's first row only), the LM head over "all" tokens or the "ordinary" ones; "padded" and
    # "padded all": Pyserini's, which pads each batch of 64 to its longest document and runs every position)
    systems = {PYSERINI_DENSE: (pyserini_loop(pyserini), "padded"),
               PYSERINI_SPLADE: (pyserini_loop(splade), "padded all"),
               OURS_DENSE: (ours_run(ours["minilm-cls"]), work(ours["minilm-cls"])),
               OURS_DUPMAE: (ours_run(ours["dupmae-minilm"]), work(ours["dupmae-minilm"])),
               **({OURS_DUPMAE_TILED: (other_max_pool, "ordinary")} if on_cuda else
                  {OURS_DUPMAE_NAIVE: (other_max_pool, "all")})}
    if int8:
        systems.update({OURS_DENSE_INT8: (ours_run(int8["minilm-cls"]), work(int8["minilm-cls"])),
                        OURS_DUPMAE_INT8: (ours_run(int8["dupmae-minilm"]), "ordinary")})
    backends = {"inductor": (OURS_DENSE_COMPILED, OURS_DUPMAE_COMPILED)}
    if torch.device(device).type == "cpu":  # OpenVINO's CPU plugin
        backends["openvino"] = (OURS_DENSE_OPENVINO, OURS_DUPMAE_OPENVINO)
    if kernels_run_here(device, dtype):  # our own AVX2 kernels: fp32 on an x86-64 CPU
        backends["kernels"] = (OURS_DENSE_KERNELS, OURS_DUPMAE_KERNELS)
    compile_s = {}
    for backend, rows in backends.items():
        for name, system in zip(ours, rows):
            model = EncoderModel.from_card(name, device=device, bf16=dtype == "bf16")
            start = clock(device)  # conversion or compilation is paid once, before the clock (reported apart)
            model.compile_backbone(backend).encode_passage(texts[:64], 64)
            compile_s[f"{name} --compile {backend}"] = clock(device) - start
            systems[system] = (ours_run(model), work(model))
    splade_model_only = PYSERINI_SPLADE.replace("(sparse)", "(sparse, without its dict output)")
    best = {name: float("inf") for name in [*systems, splade_model_only]}
    label = f"[{device} {dtype}]"
    for run, _ in systems.values():  # library start-up, kernel choice, first allocations: outside the clock
        run(texts[:64])
    paths = dict((start_routes or {}).get(dtype, {}))  # the ceiling: the highest route measured in this process

    def measure_routes():
        for route, gflops in matmul_paths(args.threads, device=device, dtypes=(dtype,))[dtype].items():
            paths[route] = max(paths.get(route, 0.0), gflops)

    for round_ in range(args.rounds):
        measure_routes()
        order = list(systems.items())
        for name, (run, _) in order[::-1] if round_ % 2 else order:
            dict_output.reset()
            start = clock(device)
            run(texts)
            seconds = clock(device) - start
            best[name] = min(best[name], seconds)
            print(f"{label} round {round_}: {name}: {len(texts) / seconds:.2f} docs/s", flush=True)
            if name == PYSERINI_SPLADE:
                best[splade_model_only] = min(best[splade_model_only], seconds - dict_output.seconds)
                print(f"{label} round {round_}: {splade_model_only}: "
                      f"{len(texts) / (seconds - dict_output.seconds):.2f} docs/s", flush=True)
    measure_routes()
    tokens, ordinary = token_counts(ours["dupmae-minilm"].tokenizer, texts, 256)
    config = AutoConfig.from_pretrained(minilm)
    flops = {None: model_flops_per_doc(config, tokens, False).sum(),
             "first token": model_flops_per_doc(config, tokens, False, first_token_last_layer=True).sum(),
             "all": model_flops_per_doc(config, tokens, True).sum(),
             "ordinary": model_flops_per_doc(config, tokens, True, ordinary).sum(),
             "padded": model_flops_per_doc(config, padded_lengths(tokens, 64), False).sum(),
             "padded all": model_flops_per_doc(config, padded_lengths(tokens, 64), True).sum()}
    heads = {**{name: head for name, (_, head) in systems.items()}, splade_model_only: "padded all"}
    ceiling = max(paths.values())
    results = {"device": device, "dtype": dtype, "docs": len(texts), "mean_tokens_per_doc": float(tokens.mean()),
               "mean_ordinary_tokens_per_doc": float(ordinary.mean()), f"{dtype}_ceiling_gflops": ceiling,
               f"{dtype}_matmul_routes_gflops": paths, "compile_and_first_batch_s": compile_s,
               "mkl_shim_loaded": mkl_shim_loaded()}
    if torch.device(device).type == "cuda":
        results["gpu"] = torch.cuda.get_device_name(device)
        results["cuda_matmul_allow_tf32"] = torch.backends.cuda.matmul.allow_tf32  # False: fp32 is fp32
    n = len(texts)

    def row(seconds, work):
        gflops = work / seconds / 1e9
        return {"docs_per_s": n / seconds, "vs_pyserini": best[PYSERINI_DENSE] / seconds,
                "gflops_per_s": gflops, f"fraction_of_{dtype}_ceiling": gflops / ceiling}

    for name, head in heads.items():
        results[name] = row(best[name], flops[head])
    # Pyserini's two passes for what DupMAE gives in one: the dense encoder, then SPLADE over the same documents
    full = "pyserini two-pass (dense + SPLADE)"
    model_only = "pyserini two-pass (dense + SPLADE without its dict output)"
    two_pass = {full: best[PYSERINI_DENSE] + best[PYSERINI_SPLADE],
                model_only: best[PYSERINI_DENSE] + best[splade_model_only]}
    for name, seconds in two_pass.items():
        results[name] = row(seconds, flops[None] + flops["all"])
    results["ratios"] = {  # speed-ups: the other's seconds over ours
        "ours DupMAE vs Pyserini two-pass": two_pass[full] / best[OURS_DUPMAE],
        "ours DupMAE vs Pyserini two-pass without SPLADE's dict output": two_pass[model_only] / best[OURS_DUPMAE],
        "ours DupMAE vs Pyserini SPLADE alone": best[PYSERINI_SPLADE] / best[OURS_DUPMAE],
        "ours DupMAE vs Pyserini dense": best[PYSERINI_DENSE] / best[OURS_DUPMAE],
        "ours dense vs Pyserini dense": best[PYSERINI_DENSE] / best[OURS_DENSE],
        **({"ours DupMAE packed+tiled OT max-pool vs naive": best[OURS_DUPMAE_NAIVE] / best[OURS_DUPMAE]}
           if OURS_DUPMAE_NAIVE in best else
           {"ours DupMAE naive OT max-pool (CUDA's route) vs packed+tiled":
            best[OURS_DUPMAE_TILED] / best[OURS_DUPMAE]}),
        "ours dense --compile vs eager": best[OURS_DENSE] / best[OURS_DENSE_COMPILED],
        "ours DupMAE --compile vs eager": best[OURS_DUPMAE] / best[OURS_DUPMAE_COMPILED],
        "ours DupMAE --compile vs Pyserini two-pass": two_pass[full] / best[OURS_DUPMAE_COMPILED]}
    if OURS_DUPMAE_OPENVINO in best:
        results["ratios"].update({
            "ours dense --compile openvino vs --compile": best[OURS_DENSE_COMPILED] / best[OURS_DENSE_OPENVINO],
            "ours DupMAE --compile openvino vs --compile": best[OURS_DUPMAE_COMPILED] / best[OURS_DUPMAE_OPENVINO],
            "ours DupMAE --compile openvino vs Pyserini dense": best[PYSERINI_DENSE] / best[OURS_DUPMAE_OPENVINO],
            "ours DupMAE --compile openvino vs Pyserini two-pass": two_pass[full] / best[OURS_DUPMAE_OPENVINO]})
    if OURS_DUPMAE_KERNELS in best:
        results["ratios"].update({
            "ours dense --compile kernels vs --compile openvino": best[OURS_DENSE_OPENVINO] / best[OURS_DENSE_KERNELS],
            "ours DupMAE --compile kernels vs --compile openvino":
                best[OURS_DUPMAE_OPENVINO] / best[OURS_DUPMAE_KERNELS],
            "ours DupMAE --compile kernels vs Pyserini dense": best[PYSERINI_DENSE] / best[OURS_DUPMAE_KERNELS],
            "ours DupMAE --compile kernels vs Pyserini two-pass": two_pass[full] / best[OURS_DUPMAE_KERNELS]})
    if int8:
        results["ratios"].update({
            "ours DupMAE int8 vs Pyserini two-pass": two_pass[full] / best[OURS_DUPMAE_INT8],
            "ours DupMAE int8 vs Pyserini dense": best[PYSERINI_DENSE] / best[OURS_DUPMAE_INT8],
            "ours dense int8 vs Pyserini dense": best[PYSERINI_DENSE] / best[OURS_DENSE_INT8]})
    print(json.dumps(results, indent=1), flush=True)
    return results


def encode_table(results: dict) -> str:
    """The encode rows as a Markdown table whose header names the documents, device and dtype."""
    device, dtype = results["device"], results["dtype"]
    int8 = "; int8 rows: cpu, int8" if OURS_DENSE_INT8 in results else ""
    lines = [f"| encoder ({results['docs']} documents, {device}, {dtype}{int8}) | docs/s "
             f"| vs Pyserini dense | GFLOP/s | of the {dtype} ceiling ({results[f'{dtype}_ceiling_gflops']:.1f}) |",
             "| --- | --- | --- | --- | --- |"]
    routes = results.get(f"{dtype}_matmul_routes_gflops", {})
    for name, row in results.items():
        if isinstance(row, dict) and "docs_per_s" in row:
            lines.append(f"| {name} | {row['docs_per_s']:.2f} | {row['vs_pyserini']:.2f} | "
                         f"{row['gflops_per_s']:.1f} | {row[f'fraction_of_{dtype}_ceiling']:.2f} |")
    if routes:
        lines.append("\nthe ceiling is the faster route of a square product: " +
                     ", ".join(f"{route} {gflops:.1f}" for route, gflops in routes.items()) + " GFLOP/s")
    if "mkl_shim_loaded" in results:  # every system in the run, Pyserini's included, ran with it or without it
        lines.append(f"retromae_ir.mkl_shim (MKL's AVX-512 kernels on AMD) loaded: {results['mkl_shim_loaded']}")
    return "\n".join(lines)


def precision_quality(args) -> dict:
    """Dense cosine and sparse top-k overlap of bf16 autocast and of int8 against fp32, on the same documents."""
    from retromae_ir.encode import EncoderModel

    texts = write_corpora(args.corpus, args.work, args.bf16_docs)[2]
    models = {"fp32": EncoderModel.from_card("dupmae-minilm", device="cpu", bf16=False),
              "bf16": EncoderModel.from_card("dupmae-minilm", device="cpu", bf16=True),
              "int8": EncoderModel.from_card("dupmae-minilm", device="cpu", bf16=False).quantize_int8()}
    timings, outputs = {}, {}
    for name, model in models.items():
        model.encode_passage(texts[:2], batch_size=16)  # untimed: first-call set-up is not throughput
        start = time.perf_counter()
        outputs[name] = model.encode_passage(texts, batch_size=16)
        timings[name] = len(texts) / (time.perf_counter() - start)
    results = {"docs": len(texts), "docs_per_s": timings}
    a = outputs["fp32"]
    for name in ("bf16", "int8"):
        b = outputs[name]
        cosine = (a.dense * b.dense).sum(1) / np.linalg.norm(a.dense, axis=1) / np.linalg.norm(b.dense, axis=1)
        overlap = [len(set(a.sparse[i].indices) & set(b.sparse[i].indices)) / max(1, a.sparse[i].nnz)
                   for i in range(len(texts))]
        results[name] = {"dense_cosine_min": float(cosine.min()), "dense_cosine_mean": float(cosine.mean()),
                         "sparse_topk_overlap_min": float(min(overlap)),
                         "sparse_topk_overlap_mean": float(np.mean(overlap))}
    return results


def search_benchmark(args) -> dict:
    from pyserini.encode import QueryEncoder
    from pyserini.search.faiss import FaissSearcher
    from pyserini.search.hybrid import HybridSearcher
    from pyserini.search.lucene import LuceneImpactSearcher

    from retromae_ir.data.readers import load_qrels, load_topics
    from retromae_ir.encode import EncoderModel
    from retromae_ir.encode.manifest import check_queries, manifest_precision, read_manifest
    from retromae_ir.evaluate import evaluate_run
    from retromae_ir.search import BruteForceScorer, ExactHybridSearcher

    torch.set_num_threads(args.threads)
    topics = load_topics(args.topics)
    qrels = load_qrels(args.qrels)
    qids, texts = list(topics), list(topics.values())
    # queries in the index's precision, as `encode queries --dtype auto` wrote Pyserini's file beside it
    precision = manifest_precision(read_manifest(args.index))
    model = EncoderModel.from_card(args.encoder, device="cpu", bf16=precision == "bf16")
    encoded = model.encode_query(texts)
    exact = {K: ExactHybridSearcher(args.index, model, candidates=K, threads=args.threads) for K in args.candidates}
    brute = BruteForceScorer(next(iter(exact.values())).index).search(encoded.dense, encoded.sparse, 10)
    reference = [[d for d, _ in hits] for hits in brute]

    def agreement(top10s):
        equal = np.mean([a == b for a, b in zip(top10s, reference)])
        recall = np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(top10s, reference)])
        return {"top10_equal": float(equal), "recall_at_10_of_exact": float(recall)}

    results = {"queries": len(qids), "documents": len(exact[args.candidates[0]].index), "exact": {}, "pyserini": {}}
    for K, searcher in exact.items():
        # K hits: the searcher raises K' to the hits asked for, so 1,000 hits would search every row at K' 1,000
        searcher.search_encoded(encoded, min(1000, K))  # untimed, as Pyserini's
        start = time.perf_counter()
        hits = searcher.search_encoded(encoded, min(1000, K))
        seconds = time.perf_counter() - start
        run = {qid: dict(h) for qid, h in zip(qids, hits)}
        results["exact"][K] = {"qps": len(qids) / seconds, **agreement([[d for d, _ in h[:10]] for h in hits]),
                               **evaluate_run(run, qrels, ["ndcg@10", *(["recall@100"] if K >= 100 else [])])}
    check_queries(args.queries, args.index)  # Pyserini scores other queries' vectors without a word
    dense = FaissSearcher(str(args.index / "dense"), QueryEncoder.load_encoded_queries(str(args.queries / "dense")))
    sparse = LuceneImpactSearcher(str(args.index / "sparse" / "index"), str(args.queries / "sparse.jsonl"),
                                  min_idf=-1)
    hybrid = HybridSearcher(dense, sparse)
    alpha = 1 / model.card.scale ** 2
    for K in args.candidates:
        hybrid.batch_search(texts, qids, k0=K, k=1000, threads=args.threads, alpha=alpha)  # untimed, as ours
        start = time.perf_counter()
        fused = hybrid.batch_search(texts, qids, k0=K, k=1000, threads=args.threads, alpha=alpha)
        seconds = time.perf_counter() - start
        run = {qid: {h.docid: h.score for h in hits} for qid, hits in fused.items()}
        top10 = [[h.docid for h in sorted(fused[q], key=lambda h: (-h.score, h.docid))[:10]] for q in qids]
        results["pyserini"][K] = {"qps": len(qids) / seconds, **agreement(top10),
                                  **evaluate_run(run, qrels, ["ndcg@10", "recall@100"])}
    dense.batch_search(texts, qids, 1000, args.threads)  # untimed
    start = time.perf_counter()
    dense.batch_search(texts, qids, 1000, args.threads)
    results["faiss_alone_qps"] = len(qids) / (time.perf_counter() - start)
    print(json.dumps(results, indent=1), flush=True)
    return results


def index_sizes(index: Path) -> dict:
    def du(path: Path) -> int | None:
        """Bytes under ``path``; None when the index has no such part (one written before the OT store has
        ``sparse/vectors.npz`` instead of ``sparse/ot``)."""
        if path.is_dir():
            return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        return path.stat().st_size if path.is_file() else None

    manifest = json.loads((index / "manifest.json").read_text())
    n = manifest["documents"]
    sizes = {"documents": n, "dense_flat_384": du(index / "dense" / "index"),
             "sparse_lucene_impact_index": du(index / "sparse" / "index"),
             "sparse_ot_store_fp16": du(index / "sparse" / "ot"),
             "sparse_vectors_npz_before_the_store": du(index / "sparse" / "vectors.npz"),
             "sparse_collection_jsonl": du(index / "sparse" / "collection"),
             "flat_768_equivalent": n * 768 * 4}
    sizes["dupmae_index_total_dense_plus_lucene"] = sizes["dense_flat_384"] + sizes["sparse_lucene_impact_index"]
    return sizes


# the inputs each step reads (argparse dests), so that a run leaving steps out needs only the others' inputs
STEP_INPUTS = {"encode": ("corpus",), "precision": ("corpus",), "search": ("index", "queries", "topics", "qrels"),
               "sizes": ("index",)}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="benchmarks/encode_search.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=None,
                        help="BEIR corpus.jsonl for the encode and precision steps")
    parser.add_argument("--index", type=Path, default=None,
                        help="a DupMAE index (retromae_ir.encode corpus): search and sizes steps")
    parser.add_argument("--encoder", default="dupmae-minilm", help="the index's card (search benchmark)")
    parser.add_argument("--queries", type=Path, default=None,
                        help="its pre-encoded queries (encode queries): search step")
    parser.add_argument("--topics", type=Path, default=None, help="search step")
    parser.add_argument("--qrels", type=Path, default=None, help="search step")
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="where the encode step runs every encoder and measures its ceiling (int8 rows: cpu only)")
    parser.add_argument("--dtype", choices=list(DTYPES), default="fp32",
                        help="the encode step's arithmetic: fp32, or bf16 autocast for every encoder")
    parser.add_argument("--encode-docs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2,
                        help="encode rounds, at least 2 (odd ones in reverse order); the best of each is kept")
    parser.add_argument("--bf16-docs", type=int, default=64,
                        help="documents of the bf16 / int8 quality check (precision step, on the CPU)")
    parser.add_argument("--candidates", type=int, nargs="+", action=Repeatable, default=[10, 100, 1000])
    parser.add_argument("--skip", nargs="*", action=Repeatable, default=[], choices=list(STEP_INPUTS),
                        help="steps to leave out (sizes: the index sizes, which read --index)")
    args = parser.parse_args(argv)
    if args.rounds < 2:  # one round leaves whoever runs first cold: alternating orders need two
        parser.error(f"--rounds must be at least 2, got {args.rounds}")
    for step, inputs in STEP_INPUTS.items():
        missing = [f"--{dest}" for dest in inputs if step not in args.skip and getattr(args, dest) is None]
        if missing:
            parser.error(f"the {step} step needs {' '.join(missing)} (or leave it out: --skip {step})")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    from retromae_ir.hardware import bf16_is_fast

    # bf16's routes only where it is native or asked for: emulated (AVX2) its square product took about 4 minutes
    dtypes = ("fp32", "bf16") if bf16_is_fast(args.device) or args.dtype == "bf16" else ("fp32",)
    results = {"threads": args.threads, "device": args.device, "dtype": args.dtype,
               "matmul_routes_gflops": matmul_paths(args.threads, device=args.device, dtypes=dtypes)}
    print(json.dumps(results), flush=True)
    if "encode" not in args.skip:
        results["encode"] = encode_benchmark(args, results["matmul_routes_gflops"])
    if "precision" not in args.skip:
        results["precision"] = precision_quality(args)
        print(json.dumps(results["precision"]), flush=True)
    if "search" not in args.skip:
        results["search"] = search_benchmark(args)
    if "sizes" not in args.skip:
        results["sizes"] = index_sizes(args.index)
    from retromae_ir.io import atomic_write

    with atomic_write(args.work / "results.json") as out:
        json.dump(results, out, indent=2)
    print(json.dumps(results, indent=2))
    if "encode" in results:
        print(encode_table(results["encode"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Gradient caching gives the gradient of the plain full batch (the negative pool is not shrunk)."""
import pytest
import torch
from tiny import full_batch, gradients, tiny_bi_encoder

from retromae_ir.finetune.gradcache import forward_backward, split_batch


def test_split_batch_keeps_rows_per_query_together():
    batch = {"size": 3, "query": torch.arange(3), "passage": torch.arange(6), "note": "x"}
    parts = split_batch(batch, 2)
    assert [p["size"] for p in parts] == [2, 1]
    assert parts[0]["passage"].tolist() == [0, 1, 2, 3] and parts[1]["passage"].tolist() == [4, 5]
    assert parts[1]["query"].tolist() == [2] and parts[1]["note"] == "x"


def run(model, batch, chunk):
    model.zero_grad(set_to_none=True)
    losses = forward_backward(model, batch, model.loss, chunk)
    return losses, gradients(model)


@pytest.mark.parametrize("stage, kind", [("distill", "dupmae"), ("2", "retromae")])
def test_gradient_cache_equals_full_batch(tiny_bert_dir, stage, kind):
    model = tiny_bi_encoder(tiny_bert_dir, stage, kind)
    batch = full_batch(model)
    plain_losses, plain = run(model, batch, 0)
    losses, cached = run(model, batch, 3)  # chunks of 3 + 1 queries
    assert losses.keys() == plain_losses.keys()
    for name in losses:
        assert losses[name].item() == pytest.approx(plain_losses[name].item(), rel=1e-5)
    assert cached.keys() == plain.keys() and len(plain) > 10
    for name in plain:
        torch.testing.assert_close(cached[name], plain[name], rtol=1e-4, atol=3e-5, msg=name)


def test_gradient_cache_replays_dropout(tiny_bert_dir):
    """With dropout on, the gradient must be that of the loss on the representations the graph-less pass drew:
    the same as encoding the chunks one after another with a graph from the same RNG state."""
    model = tiny_bi_encoder(tiny_bert_dir).train()
    batch = full_batch(model)
    torch.manual_seed(1)
    cached_losses, cached = run(model, batch, 2)
    model.zero_grad(set_to_none=True)
    torch.manual_seed(1)
    parts = [model(part) for part in split_batch(batch, 2)]
    outputs = {key: torch.cat([p[key] for p in parts]) for key in parts[0]}
    losses = model.loss(outputs, batch)
    losses["loss"].backward()
    assert cached_losses["loss"].item() == pytest.approx(losses["loss"].item(), rel=1e-6)
    for name, grad in gradients(model).items():
        torch.testing.assert_close(cached[name], grad, rtol=1e-4, atol=3e-5, msg=name)


def test_both_passes_of_the_gradient_cache_take_the_route_of_the_graph(tiny_bert_dir, monkeypatch):
    """Where encoding takes the padded head (a CUDA GPU, stood in for by the CPU here), the gradient cache's first,
    graph-less pass took it too while the graph pass took the tiled one: rounding apart, top-k cut the two passes'
    OT vectors differently, and the cached gradients fell on entries the second pass did not keep."""
    import retromae_ir.encode.representation as representation

    monkeypatch.setattr(representation, "PADDED_ROUTE_DEVICES", ("cpu",))
    calls = []
    naive = representation.max_pool_logits_naive
    monkeypatch.setattr(representation, "max_pool_logits_naive", lambda *a, **k: calls.append(1) or naive(*a, **k))
    model = tiny_bi_encoder(tiny_bert_dir, "2", "dupmae")
    run(model, full_batch(model), 3)
    assert calls == []
    with torch.inference_mode():  # encoding still takes it
        model.encoder.encode_passage(["cells divide by mitosis"])
    assert calls == [1]

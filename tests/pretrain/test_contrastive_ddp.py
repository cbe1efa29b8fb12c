"""The pre-training contrastive loss under two gloo processes gives the loss and the gradient of one process on the
combined batch (before, each process's loss covered its own anchors only, and a positive was never pushed away
from the other process's anchors: the gradient differed by up to half its size)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from retromae_ir.pretrain.contrastive import info_nce

HERE = Path(__file__).parent


def test_two_processes_give_the_combined_batchs_loss_and_gradient(tmp_path):
    sys.path.insert(0, str(HERE))
    from contrastive_worker import fixed_batch

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(filter(None, [
        str(HERE.parents[1]), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(HERE / "contrastive_worker.py"), str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    weight, anchors, positives, documents = fixed_batch()
    weight.requires_grad_(True)
    expected = info_nce(anchors @ weight, positives @ weight, 0.1, documents)
    expected.backward()
    for rank in range(2):
        result = torch.load(tmp_path / f"rank{rank}.pt")
        assert result["loss"] == pytest.approx(expected.item(), rel=1e-6)
        torch.testing.assert_close(result["grad"], weight.grad, rtol=1e-5, atol=1e-6)


def test_the_other_segments_of_the_anchors_document_are_not_negatives():
    """Rows 0 and 2 are one document's segments: column 2 leaves row 0's sum and column 0 row 2's (exact values
    against the equation written out)."""
    generator = torch.Generator().manual_seed(1)
    anchors, positives = torch.randn(4, 6, generator=generator), torch.randn(4, 6, generator=generator)
    loss = info_nce(anchors, positives, 0.1, torch.tensor([7, 8, 7, 9]))
    scores = torch.nn.functional.normalize(anchors, dim=-1) @ torch.nn.functional.normalize(positives, dim=-1).T / 0.1
    kept = [[0, 1, 3], [0, 1, 2, 3], [1, 2, 3], [0, 1, 2, 3]]
    expected = torch.stack([torch.logsumexp(scores[i, kept[i]], 0) - scores[i, i] for i in range(4)]).mean()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert loss.item() < info_nce(anchors, positives, 0.1).item()  # fewer negatives, a smaller loss

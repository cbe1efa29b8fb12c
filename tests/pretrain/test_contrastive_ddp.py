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
    weight, anchors, positives = fixed_batch()
    weight.requires_grad_(True)
    expected = info_nce(anchors @ weight, positives @ weight, 0.1)
    expected.backward()
    for rank in range(2):
        result = torch.load(tmp_path / f"rank{rank}.pt")
        assert result["loss"] == pytest.approx(expected.item(), rel=1e-6)
        torch.testing.assert_close(result["grad"], weight.grad, rtol=1e-5, atol=1e-6)

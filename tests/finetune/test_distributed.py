"""Two gloo processes with the pool gathered across them give the loss and the gradient of one process on the
combined batch (plain, and through the gradient cache)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tiny import CASES, full_batch, gradients, tiny_bi_encoder

from retromae_ir.finetune.gradcache import forward_backward

WORKER = Path(__file__).parent / "ddp_worker.py"


@pytest.fixture(scope="module")
def two_processes(tiny_bert_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(WORKER), str(tiny_bert_dir), str(out)],
                          capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return [torch.load(out / f"rank{r}.pt") for r in range(2)]


@pytest.mark.parametrize("case", list(CASES))
def test_gathered_loss_and_gradients_equal_one_process(tiny_bert_dir, two_processes, case):
    stage, _, mask, examples = CASES[case]
    model = tiny_bi_encoder(tiny_bert_dir, stage, mask=mask)
    expected = forward_backward(model, full_batch(model, examples), model.loss)
    reference = gradients(model)
    for rank in two_processes:
        result = rank[case]
        assert result["losses"].keys() == expected.keys()
        for name, value in expected.items():
            assert result["losses"][name] == pytest.approx(value.item(), rel=1e-5)
        assert result["grads"].keys() == reference.keys()
        for name, grad in reference.items():
            torch.testing.assert_close(result["grads"][name], grad, rtol=1e-4, atol=3e-5, msg=name)

"""One of two gloo processes for test_trainer.py: ``check_same_step`` with this rank's step (argv 1 and 2), its
outcome written to ``<argv 3>/rank<r>.txt``."""
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from retromae_ir.training.trainer import TrainerError, check_same_step

dist.init_process_group("gloo")
rank = dist.get_rank()
try:
    check_same_step(int(sys.argv[1 + rank]), dist.get_world_size(), torch.device("cpu"))
    outcome = "agreed"
except TrainerError as error:
    outcome = f"refused: {error}"
(Path(sys.argv[3]) / f"rank{rank}.txt").write_text(outcome)
dist.destroy_process_group()

"""Cross-encoder teacher for distillation (DupMAE Eq. 15): trained on the stage-2 groups, then soft labels."""

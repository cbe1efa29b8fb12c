"""The training machinery pre-training and fine-tuning share: the loop with checkpoints and exact resume, loss CSV and
PNG (``trainer``), its arguments (``arguments``), and the cross-process gather of in-batch negatives
(``distributed``). Each stage brings its model (an ``nn.Module`` with the stage's loss) and its data."""

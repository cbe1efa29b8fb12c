"""Fine-tuning (DupMAE Eq. 13-15): in-batch + BM25 negatives -> mined hard negatives -> cross-encoder distillation."""

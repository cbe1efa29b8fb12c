"""The fused OT kernel against eager's MKL tiles (``max_pool_logits`` with ``rows=CPU_ROWS`` over a plain
``nn.Linear`` decoder), in inference mode, on random hidden states of MiniLM's head shape: the largest difference
of the pooled logits, relative to the largest logit, and whether each document's top 384 entries are the same set.

    .venv/bin/python runs/ot-kernel/eager_agreement.py > runs/ot-kernel/eager-agreement.log
"""
import torch
from transformers import BertConfig
from transformers.models.bert.modeling_bert import BertOnlyMLMHead

from retromae_ir.encode.fused_max_pool import chosen_here
from retromae_ir.encode.representation import CPU_ROWS, max_pool_logits

torch.manual_seed(0)
torch.set_num_threads(2)
head = BertOnlyMLMHead(BertConfig(hidden_size=384, vocab_size=30522)).eval()
print(f"the fused kernel chosen here: {chosen_here()}")
print("| batch | largest difference | relative to the largest logit | same top 384 |\n| --- | --- | --- | --- |")
for lengths in ([256] * 10, list(range(150, 166)), [60] * 40):
    hidden = torch.randn(len(lengths), max(lengths), 384)
    mask = torch.zeros(len(lengths), max(lengths), dtype=torch.bool)
    for row, length in enumerate(lengths):
        mask[row, 1:length - 1] = True
    with torch.inference_mode():
        fused, tiled = max_pool_logits(head, hidden, mask), max_pool_logits(head, hidden, mask, rows=CPU_ROWS)
    same = all(set(a.tolist()) == set(b.tolist()) for a, b in zip(fused.topk(384).indices, tiled.topk(384).indices))
    difference = float((fused - tiled).abs().max())
    print(f"| {len(lengths)} x {min(lengths)}-{max(lengths)} tokens | {difference:.1e} "
          f"| {difference / float(tiled.abs().max()):.1e} | {'yes' if same else 'no'} |")

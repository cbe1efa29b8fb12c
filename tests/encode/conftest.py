"""Fixtures of the OT max-pool tests (test_ot_maxpool.py, test_fused_max_pool.py): a tiny BERT MLM with a
non-trivial head and its hidden states over padded texts."""
import pytest
import torch

from retromae_ir.encode.representation import ordinary_token_mask

# different lengths (padding), "" is [CLS] [SEP] only: no ordinary token
TEXTS = ["the cat sat on the mat", "", "protein folding in yeast cells under heat stress and cold shock", "a b"]


@pytest.fixture(scope="module")
def mlm(tiny_bert_dir):
    """The tiny BertForMaskedLM with a non-trivial head: random LayerNorm affine and decoder bias (zeros and ones
    as saved would hide a bias or LayerNorm the tiled path forgot)."""
    from transformers import AutoModelForMaskedLM

    model = AutoModelForMaskedLM.from_pretrained(tiny_bert_dir).eval()
    torch.manual_seed(5)
    with torch.no_grad():
        head = model.cls.predictions
        head.transform.LayerNorm.weight.normal_(1.0, 0.3)
        head.transform.LayerNorm.bias.normal_(0.0, 0.3)
        head.decoder.bias.normal_(0.0, 0.5)
    return model


@pytest.fixture(scope="module")
def batch(mlm, tiny_bert_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_dir)
    inputs = tokenizer(TEXTS, padding=True, return_tensors="pt")
    special = torch.tensor(sorted(set(tokenizer.all_special_ids)))
    mask = ordinary_token_mask(inputs["input_ids"], inputs["attention_mask"], special)
    assert not mask[1].any() and mask.sum(1).unique().numel() == len(TEXTS)  # an empty text, all lengths differ
    with torch.no_grad():
        hidden = mlm.base_model(**inputs).last_hidden_state
    return hidden, mask

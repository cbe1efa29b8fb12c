"""The rule every stage that lets the tokenizer truncate (encoding, fine-tuning, the cross-encoder) applies to a
max length (pre-training cuts its own segments between [CLS] and [SEP]: ``pretrain/data.py`` refuses below 3).

Hugging Face tokenizers ignore a ``max_length`` that the special tokens alone fill (a warning, then the whole
text): a card or flag of 1 token encoded every text at full length, and a cross-encoder's 2 kept whole pairs.
"""
from __future__ import annotations


def check_max_length(tokenizer, max_length: int, what: str, pair: bool = False) -> None:
    """Refuse a ``max_length`` that leaves no token for text once the tokenizer's special tokens are added."""
    specials = tokenizer.num_special_tokens_to_add(pair=pair)
    if max_length <= specials:
        inputs = "a query-passage pair" if pair else "a text"
        raise ValueError(f"{what} {max_length} leaves no room for text: the tokenizer adds {specials} special tokens "
                         f"to {inputs} (and would then ignore the limit); give at least {specials + 1}")

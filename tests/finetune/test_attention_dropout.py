"""--attention-dropout: set on every self-attention layer of the model being trained, never saved into its config."""
import pytest
import torch

from retromae_ir.finetune.arguments import ModelArguments
from retromae_ir.finetune.model import hf_model, load_encoder, set_attention_dropout
from tiny import tiny_card


def attention_dropouts(encoder):
    return [m.dropout.p for m in hf_model(encoder).modules() if type(m).__name__.endswith("SelfAttention")]


@pytest.mark.parametrize("kind", ["dupmae", "retromae"])
def test_every_attention_layer_gets_the_value_and_the_config_keeps_its_own(tiny_bert_dir, kind):
    card = tiny_card(tiny_bert_dir, kind=kind)
    default = load_encoder(card, seed=0)
    configured = hf_model(default).config.attention_probs_dropout_prob
    assert attention_dropouts(default) == [configured] * hf_model(default).config.num_hidden_layers
    encoder = load_encoder(card, seed=0, attention_dropout=0.0)
    assert attention_dropouts(encoder) == [0.0] * hf_model(encoder).config.num_hidden_layers
    assert hf_model(encoder).config.attention_probs_dropout_prob == configured


def test_attention_dropout_zero_leaves_no_attention_dropout_behind(tiny_bert_dir):
    """With hidden dropout also set to 0, a train-mode forward is deterministic at --attention-dropout 0 and random
    at 0.5: the option reaches every attention layer that dropout runs in."""
    def twice(attention_dropout):
        encoder = load_encoder(tiny_card(tiny_bert_dir), seed=0, attention_dropout=attention_dropout)
        attention = {id(m.dropout) for m in hf_model(encoder).modules() if type(m).__name__.endswith("SelfAttention")}
        for module in hf_model(encoder).modules():
            if isinstance(module, torch.nn.Dropout) and id(module) not in attention:
                module.p = 0.0
        batch = encoder.tokenizer(["cells divide by mitosis in the nucleus"], return_tensors="pt")
        assert encoder.mlm.training
        return [encoder.represent(batch["input_ids"], batch["attention_mask"], 8)[0] for _ in range(2)]

    assert torch.equal(*twice(0.0))
    assert not torch.equal(*twice(0.5))  # so the first assertion is not deterministic by accident


def test_a_model_without_self_attention_layers_is_an_error():
    with pytest.raises(ValueError, match="no BERT-style self-attention layer"):
        set_attention_dropout(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.1)), 0.0)


@pytest.mark.parametrize("value", [-0.1, 1.0])
def test_out_of_range_values_are_refused(value):
    with pytest.raises(ValueError, match="--attention-dropout must be in"):
        ModelArguments(attention_dropout=value)

"""RetroMAE and DupMAE on a tiny random BERT: the BoW target, OT pooling, losses that go down, the
checkpoint round trip, and continued pre-training from our own checkpoint."""
from __future__ import annotations

import pytest
import torch
from transformers import AutoModel, AutoModelForMaskedLM

from retromae_ir.pretrain import get_method
from retromae_ir.pretrain.arguments import MaskingArguments
from retromae_ir.pretrain.base import DECODERS_FILE, CheckpointError
from retromae_ir.pretrain.collate import Segment
from retromae_ir.pretrain.contrastive import ContrastiveArguments, with_contrastive
from retromae_ir.pretrain.data import document_runs
from retromae_ir.pretrain.dupmae import DupMAEArguments, bow_loss, bow_target, ot_vector

from pretrain_helpers import sentence


def segments(tokenizer, count=8):
    return [Segment(f"d{i}", 0, tuple(tokenizer(sentence(i), add_special_tokens=False)["input_ids"]))
            for i in range(count)]


def test_bow_target_is_the_set_of_input_tokens():
    input_ids = torch.tensor([[1, 7, 9, 7, 2, 0], [1, 5, 2, 0, 0, 0]])
    ordinary = torch.tensor([[0, 1, 1, 1, 0, 0], [0, 1, 0, 0, 0, 0]], dtype=torch.bool)
    target = bow_target(input_ids, ordinary, vocab_size=12)
    assert torch.nonzero(target[0]).flatten().tolist() == [7, 9] and torch.allclose(target[0, [7, 9]], torch.tensor(0.5))
    assert torch.nonzero(target[1]).flatten().tolist() == [5] and target[1, 5] == 1.0


def test_ot_vector_max_pools_only_the_chosen_positions():
    logits = torch.tensor([[[9.0, 0.0], [1.0, 2.0], [3.0, -1.0], [7.0, 7.0]]])  # [1, L=4, V=2]
    pool = torch.tensor([[False, True, True, False]])
    assert ot_vector(logits, pool).tolist() == [[3.0, 2.0]]


def test_bow_loss_skips_rows_without_a_pooled_position_but_not_nan_rows():
    ot = torch.tensor([[1.0, 2.0, 0.0], [float("-inf")] * 3])
    target = torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])
    expected = -(0.5 * torch.log_softmax(ot[0], -1)[:2]).sum()
    assert torch.allclose(bow_loss(ot, target), expected)
    ot[1] = float("nan")  # a diverged model's row: counted, so the loss says so (it was dropped: a finite bow)
    assert torch.isnan(bow_loss(ot, target))


@pytest.mark.parametrize("method", ["retromae", "dupmae"])
def test_loss_goes_down_on_a_repeated_batch(tiny_bert_dir, method):
    torch.manual_seed(0)
    model = get_method(method).from_pretrained(tiny_bert_dir, MaskingArguments())
    batch = model.make_collator()(segments(model.tokenizer, count=4), torch.Generator().manual_seed(0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    history = []
    for step in range(8):
        torch.manual_seed(step)
        losses = model(batch)
        losses["loss"].backward()
        optimizer.step()
        optimizer.zero_grad()
        history.append({k: float(v.detach()) for k, v in losses.items()})
    expected = {"loss", "mlm", "dec"} | ({"bow"} if method == "dupmae" else set())
    assert set(history[0]) == expected
    for term in expected:
        assert history[-1][term] < history[0][term] - 0.5, term


def test_dupmae_total_weights_the_bow_term(tiny_bert_dir):
    model = get_method("dupmae").from_pretrained(tiny_bert_dir, MaskingArguments(), DupMAEArguments(bow_weight=0.1))
    model.eval()
    batch = model.make_collator()(segments(model.tokenizer), torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    losses = model(batch)
    assert torch.isclose(losses["loss"], losses["mlm"] + losses["dec"] + 0.1 * losses["bow"])


def test_contrastive_term_is_added(tiny_bert_dir):
    cls = with_contrastive(get_method("retromae"), ContrastiveArguments(contrastive_weight=0.5, temperature=0.1))
    model = cls.from_pretrained(tiny_bert_dir, MaskingArguments())
    model.eval()
    first, *others = segments(model.tokenizer)
    segs = [first, Segment("d0", 1, (2000, 2001, 2002)), *others]  # a document's segments in a row, as read
    examples = model.make_examples(segs)
    batch = model.make_collator()(list(examples), torch.Generator().manual_seed(0))
    assert batch["positive_input_ids"][0, 1:4].tolist() == [2000, 2001, 2002]  # the other segment of d0
    assert batch["positive_input_ids"][1, 1:1 + len(first.input_ids)].tolist() == list(first.input_ids)
    assert batch["document"].tolist() == [0, *range(8)]  # d0's two segments: one document, not each other's negative
    with pytest.raises(ValueError, match="the segments of a document must be consecutive rows"):
        document_runs([*segs[1:], first])  # d0 split around the others: its pairing would miss one
    torch.manual_seed(0)
    losses = model(batch)
    assert losses["ctr"] > 0 and torch.isclose(losses["loss"], losses["mlm"] + losses["dec"] + 0.5 * losses["ctr"])


def test_checkpoint_round_trip(tiny_bert_dir, tmp_path):
    masking = MaskingArguments()
    model = get_method("dupmae").from_pretrained(tiny_bert_dir, masking)
    with torch.no_grad():  # make the decoder differ from a fresh initialisation
        model.decoder.query.weight.add_(1.0)
    model.save(tmp_path, {"step": 3})
    assert all(not k.startswith("encoder.") for k in model.decoder_state_dict())
    again = get_method("dupmae").from_pretrained(tmp_path, masking)
    original, reloaded = model.state_dict(), again.state_dict()
    assert original.keys() == reloaded.keys()
    assert all(torch.equal(original[k], reloaded[k]) for k in original)
    encoder = AutoModel.from_pretrained(tmp_path)
    assert torch.equal(encoder.embeddings.word_embeddings.weight, model.encoder.bert.embeddings.word_embeddings.weight)
    _, info = AutoModelForMaskedLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"]


def test_decoders_of_another_shape_are_refused(tiny_bert_dir, tmp_path):
    from safetensors.torch import save_file

    save_file({"decoder.query.weight": torch.zeros(3, 3)}, str(tmp_path / DECODERS_FILE))
    model = get_method("retromae").from_pretrained(tiny_bert_dir, MaskingArguments())
    with pytest.raises(CheckpointError, match="does not fit method"):
        model.load_decoders(tmp_path / DECODERS_FILE)


def test_bow_options_without_the_bow_term_are_refused():
    """--bow-exclude-masked with --bow-weight 0 was keyed in the run identity and read by nothing."""
    with pytest.raises(ValueError, match="--bow-exclude-masked shapes the L_BoW term, and --bow-weight is 0"):
        DupMAEArguments(bow_weight=0.0, bow_exclude_masked=True)
    with pytest.raises(ValueError, match="--bow-weight must be >= 0, got -1.0"):
        DupMAEArguments(bow_weight=-1.0)
    assert DupMAEArguments(bow_weight=0.0).bow_weight == 0.0


def test_the_contrastive_temperature_without_the_contrastive_loss_is_refused():
    """--temperature with --contrastive-weight 0 (the default) was accepted and read by nothing."""
    with pytest.raises(ValueError, match="--temperature is the contrastive loss's, and --contrastive-weight is 0"):
        ContrastiveArguments(temperature=0.1)
    ContrastiveArguments(temperature=0.1, contrastive_weight=1.0)
    ContrastiveArguments()


def test_positives_from_the_flat_table_are_the_per_document_lists_choice(tiny_bert_dir, tmp_path):
    """The collator finds a document's other segments by their rows in the corpus's table, instead of keeping a
    list of every segment per document (the whole corpus's tokens as Python tuples): the same positive for every
    row under the same generator, and the same document numbers, as the lists gave."""
    from collections import defaultdict

    from retromae_ir.pretrain.contrastive import NumberedSegments, PositiveSpanCollator
    from retromae_ir.pretrain.data import load_segments

    corpus = tmp_path / "c.jsonl"
    texts = ["one two three four five six seven", "eight", "nine ten eleven twelve", "thirteen fourteen"]
    corpus.write_text("".join(f'{{"id": "d{i}", "text": "{t}"}}\n' for i, t in enumerate(texts)))
    table = load_segments(corpus, get_method("retromae").from_pretrained(tiny_bert_dir, MaskingArguments()).tokenizer,
                          4)  # 2 tokens a segment: documents of 4, 1, 2 and 1 segments
    collator = PositiveSpanCollator(lambda segments, generator: {}, None, table)
    by_doc = defaultdict(list)  # the per-document lists the collator kept before
    for segment in table:
        by_doc[segment.docid].append(segment)
    for row, segment in enumerate(NumberedSegments(table)):
        chosen = collator.positive(segment, torch.Generator().manual_seed(row))
        generator = torch.Generator().manual_seed(row)
        others = [s for s in by_doc[segment.docid] if s.index != segment.index]
        if others:
            expected = others[int(torch.randint(len(others), (1,), generator=generator))].input_ids
        else:
            half = max(1, len(segment.input_ids) // 2)
            start = int(torch.randint(len(segment.input_ids) - half + 1, (1,), generator=generator))
            expected = segment.input_ids[start:start + half]
        assert chosen == expected
    assert collator.run_of.tolist() == [list(by_doc).index(s.docid) for s in table] == [0, 0, 0, 0, 1, 2, 2, 3]

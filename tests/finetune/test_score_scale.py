"""The chosen score scale: the OT side's weight lives in the representation, the temperature follows the dense side."""
import dataclasses

import pytest
import torch

from retromae_ir.encode.representation import score
from retromae_ir.finetune.arguments import DataArguments, LossArguments
from retromae_ir.finetune.losses import contrastive_loss, default_temperature
from retromae_ir.finetune.model import BiEncoder, load_encoder
from tiny import EXAMPLES, tiny_card


def represent(checkpoint, **fields):
    encoder = load_encoder(dataclasses.replace(tiny_card(checkpoint), **fields), seed=0).eval()
    batch = encoder.tokenizer(["cells divide by mitosis", "vitamin d helps calcium uptake"], padding=True,
                              return_tensors="pt")
    with torch.no_grad():
        return encoder.represent(batch["input_ids"], batch["attention_mask"], 40)


def test_sparse_weight_scales_the_ot_vector_by_its_square_root(tiny_bert_dir):
    dense_1, sparse_1 = represent(tiny_bert_dir)
    dense_w, sparse_w = represent(tiny_bert_dir, sparse_weight=0.04)
    torch.testing.assert_close(dense_w, dense_1)
    torch.testing.assert_close(sparse_w, 0.2 * sparse_1)


def test_eq12_with_the_weight_is_dense_plus_lambda_sparse(tiny_bert_dir):
    dense_1, sparse_1 = represent(tiny_bert_dir)
    dense_w, sparse_w = represent(tiny_bert_dir, sparse_weight=0.04)
    expected = dense_1 @ dense_1.T + 0.04 * (sparse_1 @ sparse_1.T)
    torch.testing.assert_close(score(dense_w, dense_w, sparse_w, sparse_w), expected)


def test_normalised_dense_side_is_a_cosine(tiny_bert_dir):
    dense, _ = represent(tiny_bert_dir, normalize=True)
    torch.testing.assert_close(dense.norm(dim=-1), torch.ones(2))


@pytest.mark.parametrize("normalize, expected", [(True, 0.05), (False, 1.0)])
def test_default_temperature_follows_the_dense_side(tiny_bert_dir, normalize, expected):
    card = dataclasses.replace(tiny_card(tiny_bert_dir), normalize=normalize)
    assert default_temperature(card) == expected
    model = BiEncoder(load_encoder(card, seed=0), DataArguments(train="x.jsonl", group_size=3),
                      LossArguments(stage="2")).eval()
    assert model.loss_args.temperature == expected
    batch = model.make_collator()(EXAMPLES, torch.Generator().manual_seed(0))
    with torch.no_grad():
        outputs = model(batch)
        scores = model.scores(outputs)
        loss = model.loss(outputs, batch)["loss"]
    torch.testing.assert_close(loss, contrastive_loss(scores, 3, expected))
    assert not torch.isclose(loss, contrastive_loss(scores, 3, 1.0 if normalize else 0.05))


def test_an_explicit_temperature_wins(tiny_bert_dir):
    card = dataclasses.replace(tiny_card(tiny_bert_dir), normalize=True)
    model = BiEncoder(load_encoder(card, seed=0), DataArguments(train="x.jsonl", group_size=3),
                      LossArguments(stage="2", temperature=0.5))
    assert model.loss_args.temperature == 0.5


def test_sparse_loss_term_adds_a_contrastive_loss_on_the_raw_ot_dot(tiny_bert_dir):
    card = dataclasses.replace(tiny_card(tiny_bert_dir), sparse_weight=0.04)
    model = BiEncoder(load_encoder(card, seed=0), DataArguments(train="x.jsonl", group_size=3),
                      LossArguments(stage="2", temperature=0.5, sparse_loss_weight=0.3,
                                    sparse_temperature=2.0)).eval()
    batch = model.make_collator()(EXAMPLES, torch.Generator().manual_seed(0))
    with torch.no_grad():
        outputs = model(batch)
        losses = model.loss(outputs, batch)
    raw_ot = outputs["query_sparse"] @ outputs["passage_sparse"].T / 0.04  # lambda taken out of the folded vectors
    expected_sparse = contrastive_loss(raw_ot, 3, 2.0)
    torch.testing.assert_close(losses["ce_sparse"], expected_sparse)
    torch.testing.assert_close(losses["ce"], contrastive_loss(model.scores(outputs), 3, 0.5))
    torch.testing.assert_close(losses["loss"], losses["ce"] + 0.3 * expected_sparse)


def test_sparse_loss_term_needs_an_ot_side(tiny_bert_dir):
    with pytest.raises(ValueError, match="sparse-loss-weight needs a card with an OT side"):
        BiEncoder(load_encoder(tiny_card(tiny_bert_dir, kind="retromae"), seed=0),
                  DataArguments(train="x.jsonl", group_size=3), LossArguments(stage="1", sparse_loss_weight=1.0))


def test_dense_loss_term_adds_a_contrastive_loss_on_the_dense_side_alone(tiny_bert_dir):
    card = dataclasses.replace(tiny_card(tiny_bert_dir), sparse_weight=0.04)
    model = BiEncoder(load_encoder(card, seed=0), DataArguments(train="x.jsonl", group_size=3),
                      LossArguments(stage="2", temperature=0.5, dense_loss_weight=0.7, sparse_loss_weight=0.3,
                                    sparse_temperature=2.0)).eval()
    batch = model.make_collator()(EXAMPLES, torch.Generator().manual_seed(0))
    with torch.no_grad():
        outputs = model(batch)
        losses = model.loss(outputs, batch)
    expected_dense = contrastive_loss(outputs["query_dense"] @ outputs["passage_dense"].T, 3, 0.5)
    torch.testing.assert_close(losses["ce_dense"], expected_dense)
    assert not torch.isclose(losses["ce_dense"], losses["ce"])  # Eq. 12's OT part is not in it
    torch.testing.assert_close(losses["loss"], losses["ce"] + 0.7 * expected_dense + 0.3 * losses["ce_sparse"])


def test_dense_loss_term_needs_an_ot_side(tiny_bert_dir):
    with pytest.raises(ValueError, match="dense-loss-weight needs a card with an OT side"):
        BiEncoder(load_encoder(tiny_card(tiny_bert_dir, kind="retromae"), seed=0),
                  DataArguments(train="x.jsonl", group_size=3), LossArguments(stage="1", dense_loss_weight=1.0))
    with pytest.raises(ValueError, match="dense-loss-weight >= 0"):
        LossArguments(stage="1", dense_loss_weight=-1.0)


@pytest.mark.parametrize("flags, named", [({"teacher_temperature": 2.0}, "--teacher-temperature"),
                                          ({"hard_label_weight": 1.0}, "--hard-label-weight"),
                                          ({"calibrate_teacher": True}, "--calibrate-teacher")])
def test_distillation_flags_are_refused_outside_distillation(flags, named):
    """They changed nothing on stages 1 and 2 but the run's identity (exit 0, the flag silently ignored)."""
    for stage in ("1", "2"):
        with pytest.raises(ValueError, match=f"{named}: distillation only \\(--stage distill\\), not --stage {stage}"):
            LossArguments(stage=stage, **flags)
    assert LossArguments(stage="distill", **flags).distill


def test_a_teacher_temperature_calibration_would_replace_is_refused():
    """The calibrated temperature replaced the given one, which stayed in the run's identity (exit 0)."""
    with pytest.raises(ValueError, match="--teacher-temperature and --calibrate-teacher do not combine"):
        LossArguments(stage="distill", teacher_temperature=2.0, calibrate_teacher=True)


def test_flags_whose_term_or_data_is_absent_are_refused():
    """Accepted and ignored before (only the run's identity changed): the sparse term's temperature without the
    term, false-negative masking in distillation without a contrastive term (the KL term is not masked), and the
    qrels label threshold with a --train file (which names its positives itself)."""
    with pytest.raises(ValueError, match="--sparse-temperature is the temperature of the --sparse-loss-weight term"):
        LossArguments(stage="1", sparse_temperature=10.0)
    LossArguments(stage="1", sparse_temperature=10.0, sparse_loss_weight=1.0)
    with pytest.raises(ValueError, match="--mask-false-negatives with --stage distill masks the contrastive terms"):
        LossArguments(stage="distill", mask_false_negatives=True)
    LossArguments(stage="distill", mask_false_negatives=True, dense_loss_weight=0.5)
    LossArguments(stage="2", mask_false_negatives=True)
    with pytest.raises(ValueError, match="--min-relevance goes with --queries/--qrels, not --train"):
        DataArguments(train="x.jsonl", min_relevance=2)
    DataArguments(queries="q", qrels="r", corpus="c", min_relevance=2)
    with pytest.raises(ValueError, match="--min-relevance must be >= 1, got 0"):  # 0: judged non-relevant
        DataArguments(queries="q", qrels="r", corpus="c", min_relevance=0)
    # text triples name no ids: the corpus was read (all of MS MARCO), keyed in the run identity, never looked up
    with pytest.raises(ValueError, match=r"--corpus looks up document ids, and --train triples.tsv.gz holds text "
                                         r"triples"):
        DataArguments(train="triples.tsv.gz", corpus="collection.tsv")
    DataArguments(train="mined.jsonl", corpus="collection.tsv")
    DataArguments(train="triples.tsv")

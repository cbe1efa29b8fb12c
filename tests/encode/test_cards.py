"""Encoder cards: the shipped ones load, bad ones fail with a clear message, the fingerprint tracks the vectors."""
import dataclasses

import pytest

from retromae_ir.encode.cards import CARD_DIR, CardError, load_card


def test_every_shipped_card_loads():
    names = sorted(p.stem for p in CARD_DIR.glob("*.yaml"))
    for required in ("minilm-cls", "minilm-mean", "dupmae-minilm", "retromae", "retromae-msmarco",
                     "retromae-msmarco-finetune", "retromae-msmarco-distill", "retromae-beir",
                     "master-msmarco", "master-wiki"):
        assert required in names
    for name in names:
        card = load_card(name)
        assert card.name == name and card.dims > 0
    assert load_card("dupmae-minilm").sparse and not load_card("minilm-mean").sparse
    assert load_card("minilm-mean").pooling == "mean"


def test_packaged_minilm_resolves_to_a_local_directory(minilm_path):
    assert load_card("minilm-cls").checkpoint_path() == str(minilm_path)


def test_fingerprint_follows_the_representation_not_the_name():
    card = load_card("dupmae-minilm")
    assert dataclasses.replace(card, name="x", description="y").fingerprint() == card.fingerprint()
    assert dataclasses.replace(card, scale=50).fingerprint() != card.fingerprint()
    assert dataclasses.replace(card, k=260).fingerprint() != card.fingerprint()


@pytest.mark.parametrize("text, message", [
    ("checkpoint: x\nkind: splade\ndims: 8\n", "unknown kind"),
    ("checkpoint: x\nkind: dupmae\ndims: 8\nactivation: gelu\n", "activation"),
    ("checkpoint: x\nkind: dupmae\ndims: 8\nbogus: 1\n", "unknown fields"),
    ("kind: dupmae\ndims: 8\n", "missing required"),
    ("checkpoint: x\nkind: dupmae\ndims: 8\nscale: 0\n", "scale"),
    ("name: ''\ncheckpoint: x\nkind: dupmae\ndims: 8\n", "name must be one folder name"),  # runs went to runs/
    ("name: a/../b\ncheckpoint: x\nkind: dupmae\ndims: 8\n", "name must be one folder name"),
    ("name: ..\ncheckpoint: x\nkind: dupmae\ndims: 8\n", "name must be one folder name"),
    ("name: .x.ab.tmp\ncheckpoint: x\nkind: dupmae\ndims: 8\n", "name must be one folder name, not hidden"),
    # an infinite scale made every impact int64's minimum, dropped as a zero: an impact index of empty documents
    ("checkpoint: x\nkind: dupmae\ndims: 8\nscale: .inf\n", "scale must be positive and finite, got inf"),
    ("checkpoint: x\nkind: dupmae\ndims: 8\nsparse_weight: .inf\n", "sparse_weight must be positive and finite"),
    ("- a list\n", "mapping"),
    ("checkpoint: x\nkind: dupmae\ndims: 8\npooling: cls\nnormalize: 'false'\n", "normalize must be true or false"),
    # PyYAML kept the second value silently: a card edited by appending a line encoded with that one
    ("checkpoint: x\nkind: dupmae\ndims: 8\nk: 256\nk: 64\n",
     "not valid YAML: line 5: the key 'k' is given twice \\(first on line 4\\)"),
])
def test_bad_cards_are_rejected(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(CardError, match=message):
        load_card(path)


def test_unknown_card_name_lists_the_known_ones():
    with pytest.raises(CardError, match="dupmae-minilm"):
        load_card("no-such-card")


def test_a_relative_checkpoint_is_the_card_folders_and_moves_with_it(tiny_bert_dir, tmp_path, monkeypatch):
    """A fine-tuned output's ``checkpoint: .`` names the folder the card lies in: a copy of the folder reads its
    own weights, never the original's (a chain output copied elsewhere trained its next stage from the original)."""
    import shutil

    original = tmp_path / "a" / "stage"
    shutil.copytree(tiny_bert_dir, original)
    (original / "card.yaml").write_text("checkpoint: .\nkind: cls-dense\ndims: 32\n")
    (tmp_path / "a" / "beside.yaml").write_text("checkpoint: ./stage\nkind: cls-dense\ndims: 32\n")
    (tmp_path / "a" / "up.yaml").write_text("checkpoint: ../a/stage\nkind: cls-dense\ndims: 32\n")
    for card in ("stage/card.yaml", "beside.yaml", "up.yaml"):
        assert load_card(tmp_path / "a" / card).checkpoint_path() == str(original.resolve())
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    assert load_card(tmp_path / "b" / "stage" / "card.yaml").checkpoint_path() == str((tmp_path / "b" / "stage"))
    assert load_card(tmp_path / "b" / "beside.yaml").checkpoint == str(tmp_path / "b" / "stage")
    shutil.rmtree(tmp_path / "a")
    with pytest.raises(CardError, match="does not exist"):
        load_card(tmp_path / "b" / "up.yaml").checkpoint_path()  # ../a/stage: relative to the card, not the cwd
    # hub names, the packaged model and explicit overrides are taken as written
    hub = tmp_path / "hub.yaml"
    hub.write_text("checkpoint: Shitao/RetroMAE\nkind: retromae\ndims: 768\npooling: cls\nnormalize: false\n")
    assert load_card(hub).checkpoint == "Shitao/RetroMAE"
    assert load_card("minilm-cls").checkpoint == "packaged:all-MiniLM-L6-v2"
    monkeypatch.chdir(tmp_path / "b")  # an override is the caller's path: relative to the working directory
    assert load_card(tmp_path / "b" / "stage" / "card.yaml", checkpoint="./stage").checkpoint == "./stage"


def test_a_name_of_a_folder_beside_the_card_is_not_read_as_another(tiny_bert_dir, tmp_path, monkeypatch):
    """``checkpoint: ft/stage`` reads as a hub name, which from_pretrained takes from the working directory when a
    folder of that name is there: with another ``ft/stage`` beside the card, the working directory's weights were
    encoded and scored (exit 0), and with none there, the hub's model of that name would have been."""
    import shutil

    cards = tmp_path / "cards"
    shutil.copytree(tiny_bert_dir, cards / "ft" / "stage")
    (cards / "mine.yaml").write_text("checkpoint: ft/stage\nkind: cls-dense\ndims: 32\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CardError, match=r"checkpoint ft/stage reads as a hub name .* lies beside the card .*write "
                                        r"\./ft/stage for that one"):
        load_card(cards / "mine.yaml")
    monkeypatch.chdir(cards)  # the card's folder is the working directory: one folder, no question
    assert load_card(cards / "mine.yaml").checkpoint_path() == "ft/stage"
    (cards / "mine.yaml").write_text("checkpoint: ./ft/stage\nkind: cls-dense\ndims: 32\n")
    monkeypatch.chdir(tmp_path)
    assert load_card(cards / "mine.yaml").checkpoint_path() == str((cards / "ft" / "stage").resolve())


def test_an_old_own_card_in_a_copied_output_reads_the_weights_beside_it(tiny_bert_dir, tmp_path, caplog):
    """Outputs written before relative paths named their own folder absolutely: in a copy that is the original's
    folder (other weights, exit 0). A ``card.yaml`` beside a ``config.json`` now reads the checkpoint beside it,
    with a warning; any other card keeps the absolute path it names."""
    import shutil

    original = tmp_path / "a" / "stage"
    shutil.copytree(tiny_bert_dir, original)
    (original / "card.yaml").write_text(f"checkpoint: {original}\nkind: cls-dense\ndims: 32\n")
    (tmp_path / "a" / "other.yaml").write_text(f"checkpoint: {original}\nkind: cls-dense\ndims: 32\n")
    assert load_card(original / "card.yaml").checkpoint == str(original)  # in place: as written, no warning
    assert not caplog.records
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    with caplog.at_level("WARNING"):
        assert load_card(tmp_path / "b" / "stage" / "card.yaml").checkpoint == str(tmp_path / "b" / "stage")
    assert "not the folder it lies in" in caplog.text
    assert load_card(tmp_path / "b" / "other.yaml").checkpoint == str(original)


def test_an_impact_beyond_a_java_int_is_refused_not_wrapped():
    """Anserini stores an impact as a Java int term frequency: 4294967301 was indexed as 5, 3e9 dropped."""
    import numpy as np
    import scipy.sparse

    from retromae_ir.encode.representation import LUCENE_MAX_IMPACT, impact_dicts

    rows = scipy.sparse.csr_matrix(np.array([[0.5, 0.0, 2.0], [0.0, 1.0, 0.25]], dtype=np.float32))
    assert impact_dicts(rows, ["a", "b", "c"], 100) == [{"a": 50, "c": 200}, {"b": 100, "c": 25}]
    assert impact_dicts(rows, ["a", "b", "c"], 1e9)[0]["c"] == 2_000_000_000 < LUCENE_MAX_IMPACT
    with pytest.raises(ValueError, match=r"row 0: an OT weight times the card's scale 2000000000.0 is 4000000000.0, "
                                         r"beyond"):
        impact_dicts(rows, ["a", "b", "c"], 2e9)
    with pytest.raises(ValueError, match=r"id 'doc-1': an OT weight times"):
        impact_dicts(rows[1:], ["a", "b", "c"], 9e9, ids=["doc-1"])


def test_a_checkpoint_trained_again_while_it_loads_is_refused(tiny_bert_dir, tmp_path, monkeypatch):
    """Its files were hashed before the load: the index or run was keyed by the files read before, while holding
    vectors of the ones loaded."""
    import shutil

    import yaml

    from retromae_ir.encode import MODEL_CLASSES, EncoderModel
    from retromae_ir.io import InputChangedError

    checkpoint = shutil.copytree(tiny_bert_dir, tmp_path / "checkpoint")
    card = tmp_path / "tiny.yaml"
    card.write_text(yaml.safe_dump({"checkpoint": str(checkpoint), "kind": "dupmae", "dims": 32, "k": 8}))
    assert EncoderModel.from_card(card, device="cpu").loaded_digests  # settled: loads
    original = MODEL_CLASSES["dupmae"].from_checkpoint

    def load_then_train_again(loaded_card):
        model = original(loaded_card)
        (checkpoint / "config.json").write_text((checkpoint / "config.json").read_text() + "\n")
        return model

    monkeypatch.setattr(MODEL_CLASSES["dupmae"], "from_checkpoint", load_then_train_again)
    with pytest.raises(InputChangedError, match=r"checkpoint .*checkpoint changed while it was loaded"):
        EncoderModel.from_card(card, device="cpu")


def test_a_fine_tuned_output_given_as_another_cards_checkpoint_keeps_its_pooling(tiny_bert_dir, tmp_path):
    """A fine-tuned output writes no modules.json, only its own card.yaml: given as another card's checkpoint
    (``finetune --encoder X --model OUTPUT``), it was read as declaring nothing, and a mean-pooled cosine model went
    on as [CLS] with raw dot products. Its card.yaml's pooling and normalize are its declaration."""
    import shutil

    from retromae_ir.encode.cards import EncoderCard

    output = tmp_path / "stage2"
    shutil.copytree(tiny_bert_dir, output)
    bare = EncoderCard(name="x", checkpoint=str(output), kind="dupmae", dims=32)
    assert (bare.pooling, bare.normalize) == ("cls", False)  # declares nothing: the kind's default
    (output / "card.yaml").write_text("checkpoint: .\nkind: dupmae\ndims: 32\npooling: mean\nnormalize: true\n")
    card = EncoderCard(name="x", checkpoint=str(output), kind="dupmae", dims=32)
    assert (card.pooling, card.normalize) == ("mean", True)
    explicit = EncoderCard(name="x", checkpoint=str(output), kind="dupmae", dims=32, pooling="cls", normalize=False)
    assert (explicit.pooling, explicit.normalize) == ("cls", False)  # the card's own choice still wins
    (output / "card.yaml").write_text("checkpoint: /elsewhere\nkind: dupmae\ndims: 32\npooling: mean\n")
    other = EncoderCard(name="x", checkpoint=str(output), kind="dupmae", dims=32)
    assert other.pooling == "cls"  # a card of other weights declares nothing about these
    (output / "card.yaml").write_text("checkpoint: .\npooling: mean\npooling: cls\n")
    with pytest.raises(CardError, match=r"card.yaml is not valid YAML"):
        EncoderCard(name="x", checkpoint=str(output), kind="dupmae", dims=32)

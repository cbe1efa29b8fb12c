"""A card without ``pooling`` / ``normalize`` follows what a sentence-transformers checkpoint declares."""
import json
import shutil

import pytest

from retromae_ir.encode.cards import CardError, EncoderCard, load_card


def st_checkpoint(base, folder, pooling_flags: dict, normalize: bool):
    """A copy of ``base`` laid out as sentence-transformers saves it (modules.json, 1_Pooling/config.json)."""
    shutil.copytree(base, folder)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling").mkdir()
    flags = {"pooling_mode_cls_token": False, "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False}
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32, **flags,
                                                                  **pooling_flags}))
    return folder


def card(checkpoint, **fields):
    return EncoderCard(name="t", checkpoint=str(checkpoint), kind=fields.pop("kind", "dupmae"), dims=32, **fields)


def test_declared_mean_pooling_and_normalisation_are_followed(tiny_bert_dir, tmp_path):
    st = st_checkpoint(tiny_bert_dir, tmp_path / "st", {"pooling_mode_mean_tokens": True}, normalize=True)
    resolved = card(st)
    assert (resolved.pooling, resolved.normalize) == ("mean", True)


def test_an_explicit_card_value_wins(tiny_bert_dir, tmp_path):
    st = st_checkpoint(tiny_bert_dir, tmp_path / "st", {"pooling_mode_mean_tokens": True}, normalize=True)
    resolved = card(st, pooling="cls", normalize=False)
    assert (resolved.pooling, resolved.normalize) == ("cls", False)


def test_a_checkpoint_declaring_nothing_keeps_the_family_default(tiny_bert_dir):
    for kind, pooling in (("dupmae", "cls"), ("mean-dense", "mean"), ("retromae", "cls")):
        resolved = card(tiny_bert_dir, kind=kind)
        assert (resolved.pooling, resolved.normalize) == (pooling, False)


def test_declared_cls_without_normalize(tiny_bert_dir, tmp_path):
    st = st_checkpoint(tiny_bert_dir, tmp_path / "st", {"pooling_mode_cls_token": True}, normalize=False)
    assert (card(st).pooling, card(st).normalize) == ("cls", False)


def test_a_pooling_we_cannot_reproduce_is_a_clear_error(tiny_bert_dir, tmp_path):
    st = st_checkpoint(tiny_bert_dir, tmp_path / "st", {"pooling_mode_max_tokens": True}, normalize=False)
    with pytest.raises(CardError, match=r"1_Pooling/config.json.*pooling_mode_max_tokens.*'pooling:'"):
        card(st)


def test_a_module_we_cannot_reproduce_is_a_clear_error_unless_the_card_is_explicit(tiny_bert_dir, tmp_path):
    """A Dense projection after the pooling (LaBSE, distiluse) was dropped without a word: vectors that are not the
    checkpoint's, exit 0."""
    st = st_checkpoint(tiny_bert_dir, tmp_path / "st", {"pooling_mode_mean_tokens": True}, normalize=True)
    modules = json.loads((st / "modules.json").read_text())
    modules.insert(2, {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    (st / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(CardError, match=r"modules.json: module '2_Dense' \(sentence_transformers.models.Dense\) "
                                        r"has no equivalent here.*'pooling:' and 'normalize:'"):
        card(st)
    explicit = card(st, pooling="mean", normalize=True)  # the card's own word: no declaration read
    assert (explicit.pooling, explicit.normalize) == ("mean", True)


def test_a_checkpoint_saved_by_the_installed_sentence_transformers_is_read(minilm_path, tmp_path):
    """sentence-transformers 6.x names modules by their new import paths and writes {"pooling_mode": "mean"}: such
    a checkpoint was read as declaring nothing ([CLS], no normalisation), then refused for its Transformer."""
    from sentence_transformers import SentenceTransformer

    saved = tmp_path / "saved"
    SentenceTransformer(str(minilm_path), device="cpu").save(str(saved))
    resolved = EncoderCard(name="t", checkpoint=str(saved), kind="mean-dense", dims=384)
    assert (resolved.pooling, resolved.normalize) == ("mean", True)
    (saved / "1_Pooling" / "config.json").write_text(json.dumps({"embedding_dimension": 384, "pooling_mode": "max"}))
    with pytest.raises(CardError, match=r"1_Pooling/config.json: pooling \['max'\] has no equivalent here"):
        EncoderCard(name="t", checkpoint=str(saved), kind="mean-dense", dims=384)


def test_packaged_minilm_is_read_with_its_own_mean_pooling_and_cosine():
    minilm = load_card("dupmae-minilm")
    assert (minilm.pooling, minilm.normalize) == ("mean", True)
    assert (load_card("minilm-cls").pooling, load_card("minilm-cls").normalize) == ("cls", False)


def test_hub_name_resolves_through_the_offline_cache(tiny_bert_dir, tmp_path, monkeypatch):
    """A hub name (owner/name) is looked up in the Hugging Face cache layout with the hub offline."""
    snapshot = tmp_path / "hub" / "models--someone--st-model" / "snapshots" / "abc123"
    st_checkpoint(tiny_bert_dir, snapshot, {"pooling_mode_mean_tokens": True}, normalize=True)
    (tmp_path / "hub" / "models--someone--st-model" / "refs").mkdir()
    (tmp_path / "hub" / "models--someone--st-model" / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    resolved = card("someone/st-model")
    assert (resolved.pooling, resolved.normalize) == ("mean", True)
    # offline and not cached: unknown, an error naming the fix (it was read as "declares nothing": [CLS], no
    # normalisation, silently another representation of a sentence-transformers model)
    with pytest.raises(CardError, match="cannot tell whether someone/not-cached has modules.json.*set pooling and "
                                        "normalize in the encoder card"):
        card("someone/not-cached")
    assert card("someone/not-cached", pooling="cls", normalize=False).pooling == "cls"  # explicit: no lookup
    # weights cached by transformers alone (no modules.json, nor a record of its absence): unknown as well
    plain = tmp_path / "hub" / "models--someone--plain" / "snapshots" / "def456"
    shutil.copytree(tiny_bert_dir, plain)
    (tmp_path / "hub" / "models--someone--plain" / "refs").mkdir()
    (tmp_path / "hub" / "models--someone--plain" / "refs" / "main").write_text("def456")
    with pytest.raises(CardError, match="cannot tell whether someone/plain has modules.json"):
        card("someone/plain")
    # the hub's record that the repository has no modules.json: declares nothing, the family's default
    (tmp_path / "hub" / "models--someone--plain" / ".no_exist" / "def456").mkdir(parents=True)
    (tmp_path / "hub" / "models--someone--plain" / ".no_exist" / "def456" / "modules.json").touch()
    assert (card("someone/plain").pooling, card("someone/plain").normalize) == ("cls", False)

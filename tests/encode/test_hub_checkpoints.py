"""The published checkpoints, by hub name, resolve through the real loading code (issue 13, item 3).

No network here, so each test lays out a real Hugging Face cache in a temporary folder (``models--<owner>--<name>/``
with ``refs/main`` holding a commit hash, ``blobs/`` and ``snapshots/<hash>/`` of relative symlinks into the blobs,
the layout ``huggingface_hub`` writes) and points the hub at it, offline. What is cached is a tiny randomly
initialised BERT with the published checkpoints' layout (``config.json``, ``pytorch_model.bin``, ``vocab.txt``,
``tokenizer_config.json``, ``special_tokens_map.json``; hidden size 768, so the shipped cards are used unchanged).
The cards are then loaded by name and the encoders built with ``EncoderModel.from_card``: the code under test is
the code a user runs (``EncoderCard.checkpoint_path``, ``declared_pipeline``, ``from_pretrained``), nothing is
stubbed, and any attempt to open a network connection fails the test.

``huggingface_hub`` reads ``HF_HUB_CACHE`` and ``HF_HUB_OFFLINE`` into ``huggingface_hub.constants`` when it is
first imported, and both it and transformers read those module attributes (not the environment) on every call.
In-process tests therefore set the environment *and* patch those two attributes; one test starts a fresh
interpreter with only the environment variables set, the way a user runs it, to show that path too.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from retromae_ir.encode import DenseEncoderModel, DupMAEEncoderModel, EncoderModel
from retromae_ir.encode.cards import CARD_DIR, load_card
from retromae_ir.encode.representation import ordinary_token_mask

REPO = Path(__file__).resolve().parents[2]
HIDDEN = 768  # the published cards' dims: the cards are used exactly as shipped
WORDS = ("the a of in is was who what when where how many wrote sang first capital city river longest france paris "
         "lyon europe country song singer novel author book").split()
QUERY = "who wrote the first novel"
PASSAGES = ["paris is the capital city of france", "the longest river in europe", "who sang the song"]


def published_cards() -> list[str]:
    """Every shipped card whose checkpoint is a hub name (owner/name), not a path or the packaged MiniLM."""
    names = []
    for path in sorted(CARD_DIR.glob("*.yaml")):
        checkpoint = str(yaml.safe_load(path.read_text())["checkpoint"])
        if checkpoint.count("/") == 1 and not checkpoint.startswith((".", "/", "~")) and ":" not in checkpoint:
            names.append(path.stem)
    return names


PUBLISHED = published_cards()


def load_card_fields(name: str) -> dict:
    return yaml.safe_load((CARD_DIR / f"{name}.yaml").read_text())


def test_the_published_cards_are_found():
    checkpoints = {load_card_fields(name)["checkpoint"] for name in PUBLISHED}
    assert {"Shitao/RetroMAE", "Shitao/RetroMAE_MSMARCO", "Shitao/RetroMAE_MSMARCO_finetune",
            "Shitao/RetroMAE_MSMARCO_distill", "Shitao/RetroMAE_BEIR", "lx865712528/master-base-pretrained-msmarco",
            "lx865712528/master-base-pretrained-wiki"} <= checkpoints


# --- a real Hugging Face cache ---------------------------------------------------------------------------------

def write_tokenizer(folder: Path) -> None:
    """A lower-casing WordPiece tokenizer as the published BERT checkpoints ship it (no tokenizer.json)."""
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, *letters, *(f"##{c}" for c in letters)]
    (folder / "vocab.txt").write_text("".join(f"{token}\n" for token in vocab))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"do_lower_case": True, "model_max_length": 512, "tokenizer_class": "BertTokenizer"}))
    (folder / "special_tokens_map.json").write_text(json.dumps(
        {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
         "mask_token": "[MASK]"}))


def bert_config(vocab_size: int):
    from transformers import BertConfig

    return BertConfig(vocab_size=vocab_size, hidden_size=HIDDEN, num_hidden_layers=1, num_attention_heads=12,
                      intermediate_size=64, max_position_embeddings=512)


def write_mlm_checkpoint(folder: Path, seed: int = 0) -> None:
    """A BertForMaskedLM whose MLM head is far from the identity head (random transform, LayerNorm and bias), saved
    as a ``pytorch_model.bin`` state dict like the published checkpoints."""
    from transformers import BertForMaskedLM

    folder.mkdir(parents=True)
    write_tokenizer(folder)
    vocab_size = len((folder / "vocab.txt").read_text().splitlines())
    torch.manual_seed(seed)
    config = bert_config(vocab_size)
    config.architectures = ["BertForMaskedLM"]
    model = BertForMaskedLM(config)
    with torch.no_grad():
        head = model.cls.predictions
        head.transform.LayerNorm.weight.uniform_(0.5, 1.5)
        head.transform.LayerNorm.bias.normal_(0, 0.1)
        head.bias.normal_(0, 0.5)
    config.to_json_file(folder / "config.json")
    torch.save(model.state_dict(), folder / "pytorch_model.bin")


def write_headless_checkpoint(folder: Path) -> None:
    """A plain BertModel (no ``cls.*`` weights), in safetensors, as a retrieval-only checkpoint is often saved."""
    from transformers import BertModel

    folder.mkdir(parents=True)
    write_tokenizer(folder)
    torch.manual_seed(1)
    BertModel(bert_config(len((folder / "vocab.txt").read_text().splitlines()))).save_pretrained(folder)


def write_sentence_transformers_checkpoint(folder: Path) -> None:
    """The headless BERT in sentence-transformers' layout: modules.json, 1_Pooling (mean), 2_Normalize."""
    write_headless_checkpoint(folder)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]
    (folder / "modules.json").write_text(json.dumps(modules, indent=2))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": HIDDEN, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
         "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False}))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128, "do_lower_case": False}))


def cache_repo(cache: Path, repo_id: str, source: Path) -> Path:
    """Lay ``source``'s files out as ``huggingface_hub`` caches ``repo_id``: blobs named by content hash,
    ``snapshots/<commit>/`` of relative symlinks into them, ``refs/main`` naming the commit. Returns the snapshot."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True)
    for file in sorted(p for p in source.rglob("*") if p.is_file()):
        digest = hashlib.sha256(file.read_bytes()).hexdigest()
        blob = repo / "blobs" / digest
        if not blob.exists():
            os.link(file, blob)  # hard link: seven repos share one copy of the weights
        link = snapshot / file.relative_to(source)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return snapshot


HEADLESS = "someone/headless-bert"
SENTENCE_TRANSFORMERS = "someone/st-bert"


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory) -> dict:
    """``{"cache": HF_HUB_CACHE, "home": HF_HOME, repo_id: snapshot}`` for every published checkpoint (one tiny MLM
    checkpoint under all their names), a head-less BERT and a sentence-transformers checkpoint."""
    root = tmp_path_factory.mktemp("hf")
    sources = root / "sources"
    write_mlm_checkpoint(sources / "mlm")
    write_headless_checkpoint(sources / "headless")
    write_sentence_transformers_checkpoint(sources / "st")
    cache = root / "home" / "hub"
    out = {"home": root / "home", "cache": cache}
    for name in PUBLISHED:
        repo_id = load_card_fields(name)["checkpoint"]
        if repo_id not in out:
            out[repo_id] = cache_repo(cache, repo_id, sources / "mlm")
    out[HEADLESS] = cache_repo(cache, HEADLESS, sources / "headless")
    out[SENTENCE_TRANSFORMERS] = cache_repo(cache, SENTENCE_TRANSFORMERS, sources / "st")
    return out


@pytest.fixture
def offline_hub(hub_cache, monkeypatch) -> dict:
    """The hub pointed at the temporary cache, offline, with every network connection refused."""
    monkeypatch.setenv("HF_HOME", str(hub_cache["home"]))
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache["cache"]))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(hub_cache["cache"]))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    return hub_cache


# --- direct computations to compare with -----------------------------------------------------------------------

def tokenize(snapshot: Path, texts: list[str], max_length: int):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(snapshot)(texts, truncation=True, max_length=max_length, padding=True,
                                                  return_tensors="pt")


def direct_dense(snapshot: Path, texts: list[str], max_length: int, pooling: str, normalize: bool) -> np.ndarray:
    """[CLS] or mean pooling of ``AutoModel`` loaded from the snapshot folder itself, optionally L2-normalised."""
    from transformers import AutoModel

    batch = tokenize(snapshot, texts, max_length)
    with torch.no_grad():
        hidden = AutoModel.from_pretrained(snapshot)(**batch).last_hidden_state
    if pooling == "cls":
        pooled = hidden[:, 0]
    else:
        mask = batch["attention_mask"].unsqueeze(-1).float()
        pooled = (hidden * mask).sum(1) / mask.sum(1)
    return torch.nn.functional.normalize(pooled, dim=-1).numpy() if normalize else pooled.numpy()


def ordinary_mask(snapshot: Path, batch) -> torch.Tensor:
    from transformers import AutoTokenizer

    special = torch.tensor(sorted(set(AutoTokenizer.from_pretrained(snapshot).all_special_ids)))
    return ordinary_token_mask(batch["input_ids"], batch["attention_mask"], special)


def sparse_from_logits(logits: torch.Tensor, mask: torch.Tensor, k: int | None) -> np.ndarray:
    """Eq. 6-7 and 11 written out: max over the ordinary positions, log(1 + relu), the k largest kept."""
    pooled = logits.masked_fill(~mask.unsqueeze(-1), float("-inf")).amax(dim=1)
    weights = torch.log1p(torch.relu(pooled))
    if k is not None:
        kept = torch.zeros_like(weights)
        values, indices = weights.topk(k, dim=-1)
        weights = kept.scatter_(-1, indices, values)
    return weights.numpy()


def trained_head_sparse(snapshot: Path, texts: list[str], max_length: int, k: int | None) -> np.ndarray:
    """The checkpoint's own MLM head: ``AutoModelForMaskedLM(...).logits``, loaded from the snapshot folder."""
    from transformers import AutoModelForMaskedLM

    batch = tokenize(snapshot, texts, max_length)
    with torch.no_grad():
        logits = AutoModelForMaskedLM.from_pretrained(snapshot)(**batch).logits
    return sparse_from_logits(logits, ordinary_mask(snapshot, batch), k)


def identity_head_sparse(snapshot: Path, texts: list[str], max_length: int, k: int | None) -> np.ndarray:
    """The identity head of ``retromae_ir.mlm_head`` written out: LayerNorm(gelu(h)) @ E^T, no affine, no bias."""
    from transformers import AutoModel

    batch = tokenize(snapshot, texts, max_length)
    with torch.no_grad():
        model = AutoModel.from_pretrained(snapshot)
        hidden = model(**batch).last_hidden_state
        transformed = torch.nn.functional.layer_norm(torch.nn.functional.gelu(hidden), (HIDDEN,),
                                                     eps=model.config.layer_norm_eps)
        logits = transformed @ model.get_input_embeddings().weight.T
    return sparse_from_logits(logits, ordinary_mask(snapshot, batch), k)


def dupmae_card(tmp_path: Path, checkpoint: str, **fields) -> Path:
    """A DupMAE card over a hub checkpoint (no DupMAE checkpoint is published, so none is shipped); pooling set, as
    the cache holds what transformers fetched (no ``modules.json``) and the hub is offline."""
    path = tmp_path / "dupmae-hub.yaml"
    path.write_text(yaml.safe_dump({"checkpoint": checkpoint, "kind": "dupmae", "dims": HIDDEN, "k": 16,
                                    "max_query_length": 32, "max_passage_length": 64, "pooling": "cls",
                                    "normalize": False, **fields}))
    return path


# --- the tests --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", PUBLISHED)
def test_published_card_loads_its_hub_checkpoint_and_encodes(offline_hub, name):
    """Each shipped hub card, unchanged, finds its checkpoint in the cache and encodes queries and passages exactly
    as the checkpoint's own [CLS] vector (the cards say ``pooling: cls``, no normalisation, dims 768)."""
    card = load_card(name)
    snapshot = offline_hub[card.checkpoint]
    assert card.checkpoint_path() == card.checkpoint  # a hub name goes to from_pretrained as it is
    assert (card.kind, card.pooling, card.normalize, card.dims) in {("retromae", "cls", False, HIDDEN),
                                                                   ("master", "cls", False, HIDDEN)}
    model = EncoderModel.from_card(card, device="cpu")
    assert isinstance(model, DenseEncoderModel) and model.projection is None
    saved = torch.load(snapshot / "pytorch_model.bin", weights_only=True)
    embeddings = saved["bert.embeddings.word_embeddings.weight"]
    assert torch.equal(model.backbone.embeddings.word_embeddings.weight, embeddings)

    query = model.encode_query([QUERY])
    passages = model.encode_passage(PASSAGES)
    assert query.sparse is None and passages.sparse is None
    assert query.dense.shape == (1, HIDDEN) and passages.dense.shape == (len(PASSAGES), HIDDEN)
    np.testing.assert_allclose(query.dense, direct_dense(snapshot, [QUERY], card.max_query_length, "cls", False),
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(passages.dense,
                               direct_dense(snapshot, PASSAGES, card.max_passage_length, "cls", False),
                               rtol=1e-4, atol=1e-5)


def test_the_cache_is_where_the_files_came_from(offline_hub):
    """The resolution really went through the temporary cache (not a copy elsewhere on the machine)."""
    from huggingface_hub import try_to_load_from_cache
    from transformers.utils import cached_file

    for filename in ("config.json", "pytorch_model.bin", "vocab.txt"):
        resolved = Path(cached_file("Shitao/RetroMAE", filename))
        assert resolved.parent == offline_hub["Shitao/RetroMAE"]
        assert Path(try_to_load_from_cache("Shitao/RetroMAE", filename)) == resolved


def test_dupmae_card_uses_the_checkpoints_own_mlm_head(offline_hub, tmp_path, caplog):
    """A DupMAE card over a hub checkpoint with a trained MLM head: the OT side is that head's logits (no identity
    head, no warning), equal to ``AutoModelForMaskedLM(...).logits`` max-pooled, activated and cut to k."""
    snapshot = offline_hub["Shitao/RetroMAE"]
    card = load_card(dupmae_card(tmp_path, "Shitao/RetroMAE"))
    with caplog.at_level(logging.WARNING, logger="retromae_ir.encode.dupmae"):
        model = EncoderModel.from_card(card, device="cpu")
    assert isinstance(model, DupMAEEncoderModel)
    assert not [r for r in caplog.records if "no trained MLM head" in r.getMessage()]
    saved = torch.load(snapshot / "pytorch_model.bin", weights_only=True)
    for name in ("cls.predictions.transform.dense.weight", "cls.predictions.transform.LayerNorm.weight",
                 "cls.predictions.bias"):
        assert torch.equal(model.mlm.state_dict()[name], saved[name]), name

    query, passages = model.encode_query([QUERY]), model.encode_passage(PASSAGES)
    np.testing.assert_allclose(query.dense, direct_dense(snapshot, [QUERY], 32, "cls", False), rtol=1e-4, atol=1e-5)
    expected_query = trained_head_sparse(snapshot, [QUERY], 32, None)  # query_k unset: every positive entry
    expected_passages = trained_head_sparse(snapshot, PASSAGES, 64, 16)
    np.testing.assert_allclose(query.sparse.toarray(), expected_query, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(passages.sparse.toarray(), expected_passages, rtol=1e-4, atol=1e-5)
    assert (passages.sparse.getnnz(axis=1) == 16).all()
    # and it is not the identity head the code would give a head-less checkpoint
    identity = identity_head_sparse(snapshot, PASSAGES, 64, 16)
    assert np.abs(passages.sparse.toarray() - identity).max() > 0.1


def test_a_headless_hub_checkpoint_gets_the_identity_head(offline_hub, tmp_path, caplog):
    """Documented in retromae_ir/mlm_head.py and docs/encoders.md: a checkpoint without an MLM head gets the
    deterministic identity head (transform = identity, plain LayerNorm, zero bias, decoder tied to the word
    embeddings) and a warning, not transformers' random head and not an error."""
    snapshot = offline_hub[HEADLESS]
    card = load_card(dupmae_card(tmp_path, HEADLESS))
    with caplog.at_level(logging.WARNING, logger="retromae_ir.encode.dupmae"):
        model = EncoderModel.from_card(card, device="cpu")
    warnings = [r.getMessage() for r in caplog.records if "no trained MLM head" in r.getMessage()]
    assert len(warnings) == 1 and HEADLESS in warnings[0] and "identity head" in warnings[0]
    head = model.mlm.cls.predictions
    assert torch.equal(head.transform.dense.weight, torch.eye(HIDDEN))
    assert not head.transform.dense.bias.any() and not head.bias.any()
    assert (head.transform.LayerNorm.weight == 1).all() and not head.transform.LayerNorm.bias.any()
    assert head.decoder.weight.data_ptr() == model.mlm.get_input_embeddings().weight.data_ptr()

    passages = model.encode_passage(PASSAGES)
    np.testing.assert_allclose(passages.sparse.toarray(), identity_head_sparse(snapshot, PASSAGES, 64, 16),
                               rtol=1e-4, atol=1e-4)
    # deterministic: a second load (another process would do the same) gives the same vectors
    again = EncoderModel.from_card(card, device="cpu").encode_passage(PASSAGES)
    np.testing.assert_array_equal(again.sparse.toarray(), passages.sparse.toarray())


def test_a_published_dense_card_needs_no_head(offline_hub):
    """RetroMAE/MASTER cards are dense-only: a head-less checkpoint loads under them without any head."""
    snapshot = offline_hub[HEADLESS]
    model = EncoderModel.from_card(load_card("master-wiki", checkpoint=HEADLESS), device="cpu")
    np.testing.assert_allclose(model.encode_passage(PASSAGES).dense,
                               direct_dense(snapshot, PASSAGES, 256, "cls", False), rtol=1e-4, atol=1e-5)


def test_unset_pooling_follows_a_cached_sentence_transformers_checkpoint(offline_hub, tmp_path):
    """A card that leaves pooling/normalize unset follows the cached checkpoint's modules.json (mean pooling,
    Normalize) and encodes accordingly; a published card's explicit ``pooling: cls`` still wins."""
    snapshot = offline_hub[SENTENCE_TRANSFORMERS]
    path = tmp_path / "st.yaml"
    path.write_text(yaml.safe_dump({"checkpoint": SENTENCE_TRANSFORMERS, "kind": "retromae", "dims": HIDDEN}))
    card = load_card(path)
    assert (card.pooling, card.normalize) == ("mean", True)
    model = EncoderModel.from_card(card, device="cpu")
    passages = model.encode_passage(PASSAGES)
    np.testing.assert_allclose(np.linalg.norm(passages.dense, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(passages.dense, direct_dense(snapshot, PASSAGES, card.max_passage_length, "mean", True),
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(model.encode_query([QUERY]).dense,
                               direct_dense(snapshot, [QUERY], card.max_query_length, "mean", True),
                               rtol=1e-4, atol=1e-5)
    explicit = load_card("retromae", checkpoint=SENTENCE_TRANSFORMERS)
    assert (explicit.pooling, explicit.normalize) == ("cls", False)


def test_a_checkpoint_missing_from_the_offline_cache_fails_to_load(offline_hub):
    """Offline and not cached: an error before anything is encoded (today transformers' OSError)."""
    card = load_card("retromae", checkpoint="someone/not-cached")  # explicit pooling: nothing looked up yet
    with pytest.raises((OSError, ValueError), match="couldn't find them in the cached files"):
        EncoderModel.from_card(card, device="cpu")


def test_a_missing_checkpoint_error_names_the_card_and_the_checkpoint(offline_hub):
    card = load_card("retromae", checkpoint="someone/not-cached")
    with pytest.raises((OSError, ValueError), match="someone/not-cached"):
        EncoderModel.from_card(card, device="cpu")


def test_a_hub_checkpoints_projection_is_used(offline_hub, tmp_path):
    from safetensors.torch import save_file

    source = tmp_path / "with-projection"
    source.mkdir()
    for file in offline_hub[HEADLESS].iterdir():
        (source / file.name).write_bytes(file.read_bytes())
    torch.manual_seed(3)
    save_file({"weight": torch.randn(HIDDEN, HIDDEN) / HIDDEN ** 0.5}, source / "projection.safetensors")
    cache_repo(offline_hub["cache"], "someone/with-projection", source)
    model = EncoderModel.from_card(load_card("master-wiki", checkpoint="someone/with-projection"), device="cpu")
    assert model.projection is not None


def test_a_hub_checkpoints_revision_keys_the_index(offline_hub):
    assert load_card("retromae").checkpoint_digests()


def test_a_hub_snapshot_without_its_weights_is_unknown_not_another_model(offline_hub, tmp_path):
    """Only config.json cached (the card's pooling was looked up, the weights never loaded here): {} ("unknown",
    so an index built elsewhere is still searched), not a key of config alone that would differ from the index's."""
    source = tmp_path / "config-only"
    source.mkdir()
    (source / "config.json").write_bytes((offline_hub[HEADLESS] / "config.json").read_bytes())
    cache_repo(offline_hub["cache"], "someone/config-only", source)
    assert load_card("retromae", checkpoint="someone/config-only").checkpoint_digests() == {}


def test_a_fresh_process_finds_the_cache_from_the_environment_alone(hub_cache, tmp_path):
    """What a user does: HF_HOME / HF_HUB_CACHE and HF_HUB_OFFLINE=1 in the environment, nothing patched."""
    script = textwrap.dedent(f"""
        import json, numpy as np
        from retromae_ir.encode import EncoderModel
        from retromae_ir.encode.cards import load_card
        model = EncoderModel.from_card(load_card("master-msmarco"), device="cpu")
        st = load_card({str(tmp_path / 'st.yaml')!r})
        print(json.dumps({{"dense": model.encode_query([{QUERY!r}]).dense[0, :4].tolist(),
                           "st": [st.pooling, st.normalize]}}))
    """)
    (tmp_path / "st.yaml").write_text(yaml.safe_dump({"checkpoint": SENTENCE_TRANSFORMERS, "kind": "retromae",
                                                      "dims": HIDDEN}))
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HF_", "TRANSFORMERS_"))}
    env.update(HF_HOME=str(hub_cache["home"]), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    snapshot = hub_cache["lx865712528/master-base-pretrained-msmarco"]
    np.testing.assert_allclose(out["dense"], direct_dense(snapshot, [QUERY], 64, "cls", False)[0, :4],
                               rtol=1e-4, atol=1e-5)
    assert out["st"] == ["mean", True]


def test_a_hub_models_digests_name_the_revision_its_load_read(offline_hub, tmp_path, monkeypatch):
    """A hub name whose load fetches a newer revision than the cache held: the model's digests (what its index and
    queries record) are the revision it read, taken after the load, not the one cached before it."""
    from transformers import AutoModel

    from retromae_ir.encode import MODEL_CLASSES

    old = tmp_path / "old"
    old.mkdir()
    for file in offline_hub[HEADLESS].iterdir():
        (old / file.name).write_bytes(file.read_bytes())
    snapshot = cache_repo(offline_hub["cache"], "someone/revised", old)
    card = load_card("retromae", checkpoint="someone/revised")
    cached_before = card.checkpoint_digests()

    def newer_revision_then_load(card):  # what an online from_pretrained does when main moved on
        newer = snapshot.parent / "newer"
        newer.mkdir()
        model = AutoModel.from_pretrained(old)
        with torch.no_grad():
            model.embeddings.word_embeddings.weight.mul_(2.0)
        model.save_pretrained(newer)
        for file in old.iterdir():
            if not (newer / file.name).exists():
                (newer / file.name).write_bytes(file.read_bytes())
        (snapshot.parents[1] / "refs" / "main").write_text("newer")
        return original(card)

    original = MODEL_CLASSES[card.kind].from_checkpoint
    monkeypatch.setattr(MODEL_CLASSES[card.kind], "from_checkpoint", newer_revision_then_load)
    model = EncoderModel.from_card(card, device="cpu")
    assert model.checkpoint_digests()["model.safetensors"] != cached_before["model.safetensors"]
    assert model.checkpoint_digests() == card.checkpoint_digests()  # the revision now cached, which it read

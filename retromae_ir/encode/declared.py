"""What a sentence-transformers checkpoint (or a fine-tuned output, in its own ``card.yaml``) declares about its own
pipeline.

A checkpoint trained with sentence-transformers names its pooling (``1_Pooling/config.json``) and whether it
L2-normalises (a ``Normalize`` module in ``modules.json``); any other module (a ``Dense`` projection) is refused,
since it would be dropped. An encoder card that leaves ``pooling`` or ``normalize`` unset follows that declaration,
so all-MiniLM-L6-v2 is read with the mean pooling and cosine it was trained for (nDCG@10 0.6451 on scifact, against
0.5175 with [CLS]); a checkpoint that declares nothing (a BERT-style MLM checkpoint, the papers' case) keeps its
family's default. Files are looked up in a local directory, then in the Hugging Face cache, then downloaded (unless
``HF_HUB_OFFLINE`` is set). A hub checkpoint whose files cannot be looked up (offline, or the hub unreachable, and
not in the cache: transformers caches its weights without ``modules.json``) is an error, not "declares nothing":
read as [CLS] without normalisation, all-MiniLM-L6-v2 would silently be another representation. Set ``pooling`` and
``normalize`` in the card to need no lookup.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)
MODULES = "modules.json"
# modules.json names a module by its class's import path, which sentence-transformers moved between versions
# (``sentence_transformers.models.Pooling``; in 6.x
# ``sentence_transformers.sentence_transformer.modules.pooling.Pooling``): the class name is what is compared
TRANSFORMER, POOLING, NORMALIZE = "Transformer", "Pooling", "Normalize"
# 1_Pooling/config.json flag -> our pooling name; other modes (max, mean_sqrt_len, ...) have no equivalent here
POOLING_FLAGS = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean"}
POOLING_MODES = {"cls": "cls", "mean": "mean"}  # 6.x writes {"pooling_mode": "mean"} instead of the flags


class DeclarationError(ValueError):
    """The checkpoint declares a pipeline this toolkit cannot reproduce, or what it declares cannot be read."""


class UnknownFile(DeclarationError):
    """Whether a hub checkpoint has a file cannot be told here (offline or unreachable, and not in the cache)."""


@dataclasses.dataclass(frozen=True)
class Declared:
    pooling: str | None = None  # None: not declared
    normalize: bool | None = None


def declared_pipeline(checkpoint: str) -> Declared:
    """The pooling and normalisation ``checkpoint`` (a local directory or a hub name) declares."""
    try:
        return _declared(checkpoint)
    except UnknownFile as error:
        raise UnknownFile(f"{error}; set pooling and normalize in the encoder card, give the checkpoint as a local "
                          "folder, or let the hub be reached once") from None


def _declared(checkpoint: str) -> Declared:
    modules_file = checkpoint_file(checkpoint, MODULES)
    if modules_file is None:
        return _declared_by_own_card(checkpoint)
    modules = json.loads(Path(modules_file).read_text())
    classes = {_class_name(module): module.get("path", "") for module in modules}
    for module in modules:  # a Dense projection (LaBSE, distiluse) would otherwise be dropped without a word
        if _class_name(module) not in (TRANSFORMER, POOLING, NORMALIZE):
            raise DeclarationError(f"{modules_file}: module {module.get('path') or module.get('name')!r} "
                                   f"({module.get('type')}) has no equivalent here, which encodes with the "
                                   "transformer, its pooling and normalisation only; set 'pooling:' and "
                                   "'normalize:' in the encoder card to encode without it deliberately")
    normalize = NORMALIZE in classes
    if POOLING not in classes:
        return Declared(normalize=normalize)
    config_name = f"{classes[POOLING]}/config.json".lstrip("/")
    config_file = checkpoint_file(checkpoint, config_name)
    if config_file is None:
        return Declared(normalize=normalize)
    return Declared(_pooling(json.loads(Path(config_file).read_text()), config_file), normalize)


def _declared_by_own_card(checkpoint: str) -> Declared:
    """What a fine-tuned output declares in its own ``card.yaml`` (it writes no modules.json): given to another card
    as ``checkpoint`` (``finetune --encoder X --model OUTPUT``, a chain's ``--model``), it was read as declaring
    nothing, so a mean-pooled cosine model trained on as [CLS] with raw dot products (exit 0)."""
    import yaml

    from retromae_ir import strict_yaml
    from retromae_ir.encode.cards import OWN_CARD

    path = Path(os.path.expanduser(checkpoint)) / OWN_CARD
    if not path.is_file():
        return Declared()
    try:
        card = strict_yaml.load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise DeclarationError(f"{path} is not valid YAML: {error}") from None
    if not isinstance(card, dict) or card.get("checkpoint") != ".":  # not the card of the weights beside it
        return Declared()
    pooling, normalize = card.get("pooling"), card.get("normalize")
    if pooling not in (None, *POOLING_MODES) or normalize not in (None, True, False):
        raise DeclarationError(f"{path}: pooling {pooling!r} / normalize {normalize!r} are not a pipeline here")
    return Declared(pooling, normalize)


def _class_name(module: dict) -> str:
    """The class a modules.json entry names, without its import path (which moved between versions)."""
    return str(module.get("type")).rsplit(".", 1)[-1]


def _pooling(config: dict, where: str | os.PathLike) -> str:
    if "pooling_mode" in config:  # sentence-transformers 6.x: the mode by name
        mode = config["pooling_mode"]
        modes, pooling = [mode], POOLING_MODES.get(mode) if isinstance(mode, str) else None
    else:
        modes = [flag for flag, on in config.items() if flag.startswith("pooling_mode_") and on]
        pooling = POOLING_FLAGS.get(modes[0]) if len(modes) == 1 else None
    if pooling is None:
        raise DeclarationError(f"{where}: pooling {modes} has no equivalent here (cls or mean); set 'pooling:' in "
                               "the encoder card explicitly")
    return pooling


def checkpoint_file(checkpoint: str, filename: str) -> str | None:
    """``filename`` of a local checkpoint directory, else of a hub checkpoint (cache first, then download); None
    when the checkpoint has no such file. :class:`UnknownFile` when a hub checkpoint's file is neither in the cache
    (nor cached as missing) nor downloadable (``HF_HUB_OFFLINE``, or the hub unreachable)."""
    local = Path(checkpoint)
    if local.is_dir():
        return str(local / filename) if (local / filename).is_file() else None
    if local.is_absolute() or checkpoint.count("/") != 1:
        return None  # neither a directory nor a hub name (owner/name)
    from huggingface_hub import hf_hub_download, try_to_load_from_cache
    from huggingface_hub.errors import RemoteEntryNotFoundError

    cached = try_to_load_from_cache(checkpoint, filename)
    if isinstance(cached, str):
        return cached
    if cached is not None:
        return None  # cached as missing
    why = "HF_HUB_OFFLINE is set"
    if os.environ.get("HF_HUB_OFFLINE", "0") in ("0", "", "false"):
        try:
            return hf_hub_download(checkpoint, filename)
        except RemoteEntryNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001 - whatever the reason, the file's presence is unknown
            why = f"{type(exc).__name__}: {exc}"
    raise UnknownFile(f"cannot tell whether {checkpoint} has {filename}: not in the Hugging Face cache and not "
                      f"downloadable ({why})")

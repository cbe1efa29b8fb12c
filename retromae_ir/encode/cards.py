"""Encoder cards: a named YAML configuration of a checkpoint and the representation built from it.

Every command takes a card name (``encoders/<name>.yaml``) or a card path. The card's fingerprint is stored
in each index manifest, so an index is never searched with queries encoded by a different configuration.

A relative checkpoint folder in a card file (``.``, ``./x``, ``../x``, ``x/y/z``) is relative to the card's folder,
not to the working directory: a fine-tuned output's ``card.yaml`` says ``checkpoint: .``, so the folder can be
moved or copied whole and its card still names the weights beside it.

``pooling`` and ``normalize`` left unset follow what the checkpoint declares (sentence-transformers'
``modules.json``, or a fine-tuned output's own ``card.yaml``, see :mod:`retromae_ir.encode.declared`), else the
family's default ([CLS], no normalisation); an explicit value always wins. ``sparse_weight`` is Eq. 12's weight of
the OT side against the dense side.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
from pathlib import Path

import yaml

from retromae_ir import strict_yaml

logger = logging.getLogger(__name__)

CARD_DIR = Path(__file__).resolve().parents[2] / "encoders"
OWN_CARD = "card.yaml"  # a fine-tuned output's card of the checkpoint beside it (retromae_ir.finetune.model)
PACKAGED_MINILM = "packaged:all-MiniLM-L6-v2"
KINDS = {  # kind -> (default pooling, has a sparse OT side)
    "dupmae": ("cls", True),
    "retromae": ("cls", False),
    "master": ("cls", False),
    "cls-dense": ("cls", False),
    "mean-dense": ("mean", False),
}


class CardError(ValueError):
    """A card that cannot be found or does not describe a valid representation."""


@dataclasses.dataclass(frozen=True)
class EncoderCard:
    name: str
    checkpoint: str
    kind: str
    dims: int
    pooling: str = ""  # "": declared by the checkpoint, else the kind's default
    normalize: bool | None = None  # None: declared by the checkpoint, else False
    k: int | None = 384
    query_k: int | None = None
    activation: str = "log1p_relu"
    scale: float = 100.0
    sparse_weight: float = 1.0  # lambda in score = dense . dense + lambda * OT . OT (representation.py)
    max_query_length: int = 64
    max_passage_length: int = 256
    description: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise CardError(f"card {self.name!r}: unknown kind {self.kind!r}; choose one of {sorted(KINDS)}")
        self._resolve_declared()
        from retromae_ir.encode.representation import ACTIVATIONS

        checks = [
            # it names the card's index and runs folders: "" put runs in runs/ itself, "a/../b" elsewhere
            (isinstance(self.name, str) and self.name and not self.name.startswith(".")
             and not {"/", "\\"} & set(self.name),
             f"name must be one folder name, not hidden (it names the card's index and runs folders; quote a "
             f"number), got {self.name!r}"),
            (self.pooling in ("cls", "mean"), f"pooling must be 'cls' or 'mean', got {self.pooling!r}"),
            (isinstance(self.normalize, bool), f"normalize must be true or false, got {self.normalize!r}"),
            (self.dims > 0, f"dims must be positive, got {self.dims}"),
            (self.k is None or self.k > 0, f"k must be positive or null, got {self.k}"),
            (self.query_k is None or self.query_k > 0, f"query_k must be positive or null, got {self.query_k}"),
            (self.activation in ACTIVATIONS, f"activation must be one of {sorted(ACTIVATIONS)}"),
            (0 < self.scale < math.inf, f"scale must be positive and finite, got {self.scale}"),
            (0 < self.sparse_weight < math.inf, f"sparse_weight must be positive and finite, got {self.sparse_weight}"),
            (self.max_query_length > 0 and self.max_passage_length > 0, "max lengths must be positive"),
        ]
        for ok, message in checks:
            if not ok:
                raise CardError(f"card {self.name!r}: {message}")

    def _resolve_declared(self) -> None:
        """Fill an unset pooling / normalize from the checkpoint's declaration, else the kind's defaults."""
        if self.pooling and self.normalize is not None:
            return
        from retromae_ir.encode.declared import DeclarationError, declared_pipeline

        try:
            declared = declared_pipeline(self.checkpoint_path())
        except (DeclarationError, OSError, ValueError) as exc:
            raise CardError(f"card {self.name!r}: {exc}") from None
        if not self.pooling:
            object.__setattr__(self, "pooling", declared.pooling or KINDS[self.kind][0])
        if self.normalize is None:
            object.__setattr__(self, "normalize", bool(declared.normalize))

    @property
    def sparse(self) -> bool:
        """Whether this representation has the OT (sparse) side."""
        return KINDS[self.kind][1]

    def checkpoint_path(self) -> str:
        """The checkpoint as from_pretrained takes it: a hub name, a local path, or the packaged MiniLM. A checkpoint
        that can only be a local folder (absolute, ``~``, ``./``, more than one ``/``) and is not one is a
        ``CardError``, not a failed hub download."""
        if self.checkpoint == PACKAGED_MINILM:
            from retromae_ir.packaged import default_model

            return default_model()
        path = os.path.expanduser(self.checkpoint)
        if not os.path.isdir(path) and _local_path(self.checkpoint):
            problem = "is a file, not a checkpoint folder" if os.path.exists(path) else "does not exist"
            raise CardError(f"card {self.name!r}: checkpoint {self.checkpoint} {problem}")
        return path

    def checkpoint_digests(self) -> dict[str, str]:
        """sha256 of each file of the checkpoint that makes its vectors (weights, config, tokenizer: see
        ``io.CHECKPOINT_FILES``): a local folder, or a hub name's cached snapshot (so another revision is another
        key; {} when the hub name is not cached): a checkpoint trained again into the same folder, or its tokenizer
        edited there, keeps the card's fingerprint but not these."""
        from retromae_ir.encode.declared import UnknownFile, checkpoint_file
        from retromae_ir.io import checkpoint_file_digests, snapshot_digests

        checkpoint = Path(self.checkpoint_path())
        if checkpoint.is_dir():
            return checkpoint_file_digests(checkpoint)
        try:
            config = checkpoint_file(self.checkpoint_path(), "config.json")
        except UnknownFile:
            return {}
        return snapshot_digests(Path(config).parent) if config is not None else {}

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def fingerprint(self) -> str:
        """Hash of everything that changes the vectors (the name and description do not)."""
        fields = {key: value for key, value in self.to_dict().items() if key not in ("name", "description")}
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def _beside(card_file: Path, checkpoint: str) -> str:
    """``checkpoint`` as written in ``card_file``: a relative local folder resolved against the card's folder. An
    output's own card (``card.yaml`` beside a ``config.json``) written before relative paths named its folder by
    its absolute path: in a copied or moved output that path is the original's, so the folder beside it is used."""
    expanded = os.path.expanduser(checkpoint)
    folder = card_file.resolve().parent
    if card_file.name == OWN_CARD and (folder / "config.json").is_file() and os.path.isabs(expanded) \
            and Path(expanded).resolve() != folder:
        logger.warning("%s names %s, not the folder it lies in: a card written before 2026-11-25 in an output since "
                       "copied or moved; reading the checkpoint beside it (write `checkpoint: .` to silence this)",
                       card_file, checkpoint)
        return str(folder)
    if checkpoint == PACKAGED_MINILM or os.path.isabs(expanded):
        return checkpoint
    if not _local_path(checkpoint):
        beside = folder / expanded
        if beside.is_dir() and beside.resolve() != Path(expanded).resolve():
            raise CardError(f"card {card_file}: checkpoint {checkpoint} reads as a hub name or a folder in the working "
                            f"directory, but a folder of that name lies beside the card ({beside}): write "
                            f"./{checkpoint} for that one, or an absolute path")
        return checkpoint
    return str((folder / expanded).resolve())


def _local_path(checkpoint: str) -> bool:
    """Whether ``checkpoint`` can only name a local folder, not a hub model (``name`` or ``owner/name``)."""
    return (os.path.isabs(os.path.expanduser(checkpoint)) or checkpoint.startswith((".", "~"))
            or checkpoint.count("/") > 1)


def card_path(name_or_path: str | os.PathLike) -> Path:
    """The YAML file of a card name or path."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.is_file():
        if not path.is_file():
            raise CardError(f"card file {path} does not exist")
        return path
    named = CARD_DIR / f"{name_or_path}.yaml"
    if not named.is_file():
        known = ", ".join(sorted(p.stem for p in CARD_DIR.glob("*.yaml")))
        raise CardError(f"no encoder card named {name_or_path!r} in {CARD_DIR} (known: {known})")
    return named


def load_card(name_or_path: str | os.PathLike | EncoderCard, **overrides) -> EncoderCard:
    """Read a card by name or path; ``overrides`` replace its fields (e.g. checkpoint=...)."""
    if isinstance(name_or_path, EncoderCard):
        return dataclasses.replace(name_or_path, **overrides) if overrides else name_or_path
    path = card_path(name_or_path)
    try:
        data = strict_yaml.load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise CardError(f"card {path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise CardError(f"card {path} must be a mapping of fields")
    data.setdefault("name", path.stem)
    if isinstance(data.get("checkpoint"), str) and "checkpoint" not in overrides:
        data["checkpoint"] = _beside(path, data["checkpoint"])
    data.update(overrides)
    known = {field.name for field in dataclasses.fields(EncoderCard)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise CardError(f"card {path}: unknown fields {unknown} (known: {sorted(known)})")
    missing = sorted({"checkpoint", "kind", "dims"} - set(data))
    if missing:
        raise CardError(f"card {path}: missing required fields {missing}")
    return EncoderCard(**data)

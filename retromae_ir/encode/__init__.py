"""Encoding: the DupMAE / RetroMAE / MASTER representations, Pyserini encoder classes, corpus and query encoding."""
from retromae_ir.encode.base import EncoderModel, Encoded
from retromae_ir.encode.cards import EncoderCard, load_card
from retromae_ir.encode.dense import DenseEncoderModel
from retromae_ir.encode.dupmae import DupMAEEncoderModel

MODEL_CLASSES = {
    "dupmae": DupMAEEncoderModel,
    "retromae": DenseEncoderModel,
    "master": DenseEncoderModel,
    "cls-dense": DenseEncoderModel,
    "mean-dense": DenseEncoderModel,
}

__all__ = ["EncoderModel", "Encoded", "EncoderCard", "load_card", "DenseEncoderModel", "DupMAEEncoderModel",
           "MODEL_CLASSES"]

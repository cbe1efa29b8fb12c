"""Results tables (markdown and CSV) and bar charts, written atomically, from a pandas DataFrame."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from retromae_ir.io import atomic_write


def format_markdown(frame: pd.DataFrame, digits: int = 4) -> str:
    """A GitHub markdown table; floats with ``digits`` decimals, missing values as an en dash."""
    def cell(value) -> str:
        if value is None or (isinstance(value, float) and pd.isna(value)):
            return "–"
        if isinstance(value, float):
            return f"{value:.{digits}f}"
        return str(value)

    header = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "| " + " | ".join("---" for _ in frame.columns) + " |"
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *rows]) + "\n"


def write_table(frame: pd.DataFrame, stem: Path, title: str = "", notes: list[str] | None = None,
                digits: int = 4) -> tuple[Path, Path]:
    """Write ``stem``.md (rounded to ``digits`` decimals for reading) and ``stem``.csv (at full precision: a check
    against a tolerance reads it, and a 4-decimal value could pass a gap up to 0.00005 past it); returns both
    paths."""
    stem = Path(stem)
    markdown = (f"# {title}\n\n" if title else "") + format_markdown(frame, digits)
    if notes:
        markdown += "\n" + "\n".join(f"- {note}" for note in notes) + "\n"
    md_path, csv_path = stem.with_suffix(".md"), stem.with_suffix(".csv")
    with atomic_write(md_path) as handle:
        handle.write(markdown)
    with atomic_write(csv_path) as handle:
        frame.to_csv(handle, index=False)
    return md_path, csv_path


def write_bar_chart(frame: pd.DataFrame, label_column: str, value_columns: list[str], path: Path,
                    ylabel: str, title: str = "") -> Path:
    """Grouped bars, one group per row of ``frame``; missing values are left as gaps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plotted = frame.set_index(label_column)[value_columns].astype(float)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.55 * len(plotted) * max(1, len(value_columns))), 4.5))
    plotted.plot.bar(ax=ax, width=0.8)
    ax.set_ylabel(ylabel)
    ax.set_xlabel("")
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    plt.setp(ax.get_xticklabels(), rotation=40, ha="right")
    fig.tight_layout()
    with atomic_write(path, "wb") as handle:
        fig.savefig(handle, format="png", dpi=110)
    plt.close(fig)
    return Path(path)

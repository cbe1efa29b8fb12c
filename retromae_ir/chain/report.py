"""A chain's report: the results table (nDCG@10 and R@100 per stage and mode, the baselines first), wall seconds
per stage, and a plot of every stage against the baselines; written as ``results.md`` and ``chain.png``."""
from __future__ import annotations

from pathlib import Path

from retromae_ir.chain.stages import BASELINES, METRICS, MODES
from retromae_ir.io import atomic_write


def baseline_rows(results: dict) -> list[dict]:
    """BM25 and the off-the-shelf MiniLM, as far as the main chain has evaluated them."""
    return [{"system": label, mode: results[stage][mode]} for stage, (label, mode) in BASELINES.items()
            if mode in results.get(stage, {})]


def evaluated_stages(results: dict) -> dict:
    """The chain's own evaluated stages (not the baselines, not the stages without an evaluation)."""
    return {stage: values for stage, values in results.items()
            if "eval_wall_s" in values and stage not in BASELINES}


def stage_rows(chains: list[tuple[str, dict]]) -> list[dict]:
    """One row per evaluated stage of each chain."""
    return [{"system": f"{label}: {stage}", **values} for label, results in chains
            for stage, values in evaluated_stages(results).items()]


def results_table(rows: list[dict]) -> str:
    """Markdown: nDCG@10 and R@100 in each mode (blank where a system has no such mode)."""
    header = ["system"] + [f"{metric} {mode}" for metric in METRICS for mode in MODES]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for row in rows:
        cells = [f"{row[mode][metric]:.4f}" if mode in row else "" for metric in METRICS for mode in MODES]
        lines.append(f"| {row['system']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def wall_table(chains: list[tuple[str, dict]]) -> str:
    """Markdown: wall seconds per stage (training or mining, then evaluation) for each chain; - where a chain did
    not run the stage (the ablation reuses the BM25 negatives and the cross-encoder)."""
    stages = list(dict.fromkeys(stage for _, results in chains for stage in results))
    lines = ["| stage | " + " | ".join(label for label, _ in chains) + " |", "|" + " --- |" * (len(chains) + 1)]
    for stage in stages:
        cells = []
        for _, results in chains:
            values = results.get(stage, {})
            parts = [f"{values['wall_s']:.0f}" if "wall_s" in values else "",
                     f"eval {values['eval_wall_s']:.0f}" if "eval_wall_s" in values else ""]
            cells.append(" + ".join(part for part in parts if part) or "-")
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    total = [sum(v.get("wall_s", 0) + v.get("eval_wall_s", 0) for v in results.values()) for _, results in chains]
    lines.append("| total | " + " | ".join(f"{seconds / 60:.1f} min" for seconds in total) + " |")
    return "\n".join(lines)


def stage_position(stage: str) -> int:
    """A stage's place on the x axis: its number in the pipeline (0-pretrain and 0-start share the first place)."""
    return int(stage.split("-", 1)[0])


def stage_ticks(chains: list[tuple[str, dict]]) -> dict[int, str]:
    """x position -> label of every evaluated stage, in pipeline order ("pretrain / start" where both chains begin)."""
    names: dict[int, list[str]] = {}
    for _, results in chains:
        for stage in evaluated_stages(results):
            label = stage.split("-", 1)[1]
            if label not in names.setdefault(stage_position(stage), []):
                names[stage_position(stage)].append(label)
    return {position: " / ".join(names[position]) for position in sorted(names)}


def plot(chains: list[tuple[str, dict]], baselines: list[dict], path: Path, title: str) -> None:
    """nDCG@10 and R@100 per stage, one line per chain and mode, baselines as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ticks = stage_ticks(chains)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for axis, metric in zip(axes, METRICS):
        for (label, results), style in zip(chains, ("-", "--")):
            for mode, color in zip(MODES, ("tab:blue", "tab:orange", "tab:green")):
                points = [(stage_position(s), v[mode][metric])
                          for s, v in evaluated_stages(results).items() if mode in v]
                if points:
                    axis.plot(*zip(*points), style, color=color, marker="o", label=f"{label}, {mode}")
        for row, style in zip(baselines, (":", "-.")):
            mode = next(m for m in MODES if m in row)
            axis.axhline(row[mode][metric], color="grey", linestyle=style, lw=1, label=row["system"])
        axis.set_xticks(list(ticks), list(ticks.values()))
        axis.set_title(f"{title}: test {metric}", fontsize=9)
    axes[0].legend(fontsize=6)
    fig.tight_layout()
    with atomic_write(path, mode="wb") as handle:
        fig.savefig(handle, format="png", dpi=110)
    plt.close(fig)


def anchor_verdict(results: dict, baselines: list[dict], metric: str = "ndcg@10") -> str:
    """One line: the chain's last evaluated stage against each baseline (the anchors its training must beat), per
    mode, on the test split: a chain whose training made retrieval worse says so in its report. An anchor the chain
    did not evaluate (BM25 under --no-lucene) is named as such: "above every anchor" read as above it too."""
    stages = evaluated_stages(results)
    if not stages:
        return ""
    stage, values = list(stages.items())[-1]
    anchors = [(row["system"].split(" (")[0], next(v for k, v in row.items() if k in MODES)[metric])
               for row in baselines]
    evaluated = {row["system"] for row in baselines}
    missing = [label.split(" (")[0] for label, _ in BASELINES.values() if label not in evaluated]
    unjudged = f" (not evaluated, so not judged against: {' and '.join(missing)})" if missing else ""
    if not anchors:
        return f"No anchor was evaluated, so {stage} is judged against none{unjudged}."
    parts = []
    for mode in (m for m in MODES if m in values):
        score = values[mode][metric]
        below = [name for name, anchor in anchors if score <= anchor]
        gaps = ", ".join(f"{gap(score - anchor)} vs {name}" for name, anchor in anchors)
        above = "above every anchor evaluated" if missing else "above every anchor"
        parts.append(f"{mode} {score:.4f} ({gaps}): " + (above if not below else f"NOT above {' and '.join(below)}"))
    return f"Against the anchors ({metric}, test), {stage}: " + "; ".join(parts) + f"{unjudged}."


def gap(difference: float) -> str:
    """A score difference at the table's 4 decimals, or at the first digit that shows it when those round it to
    0 (a verdict of "above" beside +0.0000 read as a tie)."""
    return f"{difference:+.4f}" if difference == 0 or abs(difference) >= 5e-5 else f"{difference:+.1e}"


def report(chains: list, output: Path, title: str = "scifact") -> str:
    """results.md (both tables, the anchor verdict) and chain.png under ``output``; returns the markdown."""
    measured = [(chain.label, chain.reported_results()) for chain in chains]
    baselines = baseline_rows(measured[0][1])
    verdict = anchor_verdict(measured[0][1], baselines)
    chains_run = ", ".join(label for label, _ in measured)
    text = (f"# {title}\n\nChains: {chains_run} (test split; the baselines are the first chain's).\n\n"
            + results_table(baselines + stage_rows(measured)) + (f"\n\n{verdict}" if verdict else "")
            + "\n\nWall seconds per stage:\n\n" + wall_table(measured) + "\n")
    with atomic_write(output / "results.md") as handle:
        handle.write(text)
    plot(measured, baselines, output / "chain.png", title)
    return text



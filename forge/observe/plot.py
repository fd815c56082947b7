"""``forge plot RUN_DIR``: PNG charts of a run's step metrics (``metrics.jsonl``), with
matplotlib: one file per metric and an overview of them all, in ``RUN_DIR/plots/``."""

from __future__ import annotations

import json
import math
from pathlib import Path

DEFAULT = (  # what a researcher looks at first, when the run recorded it
    "reward_mean", "pass_rate", "eval_pass_rate", "loss", "entropy", "logprob_kl", "grad_norm",
    "staleness_max", "train_tokens_per_s", "step_time_s", "segments_per_episode",
)  # fmt: skip


def series(run_dir: Path) -> dict[str, tuple[list[float], list[float]]]:
    """Each numeric metric of ``metrics.jsonl`` as (steps, values)."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no step metrics (is {run_dir} a run directory?)")
    out: dict[str, tuple[list[float], list[float]]] = {}
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a torn last line
        step = record.get("step")
        if not isinstance(step, int | float):
            continue
        for key, value in record.items():
            if key == "step" or isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if math.isfinite(value):
                xs, ys = out.setdefault(key, ([], []))
                xs.append(float(step))
                ys.append(float(value))
    return out


def plot(run_dir: Path, out: Path | None = None, metrics: list[str] | None = None) -> list[Path]:
    """Write the charts; returns their paths (the overview last)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = series(run_dir)
    names = [m for m in (metrics or DEFAULT) if m in data]
    if metrics:
        missing = sorted(set(metrics) - set(data))
        if missing:
            known = ", ".join(sorted(data)) or "none"
            raise ValueError(f"metrics: {', '.join(missing)} not in this run (it has: {known})")
    if not names:
        raise ValueError(f"{run_dir / 'metrics.jsonl'}: none of {', '.join(DEFAULT)} recorded")
    out = out or run_dir / "plots"
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names:
        fig, ax = plt.subplots(figsize=(5, 3))
        ax.plot(*data[name], marker="o", markersize=2)
        ax.set(title=name, xlabel="step")
        fig.tight_layout()
        fig.savefig(out / f"{name}.png", dpi=100)
        plt.close(fig)
        written.append(out / f"{name}.png")
    cols = 3
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 2.6 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        ax.plot(*data[name], marker="o", markersize=2)
        ax.set_title(name, fontsize=9)
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    fig.suptitle(run_dir.resolve().name)
    fig.tight_layout()
    fig.savefig(out / "overview.png", dpi=100)
    plt.close(fig)
    written.append(out / "overview.png")
    return written

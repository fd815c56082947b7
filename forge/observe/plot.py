"""``forge plot RUN_DIR``: PNG charts of a run's step metrics (``metrics.jsonl``), with
matplotlib: one file per metric and an overview of them all, in ``RUN_DIR/plots/``. A run on a
harness mix draws a line per harness beside the run's (``by_harness/<name>/<metric>``)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

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
        for key, value in flat(record).items():
            if key == "step" or isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if math.isfinite(value):
                xs, ys = out.setdefault(key, ([], []))
                xs.append(float(step))
                ys.append(float(value))
    return out


def flat(record: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as ``outer/inner`` keys."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}/"))
        else:
            out[f"{prefix}{key}"] = value
    return out


def per_harness(data: dict[str, Any], name: str) -> dict[str, str]:
    """``{harness: key}`` of ``name``'s curve per harness of a mix, where recorded."""
    outer, inner = (
        ("eval_by_harness", name.removeprefix("eval_"))
        if name.startswith("eval_")
        else ("by_harness", name)
    )
    found = {}
    for key in data:
        parts = key.split("/")
        if len(parts) == 3 and parts[0] == outer and parts[2] == inner:
            found[parts[1]] = key
    return found


def _draw(ax: Any, data: dict[str, Any], name: str) -> None:
    ax.plot(*data[name], marker="o", markersize=2, label="all")
    lines = per_harness(data, name)
    for harness, key in sorted(lines.items()):
        ax.plot(*data[key], marker=".", markersize=2, linewidth=0.8, label=harness)
    if lines:
        ax.legend(fontsize=6)


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
        _draw(ax, data, name)
        ax.set(title=name, xlabel="step")
        fig.tight_layout()
        fig.savefig(out / f"{name}.png", dpi=100)
        plt.close(fig)
        written.append(out / f"{name}.png")
    cols = 3
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 2.6 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        _draw(ax, data, name)
        ax.set_title(name, fontsize=9)
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    fig.suptitle(run_dir.resolve().name)
    fig.tight_layout()
    fig.savefig(out / "overview.png", dpi=100)
    plt.close(fig)
    written.append(out / "overview.png")
    return written

"""``forge eval --model A,B,C``: the checkpoint x harness matrix.

Each model (a name the engine knows, or a checkpoint folder) is evaluated through every agent
of the comparison (:mod:`forge.evaluate`), ``k`` attempts per task, into ``DIR/<model>/``,
where each cell's episodes stay viewable (``forge view DIR/<model>/<agent>``). Per cell:

    pass@1 with its standard error over tasks and a 95% bootstrap interval (tasks resampled)
    pass@k, pass^k, episodes, failed attempts by reason

written as ``DIR/matrix.json``, ``DIR/matrix.md`` and the heat map ``DIR/matrix.png``.
"""

from __future__ import annotations

import json
import math
import random
import re
import sys
from pathlib import Path
from typing import Any

from forge.config import RunConfig

BOOTSTRAP = 2000  # resamples of the tasks per cell


def label(model: str) -> str:
    """A model's folder name in the matrix: a run's checkpoint by run and step
    (``runs/mix/checkpoints/step_8``: ``mix-step_8``), another folder by its name, a model by
    its name; made safe."""
    path = Path(model)
    text = model
    if path.exists():
        run = path.parent.parent.name if path.parent.name == "checkpoints" else ""
        text = f"{run}-{path.name}" if run else path.name
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "model"


def cell(result: dict[str, Any], seed: int = 0) -> dict[str, Any]:
    """One cell from an agent's ``forge eval`` result (its ``passes`` per task)."""
    k = result["k"]
    rates = [min(c, k) / k for c in result["passes"].values()]
    n = len(rates)
    mean = sum(rates) / n if n else 0.0
    se = math.sqrt(sum((r - mean) ** 2 for r in rates) / (n - 1) / n) if n > 1 else 0.0
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(rates, k=n)) / n for _ in range(BOOTSTRAP)) if n else [0.0]
    return {
        "pass@1": mean,
        "pass@1_se": se,
        "pass@1_ci95": [means[int(0.025 * (len(means) - 1))], means[int(0.975 * (len(means) - 1))]],
        "pass@k": result["pass@k"],
        "pass^k": result["pass^k"],
        "k": k,
        "tasks": n,
        "episodes": result["episodes"],
        "failures": result["failures"],
    }


def markdown(matrix: dict[str, dict[str, dict[str, Any]]]) -> str:
    agents = list(dict.fromkeys(a for row in matrix.values() for a in row))
    k = next((c["k"] for row in matrix.values() for c in row.values()), 1)
    lines = [
        f"pass@1 ± standard error [95% bootstrap interval]; pass@{k} / pass^{k}; episodes "
        "(failed attempts)",
        "",
        "| checkpoint | " + " | ".join(agents) + " |",
        "|---|" + "---|" * len(agents),
    ]
    for model, row in matrix.items():
        cells = []
        for agent in agents:
            c = row.get(agent)
            if c is None:
                cells.append("-")
                continue
            lo, hi = c["pass@1_ci95"]
            failed = sum(c["failures"].values())
            cells.append(
                f"{c['pass@1']:.3f} ± {c['pass@1_se']:.3f} [{lo:.2f}, {hi:.2f}]; "
                f"{c['pass@k']:.2f} / {c['pass^k']:.2f}; {c['episodes']}"
                + (f" ({failed})" if failed else "")
            )
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def heat_map(matrix: dict[str, dict[str, dict[str, Any]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(matrix)
    agents = list(dict.fromkeys(a for row in matrix.values() for a in row))
    values = [[matrix[m].get(a, {}).get("pass@1", math.nan) for a in agents] for m in models]
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(agents), 1.2 + 0.6 * len(models)))
    image = ax.imshow(values, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(agents)), agents, rotation=30, ha="right")
    ax.set_yticks(range(len(models)), models)
    for i, row in enumerate(values):
        for j, v in enumerate(row):
            if not math.isnan(v):
                se = matrix[models[i]][agents[j]]["pass@1_se"]
                colour = "black" if v > 0.6 else "white"
                ax.text(j, i, f"{v:.2f}\n±{se:.2f}", ha="center", va="center", color=colour)
    fig.colorbar(image, ax=ax, label="pass@1")
    ax.set_title("checkpoint x harness: pass@1")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(
    config: RunConfig,
    models: list[str],
    harnesses: list[str],
    k: int,
    out: Path,
    harness_configs: list[str] | None = None,
) -> int:
    """Evaluate every model through every agent; write the matrix. Exit 2 on bad input."""
    from forge.evaluate import evaluate, plan

    labels = [label(m) for m in models]
    if len(set(labels)) < len(labels):
        print(f"forge eval: --model: two models share a name ({labels})", file=sys.stderr)
        return 2
    try:
        agents = plan(config, harnesses, harness_configs or [])
        if not agents:
            raise ValueError("no harness to evaluate: give --harness or --harness-config")
    except ValueError as e:
        print(f"forge eval: {e}", file=sys.stderr)
        return 2
    matrix: dict[str, dict[str, dict[str, Any]]] = {}
    report: dict[str, Any] = {"tasks": config.tasks, "k": k, "models": {}, "matrix": matrix}
    for model, name in zip(models, labels, strict=True):
        data = config.model_dump()
        data["policy"]["engine"]["model"] = model
        print(f"[forge] eval matrix: {name} ({model}) through {len(agents)} agent(s)", flush=True)
        try:
            results = evaluate(RunConfig.model_validate(data), agents, k, out / name)
        except Exception as e:  # one checkpoint that cannot load: said, the rest go on
            print(f"forge eval: {name}: {type(e).__name__}: {e}", file=sys.stderr)
            report["models"][name] = {"model": model, "error": f"{type(e).__name__}: {e}"}
            continue
        report["models"][name] = {"model": model}
        matrix[name] = {agent: cell(r) for agent, r in results.items()}
        _write(out, report)  # after each checkpoint: nothing lost to a crash
    if not matrix:
        return 1
    print(markdown(matrix))
    heat_map(matrix, out / "matrix.png")
    print(f"[forge] matrix: {out / 'matrix.md'}, {out / 'matrix.json'}, {out / 'matrix.png'}")
    return 0 if len(matrix) == len(models) else 1


def _write(out: Path, report: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "matrix.json").write_text(json.dumps(report, indent=2))
    (out / "matrix.md").write_text(markdown(report["matrix"]) + "\n")

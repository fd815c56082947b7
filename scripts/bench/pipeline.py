"""The training pipeline, sync against async: a slice of the main job in each mode, alternated.

Each arm is one ``forge run`` of the same config and seed (default ``examples/claw.yaml``, the
main job) for ``--steps`` steps, evaluated on its held-out split before the first step and after
the last: ``rollout.mode=sync``, then ``async`` at each ``--staleness``; the arms take turns for
``--rounds`` rounds, so drift on the machine hits them alike. From each run's ``metrics.jsonl``,
over the steps after the first (its warm-up: pods start, caches fill) and without the
evaluations' own seconds (``eval_s``):

- episodes per hour (the episodes in the steps' groups over their wall time);
- the trainer's wait: the share of that time ``collect`` waited for groups (``collect_s``);
- the rollouts' wait: the share with no attempt queued or running (``rollout_idle_s``: in sync
  mode they wait through training and the weight update; in async, for the trainer to free
  room within ``max_staleness``);
- staleness: the mean and the largest ``staleness_max`` (how many versions behind the oldest
  turn of a step's batch was);
- the held-out pass rate after the last step, with its standard error (over the evaluation's
  attempts).

The last table puts each async arm against sync: the ratio of episodes per hour and the
difference in held-out pass rate in standard errors. Runs go to a temporary folder (``--keep``
keeps them).

    .venv/bin/python scripts/bench/pipeline.py [--config examples/claw.yaml] [--steps 8]
        [--staleness 1,2] [--rounds 1] [--keep DIR] [overrides ...]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run_arm(config: str, mode: str, staleness: int, steps: int, runs: Path, name: str,
            extra: list[str]) -> Path:  # fmt: skip
    """One ``forge run`` of the arm; its run folder."""
    overrides = [
        f"name={name}",
        f"runs_dir={runs}",
        f"steps={steps}",
        f"eval_every={steps}",
        "checkpoint_every=0",
        f"rollout.mode={mode}",
        f"rollout.max_staleness={staleness}",
        *extra,
    ]
    cmd = [sys.executable, "-m", "forge.cli", "run", config, *overrides]
    print(f"[pipeline] {name}: {' '.join(cmd[2:])}", flush=True)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
        raise SystemExit(f"[pipeline] {name} failed ({done.returncode}):\n{tail}")
    print(f"[pipeline] {name}: done in {time.perf_counter() - t0:.0f}s", flush=True)
    return runs / name  # RunConfig.run_dir


def summarise(run_dir: Path) -> dict[str, Any]:
    """The arm's figures from its ``metrics.jsonl`` (see the module docstring)."""
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r.get("step", 0) >= 1 and "step_s" in r]
    if len(steps) < 2:
        raise SystemExit(f"[pipeline] {run_dir}: fewer than two steps recorded")
    timed = steps[1:]  # the first step starts the pods and fills the caches
    wall = sum(r["step_s"] - r.get("eval_s", 0.0) for r in timed)
    episodes = sum(r.get("episodes", 0) for r in timed)
    idle = timed[-1].get("rollout_idle_s", 0.0) - steps[0].get("rollout_idle_s", 0.0)
    evals = [r for r in records if "eval_pass_rate" in r]
    final = evals[-1]["eval_pass_rate"] if evals else float("nan")
    n = attempts(run_dir, evals[-1]["step"]) if evals else 0
    stale = [r.get("staleness_max", 0.0) for r in timed]
    return {
        "run": str(run_dir),
        "episodes_per_h": 3600 * episodes / wall,
        "trainer_wait": sum(r.get("collect_s", 0.0) for r in timed) / wall,
        "rollout_wait": idle / wall,
        "staleness_mean": statistics.fmean(stale),
        "staleness_max": max(stale),
        "eval_pass_rate": final,
        "eval_se": math.sqrt(final * (1 - final) / n) if n else float("nan"),
        "eval_attempts": n,
        "wall_s": wall,
        "episodes": episodes,
    }


def attempts(run_dir: Path, step: int) -> int:
    """How many held-out attempts the evaluation at ``step`` made."""
    path = run_dir / "eval" / f"step_{step}.jsonl"
    return sum(1 for _ in path.open()) if path.exists() else 0


def mean_arm(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """An arm's rounds together: means, the held-out rate over all its attempts."""
    keys = ("episodes_per_h", "trainer_wait", "rollout_wait", "staleness_mean")
    out = {k: statistics.fmean(r[k] for r in rows) for k in keys}
    out["staleness_max"] = max(r["staleness_max"] for r in rows)
    n = sum(r["eval_attempts"] for r in rows)
    rate = sum(r["eval_pass_rate"] * r["eval_attempts"] for r in rows) / n if n else float("nan")
    out.update(eval_pass_rate=rate, eval_attempts=n)
    out["eval_se"] = math.sqrt(rate * (1 - rate) / n) if n else float("nan")
    return out


def table(arms: dict[str, dict[str, Any]]) -> str:
    head = (
        "| arm | episodes/h | trainer waits | rollouts wait | staleness mean / max "
        "| held-out pass rate (± SE, attempts) |\n|---|---|---|---|---|---|"
    )
    lines = [head]
    for name, a in arms.items():
        lines.append(
            f"| {name} | {a['episodes_per_h']:.0f} | {a['trainer_wait']:.0%} "
            f"| {a['rollout_wait']:.0%} | {a['staleness_mean']:.2f} / {a['staleness_max']:.0f} "
            f"| {a['eval_pass_rate']:.3f} ± {a['eval_se']:.3f} ({a['eval_attempts']}) |"
        )
    sync = arms["sync"]
    lines += ["", "| arm against sync | episodes/h ratio | held-out difference (in SE) |",
              "|---|---|---|"]  # fmt: skip
    for name, a in arms.items():
        if name == "sync":
            continue
        se = math.hypot(a["eval_se"], sync["eval_se"]) or float("nan")
        diff = a["eval_pass_rate"] - sync["eval_pass_rate"]
        lines.append(
            f"| {name} | {a['episodes_per_h'] / sync['episodes_per_h']:.2f}x "
            f"| {diff:+.3f} ({diff / se:+.1f} SE) |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="examples/claw.yaml")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--staleness", default="1,2", help="async arms' max_staleness, comma-separated")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--keep", default=None, help="keep the runs in this folder")
    ap.add_argument("overrides", nargs="*", help="key=value overrides for every arm")
    args = ap.parse_args()
    if args.steps < 3:
        ap.error("--steps: at least 3 (the first is warm-up; two more are measured)")
    arms = [("sync", "sync", 1)] + [
        (f"async-{s}", "async", int(s)) for s in args.staleness.split(",") if s
    ]
    runs = Path(args.keep or tempfile.mkdtemp(prefix="forge-pipeline-"))
    runs.mkdir(parents=True, exist_ok=True)
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in arms}
    for r in range(args.rounds):
        for name, mode, staleness in arms:
            folder = run_arm(args.config, mode, staleness, args.steps, runs,
                             f"pipeline-{name}-r{r}", args.overrides)  # fmt: skip
            rows[name].append(summarise(folder))
            print(f"[pipeline] {name} round {r}: {json.dumps(rows[name][-1])}", flush=True)
    command = " ".join(["scripts/bench/pipeline.py", *sys.argv[1:]])
    print(f"\n{args.rounds} round(s) of {args.steps} steps of {args.config}; "
          f"reproduce: .venv/bin/python {command}\n")  # fmt: skip
    print(table({name: mean_arm(r) for name, r in rows.items()}))


if __name__ == "__main__":
    main()

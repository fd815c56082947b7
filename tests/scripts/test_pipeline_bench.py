"""scripts/bench/pipeline.py's reading of a run: the figures it takes from ``metrics.jsonl`` and
the held-out evaluation, and its table (the runs themselves are the bench's: minutes each)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "pipeline.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pipeline_bench", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def write_run(d: Path, step_s: float, idle: list[float], passed: int) -> Path:
    """A run folder as ``forge run`` leaves it: an evaluation before step 1 and after step 3."""
    d.mkdir()
    records = [{"step": 0, "eval_pass_rate": 0.1}]
    for i in (1, 2, 3):
        records.append(
            {
                "step": i,
                "step_s": step_s + (5.0 if i == 3 else 0.0),
                "eval_s": 5.0 if i == 3 else 0.0,
                "episodes": 64,
                "collect_s": step_s / 2,
                "rollout_idle_s": idle[i - 1],
                "staleness_max": float(i - 1),
            }
        )
    records[-1]["eval_pass_rate"] = passed / 10
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (d / "eval").mkdir()
    lines = [json.dumps({"reward": float(i < passed)}) for i in range(10)]
    (d / "eval" / "step_3.jsonl").write_text("\n".join(lines) + "\n")
    return d


def test_an_arm_is_measured_after_its_warm_up_and_without_its_evaluations(tmp_path) -> None:
    bench = load()
    row = bench.summarise(write_run(tmp_path / "a", 10.0, [3.0, 7.0, 12.0], passed=6))
    assert row["wall_s"] == 20.0  # steps 2 and 3, less the evaluation's 5 s
    assert row["episodes_per_h"] == pytest.approx(3600 * 128 / 20)
    assert row["trainer_wait"] == pytest.approx(10 / 20)
    assert row["rollout_wait"] == pytest.approx((12.0 - 3.0) / 20)
    assert (row["staleness_mean"], row["staleness_max"]) == (1.5, 2.0)
    assert row["eval_pass_rate"] == 0.6 and row["eval_attempts"] == 10
    assert row["eval_se"] == pytest.approx((0.6 * 0.4 / 10) ** 0.5)


def test_the_table_sets_each_async_arm_against_sync(tmp_path) -> None:
    bench = load()
    sync = bench.summarise(write_run(tmp_path / "s", 10.0, [0.0, 5.0, 10.0], passed=6))
    fast = bench.summarise(write_run(tmp_path / "f", 5.0, [0.0, 0.0, 1.0], passed=5))
    arms = {"sync": bench.mean_arm([sync]), "async-1": bench.mean_arm([fast, fast])}
    text = bench.table(arms)
    assert arms["async-1"]["eval_attempts"] == 20
    ratio = sync["wall_s"] / fast["wall_s"]
    assert f"| async-1 | {ratio:.2f}x |" in text
    assert "-0.100" in text  # the held-out difference, 0.5 against 0.6


def test_a_run_with_too_few_steps_is_refused(tmp_path) -> None:
    d = tmp_path / "short"
    d.mkdir()
    (d / "metrics.jsonl").write_text(json.dumps({"step": 1, "step_s": 1.0}) + "\n")
    with pytest.raises(SystemExit, match="fewer than two steps"):
        load().summarise(d)

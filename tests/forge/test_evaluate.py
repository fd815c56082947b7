"""``forge eval``: scoring, and the command on real harnesses with the oracle and noop policies."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from forge.evaluate import score, table
from forge.harnesses.install import PACKAGES
from forge.types import Episode, Turn
from tests.forge.test_cli import FORGE, _env

ROOT = Path(__file__).resolve().parents[2]


def _ep(task: str, reward: float, tools: tuple[str, ...] = ()) -> Episode:
    calls = [{"name": t, "arguments": "{}"} for t in tools]
    turn = Turn("e", 0, 0, "chat", {}, [1], [2], [0.0], "", calls, "stop", 0, 0.0, 0.0)
    return Episode("e", task, 0, "h", reward, "ok", turns=[turn])


def test_pass_at_1_pass_at_k_and_pass_hat_k() -> None:
    tasks = ["a", "b", "c", "d"]
    episodes = [
        _ep("a", 1.0, ("shell",)),
        _ep("a", 1.0, ("shell", "finish")),  # a: 2 of 2
        _ep("b", 1.0),
        _ep("b", 0.5),  # b: 1 of 2 (partial credit is not a pass)
        _ep("c", 0.0),  # c: 0 of 2, its other attempt failed
    ]
    r = score(tasks, episodes, k=2, failures={"timeout": 1})  # d: no attempt finished
    assert r["pass@1"] == pytest.approx((1.0 + 0.5 + 0 + 0) / 4)
    assert r["pass@k"] == pytest.approx(2 / 4)
    assert r["pass^k"] == pytest.approx(1 / 4)
    assert r["tool_calls"] == {"shell": 2, "finish": 1}
    assert r["episodes"] == 6 and r["failures"] == {"timeout": 1}
    assert r["failed_tasks"] == ["b", "c", "d"]
    assert "| h1 | 0.375 | 0.500 | 0.250 | 2 | 6 |" in table({"h1": r})


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_forge_eval_oracle_passes_and_noop_fails(tmp_path: Path) -> None:
    harnesses = ["react"] + [h for h in ("pi", "codex") if PACKAGES[h].installed()]
    results = {}
    for mode in ("oracle", "noop"):
        out = tmp_path / mode
        args = [
            "eval",
            str(ROOT / "examples" / "oracle.yaml"),
            f"policy.engine.mode={mode}",
            "task_ids=[hello_file,json_extract,count_errors]",
            "--harness",
            ",".join(harnesses),
            "--tasks",
            "smoke",
            "-k",
            "1",
            "--out",
            str(out),
        ]
        r = subprocess.run([*FORGE, *args], capture_output=True, text=True, timeout=800, env=_env())
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        assert "| harness | pass@1 |" in r.stdout  # the table is printed
        report = json.loads((out / "eval.json").read_text())
        assert (out / "eval.md").exists()
        results[mode] = {h: report["harnesses"][h] for h in harnesses}
        for h in harnesses:
            lines = (out / h / "episodes.jsonl").read_text().splitlines()
            assert len(lines) == 3, h
    for h in harnesses:
        assert results["oracle"][h]["pass@1"] == 1.0, (h, results["oracle"][h])
        assert results["noop"][h]["pass@1"] == 0.0, (h, results["noop"][h])
        assert results["oracle"][h]["tool_calls"], h  # the oracle used the harness's tools

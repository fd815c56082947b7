"""forge eval's scores (forge/eval_scores.py): pass@1, pass@k, pass^k and (c/k)^k, at each
task's pass threshold; the table and the summary line."""

from __future__ import annotations

import pytest

from forge.eval_scores import score, summary, table
from forge.types import Episode, Turn


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
    assert r["pass^k_est"] == pytest.approx((1.0 + 0.25 + 0 + 0) / 4)  # mean of (c/k)^k


def test_a_benchmarks_own_pass_threshold() -> None:
    """ClawEval passes an attempt at 0.75 (the task's pass_threshold), not only at 1."""
    episodes = [_ep("a", 0.8), _ep("a", 0.7), _ep("b", 0.9), _ep("b", 1.0)]
    r = score(["a", "b"], episodes, k=2, failures={}, thresholds={"a": 0.75, "b": 0.75})
    assert (r["pass@1"], r["pass@k"], r["pass^k"]) == (0.75, 1.0, 0.5)
    assert r["pass^k_est"] == pytest.approx((0.25 + 1.0) / 2)
    assert score(["a", "b"], episodes, k=2, failures={})["pass@1"] == 0.25  # 1 by default


def test_summary_line_prints_each_rate_once() -> None:
    r = {"k": 1, "pass@1": 0.5, "pass@k": 0.5, "pass^k": 0.5, "seconds": 3.2}
    r.update(episodes=4, failures={})
    assert summary("a", r) == "[forge] a: pass@1 0.500 (4 episodes, 3s)"
    r.update(k=3, episodes=12, **{"pass@k": 0.75, "pass^k": 0.25})
    r["pass^k_est"] = 0.125
    assert summary("a", r) == (
        "[forge] a: pass@1 0.500, pass@3 0.750, pass^3 0.250, (c/k)^3 0.125 (12 episodes, 3s)"
    )


def test_summary_line_counts_the_failed_attempts() -> None:
    """A failed attempt is no episode the Scheduler hands back: the line counts it all the same
    (it said "0 episodes" for an agent whose one attempt failed)."""
    r = score(["t"], [], k=1, failures={"harness_crash": 1})
    r["seconds"] = 2.0
    assert summary("a", r) == (
        "[forge] a: pass@1 0.000 (1 attempt: 0 scored, 1 failed (harness_crash 1), 2s)"
    )
    r = score(["t", "u"], [_ep("t", 1.0)], k=2, failures={"harness_crash": 2, "timeout": 1})
    r["seconds"] = 2.0
    assert summary("a", r).endswith(
        "(4 attempts: 1 scored, 3 failed (harness_crash 2, timeout 1), 2s)"
    )

"""``forge analyze``: behaviour rates from recorded episodes, per policy version."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from forge.observe.analyze import analyze, episode_behaviour
from tests.forge.test_cli import FORGE

TOOLS = [
    {"type": "function", "function": {"name": n}}
    for n in ("shell", "read_file", "write_file", "finish")
]


def _call(i: int, name: str, **args: str) -> dict:
    return {"id": f"c{i}", "name": name, "arguments": json.dumps(args)}


def _episode(version: int, calls: list[dict], results: list[str], reward: float) -> dict:
    """One call per turn; turn i+1's request carries the result of call i (chat protocol)."""
    turns, history = [], [{"role": "user", "content": "task"}]
    for i, call in enumerate(calls):
        turns.append(
            {
                "request": {"messages": list(history), "tools": TOOLS},
                "tool_calls": [call],
                "policy_version": version,
            }
        )
        history.append({"role": "assistant", "tool_calls": [call]})
        if i < len(results):
            history.append({"role": "tool", "tool_call_id": call["id"], "content": results[i]})
    turns.append({"request": {"messages": history, "tools": TOOLS}, "tool_calls": []})
    turns[-1]["policy_version"] = version
    return {"turns": turns, "reward": reward}


BEFORE = _episode(  # writes through the shell, never checks, ends
    0,
    [_call(0, "shell", command="echo 3 > n.txt"), _call(1, "finish", answer="3")],
    ["exit code: 0\nstdout:\n"],
    0.0,
)
AFTER = _episode(  # a dedicated write, reads it back, a failed read, then a good one
    1,
    [
        _call(0, "write_file", path="n.txt", content="3"),
        _call(1, "read_file", path="n.txt"),
        _call(2, "shell", command="cat missing.txt"),
        _call(3, "shell", command="cat n.txt"),
    ],
    ["wrote 1 characters", "3", "exit code: 1\nstderr:\ncat: missing.txt: No such file", "3"],
    1.0,
)


def test_episode_behaviour_reads_results_from_the_next_request() -> None:
    calls = episode_behaviour(AFTER)["calls"]
    assert [c["tool"] for c in calls] == ["write_file", "read_file", "shell", "shell"]
    assert [c["failed"] for c in calls] == [False, False, True, False]
    assert calls[0]["writes"] and calls[1]["checks"] and calls[3]["checks"]
    assert episode_behaviour(AFTER)["offered"] == {"shell", "read_file", "write_file"}


def test_rates_per_policy_version(tmp_path: Path) -> None:
    (tmp_path / "episodes").mkdir()
    lines = [json.dumps(e) for e in (BEFORE, BEFORE, AFTER)]
    (tmp_path / "episodes" / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    report = analyze(tmp_path)["versions"]
    v0, v1 = report["0"], report["1"]
    assert (v0["episodes"], v0["shell_share"], v0["self_verify"]) == (2, 1.0, 0.0)
    assert v0["error_recovery"] is None and v0["tool_coverage"] == pytest.approx(1 / 3)
    assert (v1["shell_share"], v1["self_verify"], v1["error_recovery"]) == (0.5, 1.0, 1.0)
    assert v1["tool_coverage"] == 1.0 and v1["reward_mean"] == 1.0
    # the command writes analysis.json and prints the table; a wrong folder is a clear error
    r = subprocess.run([*FORGE, "analyze", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0 and "| 1 | 1 | 1.00 | 0.50 | 1.00 | 1.00 | 1.00 |" in r.stdout
    assert json.loads((tmp_path / "analysis.json").read_text())["versions"]["0"]["episodes"] == 2
    bad = subprocess.run([*FORGE, "analyze", str(tmp_path / "x")], capture_output=True, text=True)
    assert bad.returncode == 2 and "no recorded episodes" in bad.stderr


def test_rates_by_any_provenance_key(tmp_path: Path) -> None:
    (tmp_path / "episodes").mkdir()
    eps = [
        {**BEFORE, "harness": "react", "provenance": {"harness": "react", "prompt_hash": "a1"}},
        {**AFTER, "harness": "pi", "provenance": {"harness": "pi", "prompt_hash": "b2"}},
        {**AFTER, "harness": "pi"},  # recorded before provenance: its own harness field
    ]
    (tmp_path / "episodes" / "episodes.jsonl").write_text(
        "\n".join(json.dumps(e) for e in eps) + "\n"
    )
    by = analyze(tmp_path, "harness")
    assert by["by"] == "harness" and {k: v["episodes"] for k, v in by["versions"].items()} == {
        "pi": 2,
        "react": 1,
    }
    assert set(analyze(tmp_path, "prompt_hash")["versions"]) == {"a1", "b2", "?"}
    with pytest.raises(ValueError, match="--by: 'colour'"):
        analyze(tmp_path, "colour")
    r = subprocess.run(
        [*FORGE, "analyze", str(tmp_path), "--by", "harness"], capture_output=True, text=True
    )
    assert r.returncode == 0 and "| harness | episodes |" in r.stdout and "| pi | 2 |" in r.stdout

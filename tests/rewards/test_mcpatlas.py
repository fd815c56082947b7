"""MCP-Atlas's credential-free subset on whole episodes: the fixtures of
tests/tasks/fixtures/mcpatlas (two stdio MCP servers of our own under the names of the
benchmark's, run by the pod in sandboxes of their own), reference solutions written here (the
benchmark ships none) and a scripted claims judge (a test double for the model only)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from forge.sandboxes.bwrap import bwrap_works
from tests.forge.httpstub import StubServer
from tests.rewards.judging import REACT_AND_OPENCLAW, scripted_judge, with_solutions
from tests.rewards.test_judge import _play

FIXTURES = Path(__file__).resolve().parents[1] / "tasks" / "fixtures" / "mcpatlas"
SOLUTIONS = {  # written here: the benchmark ships none
    "atlas-001": (
        [{"service": "calculator", "op": "calculate", "args": {"expression": "17*23+5"}}],
        "The result is 396.",
    ),
    "atlas-002": (
        [
            {"service": "filesystem", "op": "read_file", "args": {"path": "Barber Shop.csv"}},
            {"service": "filesystem", "op": "read_file", "args": {"path": "notes/todo.txt"}},
        ],
        "The shop had 8 visits in total; Lena asked for the quarterly report by Friday.",
    ),
}
pytestmark = pytest.mark.skipif(not bwrap_works(), reason="needs bubblewrap")


def _reply(prompt: str) -> str:
    """Fulfilled when the answer holds the claim's numbers and its last two words."""
    claim = prompt.split("CLAIM:\n", 1)[1].split("\n\nANSWER:\n", 1)[0]
    answer = prompt.split("\n\nANSWER:\n", 1)[1].split("\n\nThe answer fulfils", 1)[0].lower()
    numbers = re.findall(r"\d+", claim)
    tail = " ".join(claim.lower().rstrip(".").split()[-2:])
    good = all(n in answer for n in numbers) and tail in answer
    return json.dumps({"score": 1 if good else 0, "justification": "scripted"})


@pytest.fixture
def judge(monkeypatch, tmp_path) -> Iterator[StubServer]:
    with scripted_judge(_reply, monkeypatch, tmp_path / "cache") as server:
        yield server


@pytest.mark.parametrize("harness", REACT_AND_OPENCLAW)
def test_the_reference_scores_1_and_the_no_op_0(tmp_path, judge, harness) -> None:
    for task_id, task in with_solutions(f"mcpatlas:{FIXTURES}", SOLUTIONS).items():
        ep = _play(tmp_path, task, harness=harness)
        assert (ep.status, ep.reward) == ("ok", 1.0), (task_id, ep.failure, ep.verifier_detail)
        assert [c["op"] for c in ep.service_calls] == [s["op"] for s in SOLUTIONS[task_id][0]]
        assert not any(c.get("error") for c in ep.service_calls), ep.service_calls
        ep = _play(tmp_path, task, mode="noop", harness=harness)
        assert (ep.status, ep.reward) == ("ok", 0.0), (task_id, ep.verifier_detail)


def test_partial_coverage_and_what_the_judge_saw(tmp_path, judge) -> None:
    tasks = with_solutions(f"mcpatlas:{FIXTURES}", SOLUTIONS)
    half = tasks["atlas-002"].model_copy(update={"answer": "The shop had 8 visits in total."})
    ep = _play(tmp_path, half)
    assert ep.reward == 0.5 and ep.verifier_detail == "claims coverage 0.500 ([1, 0])"
    record = json.loads(ep.verifier_outputs["judge"])
    assert len(record["calls"]) == 2  # one question a claim
    asked = judge.requests[-1][3]["messages"][0]["content"]
    assert "CLAIM:\nLena asked for the quarterly report" in asked

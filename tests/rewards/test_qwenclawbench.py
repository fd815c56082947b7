"""QwenClawBench tasks scored as the benchmark scores them (rewards.qwenclawbench), in whole
episodes: the fixtures of tests/tasks/fixtures/qwenclawbench with a reference solution written
here, the scripted oracle and no-op behind a real Policy, react (and OpenClaw, -m full) in real
bubblewrap sandboxes, and a scripted judge (a test double for the model) that gives a total of
1 to the answer 3. grade() reads the transcript in OpenClaw's session shape."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from forge.sandboxes.bwrap import bwrap_works
from rewards.qwenclawbench import openclaw_session
from tasks.schema import Task
from tests.forge.httpstub import StubServer
from tests.rewards.judging import REACT_AND_OPENCLAW, scripted_judge, with_solutions
from tests.rewards.test_judge import _play

FIXTURES = Path(__file__).resolve().parents[1] / "tasks" / "fixtures" / "qwenclawbench"
SOLUTIONS = {  # written here: the benchmark ships none
    "task_90001_count_log_errors": (["grep -c ERROR logs/app.log > report.txt"], "3"),
    "task_90002_write_release_note": (
        [
            "printf '# Release 2.1\\n- Faster start-up\\n- Fixed the export crash\\n' > RELEASE.md",
            "mkdir -p docs && cp logo.png docs/logo.png",  # a binary seed, kept byte for byte
        ],
        "Done.",
    ),
}
pytestmark = pytest.mark.skipif(not bwrap_works(), reason="needs bubblewrap")


def _reply(prompt: str) -> str:
    answer = prompt.rsplit("FINAL ANSWER:\n", 1)[-1].split("\n\n", 1)[0].strip()
    total = 1.0 if answer == "3" else 0.0
    return f'Looks right.\n```json\n{{"scores": {{"count": {total}}}, "total": {total}}}\n```'


@pytest.fixture
def judge(monkeypatch, tmp_path) -> Iterator[StubServer]:
    with scripted_judge(_reply, monkeypatch, tmp_path / "cache") as server:
        yield server


def _tasks() -> dict[str, Task]:
    return with_solutions(f"qwenclawbench:{FIXTURES}", SOLUTIONS)


@pytest.mark.parametrize("harness", REACT_AND_OPENCLAW)
def test_the_reference_scores_1_and_the_no_op_0(tmp_path, judge, harness) -> None:
    for task_id, task in _tasks().items():
        ep = _play(tmp_path, task, harness=harness)
        assert (ep.status, ep.reward) == ("ok", 1.0), (task_id, ep.failure, ep.verifier_detail)
        scores = json.loads(ep.verifier_outputs["grade"])
        assert set(scores.values()) == {1.0}, scores
        ep = _play(tmp_path, task, mode="noop", harness=harness)
        assert (ep.status, ep.reward) == ("ok", 0.0), (task_id, ep.verifier_detail)
    asked = [r for r in judge.requests if r[1].endswith("/chat/completions")]
    assert len(asked) == 1  # the hybrid task's reference; under the gate it is never asked
    prompt = asked[0][3]["messages"][0]["content"]
    assert "Expected behavior:\nThe agent reads `logs/app.log`" in prompt


def test_the_gate_and_the_weights(tmp_path, judge) -> None:
    task = _tasks()["task_90001_count_log_errors"]
    # the report without reading the log by a tool: automated 0.5, under the gate
    blind = task.model_copy(update={"solution": ["echo 3 > report.txt"]})
    ep = _play(tmp_path, blind)
    assert ep.reward == pytest.approx(0.4 * 0.5), ep.verifier_detail
    assert ep.verifier_detail == "automated 0.500 (under 0.75: judge not asked)"
    # all checks pass, the judge says 0 (a wrong answer in chat): 0.4 of the reward
    wrong = task.model_copy(update={"answer": "4"})
    ep = _play(tmp_path, wrong)
    assert ep.reward == pytest.approx(0.4), ep.verifier_detail


def test_grade_reads_openclaws_session_shape() -> None:
    transcript = {"messages": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "Count."},
        {"role": "assistant", "content": "",
         "tool_calls": [{"id": "c1", "name": "exec", "arguments": {"command": "cat app.log"}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "exec", "content": "ERROR x"},
        {"role": "assistant", "content": "3"},
    ]}  # fmt: skip
    entries = openclaw_session(transcript)
    assert {e["type"] for e in entries} == {"message"}
    text = lambda t: [{"type": "text", "text": t}]  # noqa: E731
    call = {"type": "toolCall", "id": "c1", "name": "exec", "arguments": {"command": "cat app.log"}}
    assert [e["message"] for e in entries] == [
        {"role": "user", "content": text("Count.")},
        {"role": "assistant", "content": [call]},
        {"role": "toolResult", "toolCallId": "c1", "toolName": "exec", "isError": False,
         "content": text("ERROR x")},
        {"role": "assistant", "content": text("3")},
    ]  # fmt: skip

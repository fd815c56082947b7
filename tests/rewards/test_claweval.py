"""ClawEval's scoring (rewards/claweval.py) on whole episodes: the fixtures of
tests/tasks/fixtures/claweval (a mock service in the benchmark's style, its graders on a
stand-in of its package) with reference solutions written here (the benchmark ships none), a
scripted judge (a test double for the model only) and the real mock service process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from forge.sandboxes.bwrap import bwrap_works
from rewards.claweval import claweval_messages
from tasks.schema import Task
from tests.forge.httpstub import StubServer
from tests.rewards.judging import REACT_AND_OPENCLAW, scripted_judge, with_solutions
from tests.rewards.test_judge import _play

FIXTURES = Path(__file__).resolve().parents[1] / "tasks" / "fixtures" / "claweval"
PACKING = {"title": "Packing list", "body": "passport, phone charger", "tags": ["trip"]}
SUMMARY = {"title": "Work summary", "body": "Ship the parser on Friday; read Lena's design doc."}
SOLUTIONS = {  # written here: the benchmark ships none
    "f01_packing_list": (
        [
            {"service": "notebook", "op": "list_notes", "args": {"tag": "trip"}},
            {"service": "notebook", "op": "add_note", "args": PACKING},
        ],
        "Done.",
    ),
    "f02_capital": ([], "The capital of Australia is Canberra."),
    "f03_work_summary": (
        [{"service": "notebook", "op": "add_note", "args": SUMMARY}],
        "There were 2 work notes.",
    ),
}
pytestmark = pytest.mark.skipif(not bwrap_works(), reason="needs bubblewrap")


def _reply(prompt: str) -> str:
    """1 for Canberra in the answer, or a note covering both work notes; 0 otherwise."""
    shown = prompt.split("RUBRIC:", 1)[-1]
    _rubric, evidence = shown.split("\n\n", 1) if "\n\n" in shown else (shown, "")
    good = "Canberra" in evidence or ("parser" in evidence and "design doc" in evidence)
    return json.dumps({"score": 1.0 if good else 0.0, "reasoning": "scripted"})


@pytest.fixture
def judge(monkeypatch, tmp_path) -> Iterator[StubServer]:
    with scripted_judge(_reply, monkeypatch, tmp_path / "cache") as server:
        yield server


def _tasks() -> dict[str, Task]:
    return with_solutions(f"claweval:{FIXTURES}", SOLUTIONS)


@pytest.mark.parametrize("harness", REACT_AND_OPENCLAW)
def test_the_reference_scores_1_and_the_no_op_0(tmp_path, judge, harness) -> None:
    for task_id, task in _tasks().items():
        ep = _play(tmp_path, task, harness=harness)
        assert (ep.status, ep.reward) == ("ok", 1.0), (task_id, ep.failure, ep.verifier_detail)
        assert ep.verifier_detail.startswith("claweval 1.000 (pass)"), ep.verifier_detail
        ep = _play(tmp_path, task, mode="noop", harness=harness)
        assert (ep.status, ep.reward) == ("ok", 0.0), (task_id, ep.verifier_detail)
    asked = [r for r in judge.requests if r[1].endswith("/chat/completions")]
    # F02's two answers (the no-op's names no city) and F03's note (the no-op wrote none)
    assert len(asked) == 3
    again = _play(tmp_path, _tasks()["f02_capital"], harness=harness)
    record = json.loads(again.verifier_outputs["judge"])
    assert record["calls"][0]["cached"] is True  # the same question again costs nothing


def test_the_grader_reads_what_the_service_did_not_the_workspace(tmp_path, judge) -> None:
    task = _tasks()["f03_work_summary"]
    # the agent rewrites its copy of the notebook and claims the count: the service's audit
    # has no summary note, so only the reply's count scores (0.4 of completion)
    note = {"id": "n9", "title": "Work summary", "body": "parser, design doc", "tags": ["work"]}
    forged = [{"path": "fixtures/notebook/notes.json", "content": json.dumps([note])}]
    ep = _play(tmp_path, Task.model_validate({**task.model_dump(), "solution": forged}))
    assert ep.reward == pytest.approx(0.8 * 0.4), ep.verifier_detail
    scores = json.loads(ep.verifier_outputs["scores"])
    assert scores["scores"]["completion"] == pytest.approx(0.4)
    # the service's record of every call reaches the episode
    ep = _play(tmp_path, _tasks()["f01_packing_list"])
    assert [(c["service"], c["op"], c["via"]) for c in ep.service_calls] == [
        ("notebook", "list_notes", "tool"), ("notebook", "add_note", "tool")]  # fmt: skip


def test_an_unreachable_judge_fails_the_attempt_for_a_retry(tmp_path, judge, monkeypatch) -> None:
    monkeypatch.setenv("FORGE_JUDGE_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setattr("rewards.judge_client.time.sleep", lambda s: None)
    ep = _play(tmp_path, _tasks()["f02_capital"])
    assert (ep.status, ep.failure, ep.reward) == ("failed", "verifier_error", 0.0)
    assert "unreachable" in ep.harness_log


def test_messages_in_claweval_shape() -> None:
    transcript = {"messages": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "Add it."},
        {"role": "assistant", "content": "",
         "tool_calls": [{"id": "c1", "name": "notebook_add_note", "arguments": {"title": "t"}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "notebook_add_note", "content": "{}"},
        {"role": "assistant", "content": "Done."},
    ]}  # fmt: skip
    text = lambda t: [{"type": "text", "text": t}]  # noqa: E731
    assert claweval_messages(transcript) == [
        {"role": "user", "content": text("Add it.")},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c1",
                                           "name": "notebook_add_note", "input": {"title": "t"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1",
                                      "content": text("{}")}]},
        {"role": "assistant", "content": text("Done.")},
    ]  # fmt: skip


def test_a_mock_service_that_does_not_start_fails_the_attempt(tmp_path, judge) -> None:
    data = _tasks()["f01_packing_list"].model_dump()
    data["apps"]["notebook"]["http"]["command"] = ["python", "mock_services/notebook/gone.py"]
    ep = _play(tmp_path, Task.model_validate(data))
    assert (ep.status, ep.reward) == ("failed", 0.0)  # the infrastructure's fault: retried
    assert "service notebook did not start" in ep.harness_log

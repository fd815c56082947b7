"""The ClawEval reader (tasks/claweval.py) on tests/tasks/fixtures/claweval: a small checkout in
the benchmark's layout written for these tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tasks.claweval import load
from tasks.errors import TaskError
from tasks.services.http import http_spec

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "claweval"


def test_tasks_load_with_their_services_tools_files_and_bar() -> None:
    skipped: list[tuple[str, str, str]] = []
    tasks = {t.id: t for t in load(f"claweval:{FIXTURES}", skipped)}
    assert sorted(tasks) == ["f01_packing_list", "f02_capital", "f03_work_summary"]
    packing = tasks["f01_packing_list"]
    spec = http_spec(packing.apps["notebook"])
    assert spec is not None and spec.cwd == str(FIXTURES)
    assert spec.command == ["python", "mock_services/notebook/server.py"]
    assert (spec.health, spec.audit) == ("/notebook/notes", "/notebook/audit")
    assert [(t.name, t.op, t.path) for t in spec.tools] == [
        ("notebook_list_notes", "list_notes", "/notebook/notes"),
        ("notebook_add_note", "add_note", "/notebook/notes/add"),
    ]
    assert spec.env == {"NOTEBOOK_FIXTURES": "tasks/F01_packing_list/fixtures/notebook/notes.json"}
    assert packing.pass_threshold == 0.75 and packing.limits.max_turns == 10
    assert packing.verifier["type"] == "claweval" and packing.verifier["asks_judge"] is False
    assert tasks["f02_capital"].apps == {} and tasks["f02_capital"].verifier["asks_judge"]
    assert list(tasks["f03_work_summary"].files) == ["fixtures/notebook/notes.json"]
    reasons = {Path(p).parent.name: (f, m) for p, f, m in skipped}
    assert reasons == {
        "F04_live_search": ("services", "web_real searches the live web: needs $SERP_DEV_KEY "
                            "and the internet (set the key to run it)"),
        "F05_chat_user": ("user_agent", "talks with a simulated user: not supported"),
    }  # fmt: skip


def test_a_search_key_lets_the_live_web_task_in(monkeypatch) -> None:
    monkeypatch.setenv("SERP_DEV_KEY", "k")
    ids = [t.id for t in load(f"claweval:{FIXTURES}", [])]
    assert "f04_live_search" in ids and "f05_chat_user" not in ids


def test_bad_tasks_name_the_file_and_field(tmp_path) -> None:
    shutil.copytree(FIXTURES, tmp_path / "ce")
    spec = tmp_path / "ce" / "tasks" / "F01_packing_list" / "task.yaml"
    old = "tool_name: notebook_add_note\n    url: http://localhost:9300"
    spec.write_text(spec.read_text().replace(old, old.replace("9300", "9999")))
    (tmp_path / "ce" / "tasks" / "F02_capital" / "grader.py").unlink()
    with pytest.raises(TaskError) as e:
        load(f"claweval:{tmp_path / 'ce'}")
    found = {(Path(p).name, f, m) for p, f, m in e.value.problems}
    port = "notebook_add_note: http://localhost:9999/notebook/notes/add is on no service's port"
    assert ("task.yaml", "tools[1]", port) in found
    assert ("F02_capital", "grader.py", "missing") in found
    with pytest.raises(TaskError, match="not in a ClawEval checkout"):
        load(f"claweval:{tmp_path}")


def test_solution_steps_are_checked_against_the_tasks_own_service() -> None:
    """A service of the task's own named like a built-in one (ClawEval has a calendar) offers
    its own operations, not the built-in's."""
    from tasks.schema import Task

    [task] = [t for t in load(f"claweval:{FIXTURES}", []) if t.id == "f01_packing_list"]
    data = {**task.model_dump(), "apps": {"calendar": task.apps["notebook"]}}
    step = {"service": "calendar", "op": "add_note", "args": {"title": "T", "body": "B"}}
    Task.model_validate({**data, "solution": [step]})
    with pytest.raises(ValueError, match=r"solution\.0\.op: calendar has no 'create'"):
        Task.model_validate({**data, "solution": [{**step, "op": "create"}]})
    with pytest.raises(ValueError, match=r"solution\.0\.service: 'notebook' is not in apps"):
        Task.model_validate({**data, "solution": [{**step, "service": "notebook"}]})

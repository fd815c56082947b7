"""The QwenClawBench reader (tasks.qwenclawbench) on task files written here in the benchmark's
own format (tests/tasks/fixtures/qwenclawbench: a hybrid task whose grade() reads the
transcript, an automated one, one that needs the web)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tasks.errors import TaskError
from tasks.loader import load_suite
from tasks.schema import Task

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "qwenclawbench"
DATA = FIXTURES / "data" / "fixture-v1"


def test_a_checkout_loads_its_tasks_and_lists_what_cannot_run_offline() -> None:
    skipped: list[tuple[str, str, str]] = []
    tasks = {t.id: t for t in load_suite(f"qwenclawbench:{FIXTURES}", skipped)}
    assert sorted(tasks) == ["task_90001_count_log_errors", "task_90002_write_release_note"]
    [(where, field, why)] = skipped
    assert where.endswith("task_90003_fetch_docs.md") and field == "external_dependency"
    assert why == "needs the web: not run offline"
    count = tasks["task_90001_count_log_errors"]
    assert count.instruction.startswith("How many ERROR lines")
    assert count.files["logs/app.log"].count("ERROR") == 3
    assert count.files["NOTES.md"].startswith("The on-call engineer")  # an inline file
    assert (count.limits.timeout_s, count.limits.max_turns) == (600.0, 50)
    spec = count.verifier
    assert (spec["type"], spec["grading_type"], spec["weights"]) == (
        "qwenclawbench", "hybrid", {"automated": 0.4, "llm_judge": 0.6}
    )  # fmt: skip
    assert spec["grade"].startswith("def grade(transcript: list, workspace_path: str)")
    assert spec["rubric"].startswith("Task:\nHow many") and "Expected behavior:\n" in spec["rubric"]
    assert "Rubric:\n### Correct count" in spec["rubric"]
    release = tasks["task_90002_write_release_note"]
    assert release.verifier["grading_type"] == "automated" and release.tags[0] == "qwenclawbench"
    # the same set from its data folder, its tasks folder or one file
    assert len(load_suite(f"qwenclawbench:{DATA}", [])) == 2
    assert (
        len(load_suite(f"qwenclawbench:{DATA / 'tasks' / 'task_90002_write_release_note.md'}")) == 1
    )


def _copy(tmp_path: Path) -> Path:
    data = tmp_path / "data" / "v"
    shutil.copytree(DATA, data)
    (data / "tasks" / "task_90003_fetch_docs.md").unlink()
    return data / "tasks" / "task_90001_count_log_errors.md"


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (lambda t: t.replace("---\nid:", "id:", 1), "", "no YAML front matter"),
        (lambda t: t.replace("## Prompt", "## Question"), "## Prompt", "missing"),
        (lambda t: t.replace("grading_type: hybrid", "grading_type: vibes"), "grading_type",
         "'vibes': automated, hybrid or llm_judge"),
        (lambda t: t.replace("```python", "```text"), "## Automated Checks", "no ```python"),
        (lambda t: t.replace("source: logs/app.log", "source: logs/gone.log"),
         "workspace_files[0]", "is missing"),
        (lambda t: t.replace("dest: logs/app.log", "dest: ../app.log"), "workspace_files[0]",
         "a relative path without '..'"),
        (lambda t: t.replace("source: logs/app.log", "source: ../../tasks/x.md"),
         "workspace_files[0]", "is outside assets/task_90001_count_log_errors"),
    ],
)  # fmt: skip
def test_a_malformed_task_names_its_file_and_field(tmp_path, change, field, message) -> None:
    path = _copy(tmp_path)
    path.write_text(change(path.read_text()))
    with pytest.raises(TaskError) as err:
        load_suite(f"qwenclawbench:{path}")
    [(where, got_field, got)] = err.value.problems
    assert where == str(path) and got_field == field and message in got, err.value.problems


def test_binary_assets_are_seeded_and_a_misspelt_weight_reads_as_the_benchmark_reads_it(
    tmp_path,
) -> None:
    release = load_suite(f"qwenclawbench:{DATA / 'tasks' / 'task_90002_write_release_note.md'}")
    (task,) = release
    assert "logo.png" not in task.files and task.seeds()["logo.png"][:4] == b"\x89PNG"
    bad = {**task.model_dump(), "binary_files": {"logo.png": "not base64!"}}
    with pytest.raises(ValueError, match=r"logo\.png: not base64"):
        Task.model_validate(bad)
    path = _copy(tmp_path)
    path.write_text(path.read_text().replace("llm_judge: 0.6", "llmjudge: 0.6"))
    (task,) = load_suite(f"qwenclawbench:{path}")
    assert task.verifier["weights"] == {"automated": 0.4, "llm_judge": 0.5}

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tasks.errors import TaskError
from tasks.loader import list_suites, load_suite, load_task_file
from tasks.schema import Task, WriteFile

GOOD = """
id: {id}
instruction: Write ok to out.txt.
verifier: {{type: file_equals, path: out.txt, content: ok}}
solution:
  - echo ok > out.txt
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def task_dict(**over) -> dict:
    base = {
        "id": "t1",
        "instruction": "do it",
        "verifier": {"type": "file_exists", "path": "a"},
    }
    base.update(over)
    return base


def suite_file(tmp_path: Path, tasks: list[dict], name: str = "suite.yaml") -> Path:
    return write(tmp_path / name, json.dumps({"tasks": tasks}))


def error_of(path: Path) -> TaskError:
    with pytest.raises(TaskError) as info:
        load_suite(path)
    return info.value


def test_smoke_suite_loads_by_name() -> None:
    tasks = load_suite("smoke")
    assert "smoke" in list_suites()
    assert len(tasks) >= 6
    assert len({t.id for t in tasks}) == len(tasks)
    assert all(isinstance(t, Task) and t.source and t.source.endswith(".yaml") for t in tasks)
    kinds = set()
    for t in tasks:
        for spec in t.verifier if isinstance(t.verifier, list) else [t.verifier]:
            kinds.add(spec["type"])
    assert kinds >= {
        "file_exists",
        "file_equals",
        "file_regex",
        "file_absent",
        "json_field",
        "command",
        "answer_equals",
        "answer_regex",
    }


def test_single_task_file_and_defaults(tmp_path: Path) -> None:
    path = write(tmp_path / "one.yaml", GOOD.format(id="one"))
    [task] = load_task_file(path)
    assert task.id == "one"
    assert task.solution == ["echo ok > out.txt"]
    assert task.files == {} and task.tags == [] and task.answer is None
    assert (task.limits.max_turns, task.limits.timeout_s, task.limits.max_tokens_per_turn) == (
        20,
        300.0,
        512,
    )
    assert task.source == str(path)


def test_suite_file_json_and_file_steps(tmp_path: Path) -> None:
    path = write(
        tmp_path / "s.json",
        json.dumps(
            {
                "tasks": [
                    task_dict(id="a", solution=[{"path": "x/y.txt", "content": "hi"}, "ls"]),
                    task_dict(id="b", answer="42", limits={"max_turns": 3}, tags=["q"]),
                ]
            }
        ),
    )
    a, b = load_task_file(path)
    assert a.solution == [WriteFile(path="x/y.txt", content="hi"), "ls"]
    assert a.reference_script()["steps"] == [{"path": "x/y.txt", "content": "hi"}, "ls"]
    assert b.answer == "42" and b.limits.max_turns == 3 and b.tags == ["q"]


def test_directory_loads_every_task_file(tmp_path: Path) -> None:
    write(tmp_path / "d" / "b.yaml", GOOD.format(id="b"))
    write(tmp_path / "d" / "a.yml", GOOD.format(id="a"))
    write(tmp_path / "d" / "notes.md", "not a task")
    assert [t.id for t in load_suite(tmp_path / "d")] == ["a", "b"]


def test_verifier_list(tmp_path: Path) -> None:
    spec = [{"type": "file_exists", "path": "a"}, {"type": "answer_equals", "value": "x"}]
    [task] = load_task_file(suite_file(tmp_path, [task_dict(verifier=spec)]))
    assert task.verifier == spec


@pytest.mark.parametrize(
    ("task", "field", "message"),
    [
        ({"id": "t1", "verifier": {"type": "file_exists", "path": "a"}}, "tasks[0].instruction",
         "missing"),
        (task_dict(instruction="  "), "tasks[0].instruction", "blank"),
        (task_dict(id="Bad Id"), "tasks[0].id", "pattern"),
        (task_dict(id="-x"), "tasks[0].id", "pattern"),
        (task_dict(files={"/etc/passwd": "x"}), "tasks[0].files", "relative"),
        (task_dict(files={"a/../../b": "x"}), "tasks[0].files", "'..'"),
        (task_dict(verifier={"type": "fil_exists", "path": "a"}), "tasks[0].verifier.type",
         "unknown verifier 'fil_exists' (known: "),
        (task_dict(verifier={"type": "file_exists", "path": "a", "pth": "b"}),
         "tasks[0].verifier.pth", "unknown field"),
        (task_dict(verifier={"type": "file_exists"}), "tasks[0].verifier.path", "required"),
        (task_dict(verifier=[{"type": "file_exists", "path": "a"}, {"type": "x"}]),
         "tasks[0].verifier[1].type", "unknown verifier"),
        (task_dict(verifier=[]), "tasks[0].verifier", "empty"),
        (task_dict(solution=[{"path": "/abs", "content": "x"}]), "tasks[0].solution[0]",
         "relative"),
        (task_dict(solution=[{"path": "a"}]), "tasks[0].solution[0]", "'content'"),
        (task_dict(solution=[3]), "tasks[0].solution[0]", "shell command string"),
        (task_dict(limits={"max_turns": 0}), "tasks[0].limits.max_turns", "greater than"),
        (task_dict(limits={"max_turn": 3}), "tasks[0].limits.max_turn", "unknown field"),
        (task_dict(instructions="typo"), "tasks[0].instructions", "unknown field"),
    ],
)  # fmt: skip
def test_malformed_task_names_file_and_field(
    tmp_path: Path, task: dict, field: str, message: str
) -> None:
    tasks = [task_dict(id="ok1"), task_dict(id="ok2"), task]
    path = suite_file(tmp_path, tasks)
    err = error_of(path)
    field = field.replace("tasks[0]", "tasks[2]")
    assert any(p[0] == str(path) and p[1] == field for p in err.problems), err.problems
    assert f"{path}: {field}: " in str(err)
    assert message in str(err)


def test_error_format_matches_the_documented_one(tmp_path: Path) -> None:
    path = suite_file(
        tmp_path,
        [task_dict(id="a"), task_dict(id="b"), task_dict(verifier={"type": "fil_exists"})],
        name="bad.yaml",
    )
    msg = str(error_of(path))
    assert msg.startswith(f"{path}: tasks[2].verifier.type: unknown verifier 'fil_exists' (known: ")


def test_single_task_file_field_has_no_prefix(tmp_path: Path) -> None:
    path = write(tmp_path / "t.yaml", "id: t\ninstruction: x\nverifier: {type: nope}\n")
    assert str(error_of(path)).startswith(f"{path}: verifier.type: unknown verifier 'nope'")


def test_all_problems_of_a_file_are_reported(tmp_path: Path) -> None:
    path = suite_file(tmp_path, [task_dict(id="A"), task_dict(id="b", verifier={"type": "z"})])
    fields = [p[1] for p in error_of(path).problems]
    assert fields == ["tasks[0].id", "tasks[1].verifier.type"]


def test_duplicate_id_in_one_file(tmp_path: Path) -> None:
    path = suite_file(tmp_path, [task_dict(id="same"), task_dict(id="same")])
    err = error_of(path)
    assert "tasks[1].id: duplicate id 'same' (also tasks[0])" in str(err)


def test_duplicate_id_across_files_names_both(tmp_path: Path) -> None:
    a = write(tmp_path / "d" / "a.yaml", GOOD.format(id="same"))
    b = write(tmp_path / "d" / "b.yaml", GOOD.format(id="same"))
    msg = str(error_of(tmp_path / "d"))
    assert str(a) in msg and str(b) in msg and "duplicate id 'same'" in msg


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty file"),
        ("- a\n- b\n", "got list"),
        ("tasks: {}\n", "non-empty list"),
        ("tasks: [1]\n", "tasks[0]: expected a task mapping"),
        ("tasks: []\nname: x\n", "name: unknown key"),
        ("id: [unclosed\n", "invalid YAML"),
    ],
)
def test_malformed_files(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path / "f.yaml", text)
    err = error_of(path)
    assert str(err).startswith(f"{path}: ") and message in str(err)


def test_invalid_json(tmp_path: Path) -> None:
    path = write(tmp_path / "f.json", "{")
    assert "invalid JSON" in str(error_of(path))


def test_unknown_suite_name() -> None:
    with pytest.raises(TaskError, match=r"no such suite.*smoke"):
        load_suite("no_such_suite_xyz")


def test_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "e").mkdir()
    assert "no task files" in str(error_of(tmp_path / "e"))

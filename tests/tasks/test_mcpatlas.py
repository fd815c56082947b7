"""The MCP-Atlas reader (tasks/mcpatlas.py) on tests/tasks/fixtures/mcpatlas: a small checkout
in the benchmark's layout with a tasks CSV in its dataset's columns, written for these tests."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from forge.sandboxes.bwrap import bwrap_works
from tasks.errors import TaskError
from tasks.mcpatlas import load

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "mcpatlas"
pytestmark = pytest.mark.skipif(not bwrap_works(), reason="needs bubblewrap (tools are listed)")


def test_credential_free_tasks_load_with_only_their_enabled_tools() -> None:
    skipped: list[tuple[str, str, str]] = []
    tasks = {t.id: t for t in load(f"mcpatlas:{FIXTURES}", skipped)}
    assert sorted(tasks) == ["atlas-001", "atlas-002"]
    both = tasks["atlas-002"]
    assert list(both.apps) == ["filesystem", "calculator"]
    files = both.apps["filesystem"]["mcp"]
    assert [t["name"] for t in files["tools"]] == ["read_file", "list_directory"]  # not write
    assert files["data"] == str(FIXTURES / "services" / "agent-environment" / "data")
    assert files["command"][1] == str(FIXTURES / "servers" / "fixture_server.py")
    assert both.verifier == {"type": "claims", "claims": [
        "The shop had 8 visits in total", "Lena asked for the quarterly report"]}  # fmt: skip
    assert both.pass_threshold == 0.75 and both.limits.max_turns == 100
    assert {(Path(p).name, f, m) for p, f, m in skipped} == {
        ("tasks.csv#atlas-003", "ENABLED_TOOLS",
         "server brave-search needs credentials or the internet (not run here)"),
        ("tasks.csv#atlas-004", "ENABLED_TOOLS",
         "server fetch needs credentials or the internet (not run here)"),
    }  # fmt: skip
    # the CSV named itself gives the same tasks
    assert [t.id for t in load(f"mcpatlas:{FIXTURES / 'tasks.csv'}", [])] == list(tasks)


def test_bad_rows_name_the_row_and_field(tmp_path) -> None:
    shutil.copytree(FIXTURES, tmp_path / "atlas")
    rows = [
        {"TASK": "x1", "PROMPT": "p", "ENABLED_TOOLS": '["weather_forecast"]',
         "GTFA_CLAIMS": '["c1"]'},
        {"TASK": "x2", "PROMPT": "p", "ENABLED_TOOLS": '["calculator_integrate"]',
         "GTFA_CLAIMS": '["c1"]'},
        {"TASK": "x3", "PROMPT": "p", "ENABLED_TOOLS": "[]", "GTFA_CLAIMS": ""},
        {"TASK": "x4", "PROMPT": "p", "ENABLED_TOOLS": "calculator", "GTFA_CLAIMS": "c"},
    ]  # fmt: skip
    with open(tmp_path / "atlas" / "tasks.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with pytest.raises(TaskError) as e:
        load(f"mcpatlas:{tmp_path / 'atlas'}")
    assert {(p.rsplit("#", 1)[1], f, m) for p, f, m in e.value.problems} == {
        ("x1", "ENABLED_TOOLS", "weather_forecast belongs to no server of the template"),
        ("x2", "ENABLED_TOOLS", "calculator has no tool integrate"),
        ("x3", "GTFA_CLAIMS", "none (the judge has nothing to check)"),
        ("x4", "ENABLED_TOOLS", "not a JSON list"),
    }
    (tmp_path / "atlas" / "tasks.csv").unlink()
    with pytest.raises(TaskError, match="no tasks CSV"):
        load(f"mcpatlas:{tmp_path / 'atlas'}")
    with pytest.raises(TaskError, match="not in an MCP-Atlas checkout"):
        load(f"mcpatlas:{tmp_path}")

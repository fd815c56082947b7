"""Cheating agents score 0 on every smoke and claw-lite task; the oracle still scores 1.0.

Episodes take the real path: a HarnessPod (its proxy serving, no Ray needed), the ``command``
harness, bubblewrap sandboxes, :func:`rewards.runner.run_verifier`. The cheater is
``cheater.py`` (read its docstring); the oracle is the task's reference solution played as a
shell script by the same harness. ``test_the_cheat_beat_verifying_in_place`` shows what the
cheats did to the old mechanism (``sh -c CMD`` in the agent's own sandbox).
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import shlex
import uuid
from pathlib import Path
from typing import Any

import pytest

from actors.harness_pod import HarnessPod
from forge.sandboxes.base import SandboxSpec
from forge.sandboxes.bwrap import bwrap_works
from forge.sandboxes.local import LocalSandbox
from forge.types import Episode
from rewards.command import Command
from rewards.registry import build_verifier
from rewards.runner import _flatten, run_verifier
from tasks.loader import load_suite
from tasks.schema import Task, WriteFile

pytestmark = pytest.mark.skipif(not bwrap_works(), reason="bubblewrap unavailable")

CHEATER = Path(__file__).with_name("cheater.py")
TASKS = [t for suite in ("smoke", "claw-lite") for t in load_suite(suite)]
IMPORT = re.compile(r"(?:^|[;\s\"'])(?:from\s+([\w.]+)\s+import|import\s+([\w., ]+))", re.M)
READS = re.compile(r"(?:open|read|listdir|walk|tree)\(\s*'([^']+)'")


def commands(task: Task) -> list[Command]:
    return [v for v in _flatten(build_verifier(task.verifier)) if isinstance(v, Command)]


def verifier_imports(task: Task) -> list[str]:
    """Every top-level module name imported anywhere in the task's verifier commands."""
    names: set[str] = set()
    for c in commands(task):
        for frm, imp in IMPORT.findall(c.cmd):
            for name in [frm] if frm else imp.split(","):
                names.add(name.strip().split(" ")[0].split(".")[0])
    return sorted(n for n in names if n)


def verifier_targets(task: Task) -> list[str]:
    """The workspace paths the task's verifiers read."""
    paths = {getattr(v, "path", None) for v in _flatten(build_verifier(task.verifier))}
    for c in commands(task):
        paths.update(READS.findall(c.cmd))
    return sorted({p.rstrip("/") for p in paths if p})


def cheater_options(task: Task, *modes: str, tag: str = "cheat") -> dict[str, Any]:
    argv = [
        "--targets",
        ",".join(verifier_targets(task)),
        "--names",
        ",".join(verifier_imports(task)),
    ]
    return {
        "name": "cheater",
        "mounts": {str(CHEATER): "/opt/cheat/cheater.py"},
        "command": ["python3", "/opt/cheat/cheater.py", *argv, *(modes or ("all",)), tag],
    }


def oracle_script(task: Task) -> str:
    lines = ["set -e"]
    for step in task.solution:
        if isinstance(step, WriteFile):
            data = base64.b64encode(step.content.encode()).decode()
            path = shlex.quote(step.path)
            lines.append(f'mkdir -p "$(dirname {path})" && echo {data} | base64 -d > {path}')
        else:
            lines.append(f"sh -c {shlex.quote(step)}")
    lines.append(f"printf '%s\\n' {shlex.quote(task.answer or 'Done.')}")
    return "\n".join(lines) + "\n"


def oracle_options(task: Task) -> dict[str, Any]:
    return {
        "name": "oracle",
        "files": {"{home}/oracle.sh": oracle_script(task)},
        "command": ["sh", "{home}/oracle.sh"],
    }


def play(root: Path, jobs: list[tuple[Task, dict[str, Any]]]) -> list[Episode]:
    """Run each (task, command-harness options) as one episode on a HarnessPod whose local
    sandboxes live under ``root``; none is left there afterwards."""
    episodes = play_on({"root": str(root)}, jobs)
    assert not root.exists() or os.listdir(root) == []  # every sandbox destroyed
    return episodes


def play_on(sandbox: dict[str, Any], jobs: list[tuple[Task, dict[str, Any]]]) -> list[Episode]:
    """Run each (task, command-harness options) as one episode on a HarnessPod with the
    sandbox config ``sandbox`` (any backend)."""

    async def run() -> list[Episode]:
        pod = HarnessPod(None, pod_id="cheats", run="cheats", sandbox=sandbox)
        await pod.start()
        try:
            return [
                await pod.run_episode(task.model_dump(), "command", harness_options=options)
                for task, options in jobs
            ]
        finally:
            await pod.stop()

    return asyncio.run(run())


def processes_with(tag: str) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if tag in cmdline:
            found.append(f"{pid}: {cmdline}")
    return found


def sliced(tasks: list[Task]) -> list[Any]:
    """The default run's representative slice: the first task of each verifier shape (its
    verifier types, in order); the others carry the ``full`` mark (``-m full`` runs them)."""
    seen: set[str] = set()
    out = []
    for task in tasks:
        shape = ",".join(type(v).__name__ for v in _flatten(build_verifier(task.verifier)))
        marks = () if shape not in seen else (pytest.mark.full,)
        seen.add(shape)
        out.append(pytest.param(task, id=task.id, marks=marks))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("task", sliced(TASKS))
def test_cheater_scores_zero_and_oracle_one(tmp_path: Path, task: Task) -> None:
    tag = f"cheat-{uuid.uuid4().hex}"
    oracle, cheat = play(
        tmp_path / "boxes", [(task, oracle_options(task)), (task, cheater_options(task, tag=tag))]
    )
    assert (oracle.status, oracle.reward) == ("ok", 1.0), (
        oracle.verifier_detail,
        oracle.harness_log,
    )
    assert (cheat.status, cheat.reward) == ("ok", 0.0), cheat.verifier_detail
    assert cheat.harness_exit_code == 0, cheat.harness_log
    assert processes_with(tag) == []  # the cheater's daemon died with its sandbox


def in_place(task: Task, root: Path, *modes: str) -> tuple[LocalSandbox, list[int]]:
    """The cheater run in a sandbox, then each command verifier as the old mechanism ran it:
    ``sh -c CMD`` in that same sandbox. Returns the sandbox and the exit codes."""
    box = LocalSandbox(root=root, isolation="required")
    box.create(SandboxSpec(labels={"run": "in-place", "attempt": task.id}))
    for path, text in task.files.items():
        box.put_file(path, text)
    opts = cheater_options(task, *modes)
    box.put_file("/home/agent/cheater.py", CHEATER.read_text())
    argv = ["python3", "/home/agent/cheater.py", *opts["command"][2:]]
    assert box.exec(argv, 60).exit_code == 0
    return box, [box.exec(["sh", "-c", c.cmd], c.timeout_s).exit_code for c in commands(task)]


PYTHON_CHECKED = [t for t in TASKS if any(c.cmd.startswith("python3") for c in commands(t))]


@pytest.mark.slow
@pytest.mark.parametrize("task", sliced(PYTHON_CHECKED))
def test_the_cheat_beat_verifying_in_place(tmp_path: Path, task: Task) -> None:
    """Control: the planted shadows pass every python verifier run the old way, in the agent's
    own sandbox; run_verifier on that same sandbox gives 0."""
    box, codes = in_place(task, tmp_path, "edit", "shadows")
    try:
        assert codes and all(code == 0 for code in codes), codes
        verdict = run_verifier(task, box, "wrong", lambda: LocalSandbox(root=tmp_path))
        assert verdict.reward == 0.0, verdict.detail
    finally:
        box.destroy()


def test_json_shadow_no_longer_passes(tmp_path: Path) -> None:
    """The issue's reproduction: ``json.py`` in the workspace passed ``import json`` checks."""
    task = next(t for t in TASKS if t.id == "contacts_csv_to_json")
    box = LocalSandbox(root=tmp_path, isolation="required")
    box.create(SandboxSpec(labels={"run": "json"}))
    box.put_file("json.py", "import os\nos._exit(0)\n")
    (cmd,) = commands(task)
    assert box.exec(["sh", "-c", cmd.cmd], 30).exit_code == 0  # the old mechanism: passed
    verdict = run_verifier(task, box, None, lambda: LocalSandbox(root=tmp_path))
    assert verdict.reward == 0.0 and "contacts.json" in verdict.detail


@pytest.mark.parametrize(
    ("task_id", "modes"),
    [
        ("build_project", ("startup", "shims")),  # a shell verifier
        ("fix_config", ("shadows", "shims", "daemon")),  # file_regex + python
        ("collect_error_codes", ("links",)),  # file_equals on a FIFO / link
        ("log_level_counts", ("huge", "shadows")),  # json_field + python, 1 TiB sparse file
    ],
)
def test_targeted_cheats_score_zero(tmp_path: Path, task_id: str, modes: tuple[str, ...]) -> None:
    task = next(t for t in TASKS if t.id == task_id)
    (cheat,) = play(tmp_path / "boxes", [(task, cheater_options(task, *modes))])
    assert (cheat.status, cheat.reward) == ("ok", 0.0), cheat.verifier_detail

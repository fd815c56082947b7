"""The desktop suite: real X applications on a real Xvfb; every reference solution, played by the
desktop harness's action executor, makes its verifier pass, and leaving the applications
untouched does not."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from forge.harnesses.desktop_actions import DESKTOP_ACTIONS
from forge.harnesses.desktop_display import missing_tools, play, task_desktop, x_display
from rewards.base import Verdict
from rewards.registry import verify
from tasks.loader import load_suite
from tasks.schema import GuiAction, Task
from tests.rewards.sandbox_double import DirSandbox

DESKTOP = load_suite("desktop")
FILE_CHECKS = {"file_equals", "file_exists", "file_absent", "file_regex", "json_field"}
APPS = sorted({s.command.split()[0] for t in DESKTOP for s in t.services})
MISSING = missing_tools() + [a for a in APPS if shutil.which(a) is None]
needs_x = pytest.mark.skipif(bool(MISSING), reason=f"GUI programs missing: {', '.join(MISSING)}")


def test_suite_shape() -> None:
    assert len(DESKTOP) >= 10
    clicks = 0
    for t in DESKTOP:
        assert t.gui is not None and t.gui.display and t.gui.screen == (640, 480), t.id
        assert t.services, t.id
        for s in t.services:  # a fixed geometry: positions are the same on every run
            assert {"-g", "-geometry"} & set(s.command.split()), s.command
        assert t.solution and all(isinstance(s, GuiAction) for s in t.solution), t.id
        assert all(s.action in DESKTOP_ACTIONS for s in t.solution), t.id
        assert len(t.solution) + 1 <= t.limits.max_turns, t.id  # + done
        specs = t.verifier if isinstance(t.verifier, list) else [t.verifier]
        assert {v["type"] for v in specs} <= FILE_CHECKS, t.id  # state, not the agent's claim
        clicks += any(s.action == "click" for s in t.solution)
    assert clicks >= 5
    assert set(APPS) >= {"xedit", "stterm", "xcalc", "xmessage"}


def settled_verdict(task: Task, box: DirSandbox, most_s: float = 5.0) -> Verdict:
    """The verdict once the applications have written what the last action asked (a loaded
    machine may be slow to save): it may only become 1 within ``most_s``."""
    deadline = time.monotonic() + most_s
    while True:
        verdict = verify(task.verifier, box, task.answer)
        if verdict.reward == 1.0 or time.monotonic() > deadline:
            return verdict
        time.sleep(0.2)


def _workspace(tmp_path: Path) -> DirSandbox:
    box = DirSandbox(tmp_path / "ws")
    box.root.mkdir(parents=True)
    return box


@needs_x
@pytest.mark.slow
@pytest.mark.parametrize("task", DESKTOP, ids=[t.id for t in DESKTOP])
def test_reference_solution_passes(tmp_path: Path, task: Task) -> None:
    box = _workspace(tmp_path)
    with task_desktop(task, box.root) as desk:
        results = play(desk, task.solution)
        verdict = settled_verdict(task, box)
    assert not any(r.startswith("error") for r in results), results
    assert verdict.reward == 1.0, (verdict.detail, results)


@needs_x
@pytest.mark.slow
def test_untouched_applications_fail(tmp_path: Path) -> None:
    """Each task's applications started and stopped with no action (one display for all):
    what they leave (an empty choice.txt from a dialog's redirection, an editor's nothing)
    does not pass."""
    passed = []
    with x_display(640, 480) as display:
        for task in DESKTOP:
            box = _workspace(tmp_path / task.id)
            with task_desktop(task, box.root, display):
                pass
            if verify(task.verifier, box, None).reward != 0.0:
                passed.append(task.id)
    assert passed == []

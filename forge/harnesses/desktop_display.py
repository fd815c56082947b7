"""A private X display (Xvfb + openbox) on the host, and a task's desktop on it: for the desktop
harness's tests and for measuring where things are on a task's screen.

In an episode the sandbox's services launcher starts the display; this module is the same
recipe run directly, so a reference solution can be played and checked without an episode::

    python -m forge.harnesses.desktop_display SUITE TASK_ID OUT.png [--steps N]

seeds a temporary workspace with the task's files, starts its display and services, plays the
first N steps of its reference solution (default: none) and saves a screenshot.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from forge.harnesses.desktop_actions import Desktop
from forge.sandboxes.services_launch import wait_for_wm

NEEDS = ("Xvfb", "openbox", "xdotool", "import")


def missing_tools() -> list[str]:
    """The programs a desktop needs that are not on PATH."""
    return [t for t in NEEDS if shutil.which(t) is None]


def _stop(proc: subprocess.Popen[Any]) -> None:
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@contextmanager
def x_display(width: int = 640, height: int = 480) -> Iterator[str]:
    """Start Xvfb (a free display number) and openbox; yields the DISPLAY value."""
    read_fd, write_fd = os.pipe()
    xvfb = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write_fd), "-screen", "0", f"{width}x{height}x24",
         "-nolisten", "tcp", "-noreset"],
        pass_fds=(write_fd,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    os.close(write_fd)
    procs = [xvfb]
    try:
        with os.fdopen(read_fd) as f:
            number = f.readline().strip()
        if not number:
            raise RuntimeError("Xvfb did not start")
        display = f":{number}"
        wm = subprocess.Popen(
            ["openbox"], env={**os.environ, "DISPLAY": display}, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        procs.append(wm)
        _wait_for_wm(display)
        yield display
    finally:
        for proc in reversed(procs):
            _stop(proc)


def _wait_for_wm(display: str, timeout_s: float = 20.0) -> None:
    """Until openbox shows windows (the launcher's own wait: a probe window must appear)."""
    if not wait_for_wm({**os.environ, "DISPLAY": display}, timeout_s):
        raise RuntimeError(f"openbox on {display} showed no window within {timeout_s:g}s")


def start_service(command: str, workspace: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["sh", "-c", command], cwd=workspace, env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip


@contextmanager
def task_desktop(task: Any, workspace: Path, display: str | None = None) -> Iterator[Desktop]:
    """``task``'s services started in ``workspace`` (seeded with its files) on a display of
    their own, or on ``display`` when given (of the task's size, with nothing else on it)."""
    width, height = task.gui.screen
    for rel, content in task.files.items():
        path = workspace / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    if display is None:
        with x_display(width, height) as own, task_desktop(task, workspace, own) as desk:
            yield desk
        return
    env = {**os.environ, "DISPLAY": display}
    services = [start_service(s.command, workspace, env) for s in task.services]
    try:
        desk = Desktop(display, width, height, settle_s=0.1)  # then until the screen is still
        desk.wait_for_window()
        yield desk
    finally:
        for proc in services:
            _stop(proc)


def play(desk: Desktop, steps: list[Any]) -> list[str]:
    """Play GuiAction steps on ``desk``; returns each step's result text."""
    results, shot = [], desk.screenshot()
    for step in steps:
        result, shot = desk.act(step.action, step.model_dump(exclude={"action"}), shot)
        results.append(result)
    return results


def main() -> None:
    from tasks.loader import load_suite

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suite")
    parser.add_argument("task_id")
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=0, help="solution steps to play first")
    a = parser.parse_args()
    task = next(t for t in load_suite(a.suite) if t.id == a.task_id)
    with tempfile.TemporaryDirectory() as tmp, task_desktop(task, Path(tmp)) as desk:
        for line in play(desk, task.solution[: a.steps]):
            print(line)
        time.sleep(0.3)
        Path(a.out).write_bytes(desk.screenshot())
        windows = subprocess.run(
            ["sh", "-c", "for w in $(xdotool search --onlyvisible --name .); do "
             "xdotool getwindowname $w; xdotool getwindowgeometry $w; done"],
            env=desk.env, capture_output=True, text=True,
        ).stdout  # fmt: skip
        print(windows)
        for p in sorted(Path(tmp).rglob("*")):
            text = p.read_bytes()[:200] if p.is_file() else b"/"
            print(p.relative_to(tmp), text)


if __name__ == "__main__":
    main()

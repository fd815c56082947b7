"""A GUI task's services under the real launcher, on a free port, for the suite tests.

Each task gets its own workspace and launcher, its services moved from the task's fixed port to
a free one (several test runs may share this host), and the sandbox's read-only paths mapped to
the host's, as an unisolated sandbox maps them. The launcher's harness is a wait for a file
outside the workspace, so the services stay up while the test plays and the launcher stops them
when :meth:`Launched.finish` touches it.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forge.sandboxes import services
from tasks.gui_play import CHROMIUM, launch_browser, new_page
from tasks.schema import Task


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def on_port(task: Task, port: int, paths: dict[str, str]) -> tuple[dict[str, Any], str]:
    """The launcher spec and start URL of ``task`` with its fixed port replaced by ``port``."""
    assert task.gui is not None and task.gui.start_url
    old = task.gui.start_url.rsplit(":", 1)[1].strip("/")
    text = json.dumps(services.launcher_spec(task, paths))
    text = text.replace(f":{old}/", f":{port}/").replace(f"--port {old}", f"--port {port}")
    return json.loads(text), task.gui.start_url.replace(f":{old}/", f":{port}/")


class Launched:
    """``task``'s services under the launcher in ``workspace`` until :meth:`finish`; started at
    once, :meth:`wait_up` waits until the app answers ``/health``."""

    def __init__(self, task: Task, workspace: Path, done: Path, paths: dict[str, str]) -> None:
        workspace.mkdir(parents=True, exist_ok=True)
        for rel, text in task.files.items():
            (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
            (workspace / rel).write_text(text)
        spec, self.url = on_port(task, free_port(), paths)
        wait = f"while [ ! -e '{done}' ]; do sleep 0.05; done"
        argv = [sys.executable, "-I", services.LAUNCHER_HOST, "--spec", json.dumps(spec)]
        self.task, self.workspace, self.done, self.stderr = task, workspace, done, ""
        self.proc = subprocess.Popen(
            [*argv, "--", "sh", "-c", wait], cwd=workspace, stderr=subprocess.PIPE, text=True
        )

    def wait_up(self, timeout_s: float = 30.0) -> Launched:
        end = time.monotonic() + timeout_s
        while not self.up():
            if self.proc.poll() is not None or time.monotonic() > end:
                self.finish()
                raise AssertionError(f"{self.task.id}: services did not come up: {self.stderr}")
            time.sleep(0.05)
        return self

    def up(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "health", timeout=1) as resp:
                return resp.status == 200
        except OSError:
            return False

    def finish(self) -> int:
        """Stop the services (the launcher's exit status); ``stderr`` is then the launcher's."""
        self.done.touch()
        try:
            code = self.proc.wait(timeout=15)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()
        return code


class Ahead:
    """Launchers started ``depth`` tasks ahead of the one played (starting one is mostly
    waiting, so the wait overlaps the playing); each in its own folder under ``root``."""

    def __init__(self, tasks: list[Task], root: Path, paths: dict[str, str], depth: int = 1):
        self.tasks, self.root, self.paths, self.depth = tasks, root, paths, depth
        self.started: dict[str, Launched] = {}

    def _start(self, task: Task) -> None:
        if task.id not in self.started:
            d = self.root / task.id
            self.started[task.id] = Launched(task, d / "ws", d / "harness-done", self.paths)

    def take(self, task: Task) -> Launched:
        self._start(task)
        at = next(i for i, t in enumerate(self.tasks) if t.id == task.id)
        for later in self.tasks[at + 1 : at + 1 + self.depth]:
            self._start(later)
        return self.started.pop(task.id).wait_up()

    def close(self) -> None:
        for run in self.started.values():
            run.finish()


def chromium_page(screen: tuple[int, int]) -> Iterator[Any]:
    """One headless Chromium page of ``screen`` size (a module fixture's body)."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        browser = launch_browser(pw)
        yield new_page(browser, *screen)
        browser.close()


def page_verdict(spec: Any, workspace: Path) -> Any:
    """``page_state`` on the state file a state server run on its own (``--state``) wrote in
    ``workspace``, as the verifier takes the state the HarnessPod kept in an episode."""
    from rewards.registry import build_verifier

    path = workspace / ".app" / "state.json"
    verifier = build_verifier(spec)
    if not path.is_file():
        return verifier.verify_state(None)
    return verifier.verify_text(path.read_text())

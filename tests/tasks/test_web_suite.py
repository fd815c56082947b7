"""The ``web`` suite: every task's services come up under the real launcher, its reference
solution played with Playwright's mouse and keyboard at its 0..1000 coordinates in headless
Chromium makes its ``page_state`` verifier score 1, and the app's untouched state scores 0.

One browser page for the whole module. Each task gets a fresh workspace and its own launcher
(services on a free port instead of the task's fixed one: several test runs may share this
host), and the page navigates to it. The launcher's harness is a wait for a file outside the
workspace, so the services stay up while the test plays and are stopped by the launcher when it
is touched. The test then reads the state the app wrote into the workspace, as the verifier
does after an episode.
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
from rewards import verify
from tasks import Task, load_suite
from tasks.gui_play import CHROMIUM, launch_browser, new_page, play, settle
from tasks.schema import GuiAction
from tests.rewards.sandbox_double import DirSandbox

WEB = load_suite("web")
APPS = {"shop", "mail", "booking", "calendar", "bank"}
SCREEN = (640, 480)


def test_suite_shape() -> None:
    """At least 20 tasks over the four apps, each a GUI task with a service and page_state."""
    assert len(WEB) >= 20
    assert {t.tags[1] for t in WEB} == APPS
    for t in WEB:
        assert t.gui is not None and t.gui.start_url and tuple(t.gui.screen) == SCREEN, t.id
        assert len(t.services) == 1 and t.services[0].ready, t.id
        assert t.services[0].command.startswith("python3 /opt/forge/webapps/server.py "), t.id
        assert t.solution and all(isinstance(s, GuiAction) for s in t.solution), t.id
        specs = t.verifier if isinstance(t.verifier, list) else [t.verifier]
        assert {s["type"] for s in specs} == {"page_state"}, t.id
        assert len(t.solution) < t.limits.max_turns, t.id


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _on_port(task: Task, port: int) -> tuple[dict[str, Any], str]:
    """The launcher spec and start URL of ``task`` with its fixed port replaced by ``port``."""
    assert task.gui is not None and task.gui.start_url
    old = task.gui.start_url.rsplit(":", 1)[1].strip("/")
    spec = services.launcher_spec(task, {services.WEBAPPS: services.WEBAPPS_HOST})
    text = (
        json.dumps(spec).replace(f":{old}/", f":{port}/").replace(f"--port {old}", f"--port {port}")
    )
    return json.loads(text), task.gui.start_url.replace(f":{old}/", f":{port}/")


class Running:
    """A task's services under the launcher in ``workspace`` until :meth:`finish`; started at
    once, :meth:`wait_up` waits until the app answers."""

    def __init__(self, task: Task, workspace: Path, done: Path) -> None:
        workspace.mkdir(parents=True, exist_ok=True)
        for rel, text in task.files.items():
            (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
            (workspace / rel).write_text(text)
        spec, self.url = _on_port(task, _free_port())
        wait = f"while [ ! -e '{done}' ]; do sleep 0.05; done"
        argv = [sys.executable, "-I", services.LAUNCHER_HOST, "--spec", json.dumps(spec)]
        self.task, self.workspace, self.done, self.stderr = task, workspace, done, ""
        self.proc = subprocess.Popen(
            [*argv, "--", "sh", "-c", wait], cwd=workspace, stderr=subprocess.PIPE, text=True
        )

    def wait_up(self) -> Running:
        end = time.monotonic() + 20
        while not self._up():
            if self.proc.poll() is not None or time.monotonic() > end:
                self.finish()
                raise AssertionError(f"{self.task.id}: services did not come up: {self.stderr}")
            time.sleep(0.05)
        return self

    def _up(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "health", timeout=1) as resp:
                return resp.status == 200
        except OSError:
            return False

    def finish(self) -> int:
        self.done.touch()
        try:
            code = self.proc.wait(timeout=15)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()
        return code


class Launchers:
    """Launchers started ahead: while one task is played, the next one's app starts."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started: dict[str, Running] = {}

    def start(self, task: Task) -> Running:
        if task.id not in self.started:
            d = self.root / task.id
            self.started[task.id] = Running(task, d / "ws", d / "harness-done")
        return self.started[task.id]

    def take(self, task: Task) -> Running:
        run = self.start(task)
        del self.started[task.id]
        later = WEB[WEB.index(task) + 1 :]
        if later:
            self.start(later[0])
        return run.wait_up()

    def close(self) -> None:
        for run in self.started.values():
            run.finish()


@pytest.fixture(scope="module")
def launchers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launchers]:
    pool = Launchers(tmp_path_factory.mktemp("web"))
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def page() -> Iterator[Any]:
    """One Chromium page at 640x480 for the module (each task navigates it afresh)."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        browser = launch_browser(pw)
        yield new_page(browser, *SCREEN)
        browser.close()


@pytest.mark.browser
@pytest.mark.parametrize("task", WEB, ids=[t.id for t in WEB])
def test_solution_in_chromium_scores_one_and_nothing_scores_zero(
    page: Any, launchers: Launchers, task: Task
) -> None:
    run = launchers.take(task)
    workspace = run.workspace
    try:
        box = DirSandbox(workspace)
        untouched = verify(task.verifier, box, None)
        assert untouched.reward == 0.0, f"the untouched app already passes: {untouched.detail}"
        assert task.gui is not None and tuple(task.gui.screen) == SCREEN
        page.goto(run.url)
        settle(page)
        for step in task.solution:
            assert isinstance(step, GuiAction)
            play(page, step.model_dump(), *SCREEN)
    finally:
        assert run.finish() == 0, run.stderr
    verdict = verify(task.verifier, DirSandbox(workspace), "I am done.")
    assert verdict.reward == 1.0, verdict.detail
    assert not list(workspace.glob(".app/.state-*")), "a half-written state file was left"


@pytest.mark.browser
def test_launcher_stops_the_app(tmp_path: Path) -> None:
    """After the harness ends, the app's port is closed: the launcher stopped its service."""
    task = WEB[0]
    workspace = tmp_path / "ws"
    workspace.mkdir()
    run = Running(task, workspace, tmp_path / "done").wait_up()
    assert run.finish() == 0
    assert not run._up()

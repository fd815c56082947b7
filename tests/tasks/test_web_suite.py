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

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forge.sandboxes import services
from tasks.gui_play import play, settle
from tasks.loader import load_suite
from tasks.schema import GuiAction, Task
from tests.tasks.launched import Ahead, Launched, chromium_page, page_verdict

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


PATHS = {services.WEBAPPS: services.WEBAPPS_HOST}


@pytest.fixture(scope="module")
def launchers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ahead]:
    pool = Ahead(WEB, tmp_path_factory.mktemp("web"), PATHS)
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def page() -> Iterator[Any]:
    """One Chromium page at 640x480 for the module (each task navigates it afresh)."""
    yield from chromium_page(SCREEN)


@pytest.mark.browser
@pytest.mark.parametrize("task", WEB, ids=[t.id for t in WEB])
def test_solution_in_chromium_scores_one_and_nothing_scores_zero(
    page: Any, launchers: Ahead, task: Task
) -> None:
    run = launchers.take(task)
    workspace = run.workspace
    try:
        untouched = page_verdict(task.verifier, workspace)
        assert untouched.reward == 0.0, f"the untouched app already passes: {untouched.detail}"
        assert task.gui is not None and tuple(task.gui.screen) == SCREEN
        page.goto(run.url)
        settle(page)
        for step in task.solution:
            assert isinstance(step, GuiAction)
            play(page, step.model_dump(), *SCREEN)
    finally:
        assert run.finish() == 0, run.stderr
    verdict = page_verdict(task.verifier, workspace)
    assert verdict.reward == 1.0, verdict.detail
    assert not list(workspace.glob(".app/.state-*")), "a half-written state file was left"


@pytest.mark.browser
def test_launcher_stops_the_app(tmp_path: Path) -> None:
    """After the harness ends, the app's port is closed: the launcher stopped its service."""
    task = WEB[0]
    workspace = tmp_path / "ws"
    workspace.mkdir()
    run = Launched(task, workspace, tmp_path / "done", PATHS).wait_up()
    assert run.finish() == 0
    assert not run.up()

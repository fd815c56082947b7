"""The ``miniwob`` suite (``tasks/miniwob.py``): its generated instances are well formed, and,
in headless Chromium, each instance's service started under the real launcher shows the
utterance of its instruction (the seed fixes the episode), doing nothing scores 0 and the
reference solution played with Playwright's mouse and keyboard makes MiniWoB's own reward 1,
which the ``page_state`` verifier reads from the workspace.

One browser page for the module; each instance gets a fresh workspace and its own launcher with
the service on a free port (several test runs may share this host) and the read-only paths
``/opt/forge/webapps`` and ``/opt/forge/miniwob`` mapped to the host's, as an unisolated sandbox
maps them. The launcher's harness is a wait for a file outside the workspace.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from forge.harnesses.gui_actions import CHROMIUM_POLICY, chromium_policy
from forge.sandboxes import services
from tasks import miniwob
from tasks.gui_play import play, settle
from tasks.loader import load_suite
from tasks.schema import GuiAction, Task
from tasks.webapps.hosted import Hosted
from tasks.webapps.miniwob_server import EPISODE_MS
from tests.tasks.launched import Ahead, Launched, chromium_page, page_verdict

SUITE = miniwob.load()
# One seed of each MiniWoB task is played here (a representative slice, for the suite's time);
# scripts/miniwob_solutions.py replays every instance when it writes them, and
# `forge eval examples/oracle.yaml --harness browser --tasks miniwob` plays all 42.
PLAYED = [t for t in SUITE if t.id == next(u.id for u in SUITE if u.tags[1] == t.tags[1])]
try:
    HTML: str | None = services.miniwob_html()
except FileNotFoundError:  # pragma: no cover - scripts/setup.sh installs the package
    HTML = None
needs_html = pytest.mark.skipif(HTML is None, reason="the miniwob package is not installed")


def test_suite_shape() -> None:
    """At least 10 MiniWoB tasks, 3 seeds each, all GUI tasks of one served page each."""
    names = {t.tags[1] for t in SUITE}
    assert names == set(miniwob.TASKS) and len(names) >= 10
    for name in names:
        assert len([t for t in SUITE if t.tags[1] == name]) >= 3, name
    for t in SUITE:
        name, seed = t.tags[1], miniwob.seed_of(t)
        assert t.id == miniwob.instance_id(name, seed), t.id
        assert t.tags == ["miniwob", name]
        assert t.gui is not None and tuple(t.gui.screen) == miniwob.SCREEN
        assert t.gui.start_url == f"http://127.0.0.1:{miniwob.PORT}/"
        assert [s.command for s in t.services] == [miniwob.service_command(name, seed)]
        assert t.verifier == miniwob.VERIFIER
        assert t.solution and all(isinstance(s, GuiAction) for s in t.solution), t.id
        assert len(t.solution) < t.limits.max_turns
        assert t.instruction.strip() and "{" not in t.instruction


def test_build_and_write_round_trip(tmp_path: Path) -> None:
    steps = [{"action": "click", "x": 10, "y": 20}, {"action": "type", "text": "a: b"}]
    data = [
        miniwob.build_task("click-test", 5, "Click the button.", steps[:1]),
        miniwob.build_task("enter-text", 2, 'Enter "a: b" and press Submit.', steps),
    ]
    paths = miniwob.write_suite(data, tmp_path)
    assert sorted(p.name for p in paths) == ["click-test.yaml", "enter-text.yaml"]
    assert "&id" not in paths[1].read_text()  # no YAML anchors shared between tasks
    loaded = load_suite(tmp_path)
    assert [t.id for t in loaded] == ["click-test-s5", "enter-text-s2"]
    assert loaded[1].reference_script()["steps"] == steps
    assert miniwob.seed_of(loaded[1]) == 2
    with pytest.raises(ValueError, match="unknown MiniWoB task"):
        miniwob.build_task("book-flight", 0, "Book.", steps)
    with pytest.raises(ValueError, match="no instances"):
        miniwob.load("book-flight")


def test_generated_files_are_current(tmp_path: Path) -> None:
    """Each suite file is what write_suite makes of its tasks (no hand edits)."""
    files = sorted(miniwob.SUITE_DIR.glob("*.yaml"))
    assert sorted(p.stem for p in files) == sorted(miniwob.TASKS)
    for path in files:
        items = yaml.safe_load(path.read_text())["tasks"]
        (out,) = miniwob.write_suite(items, tmp_path)
        assert out.read_text() == path.read_text(), path


@needs_html
def test_the_page_is_kept_out_of_the_sandbox() -> None:
    """The state server runs in the HarnessPod (tasks.webapps.hosted), reading the package's
    HTML there: the sandbox gets neither it nor MiniWoB's HTML, only the relay and Chromium's
    policy."""
    task = SUITE[0]
    mounts = services.mounts(task)
    html = Path(str(HTML))
    assert services.MINIWOB not in mounts.values() and str(html) not in mounts
    assert mounts[chromium_policy(False)] == CHROMIUM_POLICY
    assert (html / "miniwob" / f"{task.tags[1]}.html").is_file()
    hosted = Hosted(task, armed=True)
    (port,) = hosted.pages
    relayed = hosted.relayed(task, "http://127.0.0.1:9/episodes/e/attempts/0")
    assert relayed.services[0].command == (
        f"python3 /opt/forge/webapps/relay.py --port {port} "
        f"--to http://127.0.0.1:9/episodes/e/attempts/0/page/{port}"
    )


PATHS = {services.WEBAPPS: services.WEBAPPS_HOST, services.MINIWOB: str(HTML)}


@pytest.fixture(scope="module")
def ahead(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ahead]:
    pool = Ahead(PLAYED, tmp_path_factory.mktemp("miniwob"), PATHS, depth=3)
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def page() -> Iterator[Any]:
    yield from chromium_page(miniwob.SCREEN)


def start_episode(page: Any, url: str) -> str:
    """Load the page and wait for its episode to start; the utterance shown."""
    page.goto(url)
    page.wait_for_function("document.body && document.body.dataset.episode === 'started'")
    page.wait_for_function("WOB_TASK_READY === true")
    settle(page)
    return str(page.evaluate("core.getUtterance()"))


def state(workspace: Path) -> dict[str, Any]:
    return json.loads((workspace / ".app" / "state.json").read_text())


@pytest.mark.browser
@needs_html
@pytest.mark.parametrize("task", PLAYED, ids=[t.id for t in PLAYED])
def test_solution_scores_one_and_nothing_zero(page: Any, ahead: Ahead, task: Task) -> None:
    run = ahead.take(task)
    workspace = run.workspace
    try:
        assert start_episode(page, run.url) == task.instruction
        assert page.evaluate("core.EPISODE_MAX_TIME") == EPISODE_MS  # not MiniWoB's 10-15 s
        untouched = page_verdict(task.verifier, workspace)
        assert untouched.reward == 0.0, untouched.detail
        for step in task.solution:
            assert isinstance(step, GuiAction)
            play(page, step.model_dump(), *miniwob.SCREEN)
    finally:
        assert run.finish() == 0, run.stderr
    verdict = page_verdict(task.verifier, workspace)
    assert verdict.reward == 1.0, verdict.detail
    assert state(workspace)["reports"] == 1


@pytest.mark.browser
@needs_html
def test_failure_is_final_and_reports_cannot_be_forged(page: Any, tmp_path: Path) -> None:
    """Clicking TWO in click-test-2 is MiniWoB's -1, so 0; reloading and then solving does not
    change it (the reloaded page carries no secret: its report is refused); a report without
    the page's secret is refused."""
    task = miniwob.load("click-test-2")[0]
    workspace = tmp_path / "ws"
    workspace.mkdir()
    run = Launched(task, workspace, tmp_path / "harness-done", PATHS).wait_up()
    try:
        start_episode(page, run.url)
        forged = json.dumps({"token": "x", "raw_reward": 1, "reward": 1}).encode()
        req = urllib.request.Request(run.url + "report", data=forged)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=5)
        assert refused.value.code == 403
        assert page.evaluate("document.documentElement.innerHTML.includes('/report')") is False
        box = page.locator("#subbtn2").bounding_box()
        page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        settle(page)
        assert state(workspace)["raw_reward"] == -1.0
        start_episode(page, run.url)
        for step in task.solution:
            assert isinstance(step, GuiAction)
            play(page, step.model_dump(), *miniwob.SCREEN)
    finally:
        assert run.finish() == 0, run.stderr
    got = state(workspace)
    assert got["raw_reward"] == -1.0 and got["reports"] == 1 and got["done"] is True
    assert got["pages"] == 2
    assert page_verdict(task.verifier, workspace).reward == 0.0

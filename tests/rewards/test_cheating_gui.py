"""Cheating agents score 0 on page tasks (``web``, ``miniwob``) and through the desktop's
Chromium; the oracle still scores 1.0.

Episodes take the real path: a HarnessPod (its proxy serving, no Ray: the scripted Policy runs
in this process), bubblewrap sandboxes, the services launcher, the page application kept by the
HarnessPod and reached through the sandbox's relay, real Chromium, ``run_verifier``. The
oracle is the task's reference solution played by the scripted model in the ``browser`` harness
(and the ``desktop`` harness); the cheats are ``gui_cheater.py`` and ``cheater.py`` in the
``command`` harness (a shell, as react's or the desktop's terminal), and, in the ``desktop``
harness, a model that opens DevTools and calls MiniWoB's ``core.endEpisode(1)``. A slice of
each suite keeps this short: ``forge eval examples/oracle.yaml --tasks web`` plays them all.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from actors.harness_pod import HarnessPod
from forge.harnesses.install import PACKAGES
from forge.sandboxes.bwrap import bwrap_works
from forge.types import Episode
from rewards.registry import build_verifier
from serve.policy import LocalHandle, Policy
from tasks.loader import load_suite
from tasks.schema import Task
from tasks.webapps.hosted import miniwob_html
from tests.rewards.test_cheating_agents import CHEATER

GUI_CHEATER = Path(__file__).with_name("gui_cheater.py")
WEB = {t.id: t for t in load_suite("web")}
WEB_SLICE = ["shop_cheapest_mug", "shop_cheapest_office_chair", "bank_pay_power_bill"]


def _miniwob() -> dict[str, Task]:
    try:
        miniwob_html()
    except FileNotFoundError:
        return {}
    from tasks import miniwob

    return {t.id: t for t in miniwob.load()}


MINIWOB = _miniwob()
MINIWOB_SLICE = ["click-button-s1", "enter-text-s1"]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.skipif(not bwrap_works(), reason="bubblewrap unavailable"),
    pytest.mark.skipif(not PACKAGES["browser"].installed(), reason="forge harness install browser"),
]
needs_miniwob = pytest.mark.skipif(not MINIWOB, reason="pip install --no-deps miniwob==1.1.0")


def expectations(task: Task) -> list[str]:
    """``--expect PATH=JSON`` for each equality the task's page_state verifier checks."""
    out = []
    for check in build_verifier(task.verifier).all_checks():  # type: ignore[union-attr]
        if check.op == "equals" and not check.path.endswith("length"):
            out += ["--expect", f"{check.path}={json.dumps(check.equals)}"]
    return out


def gui_cheat(task: Task) -> dict[str, Any]:
    assert task.gui is not None and task.gui.start_url
    argv = [task.gui.start_url, *expectations(task), "report", "proc", "file", "fake"]
    return {
        "name": "gui-cheater",
        "mounts": {str(GUI_CHEATER): "/opt/cheat/gui_cheater.py"},
        "command": ["python3", "/opt/cheat/gui_cheater.py", *argv],
    }


def shell_cheat() -> dict[str, Any]:
    return {
        "name": "cheater",
        "mounts": {str(CHEATER): "/opt/cheat/cheater.py"},
        "command": ["python3", "/opt/cheat/cheater.py", "--targets", ".app/state.json", "all"],
    }


def play(root: Path, jobs: list[tuple[Task, str, dict[str, Any]]]) -> list[Episode]:
    """Each (task, harness, options) as one episode on one HarnessPod whose Policy is the
    scripted model playing the task's reference solution."""

    async def run() -> list[Episode]:
        policy = LocalHandle(Policy({"engine": {"name": "scripted", "mode": "oracle"}}))
        pod = HarnessPod(policy, pod_id="gui-cheats", run="gui-cheats", sandbox={"root": str(root)})
        await pod.start()
        try:
            return [
                await pod.run_episode(task.model_dump(), harness, harness_options=options)
                for task, harness, options in jobs
            ]
        finally:
            await pod.stop()

    return asyncio.run(run())


def check(oracle: Episode, cheats: list[Episode]) -> None:
    assert (oracle.status, oracle.reward) == ("ok", 1.0), (
        oracle.failure,
        oracle.verifier_detail,
        oracle.harness_log[-2000:],
    )
    for cheat in cheats:
        assert (cheat.status, cheat.reward) == ("ok", 0.0), (
            cheat.failure,
            cheat.verifier_detail,
            cheat.harness_log[-2000:],
        )


@pytest.mark.parametrize("task_id", WEB_SLICE)
def test_web_cheats_score_zero_and_oracle_one(tmp_path: Path, task_id: str) -> None:
    task = WEB[task_id]
    oracle, cheat = play(
        tmp_path / "boxes", [(task, "browser", {}), (task, "command", gui_cheat(task))]
    )
    check(oracle, [cheat])


@needs_miniwob
@pytest.mark.parametrize("task_id", MINIWOB_SLICE)
def test_miniwob_cheats_score_zero_and_oracle_one(tmp_path: Path, task_id: str) -> None:
    task = MINIWOB[task_id]
    jobs = [(task, "browser", {}), (task, "command", gui_cheat(task))]
    if task_id == MINIWOB_SLICE[0]:
        jobs.append((task, "command", shell_cheat()))
    oracle, *cheats = play(tmp_path / "boxes", jobs)
    check(oracle, cheats)
    assert "report: token None: 403" in cheats[0].harness_log or cheats[0].final_answer


DEVTOOLS = [  # what a model does to open Chromium's console and end the episode as a success
    {"action": "press", "keys": "ctrl+shift+j"},
    {"action": "wait", "seconds": 2.0},
    {"action": "type", "text": "core.endEpisode(1, true)\n"},
    {"action": "wait", "seconds": 1.0},
    {"action": "press", "keys": "F12"},
    {"action": "wait", "seconds": 2.0},
    {"action": "type", "text": "core.endEpisode(1, true)\n"},
    {"action": "wait", "seconds": 1.0},
]
needs_desktop = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("Xvfb", "openbox", "xdotool", "import")),
    reason="the desktop harness's X programs are missing",
)


@needs_miniwob
@needs_desktop
def test_desktop_devtools_cheat_scores_zero_and_oracle_one(tmp_path: Path) -> None:
    """In the desktop harness Chromium's DevTools would run ``core.endEpisode(1)`` in the
    page; the sandbox's Chromium policy turns them off."""
    task = MINIWOB[MINIWOB_SLICE[0]]
    devtools = Task.model_validate(
        {**task.model_dump(), "solution": DEVTOOLS, "id": f"{task.id}-devtools"}
    )
    oracle, cheat = play(tmp_path / "boxes", [(task, "desktop", {}), (devtools, "desktop", {})])
    check(oracle, [cheat])
    assert len(cheat.turns) >= len(DEVTOOLS)  # every step was played

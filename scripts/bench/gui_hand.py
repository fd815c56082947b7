"""One by-hand GUI episode for scripts/bench/gui.py: the task's reference steps as a plain
script, with no Ray, proxy, policy or sandbox. The app's server (or Xvfb + openbox + xedit) is
started directly, Chromium driven through Playwright (or xdotool); per step a screenshot (PNG,
base64-encoded as an agent would send it), the action and the settle pause; then the task's
verifier on the files. The task comes as JSON on stdin; one JSON line of timings and reward
goes out::

    python scripts/bench/gui_hand.py browser|desktop [--settle-s 0.3] < TASK.json
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forge.sandboxes import services
from rewards.page_state import PageState
from rewards.registry import build_verifier, verify
from tasks.schema import GuiAction, Task


def steps_of(task: Task) -> list[dict[str, Any]]:
    return [s.model_dump() for s in task.solution if isinstance(s, GuiAction)]


@dataclass
class WorkspaceFiles:
    """The verifier's view of a host folder (it only reads files)."""

    root: Path

    def get_file(self, path: str) -> bytes | None:
        return (self.root / path).read_bytes() if (self.root / path).is_file() else None


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def seed(task: Task, ws: Path) -> None:
    for rel, content in task.files.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(content)


def web_service(task: Task, port: int) -> tuple[str, str, str]:
    """The task's one web service on ``port`` with the host's webapps folder: (command, start
    URL, ready URL)."""
    assert task.gui is not None and task.gui.start_url and len(task.services) == 1
    old = task.gui.start_url.rsplit(":", 1)[1].strip("/")
    svc = task.services[0]
    command = svc.command.replace(services.WEBAPPS, services.WEBAPPS_HOST)
    command = command.replace(f"--port {old}", f"--port {port}")
    return (
        command,
        task.gui.start_url.replace(f":{old}/", f":{port}/"),
        str(svc.ready).replace(f":{old}/", f":{port}/"),
    )


def wait_http(url: str, timeout_s: float = 30.0) -> None:
    end = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            if time.monotonic() > end:
                raise RuntimeError(f"{url} did not answer within {timeout_s:g}s") from None
            time.sleep(0.05)


def timed_steps(
    task: Task, shoot: Callable[[], bytes], act: Callable[[dict[str, Any]], object],
    settle: Callable[[], object], timing: dict[str, Any],
) -> None:  # fmt: skip
    """Play the task's steps, each: screenshot, base64, action, settle; timing gets the time
    playing began (``up``), ended (``acted``) and each step's four parts (``steps``)."""
    timing["up"] = time.perf_counter()
    for step in steps_of(task):
        t0 = time.perf_counter()
        png = shoot()
        t1 = time.perf_counter()
        base64.b64encode(png)
        t2 = time.perf_counter()
        act(step)
        t3 = time.perf_counter()
        settle()
        timing["steps"].append([t1 - t0, t2 - t1, t3 - t2, time.perf_counter() - t3])
    timing["acted"] = time.perf_counter()


def hand_browser(task: Task, ws: Path, settle_s: float, timing: dict[str, Any]) -> None:
    from playwright.sync_api import sync_playwright

    from forge.harnesses.gui_actions import CHROMIUM_ARGS, find_chromium
    from tasks.gui_play import play, settle

    width, height = task.gui.screen if task.gui else (640, 480)
    command, url, ready = web_service(task, free_port())
    server = subprocess.Popen(
        ["sh", "-c", command], cwd=ws, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        wait_http(ready)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=find_chromium(), headless=True, args=list(CHROMIUM_ARGS)
            )
            page = browser.new_page(viewport={"width": width, "height": height})
            page.goto(url, wait_until="load")
            settle(page)
            shoot = lambda: page.screenshot(type="png")  # noqa: E731
            act = lambda step: play(page, step, width, height)  # noqa: E731 (then until idle)
            timed_steps(task, shoot, act, lambda: time.sleep(settle_s), timing)
            browser.close()
    finally:
        with suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        server.wait()


def hand_desktop(task: Task, ws: Path, settle_s: float, timing: dict[str, Any]) -> None:
    from forge.harnesses.desktop_display import task_desktop

    with task_desktop(task, ws) as desk:  # Xvfb, openbox, the task's applications
        desk.settle_s = settle_s  # settled_screenshot: the pause, then until the screen is still
        act = lambda step: desk.perform(step["action"], step)  # noqa: E731
        timed_steps(task, desk.screenshot, act, desk.settled_screenshot, timing)


def workspace_reward(task: Task, ws: Path) -> float:
    """The task's verifier in place; a page task's on the state file its app, run on its own
    here, wrote (an episode's ``page_state`` reads the state the HarnessPod kept)."""
    verifier = build_verifier(task.verifier)
    if isinstance(verifier, PageState):
        state = ws / ".app" / "state.json"
        return verifier.verify_text(state.read_text() if state.is_file() else "").reward
    return verify(task.verifier, WorkspaceFiles(ws), task.answer).reward


def hand_main(kind: str, settle_s: float) -> None:
    """One by-hand episode of the task read as JSON from stdin; prints one JSON line of its
    timings and reward."""
    task = Task.model_validate_json(sys.stdin.read())
    t0 = time.perf_counter()
    timing: dict[str, Any] = {"steps": []}
    with tempfile.TemporaryDirectory(prefix="forge-gui-hand-") as tmp:
        ws = Path(tmp)
        seed(task, ws)
        (hand_browser if kind == "browser" else hand_desktop)(task, ws, settle_s, timing)
        reward = workspace_reward(task, ws)
    end = time.perf_counter()
    out = {"start": timing["up"] - t0, "steps": timing["steps"], "end": end - timing["acted"]}
    print(json.dumps({**out, "total": end - t0, "reward": reward}), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=["browser", "desktop"])
    parser.add_argument("--settle-s", type=float, default=0.3, help="pause after each action")
    args = parser.parse_args()
    hand_main(args.kind, args.settle_s)

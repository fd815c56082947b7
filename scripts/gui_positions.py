"""Where things are on a web app's page, in the 0..1000 coordinates of GUI solutions.

Starts ``tasks/webapps/server.py APP`` in a temporary workspace, renders its page in headless
Chromium at the task's screen size (640x480 by default) through Playwright, optionally plays
GUI steps first, and prints every labelled element (``data-label``: buttons, inputs, rows) with
its centre as ``x, y`` in 0..1000 (``forge.harnesses.gui_actions.from_pixels``)::

    .venv/bin/python scripts/gui_positions.py shop
    .venv/bin/python scripts/gui_positions.py shop --steps '[{"action": "click", "x":578,"y":129}]'
    .venv/bin/python scripts/gui_positions.py mail --seed my_seed.json --screenshot /tmp/mail.png
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from forge.harnesses.gui_actions import from_pixels, to_pixels  # noqa: E402

SERVER = ROOT / "tasks" / "webapps" / "server.py"
CHROMIUM = "/usr/bin/chromium"
KEYS = {"ctrl": "Control", "alt": "Alt", "shift": "Shift", "meta": "Meta", "cmd": "Meta"}
KEYS.update({"enter": "Enter", "tab": "Tab", "esc": "Escape", "escape": "Escape"})
KEYS.update({"backspace": "Backspace", "delete": "Delete", "space": " "})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(app: str, workspace: Path, port: int, seed: str | None = None) -> Iterator[str]:
    """The app's state server in ``workspace`` until the block ends; yields its base URL."""
    cmd = [sys.executable, str(SERVER), app, "--port", str(port), "--state", ".app/state.json"]
    if seed:
        cmd += ["--seed", seed]
    proc = subprocess.Popen(cmd, cwd=workspace, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}/"
    try:
        end = time.monotonic() + 15
        while True:
            try:
                urllib.request.urlopen(base + "health", timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > end:
                    raise RuntimeError(f"{app} server did not come up") from None
                time.sleep(0.05)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=5)


def settle(page: Any) -> None:
    """Until the app has no request in flight (its ``body[data-busy]`` is 0)."""
    page.wait_for_function("document.body && document.body.dataset.busy === '0'", timeout=10000)


def key_name(keys: str) -> str:
    """A GUI ``press`` (``ctrl+a``, ``Enter``) as Playwright's key name (``Control+a``)."""
    return "+".join(KEYS.get(k.lower(), k) for k in keys.split("+"))


def play(page: Any, step: dict[str, Any], width: int, height: int) -> None:
    """One GUI action with Playwright's mouse and keyboard, then wait for the app."""
    action = step["action"]
    if action in ("click", "double_click"):
        px, py = to_pixels(step["x"], step["y"], width, height)
        page.mouse.click(px, py, click_count=2 if action == "double_click" else 1)
    elif action == "type":
        page.keyboard.type(step["text"])
    elif action == "press":
        page.keyboard.press(key_name(step["keys"]))
    elif action == "scroll":
        px, py = to_pixels(step["x"], step["y"], width, height)
        page.mouse.move(px, py)
        page.mouse.wheel(step.get("dx", 0) * 100, step.get("dy", 0) * 100)
    elif action == "drag":
        px, py = to_pixels(step["x"], step["y"], width, height)
        qx, qy = to_pixels(step["x2"], step["y2"], width, height)
        page.mouse.move(px, py)
        page.mouse.down()
        page.mouse.move(qx, qy, steps=5)
        page.mouse.up()
    elif action == "goto":
        page.goto(step["url"])
    elif action == "back":
        page.go_back()
    elif action == "wait":
        page.wait_for_timeout(step.get("seconds", 1.0) * 1000)
    else:
        raise ValueError(f"unknown action {action!r}")
    settle(page)


def positions(page: Any, width: int, height: int) -> dict[str, tuple[int, int]]:
    """Every visible ``data-label`` element -> its centre in 0..1000 coordinates."""
    boxes = page.eval_on_selector_all(
        "[data-label]",
        """els => els.map(e => { const r = e.getBoundingClientRect();
            return [e.dataset.label, r.x, r.y, r.width, r.height, !e.disabled]; })""",
    )
    out: dict[str, tuple[int, int]] = {}
    for label, x, y, w, h, _enabled in boxes:
        if w > 0 and h > 0 and x + w / 2 < width and y + h / 2 < height:
            out[label] = from_pixels(x + w / 2, y + h / 2, width, height)
    return out


def new_page(browser: Any, width: int, height: int) -> Any:
    return browser.new_page(viewport={"width": width, "height": height}, device_scale_factor=1)


def launch_browser(playwright: Any) -> Any:
    return playwright.chromium.launch(
        executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--font-render-hinting=none"]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("app")
    parser.add_argument("--seed", help="seed JSON file (default: the app's own)")
    parser.add_argument("--steps", default="[]", help="GUI steps (JSON list) to play first")
    parser.add_argument("--screen", default="640x480")
    parser.add_argument("--screenshot", help="save a PNG of the page here")
    args = parser.parse_args()
    width, height = (int(v) for v in args.screen.split("x"))
    from playwright.sync_api import sync_playwright

    seed = str(Path(args.seed).resolve()) if args.seed else None
    with tempfile.TemporaryDirectory() as ws, serve(args.app, Path(ws), free_port(), seed) as url:
        with sync_playwright() as pw:
            browser = launch_browser(pw)
            page = new_page(browser, width, height)
            page.goto(url)
            settle(page)
            for step in json.loads(args.steps):
                play(page, step, width, height)
            for label, (x, y) in positions(page, width, height).items():
                print(f"{x:4d} {y:4d}  {label}")
            if args.screenshot:
                page.screenshot(path=args.screenshot)
            browser.close()
        print("state:", (Path(ws) / ".app" / "state.json").read_text().replace("\n", ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())

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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tasks.gui_play import launch_browser, new_page, play, positions, settle  # noqa: E402

SERVER = ROOT / "tasks" / "webapps" / "server.py"


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

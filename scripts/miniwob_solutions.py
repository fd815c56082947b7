"""Generate the ``miniwob`` suite (``tasks/data/miniwob/*.yaml``, see ``tasks/miniwob.py``):
for each MiniWoB task of ``tasks.miniwob.TASKS`` and seeds from 0 up, open the seeded page in
headless Chromium, read its utterance, compute a reference solution from its DOM (GUI steps at
element centres, in 0..1000 coordinates of the 640x480 viewport), play the solution on a fresh
load of the same seed and keep the instance only when MiniWoB's own reward is 1, until
``--seeds`` instances per task are kept. The page is served by the real state server, in this
process, from the installed package's HTML::

    .venv/bin/python scripts/miniwob_solutions.py [--seeds 3] [--task click-button ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from forge.harnesses.gui_actions import from_pixels
from forge.sandboxes.services import miniwob_html
from tasks import miniwob
from tasks.gui_play import launch_browser, new_page, play
from tasks.webapps.miniwob_server import Episode, serve

# Each solver: a JS function body returning steps, after PRELUDE (Q() is the utterance, A(sel)
# the elements matching sel): ['click', element] (its centre), ['type', text], ['press', keys].
PRELUDE = """
const Q = () => core.getUtterance();
const A = (sel) => [...document.querySelectorAll(sel)];
const T = (el) => el.textContent.trim();
const byText = (sel, text) => A(sel).find(e => T(e) === text);
const quoted = () => Q().match(/"([^"]*)"/)[1];
"""
SOLVERS: dict[str, str] = {
    "click-button": "return [['click', byText('#area button', quoted())]];",
    "click-link": "return [['click', byText('#area .alink', quoted())]];",
    "click-dialog": "return [['click', A('button.ui-dialog-titlebar-close')[0]]];",
    "click-test": "return [['click', A('#subbtn')[0]]];",
    "click-test-2": "return [['click', A('#subbtn')[0]]];",
    "click-button-sequence": "return [['click', A('#subbtn')[0]], ['click', A('#subbtn2')[0]]];",
    "focus-text": "return [['click', A('#tt')[0]]];",
    "click-tab": """
        const n = Q().match(/Tab #(\\d)/)[1];
        return [['click', A('#area ul a[href="#tabs-' + n + '"]')[0]]];""",
    "click-checkboxes": """
        const m = Q().match(/^Select (.*) and click Submit\\.$/)[1];
        const names = m === 'nothing' ? [] : m.split(', ');
        const steps = A('#boxes label').filter(l => names.includes(T(l)))
          .map(l => ['click', l.querySelector('input')]);
        return steps.concat([['click', A('#subbtn')[0]]]);""",
    "click-option": """
        const name = Q().match(/^Select (.*) and click Submit\\.$/)[1];
        const label = A('#boxes label').find(l => T(l) === name);
        return [['click', label.querySelector('input')], ['click', A('#subbtn')[0]]];""",
    "choose-list": """
        const name = Q().match(/^Select (.*) from the list and click Submit\\.$/)[1];
        return [['click', A('#options')[0]], ['type', name], ['press', 'Enter'],
                ['click', byText('#area button', 'Submit')]];""",
    "enter-text": """
        return [['click', A('#tt')[0]], ['type', A('#query .bold')[0].textContent],
                ['click', A('#subbtn')[0]]];""",
    "enter-password": """
        const pw = A('#query .bold')[0].textContent;
        return [['click', A('#password')[0]], ['type', pw], ['click', A('#verify')[0]],
                ['type', pw], ['click', A('#subbtn')[0]]];""",
    "login-user": """
        const m = Q().match(/username "([^"]*)" and the password "([^"]*)"/);
        return [['click', A('#username')[0]], ['type', m[1]], ['click', A('#password')[0]],
                ['type', m[2]], ['click', A('#subbtn')[0]]];""",
}
RUN = """() => {%s
const steps = (() => {%s})();
return steps.map(([action, arg]) => {
  if (action !== 'click') { return [action, arg]; }
  const r = arg.getBoundingClientRect();
  return [action, [r.x + r.width / 2, r.y + r.height / 2]];
});
}"""


class Served:
    """The state server of one instance, in a thread, with its state in a temporary folder."""

    def __init__(self, name: str, seed: int, html: Path) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="miniwob-")
        self.state = Path(self.dir.name) / "state.json"
        self.server = serve(Episode(name, seed, html, self.state, zoom=miniwob.ZOOM))
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"

    def result(self) -> dict[str, Any]:
        return json.loads(self.state.read_text())

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.dir.cleanup()


def open_episode(page: Any, url: str) -> str:
    """Load the page, wait for its episode to start; the utterance."""
    page.goto(url)
    page.wait_for_function("document.body && document.body.dataset.episode === 'started'")
    page.wait_for_function("WOB_TASK_READY === true")
    return str(page.evaluate("core.getUtterance()"))


def solve(page: Any, name: str) -> list[dict[str, Any]]:
    """The reference solution of the loaded page, as GuiAction mappings."""
    width, height = miniwob.SCREEN
    raw = page.evaluate(RUN % (PRELUDE, SOLVERS[name]))
    steps: list[dict[str, Any]] = []
    for action, arg in raw:
        if action == "click":
            if not (0 <= arg[0] < width and 0 <= arg[1] < height):
                raise ValueError(f"a click outside the viewport at {arg}")
            x, y = from_pixels(arg[0], arg[1], width, height)
            steps.append({"action": "click", "x": x, "y": y})
        elif action == "type":
            steps.append({"action": "type", "text": arg})
        else:
            steps.append({"action": "press", "keys": arg})
    return steps


def instance(page: Any, name: str, seed: int, html: Path) -> dict[str, Any] | None:
    """The task data of (name, seed) when its solution earns reward 1; else None."""
    served = Served(name, seed, html)
    try:
        utterance = open_episode(page, served.url)
        try:
            steps = solve(page, name)
        except Exception as e:  # a seed the solver cannot handle (an overlapped button...)
            print(f"  {name} seed {seed}: no solution ({str(e).splitlines()[0]})")
            return None
        if open_episode(page, served.url) != utterance:
            raise SystemExit(f"{name} seed {seed}: the utterance changed on reload")
        for step in steps:
            play(page, step, *miniwob.SCREEN)
        page.wait_for_timeout(100)
        result = served.result()
    finally:
        served.close()
    if result["raw_reward"] != 1:
        print(f"  {name} seed {seed}: solution scored {result['raw_reward']}")
        return None
    return miniwob.build_task(name, seed, utterance, steps)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seeds", type=int, default=3, help="instances per task")
    parser.add_argument("--task", action="append", choices=miniwob.TASKS, help="default: all")
    parser.add_argument("--out", type=Path, default=miniwob.SUITE_DIR)
    args = parser.parse_args(argv)
    html = Path(miniwob_html())
    from playwright.sync_api import sync_playwright

    instances = []
    with sync_playwright() as pw:
        browser = launch_browser(pw)
        page = new_page(browser, *miniwob.SCREEN)
        for name in args.task or miniwob.TASKS:
            kept = 0
            for seed in range(10 * args.seeds):
                data = instance(page, name, seed, html)
                if data is not None:
                    instances.append(data)
                    kept += 1
                    if kept == args.seeds:
                        break
            print(f"{name}: {kept} instances")
            if kept < args.seeds:
                raise SystemExit(f"{name}: only {kept} seeds solved")
        browser.close()
    for path in miniwob.write_suite(instances, args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

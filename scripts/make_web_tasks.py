"""Write the ``web`` suite (``tasks/data/web/*.yaml``) from ``scripts/web_task_defs.py``.

Each task's reference solution is written there by element (``("click", "add:Blue mug")``);
this script renders the app in headless Chromium at 640x480 (``scripts/gui_positions.py``),
plays the steps one by one, and turns each click into the element's centre in 0..1000
coordinates on the page as it is at that moment. After the last step it checks the task's
``page_state`` verifier against the state the app recorded and refuses to write a task whose
solution does not score 1::

    .venv/bin/python scripts/make_web_tasks.py            # every task
    .venv/bin/python scripts/make_web_tasks.py shop_      # those whose id starts so
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gui_positions import ROOT, free_port, serve
from web_task_defs import TASKS

from rewards.registry import build_verifier
from tasks.gui_play import launch_browser, new_page, play, positions, settle

OUT = ROOT / "tasks" / "data" / "web"
PORTS = {"shop": 8765, "mail": 8766, "booking": 8767, "calendar": 8768, "bank": 8769}
W, H = 640, 480


class _Dumper(yaml.SafeDumper):
    """Multi-line strings as literal blocks (in block-style mappings)."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def _dict(dumper: yaml.SafeDumper, value: dict[str, Any]) -> yaml.Node:
    multiline = any(isinstance(v, str) and "\n" in v for v in value.values())
    return dumper.represent_mapping(
        "tag:yaml.org,2002:map", value, flow_style=False if multiline else None
    )


_Dumper.add_representer(str, _str)
_Dumper.add_representer(dict, _dict)


def seed_json(seed: dict[str, Any]) -> str:
    """The seed as JSON, one list item a line."""
    lines = ["{"]
    for i, (key, value) in enumerate(seed.items()):
        end = "," if i < len(seed) - 1 else ""
        if isinstance(value, list):
            items = ",\n".join(f"  {json.dumps(v)}" for v in value)
            lines.append(f" {json.dumps(key)}: [\n{items}\n ]{end}")
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value)}{end}")
    return "\n".join(lines) + "\n}\n"


def verifier(t: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": "page_state", "expect": t["expect"]}
    if t.get("checks"):
        spec["checks"] = t["checks"]
    return spec


def build(browser: Any, t: dict[str, Any]) -> dict[str, Any]:
    """Play ``t``'s steps in the real page; the task as data, its clicks in 0..1000."""
    app, port = t["app"], PORTS[t["app"]]
    files: dict[str, str] = {}
    command = f"python3 /opt/forge/webapps/server.py {app} --port {port} --state .app/state.json"
    if t.get("seed"):
        files[".app/seed.json"] = seed_json(t["seed"])
        command += " --seed .app/seed.json"
    solution: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        for rel, text in files.items():
            (ws / rel).parent.mkdir(parents=True, exist_ok=True)
            (ws / rel).write_text(text)
        seed = str(ws / ".app/seed.json") if files else None
        with serve(app, ws, free_port(), seed) as url:
            page = new_page(browser, W, H)
            page.goto(url)
            settle(page)
            for kind, arg, *more in t["steps"]:
                if kind in ("click", "scroll"):
                    where = positions(page, W, H)
                    if arg not in where:
                        raise SystemExit(f"{t['id']}: no element {arg!r} on the page")
                    x, y = where[arg]
                    step: dict[str, Any] = {"action": kind, "x": x, "y": y}
                    if kind == "scroll":
                        step["dy"] = more[0]
                elif kind == "type":
                    step = {"action": "type", "text": arg}
                else:
                    step = {"action": "press", "keys": arg}
                play(page, step, W, H)
                solution.append(step)
            page.close()
        # the state file the app run on its own wrote (in an episode: the HarnessPod's state)
        state = ws / ".app" / "state.json"
        verdict = build_verifier(verifier(t)).verify_text(state.read_text())  # type: ignore[attr-defined]
        if verdict.reward != 1.0:
            raise SystemExit(f"{t['id']}: the solution scores {verdict.reward}: {verdict.detail}")
    task: dict[str, Any] = {
        "id": t["id"],
        "instruction": t["instruction"],
        "gui": {"start_url": f"http://127.0.0.1:{port}/", "screen": [W, H]},
        "services": [{"command": command, "ready": f"http://127.0.0.1:{port}/health"}],
        "verifier": verifier(t),
        "solution": solution,
        "limits": {"max_turns": len(solution) + 8, "timeout_s": 300},
        "tags": ["web", app],
    }
    if files:
        task["files"] = files
    return task


def main() -> int:
    from playwright.sync_api import sync_playwright

    prefix = sys.argv[1] if len(sys.argv) > 1 else ""
    OUT.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = launch_browser(pw)
        for t in TASKS:
            if not t["id"].startswith(prefix):
                continue
            task = build(browser, t)
            text = yaml.dump(
                task, Dumper=_Dumper, sort_keys=False, default_flow_style=None, width=100
            )
            (OUT / f"{t['id']}.yaml").write_text(text)
            print(f"{t['id']}: {len(task['solution'])} steps")
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

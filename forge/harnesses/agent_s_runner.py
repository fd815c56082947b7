"""Runs Agent S3 (PyPI ``gui-agents``, unmodified) for one attempt: the "agent-s" harness program,
inside the sandbox with the package's folder on PYTHONPATH, on the task's X display.

Agent S3 is a worker model that writes one ``agent.click("the Save button")``-style call per
step plus a grounding model that turns each element description into a point on the
screenshot; both are pointed at the attempt's proxy (the same model by default, asked in two
roles). The loop is that of the package's own ``agent_s`` command (a screenshot,
``AgentS3.predict``, ``exec`` of the pyautogui code it returns) without its pause handler,
permission dialog, log files and fixed 15 steps.

Configuration from the environment: OPENAI_BASE_URL, OPENAI_API_KEY, FORGE_MODEL, FORGE_MAX_TURNS,
DISPLAY, optional FORGE_TEMPERATURE, FORGE_GROUND_MODEL (default FORGE_MODEL),
FORGE_GROUNDING_SIZE ("WxH": the frame of the grounding model's coordinates; default
1000x1000, the 0..1000 grid of the other GUI harnesses), FORGE_REFLECTION (1: Agent S3's
reflection call each step after the first), FORGE_SETTLE_S (pause after an action, default 0.5).
The instruction is argv[1]. The last stdout line is JSON: {"final_answer", "turns", "stop",
"actions", "errors"} (stop: done | fail | max_turns | error; final_answer is "" on done: Agent
S's ``done()`` carries no answer).
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
import time
from typing import Any


def grounding_size(env: dict[str, str]) -> tuple[int, int]:
    raw = env.get("FORGE_GROUNDING_SIZE") or "1000x1000"
    try:
        w, h = (int(v) for v in raw.lower().split("x"))
    except ValueError:
        raise ValueError(f"FORGE_GROUNDING_SIZE: {raw!r} is not WxH") from None
    if w <= 0 or h <= 0:
        raise ValueError(f"FORGE_GROUNDING_SIZE: {raw!r} must be positive")
    return w, h


def build_agent(env: dict[str, str], width: int, height: int) -> Any:
    from gui_agents.s3.agents.agent_s import AgentS3
    from gui_agents.s3.agents.grounding import OSWorldACI

    model = env.get("FORGE_MODEL", "policy")
    worker: dict[str, Any] = {
        "engine_type": "openai",
        "model": model,
        "base_url": env["OPENAI_BASE_URL"],
        "api_key": env.get("OPENAI_API_KEY") or "none",
        "temperature": float(env["FORGE_TEMPERATURE"]) if env.get("FORGE_TEMPERATURE") else None,
    }
    gw, gh = grounding_size(env)
    grounding = {
        **worker,
        "model": env.get("FORGE_GROUND_MODEL") or model,
        "grounding_width": gw,
        "grounding_height": gh,
    }
    aci = OSWorldACI(
        env=None,  # no local coding environment: the agent acts through the GUI only
        platform="linux",
        engine_params_for_generation=worker,
        engine_params_for_grounding=grounding,
        width=width,
        height=height,
    )
    return AgentS3(
        worker,
        aci,
        platform="linux",
        enable_reflection=env.get("FORGE_REFLECTION", "1") == "1",
    )


def screenshot_png() -> bytes:
    """The whole screen as PNG, by Pillow's own X11 grab (pyautogui's screenshot needs a
    scrot or gnome-screenshot binary; the pixels are the same)."""
    from PIL import ImageGrab

    buf = io.BytesIO()
    ImageGrab.grab(xdisplay=os.environ["DISPLAY"]).save(buf, format="PNG")
    return buf.getvalue()


def without_mouseinfo() -> None:
    """pyautogui imports MouseInfo (a window for people reading pointer positions), which calls
    sys.exit when tkinter is missing, as in Debian's python3 without python3-tk; pyautogui
    goes on without it when the import fails, so make it fail."""
    try:
        import tkinter  # noqa: F401
    except ImportError:
        sys.modules["mouseinfo"] = None  # type: ignore[assignment]


def run(instruction: str, env: dict[str, str]) -> dict[str, object]:
    without_mouseinfo()
    import pyautogui

    width, height = pyautogui.size()
    agent = build_agent(env, width, height)
    settle = float(env.get("FORGE_SETTLE_S") or 0.5)
    max_turns = int(env.get("FORGE_MAX_TURNS", "15"))
    turns = actions = errors = 0
    stop = "max_turns"
    for _ in range(max_turns):
        turns += 1
        _, codes = agent.predict(
            instruction=instruction, observation={"screenshot": screenshot_png()}
        )
        code = (codes[0] if codes else "").strip()
        if code in ("DONE", "FAIL"):
            stop = code.lower()
            break
        if code == "NEXT":
            continue
        try:
            exec(code, {})  # the pyautogui code Agent S built, as its own command runs it
            actions += 1
        except Exception as e:  # a bad key name, a fail-safe corner: the episode goes on
            errors += 1
            print(f"agent_s_runner: action failed: {type(e).__name__}: {e}", file=sys.stderr)
        time.sleep(settle)
    answer = "" if stop == "done" else None
    return {
        "final_answer": answer,
        "turns": turns,
        "stop": stop,
        "actions": actions,
        "errors": errors,
    }


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[1]:
        print("agent_s_runner: no instruction (argv[1])", file=sys.stderr)
        return 2
    if not os.environ.get("DISPLAY"):
        print("agent_s_runner: DISPLAY is not set (the task needs gui.display)", file=sys.stderr)
        sys.stdout.write(json.dumps({"final_answer": None, "turns": 0, "stop": "error"}) + "\n")
        return 4
    scratch = tempfile.mkdtemp(prefix="agent-s-")
    os.chdir(scratch)  # whatever the package writes stays out of the workspace
    home_auth = os.path.expanduser("~/.Xauthority")
    if not os.environ.get("XAUTHORITY") and not os.path.exists(home_auth):
        # python-xlib (under pyautogui) refuses to connect without an authority file, even to
        # an Xvfb that asks for none: an empty one will do
        open(os.path.join(scratch, "Xauthority"), "w").close()
        os.environ["XAUTHORITY"] = os.path.join(scratch, "Xauthority")
    try:
        record = run(argv[1], dict(os.environ))
        code = 0
    except Exception as e:  # Agent S's own failure (its model calls, its set-up, the display)
        print(f"agent_s_runner: {type(e).__name__}: {e}", file=sys.stderr)
        record, code = {"final_answer": None, "turns": 0, "stop": "error"}, 4
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""Runs the Cua agent (PyPI ``cua-agent``, unmodified) for one attempt: the "cua" harness program,
inside the sandbox with the package's folder on PYTHONPATH, on the task's X display.

``ComputerAgent`` runs the agent loop that Cua's own registry gives for the name in
FORGE_CUA_LOOP (``ui-tars`` by default: its UI-TARS loop, plain chat completions with text
actions such as ``click(start_box='(x,y)')`` in a 0..1000 frame), registered with Cua's
``register_agent`` for the policy's own model name (the proxy serves no other), which goes
through litellm's ``hosted_vllm`` provider to ``api_base``, the attempt's proxy. Its
computer is Cua's documented custom computer: a dict of functions, here the desktop harness's
hands and eyes (xdotool, ImageMagick's ``import``).

Configuration from the environment: OPENAI_BASE_URL, OPENAI_API_KEY, FORGE_MAX_TURNS, DISPLAY,
FORGE_MODEL, optional FORGE_CUA_LOOP, FORGE_TEMPERATURE, FORGE_KEEP_SCREENSHOTS (Cua's
``only_n_most_recent_images``). The instruction is argv[1]. The last stdout line is JSON:
{"final_answer", "turns", "stop", "actions"} (stop: done | max_turns | unparsed | error).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import subprocess
import sys
import time
from typing import Any

os.environ.setdefault("CUA_TELEMETRY", "0")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of litellm's price list
BUTTONS = {"left": 1, "middle": 2, "right": 3, "wheel": 2}
KEYS = {"enter": "Return", "return": "Return", "esc": "Escape", "escape": "Escape",
        "backspace": "BackSpace", "tab": "Tab", "space": "space", "delete": "Delete",
        "ctrl": "ctrl", "control": "ctrl", "alt": "alt", "shift": "shift", "cmd": "super",
        "meta": "super", "win": "super", "up": "Up", "down": "Down", "left": "Left",
        "right": "Right", "arrowup": "Up", "arrowdown": "Down", "arrowleft": "Left",
        "arrowright": "Right", "pageup": "Prior", "pagedown": "Next", "home": "Home",
        "end": "End"}  # fmt: skip


class XComputer:
    """The functions of Cua's custom computer, acting on ``DISPLAY`` with xdotool."""

    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.actions = 0

    def _x(self, *args: object) -> None:
        subprocess.run(["xdotool", *map(str, args)], check=True, capture_output=True)

    def _act(self, *args: object) -> None:
        self.actions += 1
        self._x(*args)
        time.sleep(0.2)

    def screenshot(self) -> str:
        png = subprocess.run(
            ["import", "-window", "root", "png:-"], check=True, capture_output=True
        )
        return base64.b64encode(png.stdout).decode()

    def click(self, x: int, y: int, button: str = "left") -> None:
        self._act("mousemove", x, y, "click", BUTTONS.get(button, 1))

    def double_click(self, x: int, y: int) -> None:
        self._act("mousemove", x, y, "click", "--repeat", 2, 1)

    def type(self, text: str) -> None:
        self._act("type", "--delay", 20, "--", text)

    def keypress(self, keys: list[str] | str) -> None:
        names = [keys] if isinstance(keys, str) else list(keys)
        self._act("key", "+".join(KEYS.get(k.lower(), k) for k in names))

    def scroll(self, x: int, y: int, scroll_x: int, scroll_y: int) -> None:
        steps = [
            (4 if scroll_y < 0 else 5, abs(scroll_y)),
            (6 if scroll_x < 0 else 7, abs(scroll_x)),
        ]
        for button, amount in steps:
            for _ in range(max(1, amount // 100) if amount else 0):
                self._x("mousemove", x, y, "click", button)
        self.actions += 1

    def move(self, x: int, y: int) -> None:
        self._act("mousemove", x, y)

    def drag(self, path: list[dict[str, int]]) -> None:
        if not path:
            return
        self._x("mousemove", path[0]["x"], path[0]["y"], "mousedown", 1)
        for p in path[1:]:
            self._x("mousemove", p["x"], p["y"])
        self._act("mouseup", 1)

    def wait(self, ms: int = 1000) -> None:
        time.sleep(min(ms, 5000) / 1000)

    def functions(self) -> dict[str, Any]:
        names = ("screenshot", "click", "double_click", "type", "keypress", "scroll", "move",
                 "drag", "wait")  # fmt: skip
        return {
            **{n: getattr(self, n) for n in names},
            "dimensions": (self.width, self.height),
            "environment": "linux",
        }


def screen_size(env: dict[str, str]) -> tuple[int, int]:
    if env.get("FORGE_SCREEN"):
        w, h = (int(v) for v in env["FORGE_SCREEN"].split("x"))
        return w, h
    out = subprocess.run(["xdotool", "getdisplaygeometry"], check=True, capture_output=True)
    w, h = (int(v) for v in out.stdout.split())
    return w, h


async def run(instruction: str, env: dict[str, str]) -> dict[str, object]:
    from cua_agent import ComputerAgent, register_agent
    from cua_agent.decorators import find_agent_config

    loop_name = env.get("FORGE_CUA_LOOP") or "ui-tars"
    config = find_agent_config(loop_name)
    if config is None:
        raise ValueError(f"FORGE_CUA_LOOP: Cua has no agent loop for {loop_name!r}")
    model = f"hosted_vllm/{env.get('FORGE_MODEL', 'policy')}"
    # the loop for exactly this model string, first: Cua's public way to add a model to a loop
    register_agent(models=f"^{re.escape(model)}$", priority=1000)(config.agent_class)
    computer = XComputer(*screen_size(env))
    options: dict[str, Any] = {}
    if env.get("FORGE_TEMPERATURE"):
        options["temperature"] = float(env["FORGE_TEMPERATURE"])
    if env.get("FORGE_KEEP_SCREENSHOTS"):
        options["only_n_most_recent_images"] = int(env["FORGE_KEEP_SCREENSHOTS"])
    agent = ComputerAgent(
        model=model,
        tools=[computer.functions()],
        api_base=env["OPENAI_BASE_URL"],
        api_key=env.get("OPENAI_API_KEY") or "none",
        telemetry_enabled=False,
        max_retries=1,
        **options,
    )
    max_turns = int(env.get("FORGE_MAX_TURNS", "15"))
    turns, stop, answer = 0, "done", None
    # ComputerAgent.run loops by itself (model call, then its actions) until a reply has no
    # action; each model reply comes out as one result, each action's screenshot as another
    try:
        async for result in agent.run([{"role": "user", "content": instruction}]):
            items = result.get("output", [])
            if any(i.get("type") == "computer_call_output" for i in items):
                continue
            turns += 1
            for item in items:
                if item.get("type") == "message" and item.get("role") == "assistant":
                    texts = [c.get("text", "") for c in item.get("content") or []]
                    answer = "".join(t for t in texts if t) or answer
            if turns >= max_turns and any(i.get("type") == "computer_call" for i in items):
                stop = "max_turns"
                break
    except ValueError as e:  # a reply the loop cannot parse (UI-TARS: no "Action: ..."): Cua
        turns += 1  # raises; that is the model's doing, and it ends the episode like a stop
        stop = "unparsed"
        print(f"cua_runner: the model's reply was not an action: {e}", file=sys.stderr)
    return {"final_answer": answer if stop == "done" else None, "turns": turns, "stop": stop,
            "actions": computer.actions}  # fmt: skip


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[1]:
        print("cua_runner: no instruction (argv[1])", file=sys.stderr)
        return 2
    if not os.environ.get("DISPLAY"):
        print("cua_runner: DISPLAY is not set (the task needs gui.display)", file=sys.stderr)
        sys.stdout.write(json.dumps({"final_answer": None, "turns": 0, "stop": "error"}) + "\n")
        return 4
    try:
        record = asyncio.run(run(argv[1], dict(os.environ)))
        code = 0
    except Exception as e:  # Cua's own failure (its model calls, its set-up, the display)
        print(f"cua_runner: {type(e).__name__}: {e}", file=sys.stderr)
        record, code = {"final_answer": None, "turns": 0, "stop": "error"}, 4
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))

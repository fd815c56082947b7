"""The oracle's browser-use mode: browser-use's AgentOutput JSON for each reference step, the
progress read back from browser-use's agent history, and (where browser-use is installed) the
replies validated by browser-use's own AgentOutput model."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zlib
from typing import Any

import pytest

from forge.harnesses.gui_actions import to_pixels
from forge.harnesses.install import PACKAGES
from forge.types import ChatRequest, ImagePart, Message, TextPart, Tool, image_part
from serve.engines.scripted import NOOP_ANSWER, next_action
from serve.engines.scripted_browser_use import (
    DEFAULT_SCREEN,
    browser_use_reply,
    is_browser_use,
    screen_size,
    step_actions,
)

MAIL_STEPS: list[dict[str, Any]] = [
    {"action": "click", "x": 199, "y": 146},
    {"action": "click", "x": 495, "y": 898},
    {"action": "type", "text": "Yes, see you at 12:30."},
    {"action": "press", "keys": "Enter"},
]
SCRIPT = {"task_id": "t", "steps": MAIL_STEPS, "answer": "sent"}


def png(width: int, height: int) -> bytes:
    """A real (one-colour) PNG of the given size."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + b"\xff" * (3 * width) for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def state_message(history: list[str], shot: bytes | None) -> list[Message]:
    """browser-use's user turn: the request, the agent history, the browser state, a shot."""
    items = "\n".join(["Agent initialized", "<step>\nResult\nNavigated to http://x/", *history])
    text = (
        "<user_request>\nReply to Ana.\n</user_request>\n\n"
        f"<agent_history>\n{items}\n</agent_history>\n"
        "<browser_state>\nInteractive elements:\n[2]<button />\n\tSend\n</browser_state>"
    )
    out = [Message("user", text)]
    if shot is not None:
        image = image_part(shot, "image/png")
        out.append(Message("user", "Current screenshot:", parts=[TextPart("x"), image]))
    return out


def history_item(reply: dict[str, Any]) -> str:
    """What browser-use writes into <agent_history> for one of its model's replies."""
    parts = [reply["evaluation_previous_goal"], reply["memory"], reply["next_goal"]]
    return "<step>\n" + "\n".join(p for p in parts if p) + "\nResult\nok"


def play(script: dict[str, Any] | None, mode: str = "oracle", shot: bytes | None = None):
    """Drive the oracle as browser-use would until it answers ``done``; its action lists."""
    history: list[str] = []
    actions: list[list[dict[str, Any]]] = []
    for _ in range(12):
        messages = [Message("system", "You are an AI agent ..."), *state_message(history, shot)]
        messages.append(Message("user", "PLANNING NUDGE: make a plan."))  # a later nudge
        chat = ChatRequest(messages=messages, script=script)
        reply = json.loads(next_action(chat, mode))
        actions.append(reply["action"])
        if "done" in reply["action"][0]:
            return actions
        history.append(history_item(reply))
    raise AssertionError(f"no done after 12 turns: {actions}")


def test_recognises_browser_use_requests_only() -> None:
    assert is_browser_use(ChatRequest(messages=state_message([], None)))
    tools = [Tool("click")]
    assert not is_browser_use(ChatRequest(messages=state_message([], None), tools=tools))
    assert not is_browser_use(ChatRequest(messages=[Message("user", "<browser_state>")]))


def test_plays_the_reference_then_done_with_the_answer() -> None:
    actions = play(SCRIPT, shot=png(640, 480))
    x1, y1 = to_pixels(199, 146, 640, 480)
    x2, y2 = to_pixels(495, 898, 640, 480)
    assert actions == [
        [{"click": {"coordinate_x": x1, "coordinate_y": y1}}],
        [{"click": {"coordinate_x": x2, "coordinate_y": y2}}],
        [{"send_keys": {"keys": "Yes, see you at 12:30."}}],
        [{"send_keys": {"keys": "Enter"}}],
        [{"done": {"text": "sent", "success": True, "files_to_display": []}}],
    ]


def test_clicks_scale_to_the_screenshot_or_the_default_screen() -> None:
    chat = ChatRequest(messages=state_message([], png(800, 600)))
    assert screen_size(chat) == (800, 600)
    assert screen_size(ChatRequest(messages=state_message([], None))) == DEFAULT_SCREEN
    [click] = step_actions({"action": "click", "x": 1000, "y": 500}, (800, 600)) or []
    assert click == {"click": {"coordinate_x": 799, "coordinate_y": 300}}
    bare = ImagePart(mime="image/png", sha256="0" * 64)  # a reference without pixels
    chat = ChatRequest(messages=[Message("user", "x", parts=[bare])])
    assert screen_size(chat) == DEFAULT_SCREEN


@pytest.mark.parametrize("height", [480, 600, 777])
def test_scroll_notches_become_the_same_pixels(height: int) -> None:
    [down] = step_actions({"action": "scroll", "x": 5, "y": 5, "dy": 2}, (640, height)) or []
    assert down["scroll"]["down"] is True
    assert int(down["scroll"]["pages"] * height) == 200  # browser-use truncates pages * height
    [up] = step_actions({"action": "scroll", "x": 5, "y": 5, "dy": -7}, (640, height)) or []
    pages = up["scroll"]["pages"]
    assert up["scroll"]["down"] is False
    assert int(pages) * height + int((pages - int(pages)) * height) == 700
    assert step_actions({"action": "scroll", "x": 5, "y": 5, "dx": 3}, (640, height)) is None


def test_text_that_reads_as_a_key_is_typed_one_character_at_a_time() -> None:
    def keys(*texts: str) -> list[dict[str, Any]]:
        return [{"send_keys": {"keys": t}} for t in texts]

    assert step_actions({"action": "type", "text": "End"}, DEFAULT_SCREEN) == keys("E", "nd")
    assert step_actions({"action": "type", "text": "ctrl+a"}, DEFAULT_SCREEN) == keys("c", "trl+a")
    assert step_actions({"action": "type", "text": "up"}, DEFAULT_SCREEN) == keys("u", "p")
    assert step_actions({"action": "type", "text": "a+b"}, DEFAULT_SCREEN) == [
        {"send_keys": {"keys": "a+b"}}
    ]
    assert step_actions({"action": "press", "keys": "ctrl+a"}, DEFAULT_SCREEN) == [
        {"send_keys": {"keys": "ctrl+a"}}
    ]


def test_steps_browser_use_cannot_express_are_passed_over() -> None:
    steps = [
        {"action": "double_click", "x": 1, "y": 1},
        {"action": "goto", "url": "http://127.0.0.1:1/"},
        {"action": "drag", "x": 1, "y": 1, "x2": 9, "y2": 9},
        {"action": "back"},
        {"action": "wait", "seconds": 0.2},
    ]
    actions = play({"steps": steps, "answer": "ok"})
    assert actions == [
        [{"navigate": {"url": "http://127.0.0.1:1/", "new_tab": False}}],
        [{"go_back": {"description": None}}],
        [{"wait": {"seconds": 1}}],
        [{"done": {"text": "ok", "success": True, "files_to_display": []}}],
    ]


def test_noop_and_no_script_answer_done_at_once() -> None:
    done = [{"done": {"text": NOOP_ANSWER, "success": True, "files_to_display": []}}]
    assert play(SCRIPT, mode="noop") == [done]
    assert play(None) == [done]
    chat = ChatRequest(messages=state_message([], None), script=SCRIPT)
    assert json.loads(browser_use_reply(chat, "noop"))["action"][0]["done"]["text"] == "sent"


PYTHON = (
    "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
)  # the sandbox's
VALIDATE = """
import json, sys
from browser_use.agent.views import AgentOutput
from browser_use.tools.service import Tools
tools = Tools(exclude_actions=["screenshot"])
tools.set_coordinate_clicking(True)
model = AgentOutput.type_with_custom_actions(tools.registry.create_action_model())
for line in sys.stdin:
    out = model.model_validate_json(line)
    print(json.dumps([a.model_dump(exclude_unset=True) for a in out.action]))
"""


@pytest.mark.skipif(
    not PACKAGES["browser-use"].installed(), reason="forge harness install browser-use"
)
def test_browser_use_own_agent_output_model_accepts_every_reply() -> None:
    """browser-use's AgentOutput (its action union, coordinate clicks on) parses each reply
    into the intended action, in a separate interpreter with the package on its path."""
    scroll = {"action": "scroll", "x": 5, "y": 5, "dy": 2}
    odd = {"action": "type", "text": "ctrl+a"}  # typed as two actions of one step
    steps = [*MAIL_STEPS, scroll, odd, {"action": "goto", "url": "http://x/"}, {"action": "back"}]
    replies: list[str] = []
    history: list[str] = []
    script = {"steps": steps, "answer": "sent"}
    while not replies or "done" not in json.loads(replies[-1])["action"][0]:
        chat = ChatRequest(messages=state_message(history, png(640, 480)), script=script)
        replies.append(next_action(chat))
        history.append(history_item(json.loads(replies[-1])))
    env = {**os.environ, "PYTHONPATH": str(PACKAGES["browser-use"].require())}
    env.update(ANONYMIZED_TELEMETRY="false", BROWSER_USE_CLOUD_SYNC="false")
    done = subprocess.run(
        [PYTHON, "-c", VALIDATE],
        input="\n".join(replies) + "\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    parsed = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("[")]
    names = [next(iter(a[0])) for a in parsed]
    expected = ["click", "click", "send_keys", "send_keys", "scroll", "send_keys", "navigate"]
    expected.append("go_back")
    assert names == [*expected, "done"]
    assert parsed[0][0]["click"]["coordinate_x"] == to_pixels(199, 146, 640, 480)[0]
    assert parsed[5] == [{"send_keys": {"keys": "c"}}, {"send_keys": {"keys": "trl+a"}}]

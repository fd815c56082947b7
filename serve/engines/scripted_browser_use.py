"""The scripted engine's browser-use mode: the oracle answering browser-use (PyPI) in its own JSON.

browser-use asks for structured output (its ``AgentOutput``: ``thinking``,
``evaluation_previous_goal``, ``memory``, ``next_goal``, ``current_plan_item``,
``plan_update`` and an ``action`` list of one-key objects) and sends no tools. Its last user
message holds ``<agent_history>`` and ``<browser_state>``; it keeps no assistant messages, so
where the oracle stands is written into each reply's ``memory``
(``forge-oracle: played reference step I of N``), which browser-use shows back in
``<agent_history>``. The next step is the first one after the highest ``I`` that browser-use can
express.

A ``GuiAction`` step becomes a browser-use action:

- ``click`` -> ``click {coordinate_x, coordinate_y}`` in viewport pixels, the 0..1000 point
  scaled to the last screenshot's size (read from the PNG; 640x480 when the request carries no
  pixels). browser-use offers coordinates only with coordinate clicking on (the harness's
  ``coordinate_clicking`` option, on by default). Its element listing gives no positions, so a
  point cannot be mapped to an element index.
- ``type`` -> ``send_keys`` with the text (typed into the focused element, character by
  character); a text browser-use would read as a key name (``End``, ``ctrl+a``) goes as its
  first character and the rest, so it is typed, not pressed.
- ``press`` -> ``send_keys`` with the keys (browser-use knows ``ctrl``/``Enter``/... aliases).
- ``scroll`` -> ``scroll {down, pages}`` of the page: ``dy`` notches of 100 pixels as a share of
  the screen's height (the ``browser`` harness's wheel notch). A horizontal-only scroll has no
  browser-use form.
- ``goto`` -> ``navigate``; ``back`` -> ``go_back``; ``wait`` -> ``wait`` (whole seconds).
- ``double_click`` and ``drag`` have no browser-use action: passed over, as a step no tool can
  perform is elsewhere.

Then ``done`` with the task's answer. In noop mode the reply is ``done`` with the noop answer:
browser-use's form of "answer without acting".
"""

from __future__ import annotations

import json
import re
import struct
from typing import Any

from forge.types import ChatRequest
from serve.chat_template import message_text

__all__ = [
    "DEFAULT_SCREEN",
    "browser_use_reply",
    "is_browser_use",
    "screen_size",
    "step_actions",
]

DEFAULT_SCREEN = (640, 480)  # the GUI suites' screen, when the request has no pixels
NOTCH_PX = 100  # one wheel notch, as the browser harness scrolls it
SCALE = 1000
MARK = "forge-oracle: played reference step {i} of {n}"
MARK_RE = re.compile(r"forge-oracle: played reference step (\d+) of \d+")
# What browser-use's send_keys reads as a key rather than text (its aliases and special keys).
KEY_NAMES = {
    "ctrl", "control", "alt", "option", "meta", "cmd", "command", "shift", "enter", "return",
    "tab", "delete", "backspace", "escape", "esc", "space", "up", "down", "left", "right",
    "pageup", "pagedown", "home", "end", "arrowup", "arrowdown", "arrowleft", "arrowright",
    *(f"f{i}" for i in range(1, 13)),
}  # fmt: skip
MODIFIERS = {"ctrl", "control", "alt", "option", "meta", "cmd", "command", "shift"}


def _user_text(chat: ChatRequest) -> str:
    return "\n".join(message_text(m) for m in chat.messages if m.role == "user")


def is_browser_use(chat: ChatRequest) -> bool:
    """A request from browser-use: no tools, and a user message with its agent history and
    browser state blocks (browser-use may add nudges as later user messages)."""
    if chat.tools:
        return False
    texts = (message_text(m) for m in chat.messages if m.role == "user")
    return any("<browser_state>" in t and "<agent_history>" in t for t in texts)


def screen_size(chat: ChatRequest) -> tuple[int, int]:
    """The pixel size of the last screenshot in the request (a PNG's header), else
    :data:`DEFAULT_SCREEN`."""
    for image in reversed(chat.images):
        data = image.data
        if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and len(data) >= 24:
            width, height = struct.unpack(">II", data[16:24])
            if width > 0 and height > 0:
                return int(width), int(height)
    return DEFAULT_SCREEN


def _pixels(value: Any, size: int) -> int:
    """A 0..1000 coordinate as a pixel of a ``size``-pixel axis (as ``gui_actions.to_pixels``)."""
    return round(max(0.0, min(float(value), SCALE)) * (size - 1) / SCALE)


def _reads_as_key(text: str) -> bool:
    """Whether browser-use's send_keys would press ``text`` as a key or a combination."""
    if text.strip().lower() in KEY_NAMES:
        return True
    if "+" in text and text != "+":
        head = text[:-2] if text.endswith("++") else text.rsplit("+", 1)[0]
        parts = head.split("+")
        return all(p.strip().lower() in MODIFIERS for p in parts)
    return False


def _type_actions(text: str) -> list[dict[str, Any]]:
    if not text:
        return []
    if not _reads_as_key(text):
        return [{"send_keys": {"keys": text}}]
    head, rest = text[0], text[1:]  # one character is never a key name
    if rest and not _reads_as_key(rest):  # two actions (browser-use takes at most 5 a step)
        return [{"send_keys": {"keys": head}}, {"send_keys": {"keys": rest}}]
    return [{"send_keys": {"keys": c}} for c in text]


def step_actions(step: dict[str, Any], screen: tuple[int, int]) -> list[dict[str, Any]] | None:
    """browser-use's actions for one ``GuiAction`` step on a ``screen`` (width, height) in
    pixels; None when browser-use has no form for it."""
    name, (width, height) = step.get("action"), screen
    if name == "click":
        x, y = _pixels(step["x"], width), _pixels(step["y"], height)
        return [{"click": {"coordinate_x": x, "coordinate_y": y}}]
    if name == "type":
        return _type_actions(str(step.get("text") or "")) or None
    if name == "press":
        return [{"send_keys": {"keys": str(step["keys"])}}]
    if name == "scroll":
        dy = float(step.get("dy") or 0)
        if dy == 0:
            return None
        pages = (abs(dy) * NOTCH_PX + 0.5) / height  # browser-use truncates pages * height
        return [{"scroll": {"down": dy > 0, "pages": round(pages, 6), "index": None}}]
    if name == "goto":
        return [{"navigate": {"url": str(step["url"]), "new_tab": False}}]
    if name == "back":
        return [{"go_back": {"description": None}}]
    if name == "wait":
        return [{"wait": {"seconds": max(1, round(float(step.get("seconds", 1.0))))}}]
    return None  # double_click, drag


def _reply(goal: str, memory: str, actions: list[dict[str, Any]]) -> str:
    out = {
        "thinking": goal,
        "evaluation_previous_goal": "Carried out.",
        "memory": memory,
        "next_goal": goal,
        "current_plan_item": None,
        "plan_update": None,
        "action": actions,
    }
    return json.dumps(out, ensure_ascii=False)


def _done(text: str, memory: str = "") -> str:
    return _reply(
        "Finish.", memory, [{"done": {"text": text, "success": True, "files_to_display": []}}]
    )


def browser_use_reply(chat: ChatRequest, mode: str = "oracle", noop_answer: str = "") -> str:
    """The AgentOutput JSON for this point of a browser-use episode: the next reference step
    browser-use can express, else ``done`` with the answer (noop mode: ``done`` at once)."""
    script = chat.script or {}
    answer = str(script.get("answer") or "Done.")
    if mode == "noop" or chat.script is None:
        return _done(noop_answer or answer)
    steps = [s for s in script.get("steps") or []]
    played = max((int(m) for m in MARK_RE.findall(_user_text(chat))), default=0)
    screen = screen_size(chat)
    for i in range(played, len(steps)):
        step = steps[i]
        actions = step_actions(step, screen) if isinstance(step, dict) else None
        if actions:
            memory = MARK.format(i=i + 1, n=len(steps))
            return _reply(f"Reference step {i + 1}: {step.get('action')}.", memory, actions)
    return _done(answer, MARK.format(i=len(steps), n=len(steps)))

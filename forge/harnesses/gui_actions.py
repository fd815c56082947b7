"""The GUI action space shared by the ``browser`` and ``desktop`` harness programs.

Standard library only: the harness programs import it inside the sandbox (it is mounted beside
them). One OpenAI-style function tool per action of ``tasks.schema.GUI_ACTIONS``, plus ``done``;
coordinates are integers 0..1000 across the screenshot (:data:`SCALE`), converted to pixels by
:func:`to_pixels`. The scripted oracle emits calls to these tools by name from a task's
``GuiAction`` steps, so names and argument keys here are the contract. Also where Chromium is
and how it is started in a sandbox, for the harnesses that run one (the browser's Playwright, and
the desktop harnesses on page tasks: ``desktop_web``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

CHROMIUM_CANDIDATES = (
    "/usr/lib/chromium/chromium",  # Debian's binary (the /usr/bin one is a shell wrapper)
    "/usr/lib/chromium-browser/chromium-browser",
    "/usr/bin/chromium",
    "/usr/bin/chromium-browser",
    "/usr/bin/google-chrome",
)
CHROMIUM_ARGS = ("--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--no-proxy-server")
CHROMIUM_POLICY = "/etc/chromium/policies/managed"
"""Where a sandbox's Chromium reads its enterprise policy: a folder of
:data:`CHROMIUM_POLICY_HOST` is mounted there read-only (baked into the GUI images). Both turn
off ``javascript:``, ``devtools:`` and ``view-source:`` addresses, with which an agent could run
code in a page that computes its own reward (MiniWoB's ``core.endEpisode``) or read its source;
``desktop`` (Chromium on an X display, where a model presses keys) also turns DevTools off
(``F12``, ``ctrl+shift+j``). ``headless`` (Chromium driven by Playwright or browser-use over
the DevTools protocol, which that policy would stop) leaves them: no key a model sends there
opens them."""
CHROMIUM_POLICY_HOST = str(Path(__file__).resolve().parent / "chromium_policy")


def chromium_policy(display: bool) -> str:
    """The host folder of the policy for Chromium on an X display, or driven headless."""
    return f"{CHROMIUM_POLICY_HOST}/{'desktop' if display else 'headless'}"


def find_chromium(given: str | None = None) -> str | None:
    """``given`` when set, else the first Chromium of :data:`CHROMIUM_CANDIDATES` that exists."""
    if given:
        return given
    return next((c for c in CHROMIUM_CANDIDATES if os.access(c, os.X_OK)), None)


SCALE = 1000
_XY = {
    "x": ("integer", "0..1000 from the left edge of the screenshot."),
    "y": ("integer", "0..1000 from the top edge of the screenshot."),
}
ACTIONS: dict[str, tuple[str, dict[str, tuple[str, str]], list[str]]] = {
    # name: (description, {param: (json type, description)}, required)
    "click": ("Left-click at a point of the screenshot.", _XY, ["x", "y"]),
    "double_click": ("Double-click at a point of the screenshot.", _XY, ["x", "y"]),
    "type": (
        "Type text at the keyboard focus.",
        {"text": ("string", "The text to type.")},
        ["text"],
    ),
    "press": (
        "Press a key or a key combination.",
        {"keys": ("string", "Keys joined by '+', e.g. 'Enter', 'ctrl+a', 'Tab'.")},
        ["keys"],
    ),
    "scroll": (
        "Scroll the wheel with the pointer at a point.",
        {
            **_XY,
            "dy": ("integer", "Notches down (negative: up)."),
            "dx": ("integer", "Notches right (negative: left)."),
        },
        ["x", "y"],
    ),
    "drag": (
        "Press the left button at (x, y), move to (x2, y2) and release.",
        {
            **_XY,
            "x2": ("integer", "End point, 0..1000 from the left."),
            "y2": ("integer", "End point, 0..1000 from the top."),
        },
        ["x", "y", "x2", "y2"],
    ),
    "goto": ("Open an address in the browser.", {"url": ("string", "The URL.")}, ["url"]),
    "back": ("Go back one page in the browser's history.", {}, []),
    "wait": ("Wait a moment for the screen to change.", {"seconds": ("number", "1 to 10.")}, []),
    "done": (
        "Finish the task, with your final answer.",
        {"answer": ("string", "The final answer (may be empty).")},
        ["answer"],
    ),
}
BROWSER_ONLY = ("goto", "back")


def tools(names: list[str] | None = None) -> list[dict[str, Any]]:
    """The chat-completions ``tools`` for ``names`` (default: every action)."""
    out = []
    for name in names or list(ACTIONS):
        desc, params, required = ACTIONS[name]
        schema = {
            "type": "object",
            "properties": {p: {"type": t, "description": d} for p, (t, d) in params.items()},
            "required": required,
        }
        out.append(
            {
                "type": "function",
                "function": {"name": name, "description": desc, "parameters": schema},
            }
        )
    return out


def to_pixels(x: float, y: float, width: int, height: int) -> tuple[int, int]:
    """A 0..1000 point as pixels of a ``width`` x ``height`` screen (clamped inside it)."""
    px = round(max(0.0, min(float(x), SCALE)) * (width - 1) / SCALE)
    py = round(max(0.0, min(float(y), SCALE)) * (height - 1) / SCALE)
    return px, py


def from_pixels(px: float, py: float, width: int, height: int) -> tuple[int, int]:
    """Pixels of a ``width`` x ``height`` screen as a 0..1000 point (for reference solutions)."""
    return round(px * SCALE / max(width - 1, 1)), round(py * SCALE / max(height - 1, 1))

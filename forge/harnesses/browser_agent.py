"""A screenshot-driven browser agent: the "browser" harness program, run inside the sandbox.

It runs on the sandbox's python3 with Playwright on PYTHONPATH; ``gui_actions.py``,
``browser_page.py`` and ``react_agent.py`` are mounted beside it. Configuration from the
environment: OPENAI_BASE_URL (ends in /v1), OPENAI_API_KEY, FORGE_MODEL, FORGE_MAX_TURNS
(default 20), FORGE_START_URL (default about:blank), FORGE_SCREEN ("640x480"), FORGE_OBSERVATION
(``screenshot`` | ``screenshot+text`` | ``text``), FORGE_SCREENSHOTS_IN_CONTEXT (default 1: older
screenshots are replaced by a placeholder), optional FORGE_TEMPERATURE, FORGE_MAX_TOKENS,
FORGE_SYSTEM_PROMPT, FORGE_SETTLE_S (pause after each action, default 0.3), FORGE_CHROMIUM (the
browser binary), FORGE_REQUEST_TIMEOUT (s, default 600), FORGE_TOOLS (comma-separated subset of
the tools offered; empty: none, so the first reply, about the start page, is the answer). The
instruction is argv[1] or FORGE_INSTRUCTION.

Each turn shows the page (a PNG screenshot as an ``image_url`` data URL, and/or the page as
text) in a user message and offers the tools of ``gui_actions`` (click, double_click, type,
press, scroll, drag, goto, back, wait, done). Tool results say what happened and whether the
page changed. It stops on ``done``, on an answer without tool calls, or at the turn limit. Its
last stdout line is JSON: {"final_answer", "turns", "stop", "actions", "unchanged"}. Exit
status 0; 3 when the model endpoint fails; 4 when Chromium fails (infrastructure).
"""

from __future__ import annotations

import base64
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gui_actions
from browser_page import Browser, BrowserCrashed, parse_screen
from react_agent import (
    ModelError,
    as_assistant,
    ask,
    instruction_arg,
    report,
    request_body,
    tool_arguments,
)

SYSTEM_PROMPT = (
    "You control a web browser to complete the user's task. Each turn you see the current "
    "page{what}. Act with the tools, one or a few actions at a time. Coordinates are integers "
    "from 0 to 1000 across the screenshot: x from the left edge, y from the top edge, whatever "
    "its size in pixels. Each tool result says what happened and whether the page changed. "
    "When the task is complete, call done with your final answer (an empty string if the task "
    "asks for none)."
)
OBSERVATIONS = ("screenshot", "screenshot+text", "text")
OMITTED_IMAGE = "[earlier screenshot omitted]"
OMITTED_TEXT = "[earlier page text omitted]"


def observation(
    browser: Browser, mode: str, header: str
) -> tuple[list[dict[str, Any]], bytes | None]:
    """The content parts of one observation message, and the screenshot it shows (if any)."""
    parts: list[dict[str, Any]] = [{"type": "text", "text": header}]
    png = None
    if mode != "text":
        png = browser.screenshot()
        url = "data:image/png;base64," + base64.b64encode(png).decode()
        parts.append({"type": "image_url", "image_url": {"url": url}})
    if mode != "screenshot":
        parts.append({"type": "text", "text": browser.text()})
    return parts, png


def forget_old(messages: list[dict[str, Any]], keep: int) -> None:
    """Replace every screenshot and page text but those of the last ``keep`` observations with a
    short placeholder (in place)."""
    seen = 0
    for message in reversed(messages):
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, list):
            continue
        observed = any(p.get("type") == "image_url" or p.get("page") for p in content)
        if not observed:
            continue
        seen += 1
        if seen <= keep:
            continue
        for i, part in enumerate(content):
            if part.get("type") == "image_url":
                content[i] = {"type": "text", "text": OMITTED_IMAGE}
            elif part.get("page"):
                content[i] = {"type": "text", "text": OMITTED_TEXT}


class Agent:
    def __init__(self, instruction: str, env: dict[str, str], browser: Browser) -> None:
        self.instruction = instruction
        self.browser = browser
        self.base = env.get("OPENAI_BASE_URL", "").rstrip("/")
        self.key = env.get("OPENAI_API_KEY", "")
        self.max_turns = int(env.get("FORGE_MAX_TURNS", "20"))
        self.request_timeout = float(env.get("FORGE_REQUEST_TIMEOUT", "600"))
        self.mode = env.get("FORGE_OBSERVATION", "screenshot")
        if self.mode not in OBSERVATIONS:
            raise ValueError(f"FORGE_OBSERVATION: {self.mode!r} is not one of {OBSERVATIONS}")
        self.keep = max(1, int(env.get("FORGE_SCREENSHOTS_IN_CONTEXT", "1")))
        names = env.get("FORGE_TOOLS")
        offered = list(gui_actions.ACTIONS) if names is None else [n for n in names.split(",") if n]
        self.body = request_body(env, gui_actions.tools(offered) if offered else [])
        what = {
            "screenshot": " as a screenshot",
            "screenshot+text": " as a screenshot and as text with its interactive elements",
            "text": " as text with its interactive elements and their positions",
        }[self.mode]
        default = SYSTEM_PROMPT.format(what=what)
        self.system = env.get("FORGE_SYSTEM_PROMPT", default)
        self.actions = 0
        self.unchanged = 0
        self.turns = 0

    def observe(self, first: bool) -> dict[str, Any]:
        w, h = self.browser.width, self.browser.height
        where = f"The browser shows {self.browser.url()} ({w}x{h} pixels)."
        header = f"{self.instruction}\n\n{where}" if first else where
        parts, _ = observation(self.browser, self.mode, header)
        for part in parts[1:]:
            if part["type"] == "text":
                part["page"] = True  # marks page text for forget_old; stripped before sending
        return {"role": "user", "content": parts}

    def run(self) -> tuple[str | None, str]:
        """The loop; returns (final answer, stop reason)."""
        messages: list[dict[str, Any]] = [{"role": "system", "content": self.system}]
        if not self.system:
            messages = []
        messages.append(self.observe(first=True))
        last_text: str | None = None
        for turn in range(1, self.max_turns + 1):
            forget_old(messages, self.keep)
            wire = _wire(messages)
            message, calls = ask(self.base, self.key, self.body, wire, self.request_timeout)
            self.turns = turn
            last_text = message.get("content") or last_text
            if not calls:
                return message.get("content") or "", "answer"
            messages.append(as_assistant(message))
            for call in calls:
                fn = call.get("function") or {}
                name, args, error = fn.get("name", ""), None, None
                try:
                    args = tool_arguments(name, fn.get("arguments"))
                except ValueError as e:
                    error = f"error: {e}"
                if name == "done" and args is not None:
                    answer = args.get("answer", "")
                    if isinstance(answer, str):
                        return answer, "done"
                    error = "error: done needs a string argument: answer"
                result = error or self.act(name, args or {})
                messages.append(
                    {"role": "tool", "tool_call_id": call.get("id", ""), "content": result}
                )
            messages.append(self.observe(first=False))
        return last_text, "max_turns"

    def act(self, name: str, args: dict[str, Any]) -> str:
        if name not in gui_actions.ACTIONS:
            return f"error: unknown tool {name!r}; tools: {', '.join(gui_actions.ACTIONS)}"
        missing = [k for k in gui_actions.ACTIONS[name][2] if k not in args]
        if missing:
            return f"error: {name} needs argument(s): {', '.join(missing)}"
        result = self.browser.act(name, args)
        if not result.startswith("error"):
            self.actions += 1
            self.unchanged += "page changed: no" in result
        return result


def _wire(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as sent: without the internal ``page`` marks."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = [{k: v for k, v in p.items() if k != "page"} for p in content]
            m = {**m, "content": content}
        out.append(m)
    return out


def main(argv: list[str]) -> int:
    instruction = instruction_arg(argv, "browser_agent")
    if not instruction:
        return 2
    env = dict(os.environ)
    answer, stop, code, agent = None, "error", 0, None
    try:
        browser = Browser(
            parse_screen(env.get("FORGE_SCREEN")),
            env.get("FORGE_CHROMIUM") or None,
            float(env.get("FORGE_SETTLE_S", "0.3")),
        )
    except BrowserCrashed as e:
        print(f"browser_agent: {e}", file=sys.stderr)
        return _report(None, 0, "error", None, 4)
    try:
        start = env.get("FORGE_START_URL") or "about:blank"
        error = browser.goto(start)
        if error:  # the task's own page did not load: not the model's doing
            raise BrowserCrashed(f"start page: {error}")
        agent = Agent(instruction, env, browser)
        answer, stop = agent.run()
    except ModelError as e:
        print(f"browser_agent: {e}", file=sys.stderr)
        code = 3
    except BrowserCrashed as e:
        print(f"browser_agent: {e}", file=sys.stderr)
        code = 4
    finally:
        browser.close()
    return _report(answer, agent.turns if agent else 0, stop, agent, code)


def _report(answer: str | None, turns: int, stop: str, agent: Agent | None, code: int) -> int:
    actions, unchanged = (agent.actions, agent.unchanged) if agent else (0, 0)
    report(
        {
            "final_answer": answer,
            "turns": turns,
            "stop": stop,
            "actions": actions,
            "unchanged": unchanged,
        }
    )
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))

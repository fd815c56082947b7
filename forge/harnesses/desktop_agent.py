"""A computer-use agent: the ``desktop`` harness program, run inside the sandbox on an X display.

Standard library only (the sandbox's system Python); ``desktop_actions.py``, ``gui_actions.py``
and ``react_agent.py`` (its chat client) are mounted beside it. Configuration from the
environment: DISPLAY, OPENAI_BASE_URL (ends in /v1), OPENAI_API_KEY, FORGE_MODEL,
FORGE_MAX_TURNS (default 20), FORGE_SCREEN ("WxH"; default: the display's size),
FORGE_KEEP_SCREENSHOTS (how many of the latest screenshots stay in the conversation, default 1;
0: none are sent, the model reads the text results only), FORGE_SETTLE_S (seconds to let the
screen settle after an action, default 0.3), FORGE_WINDOW_WAIT_S (most seconds to wait for the
task's first window before the first screenshot, default 10), optional FORGE_TEMPERATURE,
FORGE_MAX_TOKENS, FORGE_REQUEST_TIMEOUT (s, default 600) and FORGE_SYSTEM_PROMPT. The
instruction is argv[1] or FORGE_INSTRUCTION.

Each turn it sends the conversation with the latest screenshot as an ``image_url`` data-URL
content part of a user message (older ones are replaced by a note) and the tools of
``gui_actions`` less goto and back; it carries out the tool calls with xdotool and answers each
with what happened and whether the screen changed. It stops on ``done(answer)``, on a reply
without tool calls (its text is the answer), or at the turn limit. Its last stdout line is JSON:
``{"final_answer", "turns", "stop", "actions", "unchanged"}`` (``unchanged``: actions after which
the screen was the same). Exit status 0; 3 when the model endpoint fails; 4 when the display
cannot be used.
"""

from __future__ import annotations

import base64
import os
import sys
from typing import Any

if __package__:  # imported from the forge package (tests)
    from forge.harnesses import desktop_actions, gui_actions
    from forge.harnesses.react_agent import (
        ModelError,
        as_assistant,
        ask,
        instruction_arg,
        report,
        request_body,
        tool_arguments,
    )
else:  # run as a program: the modules are mounted beside it, and its folder is on sys.path
    import desktop_actions
    import gui_actions
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
    "You operate a Linux desktop through its screen, keyboard and mouse. Each turn you see a "
    "screenshot of the whole screen ({width}x{height} pixels). Points are given as x, y "
    "integers from 0 to 1000 across the screenshot: (0, 0) is the top-left corner and "
    "(1000, 1000) the bottom-right, whatever the screen's size. Act with the tools, one or a "
    "few actions at a time, and look at the next screenshot to see what happened. Use press "
    "for keys and key combinations (e.g. 'Enter', 'ctrl+a'). When the task is done, call "
    "done with your final answer."
)
OMITTED = "(an earlier screenshot, omitted)"


def screenshot_message(png: bytes, text: str) -> dict[str, Any]:
    """A user message with ``text`` and the screenshot as a data-URL image part."""
    url = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": text},
            {"type": "image_url", "image_url": {"url": url}},
        ],
    }


def keep_latest_images(messages: list[dict[str, Any]], keep: int) -> None:
    """Replace all but the ``keep`` latest image parts of ``messages`` with a text note."""
    seen = 0
    for message in reversed(messages):
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, list):
            continue
        for i in range(len(content) - 1, -1, -1):
            if content[i].get("type") != "image_url":
                continue
            seen += 1
            if seen > keep:
                content[i] = {"type": "text", "text": OMITTED}


def agent(
    instruction: str, env: dict[str, str], desk: desktop_actions.Desktop, stats: dict[str, int]
) -> tuple[str | None, int, str]:
    """The loop; returns (final answer, turns, stop reason). ``stats`` counts ``turns`` answered,
    ``actions`` carried out and ``unchanged`` (actions that left the screen as it was)."""
    base = env.get("OPENAI_BASE_URL", "").rstrip("/")
    key = env.get("OPENAI_API_KEY", "")
    max_turns = int(env.get("FORGE_MAX_TURNS", "20"))
    keep = max(int(env.get("FORGE_KEEP_SCREENSHOTS", "1")), 0)
    request_timeout = float(env.get("FORGE_REQUEST_TIMEOUT", "600"))
    body = request_body(env, gui_actions.tools(desktop_actions.DESKTOP_ACTIONS))
    system = env.get("FORGE_SYSTEM_PROMPT", SYSTEM_PROMPT)
    system = system.replace("{width}", str(desk.width)).replace("{height}", str(desk.height))
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    desk.wait_for_window(float(env.get("FORGE_WINDOW_WAIT_S", "10")))
    shot = desk.screenshot()
    if keep:
        messages.append(screenshot_message(shot, instruction))
    else:
        messages.append({"role": "user", "content": instruction})
    last_text: str | None = None
    for turn in range(1, max_turns + 1):
        message, calls = ask(base, key, body, messages, request_timeout)
        stats["turns"] = turn
        last_text = message.get("content") or last_text
        if not calls:
            return message.get("content") or "", turn, "answer"
        messages.append(as_assistant(message))
        acted = False
        for call in calls:
            fn = call.get("function") or {}
            name = fn.get("name", "")
            try:
                args = tool_arguments(name, fn.get("arguments"))
            except ValueError as e:
                result = f"error: {e}"
            else:
                if name == "done":
                    if isinstance(args.get("answer"), str):
                        return args["answer"], turn, "done"
                    result = "error: done needs a string argument: answer"
                else:
                    result, shot_after = desk.act(name, args, shot)
                    if not result.startswith("error:"):
                        stats["actions"] += 1
                        stats["unchanged"] += result.endswith("did not change")
                    shot, acted = shot_after, True
            messages.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": result})
        if keep and acted:
            messages.append(screenshot_message(shot, "The screen now:"))
            keep_latest_images(messages, keep)
    return last_text, max_turns, "max_turns"


def main(argv: list[str]) -> int:
    instruction = instruction_arg(argv, "desktop_agent")
    if not instruction:
        return 2
    stats = {"turns": 0, "actions": 0, "unchanged": 0}
    answer: str | None = None
    try:
        desk = desktop_actions.Desktop.from_env(dict(os.environ))
        answer, turns, stop = agent(instruction, dict(os.environ), desk, stats)
        code = 0
    except ModelError as e:
        print(f"desktop_agent: {e}", file=sys.stderr)
        turns, stop, code = stats["turns"], "error", 3
    except (desktop_actions.ActionError, ValueError) as e:
        print(f"desktop_agent: the display cannot be used: {e}", file=sys.stderr)
        turns, stop, code = stats["turns"], "error", 4
    record = {"final_answer": answer, "turns": turns, "stop": stop}
    record.update(actions=stats["actions"], unchanged=stats["unchanged"])
    report(record)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""Runs browser-use (PyPI ``browser-use``, unmodified) for one attempt: the "browser-use"
harness program, inside the sandbox with the package's folder on PYTHONPATH.

Configuration from the environment, as for ``browser_agent.py``: OPENAI_BASE_URL, OPENAI_API_KEY,
FORGE_MODEL, FORGE_MAX_TURNS (browser-use's max_steps), FORGE_START_URL, FORGE_SCREEN,
optional FORGE_TEMPERATURE, FORGE_CHROMIUM, FORGE_COORDINATE_CLICKING (1 by default: the
``click`` action takes viewport coordinates as well as element indices, browser-use's own
switch, which it turns on by itself only for a few hosted models). Offline defaults: no
extension download, no judge call after ``done``, no telemetry or cloud sync. The instruction
is argv[1]. The last stdout line is JSON: {"final_answer", "turns", "stop"} (stop: done |
max_turns | error).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

os.environ.setdefault("ANONYMIZED_TELEMETRY", "false")
os.environ.setdefault("BROWSER_USE_CLOUD_SYNC", "false")
os.environ.setdefault("BROWSER_USE_LOGGING_LEVEL", "info")
CHROMIUM = ("/usr/lib/chromium/chromium", "/usr/bin/chromium", "/usr/bin/google-chrome")


async def run(instruction: str, env: dict[str, str]) -> dict[str, object]:
    from browser_use import Agent, BrowserProfile, BrowserSession, ChatOpenAI, Tools

    width, height = (int(v) for v in env.get("FORGE_SCREEN", "640x480").split("x"))
    chromium = env.get("FORGE_CHROMIUM") or next((c for c in CHROMIUM if os.path.exists(c)), None)
    llm_options: dict[str, object] = {}
    if env.get("FORGE_TEMPERATURE"):
        llm_options["temperature"] = float(env["FORGE_TEMPERATURE"])
    llm = ChatOpenAI(
        model=env.get("FORGE_MODEL", "policy"),
        base_url=env["OPENAI_BASE_URL"],
        api_key=env.get("OPENAI_API_KEY", ""),
        **llm_options,
    )
    profile = BrowserProfile(
        executable_path=chromium,
        headless=True,
        chromium_sandbox=False,
        enable_default_extensions=False,
        viewport={"width": width, "height": height},
        args=["--disable-dev-shm-usage", "--disable-gpu", "--no-proxy-server"],
    )
    start = env.get("FORGE_START_URL")
    # "screenshot": what Agent leaves out itself with use_vision=True; "evaluate" runs the
    # model's JavaScript in the page, where a MiniWoB page computes its own reward
    tools = Tools(exclude_actions=["screenshot", "evaluate"])
    tools.set_coordinate_clicking(env.get("FORGE_COORDINATE_CLICKING", "1") == "1")
    agent = Agent(
        task=instruction,
        llm=llm,
        tools=tools,
        browser_session=BrowserSession(browser_profile=profile),
        initial_actions=[{"navigate": {"url": start}}] if start else None,
        use_vision=True,
        use_judge=False,
    )
    max_steps = int(env.get("FORGE_MAX_TURNS", "20"))
    history = await agent.run(max_steps=max_steps)
    stop = "done" if history.is_done() else "max_turns"
    steps = history.number_of_steps() - (1 if start else 0)  # the navigation is a step too
    return {"final_answer": history.final_result(), "turns": steps, "stop": stop}


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[1]:
        print("browser_use_runner: no instruction (argv[1])", file=sys.stderr)
        return 2
    try:
        record = asyncio.run(run(argv[1], dict(os.environ)))
        code = 0
    except Exception as e:  # browser-use's own failure (its browser, its set-up)
        print(f"browser_use_runner: {type(e).__name__}: {e}", file=sys.stderr)
        record, code = {"final_answer": None, "turns": 0, "stop": "error"}, 4
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""BrowserHarness: the screenshot-driven browser agent of ``browser_agent.py`` (Chromium via
Playwright), run by the sandbox's python3."""

from __future__ import annotations

from pathlib import Path

from forge.harnesses import gui_actions
from forge.harnesses.base import AgentProgram, AttemptContext, agent_env
from forge.harnesses.install import PACKAGES

HERE = Path(__file__).resolve().parent
PROGRAM_DIR = "/opt/forge/harness"  # where the sandbox sees the program and its modules
PROGRAM = f"{PROGRAM_DIR}/browser_agent.py"
MODULES = ("browser_agent.py", "browser_page.py", "gui_actions.py", "react_agent.py")
PLAYWRIGHT = "/opt/forge/playwright"  # the ``browser`` package's folder: on PYTHONPATH
OBSERVATIONS = ("screenshot", "screenshot+text", "text")


class BrowserHarness(AgentProgram):
    """Mounts ``browser_agent.py`` and its modules read-only under :data:`PROGRAM_DIR` and the
    installed Playwright (``forge harness install browser``) at :data:`PLAYWRIGHT`, and runs the
    agent with the instruction. The task's start page and screen size come from
    ``ctx.extra["start_url"]`` and ``ctx.extra["screen"]`` ("640x480").

    ``screenshots_in_context``: how many of the latest screenshots stay in the prompt (older
    ones become a placeholder). ``observation``: what the model sees of the page each turn.
    ``chromium``: the browser binary (default: Debian's, found inside the sandbox). ``tools``:
    the subset of the GUI actions offered (None: all; []: none, a plain chat about the start
    page whose first reply is the answer, as ``react``'s ``tools: []``).
    """

    program = PROGRAM
    name = "browser"
    opens_start_url = True  # its browser opens the task's page before the agent acts
    protocol = "chat"

    def __init__(
        self,
        python: str = "python3",
        temperature: float | None = None,
        max_tokens: int | None = None,
        screenshots_in_context: int = 1,
        observation: str = "screenshot",
        system_prompt: str | None = None,
        settle_s: float | None = None,
        chromium: str | None = None,
        tools: list[str] | None = None,
    ) -> None:
        unknown = set(tools or ()) - set(gui_actions.ACTIONS)
        if unknown:
            known = ", ".join(gui_actions.ACTIONS)
            raise ValueError(f"tools: unknown {sorted(unknown)}; known: {known}")
        if observation not in OBSERVATIONS:
            raise ValueError(
                f"observation: {observation!r} is not one of {', '.join(OBSERVATIONS)}"
            )
        if screenshots_in_context < 1:
            raise ValueError("screenshots_in_context must be at least 1")
        self.python = python
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.screenshots_in_context = screenshots_in_context
        self.observation = observation
        self.system_prompt = system_prompt
        self.settle_s = settle_s
        self.chromium = chromium
        self.tools = tools

    def ro_mounts(self) -> dict[str, str]:
        mounts = {str(HERE / m): f"{PROGRAM_DIR}/{m}" for m in MODULES}
        mounts[str(PACKAGES["browser"].require())] = PLAYWRIGHT
        return mounts

    def env(self, ctx: AttemptContext) -> dict[str, str]:
        return {
            **agent_env(
                ctx,
                observation=self.observation,
                screenshots_in_context=self.screenshots_in_context,
                temperature=self.temperature,
                max_tokens=self.max_tokens,
                system_prompt=self.system_prompt,
                settle_s=self.settle_s,
                chromium=self.chromium or None,
                tools=self.tools,
            ),
            "PYTHONPATH": ctx.path(PLAYWRIGHT),
        }

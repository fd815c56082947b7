"""DesktopHarness: the computer-use agent of ``desktop_agent.py`` on the task's X display."""

from __future__ import annotations

import shutil
from pathlib import Path

from forge.harnesses.base import AgentProgram, AttemptContext, agent_env
from forge.harnesses.desktop_web import on_desktop
from forge.harnesses.install import HarnessNotInstalled

HERE = Path(__file__).resolve().parent
SANDBOX_DIR = "/opt/forge/harness"
MODULES = ("desktop_agent.py", "desktop_actions.py", "gui_actions.py", "react_agent.py")
PROGRAM = f"{SANDBOX_DIR}/desktop_agent.py"  # where the sandbox sees it
TOOLS = ("xdotool", "import")  # the program's hands and eyes (import: ImageMagick)


class DesktopHarness(AgentProgram):
    """Mounts ``desktop_agent.py`` and the modules it imports read-only side by side under
    :data:`SANDBOX_DIR` and runs it with the instruction.

    The episode starts the task's X display and desktop applications first and hands the
    command ``DISPLAY``; the screen's size comes from ``ctx.extra["screen"]`` ("WxH") when the
    episode gives it (else the program asks the display). ``keep_screenshots``: how many of
    the latest screenshots stay in the conversation (0: none are sent, text results only).
    Replacing an older screenshot with a note changes the prompt's prefix, so with the default
    of 1 every turn starts a new training segment; a ``keep_screenshots`` above the episode's
    turn count keeps one segment at the cost of a prompt that grows by a screenshot a turn.
    """

    program = PROGRAM
    name = "desktop"
    opens_start_url = True  # its browser opens the task's page before the agent acts
    protocol = "chat"

    adapt_task = staticmethod(on_desktop)  # page tasks: Chromium on the display

    def __init__(
        self,
        python: str = "python3",
        temperature: float | None = None,
        max_tokens: int | None = None,
        keep_screenshots: int = 1,
        settle_s: float | None = None,
        system_prompt: str | None = None,
    ) -> None:
        if keep_screenshots < 0:
            raise ValueError("keep_screenshots: must be 0 or more")
        if settle_s is not None and settle_s < 0:
            raise ValueError("settle_s: must be 0 or more")
        self.python = python
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.keep_screenshots = keep_screenshots
        self.settle_s = settle_s
        self.system_prompt = system_prompt

    def ro_mounts(self) -> dict[str, str]:
        missing = [tool for tool in TOOLS if shutil.which(tool) is None]
        if missing:
            raise HarnessNotInstalled(
                f"harness 'desktop' needs {', '.join(missing)} in the sandbox: apt-get install "
                "xdotool imagemagick (scripts/setup.sh installs them with Xvfb and openbox)"
            )
        return {str(HERE / m): f"{SANDBOX_DIR}/{m}" for m in MODULES}

    def env(self, ctx: AttemptContext) -> dict[str, str]:
        return agent_env(
            ctx,
            keep_screenshots=self.keep_screenshots,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            settle_s=self.settle_s,
            system_prompt=self.system_prompt,
        )

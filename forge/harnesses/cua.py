"""CuaHarness: the Cua agent (PyPI ``cua-agent``, unmodified) on the task's X display, its model
calls pointed at the attempt's proxy through litellm."""

from __future__ import annotations

import shutil
from pathlib import Path

from forge.harnesses.base import AgentProgram, AttemptContext, agent_env
from forge.harnesses.desktop_web import on_desktop
from forge.harnesses.install import PACKAGES, HarnessNotInstalled

RUNNER_HOST = str(Path(__file__).with_name("cua_runner.py").resolve())
RUNNER = "/opt/forge/harness/cua_runner.py"
PACKAGE = "/opt/forge/cua"  # the installed package folder, on PYTHONPATH
TOOLS = ("xdotool", "import")  # the custom computer's hands and eyes (import: ImageMagick)


class CuaHarness(AgentProgram):
    """Runs ``cua_runner.py`` with the ``cua-agent`` package (``forge harness install cua``) on
    the display the episode starts for a ``gui: {display: true}`` task.

    ``loop`` names the agent loop, looked up in Cua's own registry as Cua looks up a model
    name: ``ui-tars`` (the default) is its UI-TARS loop, chat completions whose replies are
    ``Thought: ...`` then ``Action: click(start_box='(x,y)')`` (0..1000 across the
    screenshot), ``type(content=...)``, ``hotkey(key=...)``, ``scroll``, ``drag``, ``wait()``,
    ``finished(content=...)``; others are ``opencua``, ``glm-4.5v``, ``holo1.5``, ``qwen``
    (these last need the package's extras). The model name sent is the attempt's own.
    ``keep_screenshots`` is Cua's ``only_n_most_recent_images`` (unset: all kept).
    """

    program = RUNNER
    name = "cua"
    opens_start_url = True  # its browser opens the task's page before the agent acts
    protocol = "chat"

    adapt_task = staticmethod(on_desktop)  # page tasks: Chromium on the display

    def __init__(
        self,
        python: str = "python3",
        loop: str = "ui-tars",
        temperature: float | None = None,
        keep_screenshots: int | None = None,
    ) -> None:
        if not isinstance(loop, str) or not loop.strip():
            raise ValueError(f"harness_options.loop: {loop!r} is not a Cua agent loop name")
        if keep_screenshots is not None and keep_screenshots < 1:
            raise ValueError("harness_options.keep_screenshots: must be 1 or more")
        self.python = python
        self.loop = loop
        self.temperature = temperature
        self.keep_screenshots = keep_screenshots

    def ro_mounts(self) -> dict[str, str]:
        missing = [tool for tool in TOOLS if shutil.which(tool) is None]
        if missing:
            raise HarnessNotInstalled(
                f"harness 'cua' needs {', '.join(missing)} in the sandbox: apt-get install "
                "xdotool imagemagick (scripts/setup.sh installs them with Xvfb and openbox)"
            )
        return {str(PACKAGES["cua"].require()): PACKAGE, RUNNER_HOST: RUNNER}

    def env(self, ctx: AttemptContext) -> dict[str, str]:
        env = agent_env(
            ctx,
            cua_loop=self.loop,
            temperature=self.temperature,
            keep_screenshots=self.keep_screenshots,
        )
        return {**env, "PYTHONPATH": ctx.path(PACKAGE)}

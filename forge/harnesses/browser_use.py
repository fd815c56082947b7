"""BrowserUseHarness: browser-use (PyPI, unmodified) on Debian's Chromium, its OpenAI client
pointed at the attempt's proxy."""

from __future__ import annotations

from pathlib import Path

from forge.harnesses.base import AttemptContext, agent_env, last_json, string_field
from forge.harnesses.install import PACKAGES
from forge.sandboxes.base import ExecResult

RUNNER_HOST = str(Path(__file__).with_name("browser_use_runner.py").resolve())
RUNNER = "/opt/forge/harness/browser_use_runner.py"
PACKAGE = "/opt/forge/browser-use"  # the installed package folder, on PYTHONPATH


class BrowserUseHarness:
    """Runs ``browser_use_runner.py`` with the ``browser-use`` package (``forge harness install
    browser-use``). browser-use asks for structured output (``response_format`` json_schema),
    which the scripted oracle answers in kind (:mod:`serve.engines.scripted_browser_use`) and a
    real policy's engine decodes under (:mod:`serve.engines.constrained`, vLLM's own).

    ``coordinate_clicking`` (default True) turns on browser-use's coordinate form of ``click``
    (``coordinate_x``, ``coordinate_y`` in viewport pixels) beside its element indices: the
    action space of the other GUI harnesses, and what GUI reference solutions are written in.
    """

    name = "browser-use"
    opens_start_url = True  # its browser opens the task's page before the agent acts
    protocol = "chat"

    def __init__(
        self,
        python: str = "python3",
        temperature: float | None = None,
        coordinate_clicking: bool = True,
    ) -> None:
        if not isinstance(coordinate_clicking, bool):
            raise ValueError(
                f"harness_options.coordinate_clicking: {coordinate_clicking!r} is not true or false"
            )
        self.python = python
        self.temperature = temperature
        self.coordinate_clicking = coordinate_clicking

    def ro_mounts(self) -> dict[str, str]:
        return {str(PACKAGES["browser-use"].require()): PACKAGE, RUNNER_HOST: RUNNER}

    def files(self, ctx: AttemptContext) -> dict[str, str]:
        return {}

    def env(self, ctx: AttemptContext) -> dict[str, str]:
        env = agent_env(ctx, temperature=self.temperature)
        clicks = "1" if self.coordinate_clicking else "0"
        return {**env, "PYTHONPATH": ctx.path(PACKAGE), "FORGE_COORDINATE_CLICKING": clicks}

    def command(self, ctx: AttemptContext) -> list[str]:
        return [self.python, ctx.path(RUNNER), ctx.instruction]

    def final_answer(self, result: ExecResult) -> str | None:
        return string_field(last_json(result.stdout, lambda r: "final_answer" in r), "final_answer")

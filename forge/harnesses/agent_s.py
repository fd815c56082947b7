"""AgentSHarness: Agent S3 (PyPI ``gui-agents``, unmodified) on the task's X display, its worker
and grounding models both pointed at the attempt's proxy."""

from __future__ import annotations

from pathlib import Path

from forge.harnesses.base import AgentProgram, AttemptContext, agent_env
from forge.harnesses.desktop_web import on_desktop
from forge.harnesses.install import PACKAGES

RUNNER_HOST = str(Path(__file__).with_name("agent_s_runner.py").resolve())
RUNNER = "/opt/forge/harness/agent_s_runner.py"
PACKAGE = "/opt/forge/agent-s"  # the installed package folder, on PYTHONPATH


class AgentSHarness(AgentProgram):
    """Runs ``agent_s_runner.py`` with the ``gui-agents`` package (``forge harness install
    agent-s``) on the display the episode starts for a ``gui: {display: true}`` task.

    Agent S3 asks the model in three roles, each a chat completion with the screenshot: the
    worker (its reasoning and one ``agent.<action>(...)`` call in a code block), the grounding
    model (``Query: <element description>`` -> a point, in a ``grounding_size`` frame:
    "1000x1000" by default, the 0..1000 grid of the other GUI harnesses) and, from the second
    step, the reflection. ``ground_model`` names a different model for grounding (default:
    the policy itself); ``reflection: false`` drops the reflection call.
    """

    program = RUNNER
    name = "agent-s"
    opens_start_url = True  # its browser opens the task's page before the agent acts
    protocol = "chat"

    adapt_task = staticmethod(on_desktop)  # page tasks: Chromium on the display

    def __init__(
        self,
        python: str = "python3",
        temperature: float | None = None,
        ground_model: str | None = None,
        grounding_size: str = "1000x1000",
        reflection: bool = True,
        settle_s: float | None = None,
    ) -> None:
        parts = grounding_size.lower().split("x") if isinstance(grounding_size, str) else []
        if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(
                f"harness_options.grounding_size: {grounding_size!r} is not WxH (e.g. 1000x1000)"
            )
        if not isinstance(reflection, bool):
            raise ValueError(f"harness_options.reflection: {reflection!r} is not true or false")
        if settle_s is not None and settle_s < 0:
            raise ValueError("harness_options.settle_s: must be 0 or more")
        self.python = python
        self.temperature = temperature
        self.ground_model = ground_model
        self.grounding_size = grounding_size.lower()
        self.reflection = reflection
        self.settle_s = settle_s

    def ro_mounts(self) -> dict[str, str]:
        return {str(PACKAGES["agent-s"].require()): PACKAGE, RUNNER_HOST: RUNNER}

    def env(self, ctx: AttemptContext) -> dict[str, str]:
        env = agent_env(
            ctx,
            temperature=self.temperature,
            ground_model=self.ground_model,
            grounding_size=self.grounding_size,
            reflection="1" if self.reflection else "0",
            settle_s=self.settle_s,
        )
        return {**env, "PYTHONPATH": ctx.path(PACKAGE)}

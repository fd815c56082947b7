"""MiniSweAgentHarness: mini-swe-agent (PyPI), unmodified, one ``mini --exit-immediately`` run.

mini-swe-agent offers one tool, ``bash``, over non-streaming chat completions (through
litellm, pointed at the attempt's proxy with ``model.model_kwargs.api_base``), and ends when a
command's first output line is ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``: the lines after it
are its submission, our final answer. It is installed with pip into its own folder and run by the
sandbox's ``python3`` with that folder on ``PYTHONPATH``; a few lines around its entry point
print the submission from its trajectory file as our last stdout line.

Reproducibility: its prompts carry the kernel's ``uname`` and no date or ids; HOME, the
workspace path and TZ are fixed by the sandbox.
"""

from __future__ import annotations

from forge.harnesses.base import AttemptContext, last_json, string_field
from forge.harnesses.install import PACKAGES
from forge.sandboxes.base import ExecResult
from forge.sandboxes.bwrap import HOME

MOUNT = "/opt/forge/harnesses/mini-swe-agent"
TRAJECTORY = f"{HOME}/mini-trajectory.json"
RUNNER = """
import json, sys
from minisweagent.run.mini import app
traj = sys.argv.pop(1)
sys.argv[0] = "mini"
try:
    app()
except SystemExit:
    pass
finally:
    try:
        info = json.load(open(traj)).get("info", {})
    except Exception:
        info = {}
    answer = info.get("submission")
    answer = answer.strip() if isinstance(answer, str) else None
    print(json.dumps({"final_answer": answer, "exit_status": info.get("exit_status")}))
"""


class MiniSweAgentHarness:
    name = "mini-swe-agent"
    protocol = "chat"

    def __init__(self, config: str = "mini.yaml") -> None:
        """``config``: the mini-swe-agent config it starts from (its own ``mini.yaml``)."""
        self.package = PACKAGES["mini-swe-agent"]
        self.config = config

    def ro_mounts(self) -> dict[str, str]:
        return {str(self.package.require()): MOUNT}

    def files(self, ctx: AttemptContext) -> dict[str, str]:
        return {}

    def env(self, ctx: AttemptContext) -> dict[str, str]:
        return {
            "PYTHONPATH": ctx.path(MOUNT),
            "MSWEA_CONFIGURED": "true",
            "MSWEA_COST_TRACKING": "ignore_errors",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no download at import
            "NO_COLOR": "1",
            "OPENAI_API_KEY": ctx.api_key,  # litellm reads it; never in argv (a process list)
        }

    def command(self, ctx: AttemptContext) -> list[str]:
        return [
            "python3",
            "-c",
            RUNNER,
            ctx.path(TRAJECTORY),
            "-m",
            f"openai/{ctx.model}",
            "--yolo",
            "--exit-immediately",
            "-c",
            self.config,
            "-c",
            f"model.model_kwargs.api_base={ctx.base_url}",
            "-c",
            f"agent.step_limit={ctx.max_turns}",
            "-o",
            ctx.path(TRAJECTORY),
            "-t",
            ctx.instruction,
        ]

    def final_answer(self, result: ExecResult) -> str | None:
        return string_field(last_json(result.stdout, lambda r: "final_answer" in r), "final_answer")

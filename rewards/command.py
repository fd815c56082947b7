"""Command checks: a shell command run inside the sandbox exits with the expected code."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from forge.sandboxes.base import Sandbox
from rewards.base import Verdict
from rewards.common import VerifierModel


def _tail(text: str, limit: int = 300) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


class Command(VerifierModel):
    """Reward 1 when ``sh -c cmd``, run in the sandbox, exits with ``expect_exit`` in time.

    A timeout is a wrong answer (reward 0); a sandbox that cannot run commands at all raises,
    so the attempt is marked failed instead of scored.
    """

    kind: ClassVar[str] = "command"
    cmd: str = Field(min_length=1, description="Shell command, run as `sh -c CMD` in the sandbox.")
    expect_exit: int = Field(default=0, description="The exit code that means success.")
    timeout_s: float = Field(
        default=30.0, gt=0, description="Seconds before the command is killed."
    )

    def verify(self, sandbox: Sandbox, final_answer: str | None) -> Verdict:
        result = sandbox.exec(["sh", "-c", self.cmd], self.timeout_s)
        if result.timed_out:
            return Verdict(0.0, f"command timed out after {self.timeout_s:g}s: {self.cmd!r}")
        if result.exit_code == self.expect_exit:
            return Verdict(1.0, f"command exited {result.exit_code}: {self.cmd!r}")
        output = _tail(result.stderr) or _tail(result.stdout)
        detail = f"command exited {result.exit_code}, expected {self.expect_exit}: {self.cmd!r}"
        return Verdict(0.0, f"{detail}; output: {output}" if output else detail)

"""Command checks: a shell command exits with the expected code.

In an episode the command runs in a verifier sandbox of its own (see :mod:`rewards.runner`):
a copy of the agent's final workspace, a fresh home, no process of the agent's, the system
PATH, and Python told to put neither the working directory nor a script's directory on
``sys.path`` (``PYTHONSAFEPATH``) and to skip the user's site-packages. So ``python3 - <<'PY'
import json`` imports the standard library's ``json`` even when the agent left a ``json.py``
(or a ``sitecustomize.py``, a ``.pth`` file, a ``~/.bashrc``, a ``python3`` shim) behind.

``files`` are the verifier's own files (a checker script, pristine copies of the inputs to
compare with): written under ``$VERIFIER_DIR`` only after the agent's workspace is in place,
where nothing of the agent's can reach them. ``$VERIFIER_DIR/task/`` holds the task's seeded
files as they were before the attempt.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import ClassVar

from pydantic import Field, field_validator

from forge.sandboxes.base import Sandbox
from rewards.base import Verdict
from rewards.common import VerifierModel

# Environment of every verifier command (on top of the sandbox's clean PATH, HOME, TZ, LANG):
# no working directory or script directory on sys.path, no user site-packages, no bytecode
# written into the workspace.
INTERPRETER_ENV = {
    "PYTHONSAFEPATH": "1",
    "PYTHONNOUSERSITE": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}


def _tail(text: str, limit: int = 300) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def relative_path(path: str) -> str:
    """``path`` when it is relative and has no ``..``; ValueError otherwise."""
    p = PurePosixPath(path)
    if not path.strip() or p.is_absolute() or ".." in p.parts:
        raise ValueError(f"file {path!r}: a relative path without '..'")
    return path


class Command(VerifierModel):
    """Reward 1 when ``sh -c cmd`` exits with ``expect_exit`` in time (cwd: the workspace).

    A timeout is a wrong answer (reward 0); a sandbox that cannot run commands at all raises,
    so the attempt is marked failed instead of scored.
    """

    kind: ClassVar[str] = "command"
    runs_commands: ClassVar[bool] = True
    cmd: str = Field(min_length=1, description="Shell command, run as `sh -c CMD` in the sandbox.")
    expect_exit: int = Field(default=0, description="The exit code that means success.")
    timeout_s: float = Field(
        default=30.0, gt=0, description="Seconds before the command is killed."
    )
    files: dict[str, str] = Field(
        default_factory=dict,
        description="The verifier's own files: relative path -> text, written under "
        "$VERIFIER_DIR after the agent's workspace is copied in (the agent never sees them).",
    )

    @field_validator("files")
    @classmethod
    def _files_relative(cls, v: dict[str, str]) -> dict[str, str]:
        for path in v:
            relative_path(path)
        return v

    def own_files(self) -> dict[str, str]:
        return dict(self.files)

    def verify(self, sandbox: Sandbox, final_answer: str | None) -> Verdict:
        result = sandbox.exec(["sh", "-c", self.cmd], self.timeout_s, INTERPRETER_ENV)
        if result.timed_out:
            return Verdict(0.0, f"command timed out after {self.timeout_s:g}s: {self.cmd!r}")
        if result.exit_code == self.expect_exit:
            return Verdict(1.0, f"command exited {result.exit_code}: {self.cmd!r}")
        output = _tail(result.stderr) or _tail(result.stdout)
        detail = f"command exited {result.exit_code}, expected {self.expect_exit}: {self.cmd!r}"
        return Verdict(0.0, f"{detail}; output: {output}" if output else detail)

"""The task format: a task is data (one YAML or JSON mapping), validated by these models.

Example (``tasks/data/smoke/hello_file.yaml``)::

    id: hello_file
    instruction: Create hello.txt containing exactly the line "Hello, OpenForge!".
    verifier: {type: file_equals, path: hello.txt, content: "Hello, OpenForge!"}
    solution:
      - printf 'Hello, OpenForge!\\n' > hello.txt
    tags: [smoke, files]
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, field_validator

from rewards import validate_spec

ID_PATTERN = r"^[a-z0-9][a-z0-9._-]*$"


def check_relative_path(path: str) -> str:
    """A workspace-relative POSIX path: not empty, not absolute, no ``..`` component."""
    if not path or not path.strip():
        raise ValueError("empty path")
    if "\\" in path:
        raise ValueError(f"path {path!r} must use '/' separators")
    p = PurePosixPath(path)
    if p.is_absolute():
        raise ValueError(f"path {path!r} must be relative to the workspace")
    if ".." in p.parts:
        raise ValueError(f"path {path!r} must not contain '..'")
    return path


class Limits(BaseModel):
    """Bounds on one attempt of the task."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(default=20, ge=1, description="Most model calls one attempt may make.")
    timeout_s: float = Field(
        default=300.0, gt=0, description="Wall-clock seconds one attempt may run before it fails."
    )
    max_tokens_per_turn: int = Field(
        default=512, ge=1, description="Most tokens the policy samples for one model call."
    )


class WriteFile(BaseModel):
    """A solution step that writes ``content`` to ``path`` in the workspace."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="Workspace-relative path of the file to write.")
    content: str = Field(description="The file's full text.")

    @field_validator("path")
    @classmethod
    def _path_relative(cls, v: str) -> str:
        return check_relative_path(v)


def _check_step(step: Any) -> Any:
    if isinstance(step, str):
        if not step.strip():
            raise ValueError("empty shell command")
        return step
    if isinstance(step, dict):
        keys = set(step)
        if keys != {"path", "content"}:
            raise ValueError(
                "a file step has exactly the keys 'path' and 'content' "
                f"(got {', '.join(sorted(map(str, keys))) or 'none'})"
            )
        if not isinstance(step["content"], str) or not isinstance(step["path"], str):
            raise ValueError("a file step's 'path' and 'content' are strings")
        return WriteFile(path=check_relative_path(step["path"]), content=step["content"])
    if isinstance(step, WriteFile):
        return step
    raise ValueError(
        f"a step is a shell command string or a {{path, content}} mapping, "
        f"got {type(step).__name__}"
    )


Step = Annotated[str | WriteFile, BeforeValidator(_check_step)]
"""One step of a reference solution: a shell command (run with ``sh -c`` in the workspace) or
a file to write."""


class Task(BaseModel):
    """One task: what the agent is asked, the workspace it starts in, and how it is checked."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(
        pattern=ID_PATTERN,
        description="Unique id within its suite: lower-case letters, digits, '.', '_' and '-'.",
    )
    instruction: str = Field(min_length=1, description="What the agent is asked to do.")
    files: dict[str, str] = Field(
        default_factory=dict,
        description="Files seeded into the workspace before the attempt: relative path -> text.",
    )
    verifier: dict[str, Any] | list[dict[str, Any]] = Field(
        description="How the result is checked: a mapping with 'type' plus that verifier's "
        "fields, or a list of such mappings that must all pass (see rewards.VERIFIERS).",
    )
    solution: list[Step] = Field(
        default_factory=list,
        description="Reference solution: shell commands (run with sh in the workspace) or "
        "{path, content} file writes, in order. Played by the scripted model double and used "
        "to prove the task is solvable.",
    )
    answer: str | None = Field(
        default=None, description="The final answer the reference solution gives, if any."
    )
    limits: Limits = Field(default_factory=Limits, description="Bounds on one attempt.")
    tags: list[str] = Field(default_factory=list, description="Free-form labels for filtering.")

    _source: str | None = PrivateAttr(default=None)

    @field_validator("instruction")
    @classmethod
    def _instruction_not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("instruction is blank")
        return v

    @field_validator("files")
    @classmethod
    def _files_relative(cls, v: dict[str, str]) -> dict[str, str]:
        for path in v:
            check_relative_path(path)
        return v

    @field_validator("verifier", mode="before")
    @classmethod
    def _verifier_builds(cls, v: Any) -> Any:
        validate_spec(v)  # raises rewards.SpecError (a ValueError) naming the field
        return v

    @property
    def source(self) -> str | None:
        """The file this task was loaded from, when it came from a file."""
        return self._source

    def reference_script(self) -> dict[str, Any]:
        """The reference solution as plain data (``steps`` and ``answer``), e.g. for the
        ``script`` of a request to the scripted model double."""
        steps: list[Any] = [s if isinstance(s, str) else s.model_dump() for s in self.solution]
        return {"task_id": self.id, "steps": steps, "answer": self.answer}

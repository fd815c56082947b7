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

import base64
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from rewards.registry import validate_spec
from tasks.environment import Environment
from tasks.services import APPS, check_apps
from tasks.services.http import catalog_entry, own_spec

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
        default=300.0,
        gt=0,
        description="Seconds the harness may run, not counting the time its model calls spend "
        "inside the Policy (queued or held by a weight update): past it the attempt ends as the "
        "policy's `timeout` (after a model call).",
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


GUI_ACTIONS = (
    "click",
    "double_click",
    "type",
    "press",
    "scroll",
    "drag",
    "goto",
    "back",
    "wait",
)
"""The GUI action space (``done(answer)`` ends an episode and is the task's ``answer``)."""
SCREEN_SCALE = 1000
"""GUI coordinates are integers in [0, SCREEN_SCALE] across the screenshot, left/top at 0."""


class GuiAction(BaseModel):
    """A GUI solution step: one action of :data:`GUI_ACTIONS` as a GUI harness's tool takes it.

    Coordinates are normalised to the screenshot: 0..1000 on each axis (``x`` from the left,
    ``y`` from the top), whatever the screen's size in pixels. ``click``/``double_click``: x, y;
    ``type``: text; ``press``: keys ("Enter", "ctrl+a"); ``scroll``: x, y, dy (and dx) in wheel
    notches, positive down/right; ``drag``: x, y to x2, y2; ``goto``: url; ``back``; ``wait``:
    seconds.
    """

    model_config = ConfigDict(extra="forbid")

    action: Literal[GUI_ACTIONS] = Field(description="The action's name.")  # type: ignore[valid-type]
    x: int | None = Field(default=None, ge=0, le=SCREEN_SCALE, description="0..1000 from the left.")
    y: int | None = Field(default=None, ge=0, le=SCREEN_SCALE, description="0..1000 from the top.")
    x2: int | None = Field(default=None, ge=0, le=SCREEN_SCALE, description="drag: end x.")
    y2: int | None = Field(default=None, ge=0, le=SCREEN_SCALE, description="drag: end y.")
    text: str | None = Field(default=None, description="type: the text typed.")
    keys: str | None = Field(default=None, description="press: keys, '+'-joined ('ctrl+s').")
    dx: int = Field(default=0, description="scroll: notches right (negative: left).")
    dy: int = Field(default=0, description="scroll: notches down (negative: up).")
    url: str | None = Field(default=None, description="goto: the address.")
    seconds: float = Field(default=1.0, ge=0, le=30, description="wait: how long.")

    @model_validator(mode="after")
    def _has_its_arguments(self) -> GuiAction:
        need = {
            "click": ("x", "y"),
            "double_click": ("x", "y"),
            "scroll": ("x", "y"),
            "drag": ("x", "y", "x2", "y2"),
            "type": ("text",),
            "press": ("keys",),
            "goto": ("url",),
        }.get(self.action, ())
        missing = [k for k in need if getattr(self, k) is None]
        if missing:
            raise ValueError(f"a {self.action} step needs {', '.join(missing)}")
        return self


class ServiceCall(BaseModel):
    """A solution step that calls one operation of a task's service (``apps``): the scripted
    model plays it through the service's tool where the harness offers one, else through its
    command-line tool in the shell."""

    model_config = ConfigDict(extra="forbid")

    service: str = Field(description="The service (mail, calendar, contacts, notes, kv).")
    op: str = Field(description="The operation (send, move, ...).")
    args: dict[str, Any] = Field(default_factory=dict, description="Its arguments.")

    def check_against(self, seed: Any) -> None:
        """ValueError naming the field unless the task's service (its ``apps`` entry, ``seed``)
        has this operation and takes these arguments."""
        spec = own_spec(seed)
        if spec is not None:  # a task's own service: the program checks the arguments
            if self.op not in {e["name"] for e in catalog_entry(self.service, spec)["ops"]}:
                raise ValueError(f"op: {self.service} has no {self.op!r}")
            return
        op = APPS[self.service].ops.get(self.op)
        if op is None:
            raise ValueError(f"op: {self.service} has no {self.op!r}")
        op.check(self.args)  # a ServiceError (a ValueError) names the argument


def _check_step(step: Any) -> Any:
    if isinstance(step, dict) and "action" in step:
        return GuiAction.model_validate(step)
    if isinstance(step, dict) and "service" in step:
        return ServiceCall.model_validate(step)
    if isinstance(step, GuiAction | ServiceCall):
        return step
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


Step = Annotated[str | WriteFile | GuiAction | ServiceCall, BeforeValidator(_check_step)]
"""One step of a reference solution: a shell command (run with ``sh -c`` in the workspace), a
file to write, a GUI action (:class:`GuiAction`, for GUI tasks) or a call of one of the task's
services (:class:`ServiceCall`)."""


class Service(BaseModel):
    """A process the task needs running inside the sandbox while the harness runs (a web
    application's state server, a desktop application): started in the workspace before the
    harness, with the task's screen as ``DISPLAY`` when the task has a display, and stopped
    (its whole process group) when the harness ends. It keeps its state in the workspace,
    where the verifier reads it after the episode."""

    model_config = ConfigDict(extra="forbid")

    command: str = Field(min_length=1, description="Shell command (sh -c, in the workspace).")
    ready: str | None = Field(
        default=None,
        description="When it is up: an http://127.0.0.1:PORT/... URL that answers 2xx, "
        "file:PATH (workspace-relative) that exists, or window:NAME, a visible window whose "
        "title or WM_CLASS matches NAME (desktop tasks). None: started, not waited for.",
    )
    ready_timeout_s: float = Field(default=30.0, gt=0, description="Most seconds to wait.")


class Gui(BaseModel):
    """What a GUI task shows: the screen's size and where a browser starts."""

    model_config = ConfigDict(extra="forbid")

    screen: tuple[int, int] = Field(
        default=(640, 480), description="Width and height in pixels (viewport or X display)."
    )
    start_url: str | None = Field(
        default=None, description="The page a browser harness opens before the first turn."
    )
    display: bool = Field(
        default=False,
        description="Start an X display (Xvfb and a window manager) of this size before the "
        "services: a desktop task.",
    )


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
    binary_files: dict[str, str] = Field(
        default_factory=dict,
        description="Binary files seeded the same way: relative path -> base64 of its bytes.",
    )
    verifier: dict[str, Any] | list[dict[str, Any]] = Field(
        description="How the result is checked: a mapping with 'type' plus that verifier's "
        "fields, or a list of such mappings that must all pass (see rewards.registry.VERIFIERS).",
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
    services: list[Service] = Field(
        default_factory=list,
        description="Processes started inside the sandbox before the harness (see Service).",
    )
    gui: Gui | None = Field(default=None, description="Set for GUI tasks (see Gui).")
    apps: dict[str, Any] = Field(
        default_factory=dict,
        description="Services offered as tools (mail, calendar, contacts, notes, kv: "
        "tasks.services), each with its seed ('default' or its state), or the task's own HTTP "
        "service ({http: {...}}: tasks.services.http). They are kept by the HarnessPod, beside "
        "the sandbox and out of its reach; the verifier reads their state.",
    )
    environment: Environment | None = Field(
        default=None,
        description="Set for a task that brings its own image (see Environment): Harbor tasks.",
    )
    allow_internet: bool = Field(
        default=False,
        description="The task needs the internet while the agent works and while it is "
        "checked (Harbor's allow_internet): its agent and verify phases are open, where the "
        "run's sandbox.network.honour_task_requests allows it.",
    )
    pass_threshold: float = Field(
        default=1.0,
        gt=0.0,
        le=1.0,
        description="The reward at which an attempt counts as passed in pass@k and pass^k (a "
        "benchmark's own bar: ClawEval's is 0.75).",
    )
    tags: list[str] = Field(default_factory=list, description="Free-form labels for filtering.")

    _source: str | None = PrivateAttr(default=None)

    @field_validator("instruction")
    @classmethod
    def _instruction_not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("instruction is blank")
        return v

    @field_validator("files", "binary_files")
    @classmethod
    def _files_relative(cls, v: dict[str, str]) -> dict[str, str]:
        for path in v:
            check_relative_path(path)
        return v

    @field_validator("binary_files")
    @classmethod
    def _base64(cls, v: dict[str, str]) -> dict[str, str]:
        for path, data in v.items():
            try:
                base64.b64decode(data, validate=True)
            except ValueError:
                raise ValueError(f"{path}: not base64") from None
        return v

    def seeds(self) -> dict[str, str | bytes]:
        """Every seeded file, text and binary: relative path -> its content."""
        return {**self.files, **{p: base64.b64decode(d) for p, d in self.binary_files.items()}}

    @field_validator("apps")
    @classmethod
    def _apps_known(cls, v: dict[str, Any]) -> dict[str, Any]:
        return check_apps(v)

    @field_validator("verifier", mode="before")
    @classmethod
    def _verifier_builds(cls, v: Any) -> Any:
        validate_spec(v)  # raises rewards.common.SpecError (a ValueError) naming the field
        return v

    @model_validator(mode="after")
    def _steps_call_offered_services(self) -> Task:
        for i, step in enumerate(self.solution):
            if not isinstance(step, ServiceCall):
                continue
            if step.service not in self.apps:
                offered = ", ".join(self.apps) or "none"
                raise ValueError(f"solution.{i}.service: {step.service!r} is not in apps "
                                 f"(offered: {offered})")  # fmt: skip
            try:
                step.check_against(self.apps[step.service])
            except ValueError as e:
                raise ValueError(f"solution.{i}.{e}") from None
        return self

    @property
    def source(self) -> str | None:
        """The file this task was loaded from, when it came from a file."""
        return self._source

    def reference_script(self) -> dict[str, Any]:
        """The reference solution as plain data (``steps`` and ``answer``), e.g. for the
        ``script`` of a request to the scripted model double."""
        steps: list[Any] = [
            s if isinstance(s, str) else s.model_dump(exclude_defaults=isinstance(s, GuiAction))
            for s in self.solution
        ]
        for step in steps:  # a task's own HTTP service's command is forge-service NAME
            if isinstance(step, dict) and own_spec(self.apps.get(step.get("service"))):
                step["command"] = f"forge-service {step['service']}"
        return {"task_id": self.id, "steps": steps, "answer": self.answer}

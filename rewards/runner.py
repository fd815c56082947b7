"""Verification out of the agent's reach (DESIGN.md decision 10).

:func:`run_verifier` scores an attempt after its harness has exited:

1. the agent's workspace is copied out of its sandbox as a tar (symlinks stay symlinks and are
   never followed; FIFOs and devices are left out; a workspace over ``max_workspace_bytes`` is
   a wrong answer, decided from ``stat`` before anything is read);
2. the agent's sandbox is destroyed, which kills every process the agent left behind;
3. a verifier that only reads files (file, JSON and judge checks) reads the copy itself, as the
   sandbox it would be extracted into serves it, without one
   (:class:`forge.sandboxes.archive_view.ArchiveView`: the same files, links followed only
   inside the workspace, and no container to start on docker);
4. each verifier that runs commands gets a fresh sandbox of the same backend: the copy goes into
   its workspace, and only then the verifier's own files (``$VERIFIER_DIR``) and pristine
   copies of the task's seeded files (``$VERIFIER_DIR/task/``). ``$VERIFIER_DIR`` is a new
   random folder in the home for each verifier sandbox, so no link the agent left can name it
   (and files are read through links inside the workspace only: :func:`rewards.common.
   read_text`). Its home is otherwise empty, its PATH the
   system's, and commands run with the interpreter settings of
   :data:`rewards.command.INTERPRETER_ENV`, so nothing the agent wrote (module shadows,
   ``sitecustomize``, ``.pth`` files, shell start-up files, shims) changes how they run;
   A command can run the agent's program and change its sandbox, so the next verifier gets
   another fresh copy.

A Harbor task in Harbor's mode (:attr:`rewards.harbor_tests.HarborTests.in_place`) is the
exception: its tests run in the agent's own sandbox, once every process the agent left is
killed, and the sandbox is destroyed after them. Either way, what the agent changed on the
system outside its workdir (a backend that can tell: docker) is listed with the verdict.

Verifiers that read the transcript (``transcript`` checks, the ``judge``) get the attempt as
the model proxy recorded it (:mod:`forge.transcript`), never a file the agent could write.
Answer-only tasks need no sandbox at all, nor do ``app_state`` and ``page_state`` checks (they
read the task's services' and page application's state, which the HarnessPod kept, handed in
as ``apps``). An error of the sandboxes
themselves propagates (the attempt is marked failed, not scored); what the agent's files cause
is a reward of 0, and so is output no verifier can take in (a ``RecursionError`` from JSON
nested thousands deep: logged and counted, :func:`unreadable_outputs`).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from forge.sandboxes.archive_view import ArchiveView
from forge.sandboxes.base import ArchiveTooLarge, ExecResult, Sandbox, SandboxSpec
from forge.sandboxes.bwrap import HOME
from forge.sandboxes.task_services import ENTRY_LOG
from rewards.base import Verdict
from rewards.common import VERIFIER_DIR, AllOf, VerifierModel, Weighted, verifier_dir
from rewards.registry import build_verifier
from rewards.registry import leaves as _flatten

if TYPE_CHECKING:
    from tasks.schema import Task

log = logging.getLogger(__name__)

TASK_FILES = "task"  # under VERIFIER_DIR: the task's seeded files, pristine
MAX_WORKSPACE_BYTES = 64 << 20
SLACK_S = 30.0  # a verifier sandbox outlives its commands' timeouts by this much
MAX_CHANGES = 500  # system paths the agent changed, listed with the episode

__all__ = [
    "MAX_WORKSPACE_BYTES",
    "VERIFIER_DIR",
    "VerifierNetwork",
    "run_verifier",
    "unreadable_outputs",
    "verifier_dir",
    "verifier_files",
    "verifier_seconds",
    "verifies_in_place",
]


class _NoSandbox:
    """Handed to answer-only verifiers: they judge the final answer and touch no sandbox."""

    workspace = ""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"an answer verifier used the sandbox ({name})")


def _combine(node: Any, verdicts: Iterator[Verdict]) -> Verdict:
    """The verdict of ``node`` from its leaves' verdicts, in :func:`_flatten`'s order."""
    if isinstance(node, AllOf):
        return AllOf.combine([_combine(v, verdicts) for v in node.verifiers])
    if isinstance(node, Weighted):
        return node.combine([_combine(v, verdicts) for v in node.verifiers])
    return next(verdicts)


def verifier_files(task: Task, verifiers: list[VerifierModel]) -> dict[str, str | bytes]:
    """Paths relative to :data:`VERIFIER_DIR` -> text: the task's seeded files under ``task/``
    and every verifier's own files."""
    files: dict[str, str | bytes] = {f"{TASK_FILES}/{p}": c for p, c in task.seeds().items()}
    for v in verifiers:
        files.update(v.own_files())
    return files


def _deadline(verifiers: list[VerifierModel]) -> float:
    return sum(getattr(v, "timeout_s", 0.0) for v in verifiers if v.runs_commands) + SLACK_S


def verifier_seconds(task: Task) -> float:
    """The most time ``task``'s verifiers' commands may take (their timeouts, summed)."""
    return _deadline(_flatten(build_verifier(task.verifier))) - SLACK_S


_unreadable = 0


def unreadable_outputs() -> int:
    """How many verifications in this process met agent output no verifier could take in."""
    return _unreadable


@dataclass
class VerifierNetwork:
    """The verify phase's way out (``sandbox.network.verify``): the variables that point its
    commands at the egress proxy, and the proxy's socket for a fresh verifier sandbox to relay
    (both empty: its proxy only, or nothing)."""

    env: dict[str, str] = field(default_factory=dict)
    egress_socket: str | None = None
    mode: str = "none"  # the phase's network mode: a fresh verifier sandbox's ``network`` label


class _VerifierBox:
    """A verifier sandbox with its own folder :attr:`verifier_dir` (a random name under the
    home, made before the agent's copy could name it), whose commands get it as
    ``$VERIFIER_DIR`` (where the backend shows it: a host path when it runs unisolated)."""

    def __init__(self, box: Sandbox, env: dict[str, str] | None = None) -> None:
        self.box = box
        self.verifier_dir = f"{VERIFIER_DIR}-{secrets.token_hex(8)}"
        home = box.path_map().get(HOME)
        shown = self.verifier_dir.replace(HOME, home, 1) if home else self.verifier_dir
        self.env = {**(env or {}), "VERIFIER_DIR": shown}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.box, name)

    def exec(
        self, cmd: list[str], timeout_s: float, env: dict[str, str] | None = None, **kw: Any
    ) -> ExecResult:
        """The sandbox's exec with ``$VERIFIER_DIR`` (``kw``: the backend's own, ``user``)."""
        return self.box.exec(cmd, timeout_s, {**self.env, **(env or {})}, **kw)


def _fresh(
    new_sandbox: Callable[[], Sandbox],
    spec: SandboxSpec,
    workspace: bytes,
    files: dict[str, str | bytes],
    env: dict[str, str],
) -> Sandbox:
    box = new_sandbox()
    try:
        box.create(spec)
        if spec.environment:  # the task's image has its own workdir: the agent's copy replaces it
            cleared = box.exec(["find", box.workspace, "-mindepth", "1", "-delete"], 60.0)
            if cleared.exit_code != 0:
                raise RuntimeError(f"emptying {box.workspace}: {cleared.stderr.strip()}")
        box.put_archive(box.workspace, workspace)
        wrapped = _VerifierBox(box, env)
        for rel, text in files.items():
            box.put_file(f"{wrapped.verifier_dir}/{rel}", text)
    except BaseException:
        box.destroy()
        raise
    return wrapped  # type: ignore[return-value]


def _verify(
    v: VerifierModel, box: Any, answer: str | None, transcript: dict[str, Any] | None = None
) -> Verdict:
    """``v``'s verdict (with the transcript, for a verifier that reads it); agent output that
    no verifier can take in (JSON or a tree nested thousands deep raising ``RecursionError``)
    is a reward of 0, logged and counted."""
    global _unreadable
    try:
        if getattr(v, "reads_transcript", False):
            return v.verify_with(box, answer, transcript)  # type: ignore[attr-defined]
        return v.verify(box, answer)
    except RecursionError:
        _unreadable += 1
        log.warning("%s verifier: the agent's output is nested too deeply to check", v.kind)
        return Verdict(0.0, f"{v.kind}: the agent's output is nested too deeply to check")


def run_verifier(
    task: Task,
    agent_sandbox: Sandbox,
    answer: str | None,
    new_sandbox: Callable[[], Sandbox],
    labels: dict[str, str] | None = None,
    max_workspace_bytes: int = MAX_WORKSPACE_BYTES,
    apps: dict[str, Any] | None = None,
    network: VerifierNetwork | None = None,
    transcript: dict[str, Any] | Callable[[], dict[str, Any]] | None = None,
) -> Verdict:
    """Score ``task`` for an attempt whose harness has exited; see the module docstring.

    ``new_sandbox`` returns a new, not yet created sandbox of the agent's backend. The agent's
    sandbox is destroyed here, whatever the outcome (its workspace is copied out first).
    ``apps``: the state of the task's services after the episode (``app_state`` reads it).
    ``network``: the verify phase's way out, if its network has one. ``transcript``: the
    attempt as the proxy recorded it (:mod:`forge.transcript`), for the verifiers that read it,
    or a function that builds it, called only when one of them does.
    """
    network = network or VerifierNetwork()
    top = build_verifier(task.verifier)
    verifiers = _flatten(top)
    if callable(transcript):
        wanted = any(v.reads_state or getattr(v, "reads_transcript", False) for v in verifiers)
        transcript = transcript() if wanted else None
    changes = system_changes(agent_sandbox, task)
    if in_place(verifiers):
        try:
            verdict = _verify(verifiers[0], _VerifierBox(agent_sandbox, network.env), answer)
        finally:
            agent_sandbox.destroy()
        return _with_changes(verdict, changes)
    workspace: bytes | None = None
    try:
        where = agent_sandbox.workspace  # and where else it is reached (unisolated: /workspace)
        aliases = [p for p, shown in agent_sandbox.path_map().items() if shown == where]
        if any(v.reads_sandbox for v in verifiers):
            workspace = agent_sandbox.get_archive(where, max_workspace_bytes)
    except ArchiveTooLarge as e:
        return Verdict(0.0, f"workspace too large to verify: {e}")
    finally:
        agent_sandbox.destroy()
    spec = SandboxSpec(
        labels={**(labels or {}), "role": "verifier", "network": network.mode},
        deadline_s=_deadline(verifiers),
        environment=task.environment.model_dump() if task.environment else None,
        egress_socket=network.egress_socket,
    )
    files = verifier_files(task, verifiers)
    verdicts: list[Verdict] = []
    view: ArchiveView | None = None
    for v in verifiers:
        if v.reads_state:
            verdicts.append(v.verify_state(apps, transcript, answer))  # type: ignore[attr-defined]
        elif not v.reads_sandbox:
            verdicts.append(_verify(v, _NoSandbox(), answer, transcript))
        elif not v.runs_commands:  # reads files only: the copy itself serves them
            assert workspace is not None
            view = view or ArchiveView(workspace, where, aliases)
            verdicts.append(_verify(v, view, answer, transcript))
        else:  # its commands may change what they run in: a fresh copy for each
            assert workspace is not None
            box = _fresh(new_sandbox, spec, workspace, files, network.env)
            try:
                verdicts.append(_verify(v, box, answer, transcript))
            finally:
                box.destroy()
    return _with_changes(_combine(top, iter(verdicts)), changes)


def in_place(verifiers: list[VerifierModel]) -> bool:
    """Whether the task verifies in the agent's own sandbox (one Harbor test run in Harbor's
    mode, :attr:`rewards.harbor_tests.HarborTests.in_place`), not in fresh ones."""
    return len(verifiers) == 1 and bool(getattr(verifiers[0], "in_place", False))


def verifies_in_place(task: Task) -> bool:
    return in_place(_flatten(build_verifier(task.verifier)))


# Where an agent's changes are expected (its workdir, the temp folders, its home, the
# sandbox's own folders and its agent's bytecode): left out of what it changed on the system
_EXPECTED = ("/tmp", "/var/tmp", HOME, "/run/forge", "/opt/forge", "/logs", "/tests", "/solution",
             "/root", "/usr/sbin/docker-init", ENTRY_LOG)  # fmt: skip


def system_changes(sandbox: Sandbox, task: Task) -> list[str]:
    """What the agent changed outside its workdir (``A``dded, ``C``hanged, ``D``eleted paths,
    e.g. a shim planted in ``/usr/local/bin``), from a backend that can tell (docker: the
    container's diff against its image); empty elsewhere. Read before any verifier runs."""
    changed = getattr(sandbox, "changed_paths", None)
    if changed is None or task.environment is None:
        return []
    skip = (*_EXPECTED, task.environment.workdir)
    paths = [(k, p) for k, p in changed() if not any(p == d or p.startswith(d + "/") for d in skip)]
    parents = {p.rsplit("/", 1)[0] for _, p in paths}
    return [f"{k} {p}" for k, p in paths if not (k == "C" and p in parents)]


def _with_changes(verdict: Verdict, changes: list[str]) -> Verdict:
    if changes:
        verdict.outputs["system_changes"] = "\n".join(changes[:MAX_CHANGES]) + (
            f"\n... and {len(changes) - MAX_CHANGES} more" if len(changes) > MAX_CHANGES else ""
        )
    return verdict

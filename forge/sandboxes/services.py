"""A task's services and X display around the harness command (host side of
:mod:`forge.sandboxes.services_launch`).

When a task has ``services`` or a ``gui`` with ``display``, the episode runs
``python3 -I PROGRAM --spec JSON -- <harness command>`` instead of the harness command, with the
launcher and the project's web applications (``tasks/webapps``, at :data:`WEBAPPS`) mounted
read-only. The launcher's own failure (a service that never came up) is the attempt's
``service_failed`` failure, found by :func:`service_failed`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from forge.harnesses.gui_actions import CHROMIUM_POLICY, chromium_policy
from forge.sandboxes import services_launch
from forge.sandboxes.base import ExecResult
from forge.sandboxes.services_launch import MARKER, PROGRAM, SERVICE_FAILED
from tasks.webapps import hosted
from tasks.webapps.hosted import WEBAPPS, miniwob_html

if TYPE_CHECKING:
    from forge.harnesses.base import AttemptContext
    from tasks.schema import Task

LAUNCHER_HOST = str(Path(services_launch.__file__).resolve())
WEBAPPS_HOST = str(Path(__file__).resolve().parents[2] / "tasks" / "webapps")
SHARED_ENV = frozenset({"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "TZ"})
"""Variables services keep even when the harness sets them (a harness may prepend to PATH)."""
MINIWOB = "/opt/forge/miniwob"  # the miniwob package's html/, for MiniWoB tasks' services
__all__ = [
    "PROGRAM",
    "WEBAPPS",
    "gui_extra",
    "miniwob_html",
    "mounts",
    "needs_launcher",
    "service_failed",
    "wrap",
]


def needs_launcher(task: Task) -> bool:
    """Whether the task's harness runs under the launcher: it has services or a display."""
    return bool(task.services) or bool(task.gui and task.gui.display)


def mounts(task: Task) -> dict[str, str]:
    """Read-only mounts (host -> sandbox) the launcher and the web applications need (the
    project's state servers are not among them: the HarnessPod keeps those, ``hosted``), and
    for a GUI task Chromium's policy (:data:`~forge.harnesses.gui_actions.CHROMIUM_POLICY`)."""
    policy = {chromium_policy(task.gui.display): CHROMIUM_POLICY} if task.gui else {}
    if not needs_launcher(task):
        return policy
    out = {LAUNCHER_HOST: PROGRAM, WEBAPPS_HOST: WEBAPPS, **policy}
    if any(MINIWOB in s.command and not _hosted(s.command) for s in task.services):
        out[miniwob_html()] = MINIWOB
    return out


def _hosted(command: str) -> bool:
    try:
        return hosted.parse(command) is not None
    except ValueError:
        return True  # refused at the start of the attempt (hosted.Hosted)


def gui_extra(task: Task) -> dict[str, str]:
    """What a GUI harness reads from ``AttemptContext.extra``: ``screen`` ("640x480") and,
    when the task has one, ``start_url``."""
    if task.gui is None:
        return {}
    width, height = task.gui.screen
    extra = {"screen": f"{width}x{height}"}
    if task.gui.start_url:
        extra["start_url"] = task.gui.start_url
    return extra


def launcher_spec(
    task: Task, paths: dict[str, str], harness_env: Iterable[str] = ()
) -> dict[str, object]:
    return {
        "services": [s.model_dump() for s in task.services],
        "gui": task.gui.model_dump() if task.gui else None,
        "paths": paths,
        "harness_env": sorted(set(harness_env) - SHARED_ENV),
    }


def wrap(
    task: Task, ctx: AttemptContext, command: list[str], harness_env: Iterable[str] = ()
) -> list[str]:
    """``command`` run under the launcher when the task needs it; else ``command`` itself.
    ``harness_env``: names of the harness's own variables (``harness.env(ctx)``), which the
    services do not get (except :data:`SHARED_ENV`)."""
    if not needs_launcher(task):
        return command
    spec = json.dumps(launcher_spec(task, ctx.paths, harness_env), separators=(",", ":"))
    return ["python3", "-I", ctx.path(PROGRAM), "--spec", spec, "--", *command]


def service_failed(result: ExecResult) -> bool:
    """Whether the launcher ended the attempt because the display or a service did not come
    up (its status and its marker line on stderr)."""
    return result.exit_code == SERVICE_FAILED and MARKER in result.stderr

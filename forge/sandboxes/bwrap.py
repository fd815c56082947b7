"""bubblewrap command lines for local sandboxes, and a once-per-process probe that it works."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading

log = logging.getLogger(__name__)

WORKSPACE = "/workspace"
HOME = "/home/agent"
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOSTNAME = "sandbox"

_probe_lock = threading.Lock()
_probe_result: bool | None = None


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def python_prefix() -> str | None:
    """The real Python installation (not the venv), when it lies outside the system dirs."""
    prefix = os.path.realpath(sys.base_prefix)
    if any(_under(prefix, os.path.realpath(d)) for d in SYSTEM_DIRS if os.path.isdir(d)):
        return None
    return prefix


def sandbox_path_var() -> str:
    """The fixed PATH inside sandboxes: the system dirs, then the real Python's ``bin`` (so
    ``python3`` works where the only interpreter is, say, under ``/root/.pyenv``)."""
    prefix = python_prefix()
    return f"{SYSTEM_PATH}:{prefix}/bin" if prefix else SYSTEM_PATH


def host_python() -> str:
    """This process's real interpreter when the sandbox sees it at the same path, else
    ``python3`` from the sandbox's PATH."""
    exe = os.path.realpath(sys.executable)
    roots = [os.path.realpath(d) for d in SYSTEM_DIRS if os.path.isdir(d)]
    prefix = python_prefix()
    if prefix:
        roots.append(prefix)
    return exe if any(_under(exe, r) for r in roots) else "python3"


def base_args() -> list[str]:
    """Namespaces, the read-only system and a private /tmp, /dev and /proc."""
    args = [
        "bwrap",
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--hostname",
        HOSTNAME,
    ]
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    prefix = python_prefix()
    if prefix:
        args += ["--ro-bind", prefix, prefix]
    args += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    return args


def bwrap_argv(
    *,
    workspace: str,
    home: str,
    ro_mounts: dict[str, str],
    binds: dict[str, str] | None = None,
) -> list[str]:
    """The bwrap prefix of one exec: system read-only, ``workspace`` at /workspace and ``home``
    at /home/agent read-write, ``ro_mounts`` (host -> sandbox) read-only, ``binds`` (host ->
    sandbox, e.g. the proxy socket) read-write, the root itself read-only, working directory
    /workspace.

    The environment is not set here: bwrap passes its own, and callers run it with exactly the
    sandbox's environment (the same as ``--clearenv`` plus ``--setenv`` for each variable, but
    keeping the attempt's key out of the host's process list).
    """
    args = base_args()
    args += ["--bind", workspace, WORKSPACE, "--bind", home, HOME]
    for host, target in ro_mounts.items():
        args += ["--ro-bind", host, target]
    for host, target in (binds or {}).items():
        args += ["--bind", host, target]
    args += ["--remount-ro", "/", "--chdir", WORKSPACE, "--"]
    return args


def bwrap_works() -> bool:
    """Whether bubblewrap is installed and can build our sandbox here; probed once per process."""
    global _probe_result
    with _probe_lock:
        if _probe_result is None:
            _probe_result = _probe()
        return _probe_result


def _probe() -> bool:
    if shutil.which("bwrap") is None:
        log.debug("bwrap not found on PATH")
        return False
    argv = [*base_args(), "--chdir", "/", "--", "true"]
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=20,
            env={"PATH": SYSTEM_PATH},
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        log.debug("bwrap probe failed: %s", e)
        return False
    if done.returncode != 0:
        log.debug("bwrap probe failed: %s", done.stderr.decode(errors="replace").strip())
        return False
    return True

"""Sandbox directories' labels, and the reconcile pass that deletes orphaned ones.

Each local sandbox directory holds a ``.forge-labels.json`` beside its workspace: labels (run,
pod, attempt), the creator's pid and kernel start time, host name and wall-clock deadline.

An orphan's processes go before its directory: every process working in it or started with a
path in it (the outer ``bwrap`` names the directory in its argv; an unisolated harness and its
tools work in its workspace) is killed with its process group. Under bwrap the sandbox's own
processes die with their parent anyway; without isolation nothing else would stop them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import tempfile
import time
from pathlib import Path

LABELS_FILE = ".forge-labels.json"


def default_root() -> Path:
    return Path(tempfile.gettempdir()) / "openforge-sandboxes"


def rmtree(path: Path) -> None:
    if not os.path.lexists(path):
        return
    try:
        shutil.rmtree(path)
    except OSError:
        # Unreadable dirs left by the agent (chmod 000): open them up, never through symlinks.
        for dirpath, dirnames, _ in os.walk(path):
            for dn in dirnames:
                p = os.path.join(dirpath, dn)
                if not os.path.islink(p):
                    with contextlib.suppress(OSError):
                        os.chmod(p, 0o700)
        shutil.rmtree(path, ignore_errors=True)


def dir_name(labels: dict[str, str]) -> str:
    parts = [labels[k] for k in ("run", "pod", "attempt") if labels.get(k)]
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(parts)).strip("._-")
    return name[:48] or "sandbox"


def pid_start(pid: int) -> str | None:
    """The kernel start time of ``pid`` (guards against pid reuse), when /proc has it."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


def _pid_alive(pid: int, start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return start is None or pid_start(pid) in (None, start)


def _procs_in(d: Path) -> list[int]:
    """Processes (not this one) whose working directory or argv lies inside ``d``."""
    prefix = str(d).rstrip("/") + "/"
    out = []
    for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            cwd = os.readlink(f"/proc/{name}/cwd")
        except OSError:
            cwd = ""
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        inside = (cwd + "/").startswith(prefix) or any(
            a.decode(errors="replace").startswith(prefix) for a in argv
        )
        if inside:
            out.append(int(name))
    return out


def kill_processes_in(d: Path) -> int:
    """SIGKILL every process inside sandbox directory ``d`` (each with its process group, as
    sandbox commands lead their own); returns how many were found."""
    pids = _procs_in(d)
    for pid in pids:
        with contextlib.suppress(OSError):
            pgid = os.getpgid(pid)
            if pgid == pid:  # a session or group leader, as every sandbox exec is
                os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


def reap_orphans(root: str | Path | None = None, run: str | None = None) -> int:
    """Delete sandbox directories under ``root`` (of ``run`` only, when given) whose creator
    process on this host is dead or whose deadline has passed, after killing the processes
    still running in them; return how many were removed."""
    root = Path(root) if root is not None else default_root()
    if not root.is_dir():
        return 0
    here, now, removed = socket.gethostname(), time.time(), 0
    for d in root.iterdir():
        try:
            record = json.loads((d / LABELS_FILE).read_text())
        except (OSError, ValueError):
            continue  # not a sandbox, or one still being created
        if run is not None and record.get("labels", {}).get("run") != run:
            continue
        expired = now > float(record.get("deadline", 0))
        dead = record.get("host") == here and not _pid_alive(
            int(record.get("pid", 0)), record.get("pid_start")
        )
        if expired or dead:
            kill_processes_in(d)
            rmtree(d)
            removed += 1
    return removed

"""Sandbox directories' labels, and the reconcile pass that deletes orphaned ones.

Each local sandbox directory holds a ``.forge-labels.json`` beside its workspace: labels (run,
pod, attempt), the creator's pid and kernel start time, host name and wall-clock deadline.

An orphan's processes go before its directory: every process working in it or started with a
path in it (the outer ``bwrap`` names the directory in its argv; an unisolated harness and its
tools work in its workspace) is killed with its process group. Under bwrap the sandbox's own
processes die with their parent anyway; without isolation nothing else would stop them.

A process's spare disks (labels role ``spare``, :mod:`forge.sandboxes.disk_pool`) belong to no
run: they are reaped whichever run is named, once their process is dead. A destroyed sandbox's
folder being released (named ``.trash-...``) is left to its living process.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import socket
import stat
import tempfile
import time
from pathlib import Path

from forge.sandboxes import quota

log = logging.getLogger(__name__)

LABELS_FILE = ".forge-labels.json"
SPARE_ROLE = "spare"  # a disk made ahead, not yet any sandbox's
TRASH = ".trash-"  # a destroyed sandbox's folder, released by its process


def default_root() -> Path:
    return Path(tempfile.gettempdir()) / "openforge-sandboxes"


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_cleanup_failures = 0


def cleanup_failures() -> int:
    """How many :func:`rmtree` calls in this process left something behind."""
    return _cleanup_failures


class _Level:
    """A directory being emptied: its name in its parent, its identity, its subdirectories
    still to empty."""

    def __init__(self, name: str, st: os.stat_result, fd: int) -> None:
        self.name, self.ident = name, (st.st_dev, st.st_ino)
        self.subdirs: list[str] = []
        for entry in os.listdir(fd):
            try:
                est = os.stat(entry, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISDIR(est.st_mode):
                    self.subdirs.append(entry)
                else:
                    os.unlink(entry, dir_fd=fd)
            except FileNotFoundError:
                continue


def _open_dir(name: str, dir_fd: int | None) -> tuple[int, os.stat_result]:
    """Open directory ``name`` (never through a symlink), made searchable and writable first
    (an agent may have left it ``chmod 000``)."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(name)
    if stat.S_IMODE(st.st_mode) & 0o700 != 0o700:
        os.chmod(name, 0o700, dir_fd=dir_fd)  # a directory, as just checked: no link followed
    fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    got = os.fstat(fd)
    if (got.st_dev, got.st_ino) != (st.st_dev, st.st_ino):
        os.close(fd)
        raise OSError(f"{name} changed while it was being removed")
    return fd, got


def _remove_tree(path: Path) -> None:
    """Delete ``path`` and everything under it, depth first without recursion, holding at most
    two descriptors whatever the depth: it goes down by name (``O_NOFOLLOW``) and back up by
    ``..``, checked to be the directory it came from."""
    parent = os.open(path.parent, _DIR_FLAGS)
    try:
        st = os.stat(path.name, dir_fd=parent, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(path.name, dir_fd=parent)
            return
        fd, st = _open_dir(path.name, parent)
    finally:
        os.close(parent)
    try:
        levels = [_Level(path.name, st, fd)]
        while levels:
            top = levels[-1]
            if top.subdirs:
                name = top.subdirs.pop()
                try:
                    sub, sub_st = _open_dir(name, fd)
                except (FileNotFoundError, NotADirectoryError):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(name, dir_fd=fd)
                    continue
                os.close(fd)
                fd = sub
                levels.append(_Level(name, sub_st, fd))
                continue
            levels.pop()
            up = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = up
            up_st = os.fstat(fd)
            if levels and (up_st.st_dev, up_st.st_ino) != levels[-1].ident:
                raise OSError(f"{path}: a directory moved while it was being removed")
            if levels:
                os.rmdir(top.name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(path)


def rmtree(path: Path) -> bool:
    """Delete ``path`` and everything in it, whatever an agent left there (thousands of levels,
    ``chmod 000`` directories, links, which are removed, never followed). Never raises: what
    it cannot remove is logged and counted (:func:`cleanup_failures`), and False returned."""
    global _cleanup_failures
    if not os.path.lexists(path):
        return True
    try:
        _remove_tree(Path(path))
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as e:
        _cleanup_failures += 1
        log.warning("could not remove %s: %s: %s", path, type(e).__name__, e)
        return False
    return True


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
    still running in them; return how many were removed. One that cannot be removed is logged
    and counted (:func:`cleanup_failures`) and left for the next pass: it never stops a run."""
    root = Path(root) if root is not None else default_root()
    if not root.is_dir():
        return 0
    here, now, removed = socket.gethostname(), time.time(), 0
    for d in root.iterdir():
        try:
            record = json.loads((d / LABELS_FILE).read_text())
            labels = record.get("labels") or {}
            if run is not None and labels.get("run") != run and labels.get("role") != SPARE_ROLE:
                continue
            dead = record.get("host") == here and not _pid_alive(
                int(record.get("pid", 0)), record.get("pid_start")
            )
            expired = now > float(record.get("deadline", 0)) and not d.name.startswith(TRASH)
        except (OSError, ValueError, TypeError, AttributeError):
            continue  # not a sandbox, or one still being created
        if expired or dead:
            kill_processes_in(d)
            quota.release(d)  # a crashed creator's disk quota is still mounted there
            removed += rmtree(d)  # one it cannot remove is logged and counted, never fatal
    return removed

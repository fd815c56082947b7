"""What a bubblewrap sandbox sees as /etc, made once and bound in one mount.

A sandbox sees of the host's /etc only :data:`forge.sandboxes.bwrap.ETC_ALLOW` and the
synthesised identity files (:func:`forge.sandboxes.bwrap.etc_files`). Bound file by file that is
some 30 mounts, about half of bwrap's start (~10 ms an exec). Instead, :func:`etc_tree` copies
them into one folder under the sandbox root, ``.etc-<pid>-<random>``, shared by the sandboxes
this process makes there and bound read-only as the whole /etc. It is made again when any
allowlisted host entry changes (their ``lstat``, compared on every call: ~0.1 ms); a folder
made before stays until this process ends (a running sandbox may have it mounted), and a
folder whose process is gone is removed by the next process that makes one under that root.
The copies keep symlinks as symlinks; what this user cannot read of the host's entries is left
out, as it could not be read through a bind either.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

from forge.sandboxes.bwrap import ETC_RESCAN_S, etc_files, etc_paths
from forge.sandboxes.orphans import pid_start, rmtree

log = logging.getLogger(__name__)

PREFIX = ".etc-"
_lock = threading.Lock()
_trees: dict[str, tuple[tuple[object, ...], str]] = {}  # root -> (host signature, folder)
_made: list[str] = []
_paths: tuple[float, list[str]] | None = None  # (when, etc_paths()): globbing costs ~1.5 ms


def _etc_paths() -> list[str]:
    """:func:`etc_paths`, looked for again at most every ``ETC_RESCAN_S``."""
    global _paths
    now = time.monotonic()
    if _paths is None or now - _paths[0] >= ETC_RESCAN_S:
        _paths = (now, etc_paths())
    return _paths[1]


def _signature(paths: list[str]) -> tuple[object, ...]:
    out: list[object] = []
    for path in paths:
        try:
            st = os.lstat(path)
            out.append((path, st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            out.append((path, None))
    return tuple(out)


def etc_tree(root: str | Path) -> str:
    """The folder under ``root`` that this process's sandboxes there see as /etc (made, or made
    again, as needed; see the module docstring). OSError when it cannot be made."""
    key = str(root)
    with _lock:
        paths = _etc_paths()
        signature = _signature(paths)
        known = _trees.get(key)
        if known is not None and known[0] == signature and os.path.isdir(known[1]):
            return known[1]
        folder = _build(Path(root), paths)
        _trees[key] = (signature, folder)
        return folder


def _build(root: Path, paths: list[str]) -> str:
    _sweep(root)
    folder = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-{pid_start(os.getpid())}-", dir=root)
    if not _made:
        atexit.register(_remove_made)
    _made.append(folder)
    for host in paths:
        dest = os.path.join(folder, os.path.relpath(host, "/etc"))
        os.makedirs(os.path.dirname(dest), mode=0o755, exist_ok=True)
        try:
            if os.path.islink(host):
                os.symlink(os.readlink(host), dest)
            elif os.path.isdir(host):
                shutil.copytree(host, dest, symlinks=True)
            else:
                shutil.copy2(host, dest)
        except (OSError, shutil.Error) as e:  # unreadable parts: left out, as a bind hides them
            log.debug("sandboxes' /etc: %s copied in part or not at all: %s", host, e)
    for name, text in etc_files().items():
        with open(os.path.join(folder, name), "w") as f:
            f.write(text)
    os.chmod(folder, 0o755)
    return folder


def _sweep(root: Path) -> None:
    """Remove the trees under ``root`` of processes that are gone."""
    try:
        names = [p.name for p in root.iterdir() if p.name.startswith(PREFIX)]
    except OSError:
        return
    for name in names:
        pid, _, rest = name[len(PREFIX) :].partition("-")
        start = rest.rpartition("-")[0]
        if pid.isdigit() and int(pid) != os.getpid() and str(pid_start(int(pid))) != start:
            rmtree(root / name)


def _remove_made() -> None:
    for folder in _made:
        rmtree(Path(folder))

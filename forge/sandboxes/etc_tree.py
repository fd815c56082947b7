"""What a bubblewrap sandbox sees as /etc, made once and bound in one mount.

A sandbox sees of the host's /etc only :data:`forge.sandboxes.bwrap.ETC_ALLOW` and the
synthesised identity files (:func:`forge.sandboxes.bwrap.etc_files`). Bound file by file that is
some 30 mounts, about half of bwrap's start (~10 ms an exec). Instead, :func:`etc_tree` copies
them into one folder, ``/tmp/openforge-etc/.etc-<pid>-<start>-<random>`` (a private folder of
this user, as the sandbox root is), shared by this process's sandboxes and bound read-only as
the whole /etc. It is made again when any allowlisted host entry changes (their ``lstat``,
compared on every call: ~0.1 ms); a folder made before stays until this process ends (a
running sandbox may have it mounted), and one whose process is gone is removed by the next
process that makes one.
The copies keep symlinks as symlinks; what this user cannot read of the host's entries is left
out, as it could not be read through a bind either. A sandbox that mounts something inside
/etc (Chromium's policies) gets the entries one by one instead (:func:`etc_mounts`): bwrap
cannot make a mount point inside the read-only copy.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from forge.sandboxes.bwrap import ETC_RESCAN_S, etc_files, etc_paths, write_etc
from forge.sandboxes.orphans import pid_start, rmtree
from forge.sandboxes.tmproot import private_root

log = logging.getLogger(__name__)

PREFIX = ".etc-"
_lock = threading.Lock()
HOME = "openforge-etc"  # under the temp dir
_trees: dict[str, tuple[tuple[object, ...], str]] = {}  # home -> (host signature, folder)
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


def etc_tree(home: Path | None = None) -> str:
    """The folder this process's sandboxes see as /etc, in ``home`` (default: the private
    ``openforge-etc`` of the temp dir), made, or made again, as needed (see the module
    docstring). OSError when it cannot be made."""
    home = private_root(home if home is not None else Path(tempfile.gettempdir()) / HOME)
    key = str(home)
    with _lock:
        paths = _etc_paths()
        signature = _signature(paths)
        known = _trees.get(key)
        if known is not None and known[0] == signature and os.path.isdir(known[1]):
            return known[1]
        folder = _build(home, paths)
        _trees[key] = (signature, folder)
        return folder


def etc_mounts(own: Path, targets: Iterable[str]) -> dict[str, str]:
    """:func:`forge.sandboxes.bwrap.bwrap_argv`'s /etc arguments for a sandbox whose other
    mounts land on ``targets``: the shared copy; or, where one lands inside /etc, the entries
    bound one by one and the identity files written into the sandbox's own folder ``own``."""
    if not any(t == "/etc" or t.startswith("/etc/") for t in targets):
        return {"etc_tree": etc_tree()}
    if not own.exists():
        write_etc(str(own))
    return {"etc": str(own)}


def _build(home: Path, paths: list[str]) -> str:
    _sweep(home)
    folder = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-{pid_start(os.getpid())}-", dir=home)
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


def _sweep(home: Path) -> None:
    """Remove the trees in ``home`` of processes that are gone."""
    try:
        names = [p.name for p in home.iterdir() if p.name.startswith(PREFIX)]
    except OSError:
        return
    for name in names:
        pid, _, rest = name[len(PREFIX) :].partition("-")
        start = rest.rpartition("-")[0]
        if pid.isdigit() and int(pid) != os.getpid() and str(pid_start(int(pid))) != start:
            rmtree(home / name)


def _remove_made() -> None:
    for folder in _made:
        rmtree(Path(folder))

"""Disk quotas off the attempt's path: made ahead, released behind.

A local sandbox with ``disk_mb`` lives on its own ext4 file system (:mod:`forge.sandboxes.quota`),
~10 ms to mount and as long to release as root: on a 0.1 s episode, a tenth of it. Here

- :func:`take` hands a sandbox a folder whose disk is already mounted (with the sandbox's
  empty :data:`FOLDERS` on it: a directory's first blocks on a fresh disk cost ~0.3 ms each
  to write), one of a few *spares*
  a background thread keeps ready for the last root and size asked for (one after the first
  sandbox, more as more are made), renamed to the sandbox's own name (a rename keeps the
  mount inside it). None when none is ready: the caller mounts its own.
- :func:`discard` renames a destroyed sandbox's folder out of the way at once (its path is
  gone when ``destroy`` returns) and unmounts and removes it on the same thread. The
  sandbox's processes are killed before, by the caller: nothing of the attempt runs on.

Nothing is reused: a spare is a fresh file system, made for whichever sandbox takes it, and
a discarded disk is only ever released. Each spare carries a labels file naming this process
(role ``spare``), each discarded folder its sandbox's own, so a process that dies leaves
nothing :func:`forge.sandboxes.orphans.reap_orphans` does not remove; at exit, this process
releases its spares and finishes what it was releasing.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import queue
import secrets
import socket
import tempfile
import threading
import time
from pathlib import Path

from forge.sandboxes import quota
from forge.sandboxes.orphans import LABELS_FILE, SPARE_ROLE, TRASH, pid_start, rmtree

log = logging.getLogger(__name__)

SPARES = 4  # disks kept ready, at most
FOLDERS = ("workspace", "home", "tmp")  # a sandbox's folders on its disk, made with a spare
_lock = threading.Lock()
_key: tuple[Path, int] | None = None  # the root and size spares are kept for: the last asked
_ready: list[Path] = []  # its spares
_asked = 0  # sandboxes that asked for one of them
_making = 0  # spares of it being made
_jobs: queue.Queue[tuple[str, Path, int]] = queue.Queue()  # ("make", root, size) | ("drop", d, 0)
_worker: threading.Thread | None = None
_closed = False


def take(root: Path, name: str, size_mb: int) -> Path | None:
    """A new folder ``root/name-XXXXXXXX`` with a fresh ``size_mb`` MiB disk mounted at its
    ``disk``, or None when none is ready (a spare is made for the next call either way)."""
    global _key, _ready, _asked, _making
    with _lock:
        if _closed:
            return None
        stale: list[Path] = []
        if _key != (root, size_mb):  # spares are kept for the last root and size asked for
            stale, _ready, _key, _asked, _making = _ready, [], (root, size_mb), 0, 0
        _asked += 1
        spare = _ready.pop() if _ready else None
        # one spare after the first sandbox, up to SPARES as more are made
        wanted = max(0, min(SPARES, _asked) - len(_ready) - _making)
        _making += wanted
    for d in stale:
        _submit(("drop", d, 0))
    for _ in range(wanted):
        _submit(("make", root, size_mb))
    if spare is None:
        return None
    d = root / f"{name}-{secrets.token_hex(4)}"
    try:
        if os.path.lexists(d):
            raise FileExistsError(d)
        os.rename(spare, d)
    except OSError:  # not to be had: released, and the caller mounts its own
        _submit(("drop", spare, 0))
        return None
    return d


def discard(d: Path) -> None:
    """Remove sandbox folder ``d`` (its processes already killed): a mounted disk in it is
    released on the background thread after ``d`` is renamed away; without one, at once."""
    if _closed or not os.path.ismount(d / quota.DISK):
        _remove(d)
        return
    gone = d.with_name(f"{TRASH}{d.name}")
    try:
        os.rename(d, gone)
    except OSError:  # left where it is: released here and now
        _remove(d)
        return
    _submit(("drop", gone, 0))


def _remove(d: Path) -> None:
    quota.release(d)  # the file system first: rmtree cannot remove a mount
    rmtree(d)


def _submit(job: tuple[str, Path, int]) -> None:
    global _worker
    with _lock:
        if _worker is None or not _worker.is_alive():
            _worker = threading.Thread(target=_work, name="forge-disk-pool", daemon=True)
            _worker.start()
    _jobs.put(job)


def _work() -> None:
    while True:
        kind, path, size_mb = _jobs.get()
        try:
            if kind == "drop":
                _remove(path)
            else:
                _make(path, size_mb)
        except Exception:  # a spare that could not be made: sandboxes mount their own
            log.warning("could not make a spare disk under %s", path, exc_info=True)
        finally:
            _jobs.task_done()


def _make(root: Path, size_mb: int) -> None:
    global _making
    d, keep = None, False
    try:
        if not _closed:
            d = _new_spare(root, size_mb)
    finally:
        with _lock:
            mine = _key == (root, size_mb)
            if mine:
                _making = max(0, _making - 1)
            if d is not None and mine and not _closed:
                _ready.append(d)
                keep = True
    if d is not None and not keep:  # made for a root and size no longer asked for
        _remove(d)


def _new_spare(root: Path, size_mb: int) -> Path:
    """A hidden folder under ``root`` labelled as this process's spare, its disk mounted;
    nothing left behind when that fails."""
    d = Path(tempfile.mkdtemp(prefix=".spare-", dir=root))
    try:
        record = {
            "labels": {"role": SPARE_ROLE},
            "pid": os.getpid(),
            "pid_start": pid_start(os.getpid()),
            "host": socket.gethostname(),
            "created": time.time(),
            "deadline": time.time() + 7 * 86400,
        }
        (d / LABELS_FILE).write_text(json.dumps(record))
        disk = quota.mount_disk(d, size_mb)
        for sub in FOLDERS:
            (disk / sub).mkdir()
    except BaseException:
        _remove(d)
        raise
    return d


def drain() -> None:
    """Finish the work under way, then release the spares (at exit; tests call it too)."""
    global _ready
    if _worker is not None and _worker.is_alive():
        _jobs.join()
    with _lock:
        spares, _ready = _ready, []
    for d in spares:
        _remove(d)


@atexit.register
def _at_exit() -> None:
    global _closed
    _closed = True
    drain()

"""Disk quotas off the attempt's path: made ahead, released behind.

A local sandbox with ``disk_mb`` lives on its own ext4 file system (:mod:`forge.sandboxes.quota`),
~10 ms to mount and as long to release as root: on a 0.1 s episode, a tenth of it. Here

- :func:`take` hands a sandbox a folder whose disk is already mounted, one of a few *spares*
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
_lock = threading.Lock()
_spares: dict[tuple[Path, int], list[Path]] = {}
_jobs: queue.Queue[tuple[str, Path, int]] = queue.Queue()  # ("make", root, size) | ("drop", d, 0)
_making: dict[tuple[Path, int], int] = {}  # spares being made
_asked: dict[tuple[Path, int], int] = {}  # sandboxes that asked for one
_worker: threading.Thread | None = None
_closed = False


def take(root: Path, name: str, size_mb: int) -> Path | None:
    """A new folder ``root/name-XXXXXXXX`` with a fresh ``size_mb`` MiB disk mounted at its
    ``disk``, or None when none is ready (a spare is made for the next call either way)."""
    key = (root, size_mb)
    with _lock:
        if _closed:
            return None
        stale = [d for k in list(_spares) if k != key for d in _spares.pop(k)]
        for k in [k for k in _asked if k != key]:
            del _asked[k]
        _asked[key] = asked = _asked.get(key, 0) + 1
        ready = _spares.setdefault(key, [])
        spare = ready.pop() if ready else None
        # one spare after the first sandbox, up to SPARES as more are made
        wanted = min(SPARES, asked) - len(ready) - _making.get(key, 0)
    for d in stale:  # spares are kept for the last root and size asked for only
        _submit(("drop", d, 0))
    for _ in range(max(0, wanted)):
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
        quota.release(d)
        rmtree(d)
        return
    gone = d.with_name(f"{TRASH}{d.name}")
    try:
        os.rename(d, gone)
    except OSError:  # left where it is: released here and now
        quota.release(d)
        rmtree(d)
        return
    _submit(("drop", gone, 0))


def _submit(job: tuple[str, Path, int]) -> None:
    global _worker
    with _lock:
        if job[0] == "make":
            key = (job[1], job[2])
            _making[key] = _making.get(key, 0) + 1
        if _worker is None or not _worker.is_alive():
            _worker = threading.Thread(target=_work, name="forge-disk-pool", daemon=True)
            _worker.start()
    _jobs.put(job)


def _work() -> None:
    while True:
        kind, path, size_mb = _jobs.get()
        try:
            if kind == "drop":
                quota.release(path)
                rmtree(path)
            else:
                _make(path, size_mb)
        except Exception:  # a spare that could not be made: sandboxes mount their own
            log.warning("could not make a spare disk under %s", path, exc_info=True)
        finally:
            _jobs.task_done()


def _make(root: Path, size_mb: int) -> None:
    key = (root, size_mb)
    try:
        if _closed:
            return
        d = Path(tempfile.mkdtemp(prefix=".spare-", dir=root))
        record = {
            "labels": {"role": SPARE_ROLE},
            "pid": os.getpid(),
            "pid_start": pid_start(os.getpid()),
            "host": socket.gethostname(),
            "created": time.time(),
            "deadline": time.time() + 7 * 86400,
        }
        (d / LABELS_FILE).write_text(json.dumps(record))
        try:
            quota.mount_disk(d, size_mb)
        except OSError:
            rmtree(d)
            raise
        with _lock:
            if not _closed:
                _spares.setdefault(key, []).append(d)
                return
        quota.release(d)
        rmtree(d)
    finally:
        with _lock:
            _making[key] -= 1


def drain() -> None:
    """Finish the work under way, then release the spares (at exit; tests call it too)."""
    if _worker is not None and _worker.is_alive():
        _jobs.join()
    with _lock:
        spares = [d for ready in _spares.values() for d in ready]
        _spares.clear()
    for d in spares:
        quota.release(d)
        rmtree(d)


@atexit.register
def _at_exit() -> None:
    global _closed
    _closed = True
    drain()

"""A disk quota for a local sandbox's writable folders: an ext4 file system of a fixed size,
in a sparse image file inside the sandbox folder, loop-mounted at ``<folder>/disk``.

A command that writes past it gets ENOSPC ("No space left on device"), as on a full disk: the
policy's doing, which the episode goes on with, never the host's disk filling. Mounting needs
root (``mount -o loop`` with mkfs.ext4 present); elsewhere :func:`quota_problem` says why and
the local backend runs without a quota (warning once). The loop device is released when the
file system is unmounted (:func:`release`), which the sandbox's cleanup does before it removes
the folder.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading
from pathlib import Path

log = logging.getLogger(__name__)

DISK = "disk"  # the mount point inside the sandbox folder
IMAGE = ".disk.img"
_lock = threading.Lock()
_problem: str | None = None


def quota_problem() -> str | None:
    """Why this process cannot give local sandboxes a disk quota (None when it can)."""
    global _problem
    with _lock:
        if _problem is None:
            if os.geteuid() != 0:
                _problem = "loop-mounting a size-limited file system needs root"
            elif shutil.which("mkfs.ext4") is None or shutil.which("mount") is None:
                _problem = "mkfs.ext4 or mount is missing (apt-get install e2fsprogs mount)"
            elif not os.path.exists("/dev/loop-control"):
                _problem = "no loop devices (/dev/loop-control)"
            else:
                _problem = ""
        return _problem or None


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip() or f"exit status {done.returncode}"
        raise OSError(f"{' '.join(argv[:2])} failed: {why}")


def mount_disk(folder: Path, size_mb: int) -> Path:
    """A fresh ext4 file system of ``size_mb`` MiB mounted at ``folder/disk`` (nosuid, nodev),
    owned by this user; its path. OSError when it cannot be made (nothing left mounted)."""
    image, mnt = folder / IMAGE, folder / DISK
    with open(image, "wb") as f:
        f.truncate(size_mb << 20)  # sparse: the host's disk is used only as it fills
    owner = f"root_owner={os.geteuid()}:{os.getegid()}"
    _run(["mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", "-E", owner, str(image)])
    mnt.mkdir(mode=0o700)
    _run(["mount", "-o", "loop,nosuid,nodev,noatime", str(image), str(mnt)])
    return mnt


def release(folder: Path) -> bool:
    """Unmount ``folder/disk`` when mounted (lazily when busy), releasing its loop device;
    True when nothing is left mounted there. Never raises."""
    mnt = folder / DISK
    if not os.path.ismount(mnt):
        return True
    for argv in (["umount", str(mnt)], ["umount", "-l", str(mnt)]):
        try:
            _run(argv)
            return True
        except (OSError, subprocess.TimeoutExpired) as e:
            log.warning("could not unmount the sandbox disk %s: %s", mnt, e)
    return False

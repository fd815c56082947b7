"""A disk quota for a local sandbox's writable folders: an ext4 file system of a fixed size,
in a sparse image file inside the sandbox folder, loop-mounted at ``<folder>/disk``.

A command that writes past it gets ENOSPC ("No space left on device"), as on a full disk: the
policy's doing, which the episode goes on with, never the host's disk filling. Mounting needs
root (``mount -o loop`` with mkfs.ext4 present); elsewhere :func:`quota_problem` says why and
the local backend runs without a quota (warning once). The loop device is released when the
file system is unmounted (:func:`release`), which the sandbox's cleanup does before it removes
the folder.

A sandbox's disk costs a few milliseconds, not a process per step (``mkfs.ext4``, ``mount``,
``umount``: ~60 ms in all per sandbox): the file system is made once per process and size into
a template, whose few written blocks (~1 MB of 2 GB) are copied into each sandbox's sparse
image, and it is mounted and unmounted with the loop and mount system calls themselves, the
commands serving where those fail. The copies share the template's UUID, which nothing here
reads. Mounted with ``noinit_itable``: the inode tables mkfs left unwritten read as zeros in a
sparse image, so the kernel need not write ~30 MB of zeros into each one.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

log = logging.getLogger(__name__)

DISK = "disk"  # the mount point inside the sandbox folder
IMAGE = ".disk.img"
OPTIONS = "nosuid,nodev,noatime,noinit_itable"
LOOP_CTL_GET_FREE, LOOP_SET_FD, LOOP_CLR_FD, LOOP_SET_STATUS64 = 0x4C82, 0x4C00, 0x4C01, 0x4C04
LOOP_CONFIGURE = 0x4C0A  # Linux 5.8: the two above in one step (each waits out a queue freeze)
LO_FLAGS_AUTOCLEAR = 4  # the loop device goes when its file system is unmounted
MS_NOSUID, MS_NODEV, MS_NOATIME, MNT_DETACH = 2, 4, 1024, 2
_lock = threading.Lock()
_problem: str | None = None
_templates: dict[int, list[tuple[int, bytes]]] = {}  # size -> a fresh file system's data


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


def _extents(path: Path) -> list[tuple[int, bytes]]:
    """The written parts of sparse file ``path``: (offset, bytes), holes left out."""
    out, fd = [], os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size, at = os.fstat(fd).st_size, 0
        while at < size:
            try:
                start = os.lseek(fd, at, os.SEEK_DATA)
            except OSError as e:  # ENXIO: nothing written past ``at``
                if e.errno == errno.ENXIO:
                    break
                raise
            at = os.lseek(fd, start, os.SEEK_HOLE)
            out.append((start, os.pread(fd, at - start, start)))
    finally:
        os.close(fd)
    return out


def _template(size_mb: int) -> list[tuple[int, bytes]]:
    """A fresh ext4 file system of ``size_mb`` MiB owned by this user, as written extents;
    made once per process and size."""
    with _lock:
        if size_mb not in _templates:
            with tempfile.TemporaryDirectory(prefix="forge-disk-") as tmp:
                image = Path(tmp) / IMAGE
                with open(image, "wb") as f:
                    f.truncate(size_mb << 20)
                owner = f"root_owner={os.geteuid()}:{os.getegid()}"
                _run(["mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", "-E", owner,
                      str(image)])  # fmt: skip
                _templates[size_mb] = _extents(image)
        return _templates[size_mb]


def _libc() -> object:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        import ctypes

        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def _attach(loop: int, backing: int, info: bytes) -> None:
    """Loop device ``loop`` onto file ``backing``, with ``info`` (a struct loop_info64)."""
    import fcntl

    config = backing.to_bytes(4, "little") + bytes(4) + info + bytes(64)  # struct loop_config
    try:
        fcntl.ioctl(loop, LOOP_CONFIGURE, config)
        return
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOTTY):  # those: a kernel before 5.8
            raise
    fcntl.ioctl(loop, LOOP_SET_FD, backing)
    try:
        fcntl.ioctl(loop, LOOP_SET_STATUS64, info)
    except OSError:
        fcntl.ioctl(loop, LOOP_CLR_FD, 0)
        raise


def _mount_loop(image: Path, mnt: Path) -> None:
    """``mount -o loop`` without the command: a free loop device on ``image`` (released with
    its file system), ext4 mounted from it at ``mnt``."""
    import fcntl

    backing = os.open(image, os.O_RDWR | os.O_CLOEXEC)
    ctl = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
    try:
        for _ in range(16):  # another process may take the free device first
            dev = f"/dev/loop{fcntl.ioctl(ctl, LOOP_CTL_GET_FREE)}"
            loop = os.open(dev, os.O_RDWR | os.O_CLOEXEC)
            info = bytearray(232)  # struct loop_info64: lo_flags, then lo_file_name
            info[52:56] = LO_FLAGS_AUTOCLEAR.to_bytes(4, "little")
            name = str(image).encode()[:63]
            info[56 : 56 + len(name)] = name
            try:
                _attach(loop, backing, bytes(info))
            except OSError as e:
                os.close(loop)
                if e.errno == errno.EBUSY:
                    continue
                raise
            try:
                flags = MS_NOSUID | MS_NODEV | MS_NOATIME
                mount = _libc().mount  # type: ignore[attr-defined]
                _check(mount(dev.encode(), str(mnt).encode(), b"ext4", flags, b"noinit_itable"),
                       f"mount {dev} at {mnt}")  # fmt: skip
            except BaseException:
                try:
                    fcntl.ioctl(loop, LOOP_CLR_FD, 0)
                except OSError:
                    pass  # released on close (autoclear)
                raise
            finally:
                os.close(loop)
            return
        raise OSError(errno.EBUSY, "no free loop device after 16 tries")
    finally:
        os.close(ctl)
        os.close(backing)


def mount_disk(folder: Path, size_mb: int) -> Path:
    """A fresh ext4 file system of ``size_mb`` MiB mounted at ``folder/disk`` (nosuid, nodev),
    owned by this user; its path. OSError when it cannot be made (nothing left mounted)."""
    image, mnt = folder / IMAGE, folder / DISK
    with open(image, "wb") as f:
        f.truncate(size_mb << 20)  # sparse: the host's disk is used only as it fills
        for offset, data in _template(size_mb):
            os.pwrite(f.fileno(), data, offset)
    mnt.mkdir(mode=0o700)
    try:
        _mount_loop(image, mnt)
    except OSError as e:
        log.debug("mounting %s with the mount command (%s)", mnt, e)
        _run(["mount", "-o", f"loop,{OPTIONS}", str(image), str(mnt)])
    return mnt


def release(folder: Path) -> bool:
    """Unmount ``folder/disk`` when mounted (lazily when busy), releasing its loop device;
    True when nothing is left mounted there. Never raises."""
    mnt = folder / DISK
    if not os.path.ismount(mnt):
        return True
    for flags in (0, MNT_DETACH):  # the system call first; the commands where it fails
        try:
            _check(_libc().umount2(str(mnt).encode(), flags), f"umount {mnt}")  # type: ignore[attr-defined]
            return True
        except OSError:
            continue
    for argv in (["umount", str(mnt)], ["umount", "-l", str(mnt)]):
        try:
            _run(argv)
            return True
        except (OSError, subprocess.TimeoutExpired) as e:
            log.warning("could not unmount the sandbox disk %s: %s", mnt, e)
    return False

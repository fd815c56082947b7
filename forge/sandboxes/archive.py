"""Tar archives of sandbox directories, read and written without ever following a link.

What a sandbox's programs left in a directory is untrusted: a path may be a symlink to the
host's files, a FIFO that blocks whoever opens it, a sparse file of terabytes, or it may change
while it is read. :func:`pack_dir` and :func:`unpack_into` therefore walk with directory file
descriptors and ``O_NOFOLLOW`` at every step:

- directories, regular files and symlinks are kept (a symlink stays a symlink, its target as
  text, never resolved on the host); FIFOs, sockets and devices are left out;
- a hard link is stored as a plain copy of its file;
- permission bits are kept without setuid, setgid and sticky; owners are not;
- the sum of file sizes, the number of entries and the depth are capped
  (:class:`ArchiveTooLarge`), checked from ``stat`` before anything is read, so a huge sparse
  file costs nothing; the walk keeps its own stack, so no tree makes it recurse.

:func:`unpack_into` accepts any tar (another backend's too) but creates only directories,
regular files and symlinks, under its root, through parents it created or found as real
directories: a member named ``a/b`` never lands behind a symlink ``a``.
"""

from __future__ import annotations

import contextlib
import io
import os
import posixpath
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path

from forge.sandboxes.base import ArchiveTooLarge

DEFAULT_MAX_BYTES = 64 << 20  # file bytes in one archive
DEFAULT_MAX_ENTRIES = 20_000
DEFAULT_MAX_DEPTH = 128  # levels of directories in one archive
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_PERM = 0o777  # mode bits kept (no setuid, setgid, sticky)

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_ENTRIES",
    "ArchiveTooLarge",
    "members",
    "pack_dir",
    "unpack_into",
]


class _Budget:
    def __init__(self, max_bytes: int, max_entries: int) -> None:
        self.bytes_left, self.entries_left = max_bytes, max_entries
        self.max_bytes, self.max_entries = max_bytes, max_entries

    def take(self, size: int, where: str) -> None:
        self.entries_left -= 1
        self.bytes_left -= size
        if self.entries_left < 0:
            raise ArchiveTooLarge(f"more than {self.max_entries} entries (at {where!r})")
        if self.bytes_left < 0:
            raise ArchiveTooLarge(f"more than {self.max_bytes} bytes of files (at {where!r})")


def _read_regular(dir_fd: int, name: str, size: int) -> bytes | None:
    """The bytes of regular file ``name`` (at most ``size``), or None when it is no longer one."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return f.read(size)  # a file that grew since stat is cut at the size that was budgeted


class _Dir:
    """A directory being walked: its descriptor, its name in the archive, its entries left."""

    def __init__(self, fd: int, prefix: str) -> None:
        self.fd, self.prefix = fd, prefix
        self.names = iter(sorted(os.listdir(fd)))


def _walk(root_fd: int, budget: _Budget, max_depth: int) -> Iterator[tuple[tarfile.TarInfo, bytes]]:
    """The entries under ``root_fd``, parents before children, walked with an explicit stack
    (a tree thousands of levels deep neither recurses nor holds more than ``max_depth``
    descriptors: deeper is :class:`ArchiveTooLarge`)."""
    stack = [_Dir(os.dup(root_fd), "")]
    try:
        while stack:
            top = stack[-1]
            name = next(top.names, None)
            if name is None:
                os.close(stack.pop().fd)
                continue
            dir_fd, rel = top.fd, f"{top.prefix}{name}"
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError:  # vanished meanwhile
                continue
            info = tarfile.TarInfo(rel)
            info.mode, info.mtime = st.st_mode & _PERM, int(st.st_mtime)
            if stat.S_ISLNK(st.st_mode):
                budget.take(0, rel)
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(name, dir_fd=dir_fd)
                yield info, b""
            elif stat.S_ISREG(st.st_mode):
                budget.take(st.st_size, rel)
                data = _read_regular(dir_fd, name, st.st_size)
                if data is not None:
                    info.size = len(data)
                    yield info, data
            elif stat.S_ISDIR(st.st_mode):
                budget.take(0, rel)
                if len(stack) >= max_depth:
                    raise ArchiveTooLarge(
                        f"more than {max_depth} levels of directories (at {rel!r})"
                    )
                try:
                    sub = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
                except OSError:  # replaced by something else, or unreadable: left out
                    continue
                try:
                    entry = _Dir(sub, rel + "/")
                except OSError:
                    os.close(sub)
                    continue
                stack.append(entry)
                info.type = tarfile.DIRTYPE
                yield info, b""
            # FIFOs, sockets and devices are left out
    finally:
        for d in stack:
            os.close(d.fd)


def pack_dir(
    root: Path | str,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_entries: int = DEFAULT_MAX_ENTRIES,
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> bytes:
    """An uncompressed tar of the contents of directory ``root`` (names relative to it).

    ``root`` itself must be a real directory (not a symlink). Raises :class:`ArchiveTooLarge`
    past ``max_bytes`` of file data, ``max_entries`` entries or ``max_depth`` levels.
    """
    budget = _Budget(max_bytes, max_entries)
    fd = os.open(root, _DIR_FLAGS)
    out = io.BytesIO()
    try:
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for info, data in _walk(fd, budget, max_depth):
                tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    finally:
        os.close(fd)
    return out.getvalue()


def _safe_parts(name: str) -> list[str]:
    """The components of member ``name`` under the root; ValueError when it would leave it."""
    norm = posixpath.normpath("/" + name.lstrip("/"))
    parts = [p for p in norm.split("/") if p not in ("", ".")]
    if not parts or ".." in name.split("/"):
        raise ValueError(f"archive member {name!r} is not a path under the destination")
    return parts


def members(
    data: bytes, max_bytes: int = DEFAULT_MAX_BYTES * 2, max_depth: int = DEFAULT_MAX_DEPTH
) -> Iterator[tuple[list[str], tarfile.TarInfo, bytes]]:
    """What :func:`unpack_into` creates from tar ``data``, in order: each directory, regular
    file, symlink and hard link (a copy of its file) as (its components under the root, the
    member, a file's bytes or ``b""``). Raises ValueError for a name that leaves the root,
    :class:`ArchiveTooLarge` past ``max_bytes`` of file data or ``max_depth`` levels."""
    total = 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar:
            if not (member.isdir() or member.isfile() or member.issym() or member.islnk()):
                continue
            parts = _safe_parts(member.name)
            if len(parts) > max_depth:
                raise ArchiveTooLarge(f"member {member.name[:200]!r}: more than {max_depth} levels")
            content = b""
            if member.isfile() or member.islnk():
                src = tar.extractfile(member)
                content = src.read() if src is not None else b""
                total += len(content)
                if total > max_bytes:
                    raise ArchiveTooLarge(f"more than {max_bytes} bytes of files")
            yield parts, member, content


def _open_parent(root_fd: int, parts: list[str]) -> int:
    """A descriptor of the directory that holds ``parts[-1]``, creating real directories as
    needed; OSError when a component exists as anything but a real directory."""
    fd = os.dup(root_fd)
    try:
        for part in parts[:-1]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o700, dir_fd=fd)
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _clear(dir_fd: int, name: str) -> None:
    """Remove a non-directory entry ``name`` so a member can take its place."""
    with contextlib.suppress(FileNotFoundError):
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(name, dir_fd=dir_fd)


def _write_file(dir_fd: int, name: str, data: bytes, mode: int) -> None:
    _clear(dir_fd, name)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        os.fchmod(fd, mode)


def unpack_into(
    root: Path | str,
    data: bytes,
    max_bytes: int = DEFAULT_MAX_BYTES * 2,
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> None:
    """Extract tar ``data`` into directory ``root`` (created if missing); see the module
    docstring for what is created and how. Raises ValueError for a member whose name leaves
    ``root``, :class:`ArchiveTooLarge` past ``max_bytes`` of file data or for a member more
    than ``max_depth`` levels down."""
    Path(root).mkdir(parents=True, exist_ok=True)
    root_fd = os.open(root, _DIR_FLAGS)
    dir_modes: list[tuple[list[str], int, int]] = []
    try:
        for parts, member, content in members(data, max_bytes, max_depth):
            mode = member.mode & _PERM
            parent = _open_parent(root_fd, parts)
            try:
                name = parts[-1]
                if member.isdir():
                    _clear(parent, name)
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, 0o700, dir_fd=parent)
                    dir_modes.append((parts, mode, int(member.mtime)))
                elif member.issym():
                    _clear(parent, name)
                    os.symlink(member.linkname, name, dir_fd=parent)
                else:  # a regular file, or a hard link stored as a copy of its target
                    _write_file(parent, name, content, mode)
                    os.utime(name, (member.mtime, member.mtime), dir_fd=parent)
            finally:
                os.close(parent)
        for parts, mode, mtime in reversed(dir_modes):  # children first, then their parents
            parent = _open_parent(root_fd, parts)
            try:
                fd = os.open(parts[-1], _DIR_FLAGS, dir_fd=parent)
                try:
                    os.fchmod(fd, mode)
                    os.utime(fd, (mtime, mtime))
                finally:
                    os.close(fd)
            finally:
                os.close(parent)
    finally:
        os.close(root_fd)

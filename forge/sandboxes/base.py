"""The Sandbox interface: where a harness runs, isolated from the host and from other attempts."""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Protocol, TypeVar

P = TypeVar("P", bound=PurePosixPath)


@dataclass
class ExecResult:
    exit_code: int  # -1 when killed on timeout
    stdout: str
    stderr: str
    timed_out: bool = False
    duration_s: float = 0.0


class ArchiveTooLarge(ValueError):
    """A directory holds more than an archive may carry (bytes of files or entries)."""


@dataclass
class SandboxSpec:
    """What an attempt's sandbox needs.

    ``labels`` identify it (run, pod, attempt) so leaked sandboxes can be found and reaped;
    ``ro_mounts`` maps host paths to sandbox paths exposed read-only (harness install caches);
    ``proxy_socket`` is the host Unix socket of the attempt's proxy, bridged to
    ``127.0.0.1:proxy_port`` inside an isolated network namespace; ``proxy_tcp`` (``host:port``)
    is the proxy's TCP address, used where no isolation is available (the sandbox then shares
    the host network) or relayed through a private Unix socket where it is. ``environment``:
    a task's own image (a :class:`tasks.environment.Environment` as data: build context, Dockerfile,
    workdir), for the backends that can build it (docker); its workdir is the workspace.
    """

    labels: dict[str, str] = field(default_factory=dict)
    deadline_s: float = 600.0
    ro_mounts: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    proxy_socket: str | None = None
    proxy_port: int = 8931
    proxy_tcp: str | None = None
    environment: dict[str, Any] | None = None
    # the run's egress proxy (its host Unix socket), relayed to 127.0.0.1:EGRESS_PORT inside,
    # in a phase whose network is allowlist or open (forge.sandboxes.egress)
    egress_socket: str | None = None


class Sandbox(Protocol):
    """Create, exec with a timeout, put and get files, destroy. Paths are sandbox paths;
    relative ones are taken from the workspace."""

    workspace: str  # the workspace path as seen inside the sandbox (fixed, e.g. /workspace)

    def create(self, spec: SandboxSpec) -> None: ...

    def exec(
        self, cmd: list[str], timeout_s: float, env: dict[str, str] | None = None
    ) -> ExecResult: ...

    def put_file(self, path: str, content: bytes | str, mode: int = 0o644) -> None: ...

    def get_file(self, path: str) -> bytes | None: ...

    def get_archive(self, path: str, max_bytes: int = 64 << 20) -> bytes:
        """An uncompressed tar of the contents of directory ``path``, names relative to it.

        Directories, regular files and symlinks only; a symlink stays a symlink and is never
        followed on the host; hard links become copies; no owners, no setuid bits. Raises
        :class:`ArchiveTooLarge` past ``max_bytes`` of file data (checked before reading).
        """
        ...

    def put_archive(self, path: str, data: bytes) -> None:
        """Extract tar ``data`` into directory ``path`` (created if missing): only directories,
        regular files and symlinks, never through a symlink; ValueError for a member whose
        name leaves ``path``."""
        ...

    def destroy(self) -> None:
        """Kill every process of the sandbox and delete it; calling it again does nothing."""
        ...

    def proxy_host_port(self) -> str:
        """``host:port`` at which commands in the sandbox reach the attempt's proxy."""
        ...

    def default_path(self) -> str:
        """The PATH commands get when the harness sets none (a harness may prepend to it)."""
        ...

    def path_map(self) -> dict[str, str]:
        """Sandbox paths (mount points such as ``/workspace`` or a harness's read-only mounts)
        -> the path commands actually see them at, for backends that cannot present the fixed
        layout (an unisolated local process). Empty when every sandbox path is real."""
        ...


def _host_link(path: PurePosixPath) -> str | None:
    return os.readlink(path) if os.path.islink(path) else None


def resolve_in(
    roots: dict[str, P],
    workspace: str,
    path: str,
    readlink: Callable[[P], str | None] = _host_link,
) -> P:
    """The real path of sandbox path ``path`` (relative: from ``workspace``), where ``roots``
    maps each sandbox root (the workspace, the home) to where it really is, following symlinks
    the way the sandbox would see them, but only within the root the path starts in: a link
    in the workspace never leads into the home (where a verifier keeps its own files), nor one
    in the home into the workspace. ValueError when it leaves its root (``..``, other absolute
    paths, symlinks pointing out). ``readlink``: a path's link target, None when it is no link
    (the host's by default; :mod:`forge.sandboxes.archive_view` reads an archive's). Standard
    library only: the in-container agent and the local backend share it."""
    p = path if path.startswith("/") else f"{workspace}/{path}"
    start: P | None = None
    start_prefix = ""
    for _ in range(40):
        p = posixpath.normpath(p)
        hits = [r for r in roots if p == r or p.startswith(r + "/")]
        if not hits:
            if start is not None:
                raise ValueError(
                    f"path {path!r} leads outside the sandbox's workspace and home (a link)"
                )
            raise ValueError(f"path {path!r} is outside the sandbox's workspace and home")
        prefix = max(hits, key=len)
        if start is None:
            start, start_prefix = roots[prefix], prefix
        elif roots[prefix] != start:
            raise ValueError(f"path {path!r} is a link out of {start_prefix}")
        parts = [x for x in p[len(prefix) :].split("/") if x]
        cur = roots[prefix]
        for i, part in enumerate(parts):
            nxt = cur / part
            target = readlink(nxt)
            if target is not None:
                here = posixpath.join(prefix, *parts[:i])
                p = posixpath.join(here, target, *parts[i + 1 :])
                break
            cur = nxt
        else:
            return cur
    raise ValueError(f"path {path!r}: too many levels of symbolic links")


MAX_FILE_BYTES = 256 << 20  # the largest file get_file reads (the sandbox agent's too)


def read_regular(host: Path, path: str, max_bytes: int = MAX_FILE_BYTES) -> bytes | None:
    """The bytes of ``host`` (sandbox path ``path``, for messages) when it is a regular file,
    never following a final symlink and never blocking on a FIFO; None when it is missing or
    not a regular file; ValueError when it cannot be read safely or is over ``max_bytes``."""
    try:  # O_NONBLOCK: a FIFO opens at once (and is refused below) instead of blocking
        fd = os.open(host, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        raise ValueError(f"path {path!r} cannot be read safely: {e}") from e
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        return None
    if info.st_size > max_bytes:
        os.close(fd)
        raise ValueError(f"path {path!r} is {info.st_size} bytes, over the {max_bytes} limit")
    with os.fdopen(fd, "rb") as f:
        data = f.read(max_bytes + 1)  # it may grow while read
    if len(data) > max_bytes:
        raise ValueError(f"path {path!r} is over the {max_bytes} limit")
    return data

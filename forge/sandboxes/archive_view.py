"""A workspace's archive, read as the sandbox it would be extracted into: files only, no sandbox.

A verifier that runs no command (file, JSON and judge checks) only reads files. It gets the copy
of the agent's workspace that :func:`rewards.runner.run_verifier` took, read here in memory
instead of extracted into a fresh sandbox of the agent's backend (on docker, a container to
start and remove for every attempt). What it can read is exactly what that sandbox would hold
and show:

- the archive is taken by :func:`forge.sandboxes.archive.unpack_into`'s rules
  (:func:`~forge.sandboxes.archive.members`: directories, regular files and symlinks; a hard link
  is a copy of its file; a later member replaces an earlier non-directory; a member never lands
  behind a symlink or a file);
- paths are resolved as a sandbox's own ``get_file`` resolves them
  (:func:`forge.sandboxes.base.resolve_in`): relative ones from the workspace, symlinks
  followed only inside the workspace, anything else a ValueError. The home holds nothing.

    view = ArchiveView(sandbox.get_archive(sandbox.workspace), sandbox.workspace)
    view.get_file("out/result.json")   # bytes, or None: missing, a directory, behind a file
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import PurePosixPath

from forge.sandboxes.archive import DEFAULT_MAX_BYTES, DEFAULT_MAX_DEPTH, members
from forge.sandboxes.base import resolve_in
from forge.sandboxes.bwrap import HOME, WORKSPACE

_WORKSPACE = PurePosixPath("/workspace")  # where the archive's tree is kept here
_HOME = PurePosixPath("/home")  # an empty home: no link leads from one into the other


class ArchiveView:
    """The files of a workspace archive, as a sandbox it was extracted into serves them; see
    the module docstring. ``workspace``: the workspace's path in the sandbox (its ``workspace``);
    ``aliases``: other paths it is also reached at (an unisolated local sandbox's host path)."""

    def __init__(
        self,
        data: bytes,
        workspace: str = WORKSPACE,
        aliases: Iterable[str] = (),
        max_bytes: int = DEFAULT_MAX_BYTES * 2,
        max_depth: int = DEFAULT_MAX_DEPTH,
    ) -> None:
        self.workspace = workspace
        self._roots = {workspace: _WORKSPACE, HOME: _HOME}
        self._roots.update({alias: _WORKSPACE for alias in aliases})
        self._dirs: set[PurePosixPath] = {_WORKSPACE, _HOME}
        self._files: dict[PurePosixPath, bytes] = {}
        self._links: dict[PurePosixPath, str] = {}
        for parts, member, content in members(data, max_bytes, max_depth):
            path = _WORKSPACE.joinpath(*parts)
            self._parents(path, member.name)
            if path in self._dirs and not member.isdir():
                raise IsADirectoryError(f"archive member {member.name!r}: a directory is there")
            self._files.pop(path, None)  # a later member replaces a file or link
            self._links.pop(path, None)
            if member.isdir():
                self._dirs.add(path)
            elif member.issym():
                self._links[path] = member.linkname
            else:
                self._files[path] = content

    def _parents(self, path: PurePosixPath, name: str) -> None:
        """Make ``path``'s missing parent directories; one that is a file or link is an error,
        as extraction would meet it."""
        for parent in reversed(path.parents):
            if parent in self._files or parent in self._links:
                raise NotADirectoryError(f"archive member {name!r} lies behind {parent.name!r}")
            if parent.is_relative_to(_WORKSPACE):
                self._dirs.add(parent)

    def get_file(self, path: str) -> bytes | None:
        """The bytes of the regular file at sandbox path ``path``, or None (missing, a
        directory); ValueError when it leaves the workspace and home, as in the sandbox."""
        return self._files.get(resolve_in(self._roots, self.workspace, path, self._links.get))

"""Fixed-name folders this project creates and reuses (``/tmp/openforge-sandboxes``,
``/tmp/openforge-docker``, the test daemons' parents): made private, and checked each time.

Under a shared ``/tmp`` another user can create such a folder first and then read, replace or
plant what the next run puts there (an agent's socket, a sandbox's workspace, a labels file the
reaper trusts). :func:`private_root` creates the folder with mode 0700, or accepts an existing
one only when it is a real directory (not a link) owned by this user and writable by no one
else; otherwise it raises :class:`UnsafeTempRoot` naming the folder and what is wrong.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class UnsafeTempRoot(RuntimeError):
    """A shared folder exists but another user owns it, can write into it, or it is a link."""


def private_root(path: str | Path) -> Path:
    """``path``, created (with its missing parents) as a private folder of this user, or
    checked to be one (see the module docstring); a folder of ours that others may read is
    closed (mode 0700)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    euid = os.geteuid()
    fix = "remove it (as its owner or root) or point this run at another folder (sandbox.root)"
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UnsafeTempRoot(f"{path} exists but is not a directory (a link or a file): {fix}")
    if st.st_uid != euid:
        raise UnsafeTempRoot(
            f"{path} is owned by uid {st.st_uid}, not by this user (uid {euid}): whoever owns "
            f"it could read or replace what is put there; {fix}"
        )
    if st.st_mode & 0o022:
        raise UnsafeTempRoot(
            f"{path} has mode {stat.S_IMODE(st.st_mode):o}: other users can write into it and "
            f"plant files there; {fix}"
        )
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path

"""The sandbox agent's user handling (standard library only, in the agent's tree): who
commands run as, files written as that user, and the agent kept out of that user's reach.

A root agent started with ``--user UID:GID`` runs every command as that unprivileged user
(``subprocess`` drops supplementary groups, then sets gid and uid in the child), writes files
with that user's filesystem ids (:func:`filesystem_user`, per thread), hands it the workspace
and home, and keeps its own socket, token and memory from it (:func:`keep_out_of_reach`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pwd
from pathlib import Path

User = tuple[int, int]  # (uid, gid)


def parse_user(text: str) -> User:
    """``UID[:GID]`` or a user name of this system's passwd (its primary group)."""
    uid, sep, gid = text.partition(":")
    if uid.isdigit() and (not sep or gid.isdigit()):
        return int(uid), int(gid) if sep else int(uid)
    try:
        entry = pwd.getpwnam(text)
    except KeyError:
        raise ValueError(f"user {text!r}: expected UID[:GID] or a known user name") from None
    return entry.pw_uid, entry.pw_gid


@contextlib.contextmanager
def filesystem_user(user: User | None):  # type: ignore[no-untyped-def]
    """Within the block, this thread creates and opens files as ``user`` (Linux's per-thread
    filesystem uid and gid: the root-only capabilities over files are off meanwhile); nothing
    when ``user`` is None or this process is not root."""
    if user is None or os.geteuid() != 0:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.setfsgid(user[1])
    libc.setfsuid(user[0])
    try:
        if libc.setfsuid(user[0]) != user[0]:  # returns the current one: check the switch
            raise OSError("setfsuid failed: cannot write files as the sandbox's user")
        yield
    finally:
        libc.setfsuid(0)
        libc.setfsgid(0)


def hand_over(user: User, roots: list[Path]) -> None:
    """Give ``roots`` and everything in them (what an image put there too) to ``user``,
    links themselves, never what they point to."""
    uid, gid = user
    for root in roots:
        os.lchown(root, uid, gid)
        for top, dirs, files in os.walk(root):
            for name in dirs + files:
                with contextlib.suppress(FileNotFoundError):
                    os.lchown(os.path.join(top, name), uid, gid)


def keep_out_of_reach(user: User, home: Path, roots: list[Path], secrets: list[str | None]) -> None:
    """Before serving, as root: the user's passwd entry (when the image lacks it), ``roots``
    (the workspace and home) handed to it, this process made non-dumpable, and the folders of
    ``secrets`` (the socket, the token file) checked to be another user's and closed to others
    (ValueError naming the folder otherwise: the user could replace the socket or read the
    token)."""
    add_passwd_entry(*user, str(home))
    hand_over(user, roots)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
    for f in secrets:
        if f is None:
            continue
        folder = os.path.dirname(os.path.abspath(f))
        st = os.stat(folder)
        if st.st_uid == user[0] or st.st_mode & 0o077:
            raise ValueError(
                f"folder {folder} (of {f}) is owned by uid {st.st_uid} with mode "
                f"{st.st_mode & 0o777:o}: the sandbox's user (uid {user[0]}) could reach "
                "it; it must be another user's (root's) with mode 0700"
            )


def add_passwd_entry(uid: int, gid: int, home: str, name: str = "agent") -> None:
    """Name ``uid`` and ``gid`` in /etc/passwd and /etc/group when the image does not (best
    effort: a read-only root leaves the ids nameless, which works)."""
    with contextlib.suppress(OSError):
        users = Path("/etc/passwd").read_text()
        if not any(line.split(":")[2:3] == [str(uid)] for line in users.splitlines()):
            taken = {line.split(":")[0] for line in users.splitlines()}
            who = name if name not in taken else f"{name}{uid}"
            with open("/etc/passwd", "a") as f:
                f.write(f"{who}:x:{uid}:{gid}:{who}:{home}:/bin/sh\n")
        groups = Path("/etc/group").read_text()
        if not any(line.split(":")[2:3] == [str(gid)] for line in groups.splitlines()):
            taken = {line.split(":")[0] for line in groups.splitlines()}
            with open("/etc/group", "a") as f:
                f.write(f"{name if name not in taken else f'{name}{gid}'}:x:{gid}:\n")

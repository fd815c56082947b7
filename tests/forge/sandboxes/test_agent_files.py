"""Files and archives through the real sandbox agent: round trips, modes, and paths or archive
members that would leave the workspace and home."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

import pytest

from forge.sandboxes.archive import pack_dir
from forge.sandboxes.base import ArchiveTooLarge
from tests.forge.sandboxes.test_agent import SYSTEM_PYTHON, Agent, agent, unix_agent

__all__ = ["agent", "unix_agent"]  # fixtures

pytestmark = pytest.mark.skipif(
    not os.path.exists(SYSTEM_PYTHON), reason="needs the system python3 (>= 3.11)"
)


def _tar(**members: bytes | str) -> bytes:
    """A tar of files (bytes) and symlinks (str: the target)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, value in members.items():
            info = tarfile.TarInfo(name.replace("__", "/"))
            if isinstance(value, str):
                info.type, info.linkname = tarfile.SYMTYPE, value
                tar.addfile(info)
            else:
                info.size, info.mode = len(value), 0o640
                tar.addfile(info, io.BytesIO(value))
    return out.getvalue()


def test_files_round_trip_with_modes(agent: Agent) -> None:
    c, ws = agent.client, agent.workspace
    blob = bytes(range(256)) * 1000
    c.put_file("deep/er/data.bin", blob, mode=0o600)
    assert c.get_file("deep/er/data.bin") == blob
    assert (ws / "deep/er/data.bin").read_bytes() == blob
    assert stat.S_IMODE((ws / "deep/er/data.bin").stat().st_mode) == 0o600
    c.put_file(f"{ws}/run.sh", "#!/bin/sh\necho ran\n", mode=0o755)
    assert c.exec(["./run.sh"], 10).stdout == "ran\n"
    c.put_file("empty", b"")
    assert c.get_file("empty") == b""
    c.put_file(f"{agent.home}/.config/x.json", "{}")
    assert c.get_file(f"{agent.home}/.config/x.json") == b"{}"
    assert (agent.home / ".config/x.json").read_text() == "{}"
    assert c.get_file("missing") is None
    assert c.get_file("deep") is None  # a directory is not a regular file
    os.mkfifo(ws / "fifo")
    assert c.get_file("fifo") is None  # refused at once, never blocks


def test_paths_may_not_leave_the_workspace_and_home(agent: Agent, tmp_path: Path) -> None:
    c, ws = agent.client, agent.workspace
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    os.symlink(tmp_path, ws / "out")
    os.symlink(secret, ws / "leak")
    os.symlink("inside.txt", ws / "ok")
    (ws / "inside.txt").write_text("in")
    for bad in ("../secret.txt", str(secret), "/etc/passwd", "out/secret.txt", "leak"):
        with pytest.raises(ValueError, match="outside"):
            c.get_file(bad)
        with pytest.raises(ValueError, match="outside"):
            c.put_file(bad, "x")
    assert secret.read_text() == "host secret"
    assert c.get_file("ok") == b"in"  # a link that stays inside is followed
    with pytest.raises(ValueError, match="directory"):
        c.put_file(str(ws), "x")
    with pytest.raises(ValueError, match="outside"):
        c.get_archive("..")
    with pytest.raises(ValueError, match="outside"):
        c.put_archive("out", _tar(f=b"x"))
    assert not (tmp_path / "f").exists()


def test_archives_round_trip_links_as_links(agent: Agent, tmp_path: Path) -> None:
    c = agent.client
    c.put_archive("proj", _tar(a__b__f=b"deep\n", top=b"top", link="/etc/passwd", rel="a/b/f"))
    proj = agent.workspace / "proj"
    assert (proj / "a/b/f").read_text() == "deep\n"
    assert os.readlink(proj / "link") == "/etc/passwd"
    assert stat.S_IMODE((proj / "top").stat().st_mode) == 0o640
    data = c.get_archive("proj")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        got = {m.name: m for m in tar}
    assert got["link"].issym() and got["link"].linkname == "/etc/passwd"
    assert got["rel"].issym() and got["a/b/f"].isfile()
    assert data == pack_dir(proj)  # the same bytes the local backend would give
    c.put_archive(f"{agent.home}/copy", data)
    assert (agent.home / "copy/a/b/f").read_text() == "deep\n"


def test_archive_refusals(unix_agent: Agent) -> None:
    c, ws = unix_agent.client, unix_agent.workspace
    with pytest.raises(ValueError, match="not a path under"):
        c.put_archive("dst", _tar(**{"..__evil": b"x"}))
    assert not (ws / "evil").exists()
    os.symlink("/tmp", ws / "dst2")
    with pytest.raises(ValueError):  # a link to outside is not a way out
        c.put_archive("dst2", _tar(f=b"x"))
    (ws / "lnk").mkdir()
    c.put_archive("via", _tar(a="../lnk"))
    with pytest.raises(OSError, match="a"):  # never extracted through the link 'a'
        c.put_archive("via", _tar(a__f=b"x"))
    assert not (ws / "lnk/f").exists()
    (ws / "big").mkdir()
    (ws / "big/f").write_bytes(b"x" * 5000)
    with pytest.raises(ArchiveTooLarge):
        c.get_archive("big", max_bytes=1000)
    assert len(c.get_archive("big", max_bytes=10_000)) > 5000
    (ws / "file").write_text("x")
    with pytest.raises(NotADirectoryError):
        c.get_archive("file")
    with pytest.raises(NotADirectoryError):
        c.get_archive("nothing-here")
    with pytest.raises(ValueError):
        c.put_archive("dst", b"this is not a tar file" * 100)
    assert c.exec(["true"], 5).exit_code == 0  # still serving on the same connection

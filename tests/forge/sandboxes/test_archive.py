"""Tar copies of sandbox directories: links stay links, nothing is followed on the host."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from forge.sandboxes.archive import pack_dir, unpack_into
from forge.sandboxes.base import ArchiveTooLarge, SandboxSpec
from forge.sandboxes.bwrap import bwrap_works
from forge.sandboxes.local import LocalSandbox


def tree(root: Path) -> dict[str, str]:
    """Relative path -> 'dir', 'link:TARGET' or 'file:MODE:CONTENT', without following links."""
    out: dict[str, str] = {}
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(d, name)
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = f"link:{os.readlink(p)}"
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = f"file:{stat.S_IMODE(p.stat().st_mode):o}:{p.read_text()}"
    return out


def members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: m for m in tar.getmembers()}


def test_round_trip_keeps_files_dirs_modes_and_symlinks(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    (src / "a" / "b" / "f.txt").write_text("deep\n")
    (src / "run.sh").write_text("#!/bin/sh\n")
    (src / "run.sh").chmod(0o755)
    (src / "empty").mkdir()
    os.symlink("/etc/passwd", src / "abs")
    os.symlink("a/b/f.txt", src / "rel")
    os.symlink("nowhere", src / "dangling")
    os.symlink("../../outside", src / "a" / "up")
    out = tmp_path / "out"
    unpack_into(out, pack_dir(src))
    assert tree(out) == tree(src)
    assert tree(out)["abs"] == "link:/etc/passwd"
    assert tree(out)["run.sh"] == "file:755:#!/bin/sh\n"


def test_special_files_are_left_out_and_hard_links_become_copies(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    os.mkfifo(src / "fifo")  # opening it would block whoever reads it
    (src / "f").write_text("x")
    os.link(src / "f", src / "hard")
    (src / "suid").write_text("s")
    (src / "suid").chmod(0o4755)
    got = members(pack_dir(src))
    assert sorted(got) == ["f", "hard", "suid"]
    assert got["hard"].isreg() and got["hard"].size == 1
    assert got["suid"].mode == 0o755


def test_caps_are_checked_before_reading(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    with open(src / "sparse", "wb") as f:
        f.truncate(1 << 40)  # 1 TiB: reading it would never finish
    with pytest.raises(ArchiveTooLarge, match="bytes"):
        pack_dir(src, max_bytes=1 << 20)
    (src / "sparse").unlink()
    for i in range(20):
        (src / f"f{i}").touch()
    with pytest.raises(ArchiveTooLarge, match="entries"):
        pack_dir(src, max_entries=10)
    assert len(members(pack_dir(src, max_entries=20))) == 20


def test_root_must_be_a_real_directory(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    with pytest.raises(OSError):
        pack_dir(tmp_path / "link")


def crafted(*entries: tuple[str, str, bytes]) -> bytes:
    """A tar from (name, kind, data) with kind 'file', 'dir', 'sym' or 'hard' (for a link,
    data is its target)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, kind, data in entries:
            info = tarfile.TarInfo(name)
            if kind in ("sym", "hard"):
                info.type = tarfile.SYMTYPE if kind == "sym" else tarfile.LNKTYPE
                info.linkname = data.decode()
                tar.addfile(info)
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_unpack_never_writes_through_a_symlink(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("host file\n")
    dest = tmp_path / "dest"
    with pytest.raises(OSError):
        unpack_into(dest, crafted(("esc", "sym", str(outside).encode()), ("esc/new", "file", b"x")))
    assert not (outside / "new").exists()
    # a file member over an existing symlink replaces the link, not its target
    unpack_into(dest, crafted(("v", "sym", str(outside / "victim").encode()), ("v", "file", b"y")))
    assert (outside / "victim").read_text() == "host file\n"
    assert not (dest / "v").is_symlink() and (dest / "v").read_text() == "y"


def test_unpack_refuses_names_that_leave_the_root(tmp_path: Path) -> None:
    dest = tmp_path / "d" / "dest"
    with pytest.raises(ValueError, match="not a path under"):
        unpack_into(dest, crafted(("../escape", "file", b"x")))
    assert not (tmp_path / "d" / "escape").exists()
    unpack_into(dest, crafted(("/abs/name", "file", b"x")))  # absolute: taken under the root
    assert (dest / "abs" / "name").read_text() == "x"


def test_unpack_skips_devices_and_fifos(tmp_path: Path) -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, kind in (("fifo", tarfile.FIFOTYPE), ("dev", tarfile.CHRTYPE)):
            info = tarfile.TarInfo(name)
            info.type = kind
            tar.addfile(info)
    unpack_into(tmp_path / "d", out.getvalue())
    assert os.listdir(tmp_path / "d") == []


needs_bwrap = pytest.mark.skipif(not bwrap_works(), reason="bubblewrap unavailable")


@pytest.fixture
def boxes(tmp_path: Path) -> Iterator[list[LocalSandbox]]:
    made: list[LocalSandbox] = []
    yield made
    for b in made:
        b.destroy()


@needs_bwrap
def test_local_sandbox_archive_between_two_sandboxes(
    tmp_path: Path, boxes: list[LocalSandbox]
) -> None:
    for i in range(2):
        box = LocalSandbox(root=tmp_path / "root", isolation="required")
        box.create(SandboxSpec(labels={"run": "arch", "attempt": str(i)}))
        boxes.append(box)
    a, b = boxes
    made = a.exec(
        ["sh", "-c", "mkdir -p d/e && echo hi > d/e/f && ln -s /etc/hostname h && mkfifo p"], 30
    )
    assert made.exit_code == 0, made.stderr
    b.put_archive(b.workspace, a.get_archive(a.workspace))
    seen = b.exec(["sh", "-c", "cat d/e/f; readlink h; test -e p || echo no-fifo"], 30)
    assert seen.stdout.split() == ["hi", "/etc/hostname", "no-fifo"]
    with pytest.raises(NotADirectoryError):
        a.get_archive("d/e/f")
    with pytest.raises(ValueError):
        a.get_archive("/etc")


def test_a_tree_thousands_deep_is_too_large_not_a_crash(tmp_path: Path) -> None:
    """A 1,200-deep workspace made the recursive walk raise RecursionError (an infrastructure
    failure); the walk keeps its own stack and refuses past its depth cap."""
    from forge.sandboxes.orphans import rmtree
    from tests.forge.sandboxes.test_orphans import deep

    src = deep(tmp_path / "src", 1200)
    try:
        with pytest.raises(ArchiveTooLarge, match="levels"):
            pack_dir(src)
    finally:
        assert rmtree(src)
    shallow = deep(tmp_path / "shallow", 20)
    got = members(pack_dir(shallow, max_depth=21))
    assert len(got) == 21 and got["/".join(["d"] * 20) + "/f"].size == 6
    with pytest.raises(ArchiveTooLarge, match="levels"):
        pack_dir(shallow, max_depth=20)


def test_unpack_refuses_a_member_past_the_depth_cap(tmp_path: Path) -> None:
    name = "/".join(["d"] * 200) + "/f"
    with pytest.raises(ArchiveTooLarge, match="levels"):
        unpack_into(tmp_path / "d", crafted((name, "file", b"x")))
    unpack_into(tmp_path / "ok", crafted((name, "file", b"x")), max_depth=201)
    assert (tmp_path / "ok" / name).read_text() == "x"

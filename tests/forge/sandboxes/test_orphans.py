"""Removing what an agent left in a sandbox folder (forge.sandboxes.orphans.rmtree) and the
reconcile pass at run start: any tree goes, or is logged and counted; nothing raises."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from forge.sandboxes import orphans
from forge.sandboxes.orphans import LABELS_FILE, cleanup_failures, reap_orphans, rmtree


@pytest.fixture(autouse=True)
def _no_deep_leftovers(tmp_path: Path) -> Iterator[None]:
    """pytest's own clean-up of old temporary folders recurses (RecursionError): remove here."""
    yield
    rmtree(tmp_path)


def deep(root: Path, levels: int) -> Path:
    """``root/d/d/.../d`` ``levels`` deep (made by descriptor: the path outgrows PATH_MAX).
    Remove it with :func:`rmtree` (pytest's clean-up of old temporary folders cannot)."""
    root.mkdir(parents=True)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=fd)
            nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        with open(os.open("f", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd), "w") as f:
            f.write("bottom")
    finally:
        os.close(fd)
    return root


def test_a_tree_thousands_deep_is_removed(tmp_path: Path) -> None:
    tree = deep(tmp_path / "ws", 1200)  # shutil.rmtree: RecursionError at ~1000
    assert rmtree(tree) and not tree.exists()


def test_closed_directories_are_opened_and_links_are_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("host file")
    tree = tmp_path / "ws"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "f").write_text("x")
    os.symlink(outside, tree / "a" / "to-outside")
    os.symlink(outside / "keep", tree / "file-link")
    (tree / "a" / "b").chmod(0)
    (tree / "a").chmod(0o500)  # its entries cannot be removed until it is opened up
    assert rmtree(tree) and not tree.exists()
    assert (outside / "keep").read_text() == "host file"
    link = tmp_path / "link"
    os.symlink(outside, link)
    assert rmtree(link) and not link.exists() and outside.is_dir()  # the link, not its target


def test_what_cannot_be_removed_is_logged_and_counted(tmp_path, monkeypatch, caplog) -> None:
    tree = tmp_path / "ws"
    (tree / "stuck").mkdir(parents=True)
    real = os.rmdir

    def refuse(path, *, dir_fd=None):  # a directory the host will not let go of
        if str(path) == "stuck":
            raise PermissionError(1, "Operation not permitted", "stuck")
        return real(path, dir_fd=dir_fd)

    monkeypatch.setattr(orphans.os, "rmdir", refuse)
    before = cleanup_failures()
    assert rmtree(tree) is False
    assert cleanup_failures() == before + 1
    assert "could not remove" in caplog.text and str(tree) in caplog.text


def _leftover(root: Path, name: str, levels: int) -> Path:
    d = root / name
    deep(d / "workspace", levels)
    record = {"labels": {"run": "r"}, "pid": 0, "host": socket.gethostname(), "deadline": 0}
    (d / LABELS_FILE).write_text(json.dumps(record))
    return d


def test_run_start_reaps_a_deep_leftover_and_survives_one_it_cannot_remove(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 1,200-deep workspace left behind made every later run of that name crash at start
    (RecursionError from the reconcile pass); now it is removed, and one that cannot be is
    counted and left for the next pass."""
    root = tmp_path / "boxes"
    gone = _leftover(root, "r-a", 1200)
    assert reap_orphans(root, run="r") == 1 and not gone.exists()
    stuck = _leftover(root, "r-b", 3)
    (root / "garbage").mkdir()
    (root / "garbage" / LABELS_FILE).write_text('["not", "a", "record"]')
    monkeypatch.setattr(orphans, "_remove_tree", lambda p: (_ for _ in ()).throw(OSError("busy")))
    before = cleanup_failures()
    assert reap_orphans(root, run="r") == 0
    assert cleanup_failures() == before + 1 and stuck.exists()

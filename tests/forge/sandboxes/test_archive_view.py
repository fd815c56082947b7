"""ArchiveView: a workspace archive's files, read as the sandbox it would be extracted into.

The reference is what a verifier read before: the archive extracted by ``unpack_into`` and read
with a sandbox's own ``get_file`` (``resolve_in`` over the workspace and an empty home, then
``read_regular``). For hypothesis-built workspaces (links anywhere, loops, FIFOs, clashing
names, deep and wide trees) the view must give the same bytes, None or refusal for every path.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forge.sandboxes.archive import pack_dir, unpack_into
from forge.sandboxes.archive_view import ArchiveView
from forge.sandboxes.base import ArchiveTooLarge, read_regular, resolve_in
from forge.sandboxes.bwrap import HOME, WORKSPACE
from forge.sandboxes.orphans import rmtree
from tests.forge.sandboxes.test_archive import crafted
from tests.rewards.test_fuzz_workspaces import READ, build, entry


def extracted(tmp: Path, data: bytes) -> tuple[dict[str, Path], Path]:
    """The archive extracted as a verifier sandbox held it: its roots, and its workspace."""
    ws, home = tmp / "ws", tmp / "home"
    home.mkdir()
    unpack_into(ws, data)
    return {WORKSPACE: ws, HOME: home}, ws


def outcome(read, path: str) -> object:
    """What reading ``path`` gives: bytes, None, or the kind of refusal."""
    try:
        return read(path)
    except ValueError as e:
        return ("ValueError", str(e))


def sandbox_reader(roots: dict[str, Path]):
    return lambda path: read_regular(resolve_in(roots, WORKSPACE, path), path)


def paths_to_try(entries: list) -> list[str]:
    names = [name for _, name, _ in entries] + READ + ["", ".", "..", "d/../a", "nope/x"]
    out: list[str] = []
    for name in names:
        out += [name, f"d/{name}", f"{WORKSPACE}/{name}", f"{name}/x", f"{HOME}/{name}"]
    return [*out, "/etc/passwd", HOME, WORKSPACE, "/"]


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(entry, max_size=8))
def test_the_view_reads_what_the_extracted_copy_reads(tmp_path: Path, entries: list) -> None:
    tmp = Path(tempfile.mkdtemp(dir=tmp_path))  # hypothesis reuses tmp_path between examples
    src = tmp / "agent"
    (src / "d").mkdir(parents=True)
    build(src, entries)
    try:
        data = pack_dir(src)
    except ArchiveTooLarge:
        return
    roots, _ = extracted(tmp, data)
    view = ArchiveView(data)
    sandbox = sandbox_reader(roots)
    for path in paths_to_try(entries):
        assert outcome(view.get_file, path) == outcome(sandbox, path), path
    assert rmtree(tmp)


def test_later_members_links_and_hard_links_read_as_extracted(tmp_path: Path) -> None:
    data = crafted(
        ("a", "file", b"one"),
        ("a", "file", b"two"),  # replaces the first
        ("b", "sym", b"a"),
        ("c", "sym", b"/workspace/d/e"),
        ("d/e", "file", b"deep"),  # its folder is made on the way
        ("f", "hard", b"a"),  # a copy of a's last version
        ("loop", "sym", b"loop"),
        ("out", "sym", b"../../etc/passwd"),
        ("home", "sym", b"/home/agent/x"),
        ("g", "sym", b"a"),
        ("g", "file", b"a file now"),  # a link replaced by a file
    )
    roots, _ = extracted(tmp_path, data)
    view, sandbox = ArchiveView(data), sandbox_reader(roots)
    for path in ("a", "b", "c", "d/e", "f", "d", "g", "loop", "out", "home", "/workspace/b", "zz"):
        assert outcome(view.get_file, path) == outcome(sandbox, path), path
    assert view.get_file("b") == b"two" and view.get_file("f") == b"two"
    assert view.get_file("c") == b"deep" and view.get_file("d") is None
    assert view.get_file("g") == b"a file now"


@pytest.mark.parametrize(
    ("members", "error"),
    [
        ([("a", "sym", b"/tmp"), ("a/b", "file", b"x")], OSError),  # never behind a link
        ([("a", "file", b"x"), ("a/b", "file", b"x")], OSError),  # nor behind a file
        ([("a", "dir", b""), ("a", "file", b"x")], OSError),  # a folder stays a folder
        ([("../x", "file", b"x")], ValueError),  # nothing outside the root
    ],
)
def test_what_extraction_refuses_the_view_refuses(tmp_path: Path, members, error) -> None:
    data = crafted(*members)
    with pytest.raises(error):
        unpack_into(tmp_path / "ws", data)
    with pytest.raises(error):
        ArchiveView(data)


def test_limits_are_the_extractions(tmp_path: Path) -> None:
    data = crafted(("a", "file", b"x" * 100), ("b", "file", b"y" * 100))
    with pytest.raises(ArchiveTooLarge):
        ArchiveView(data, max_bytes=150)
    with pytest.raises(ArchiveTooLarge):
        ArchiveView(crafted(("a/b/c/d", "file", b"x")), max_depth=3)


def test_a_workspace_reached_at_another_path(tmp_path: Path) -> None:
    """An unisolated sandbox's workspace is a host path, and /workspace names it too."""
    host = str(tmp_path / "box" / "workspace")
    view = ArchiveView(crafted(("a", "file", b"x")), host, aliases=[WORKSPACE])
    assert view.workspace == host
    assert view.get_file(f"{host}/a") == view.get_file("/workspace/a") == view.get_file("a")
    with pytest.raises(ValueError, match="outside"):
        view.get_file(str(tmp_path / "a"))

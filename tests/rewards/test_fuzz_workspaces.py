"""Any workspace an agent leaves is scored or refused, never a crash (issue 30 item 5).

Hypothesis builds workspaces (deep chains, wide folders, odd names, links to anywhere, loops,
FIFOs, huge sparse files, JSON nested past the parser) in a real bubblewrap sandbox's
workspace; the file verifiers then run as in an episode (:func:`rewards.runner.run_verifier`:
the copy, a fresh verifier sandbox, the reads) and must give a reward in [0, 1], the archive
must round-trip or refuse with :class:`ArchiveTooLarge`, and no sandbox folder may be left.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forge.sandboxes.archive import pack_dir, unpack_into
from forge.sandboxes.base import ArchiveTooLarge, SandboxSpec
from forge.sandboxes.bwrap import bwrap_works
from forge.sandboxes.local import LocalSandbox
from forge.sandboxes.orphans import rmtree
from rewards.runner import run_verifier
from tasks.schema import Task

pytestmark = pytest.mark.skipif(not bwrap_works(), reason="bubblewrap unavailable")

VERIFIERS = [
    {"type": "file_exists", "path": "a"},
    {"type": "file_equals", "path": "out.txt", "content": "42"},
    {"type": "file_regex", "path": "d/out.txt", "pattern": "4+2"},
    {"type": "json_field", "path": "r.json", "field": "a.0", "equals": 1},
    {"type": "file_absent", "path": "gone"},
]
TASK = Task(id="fuzz", instruction="anything", verifier=VERIFIERS)
READ = ["a", "out.txt", "d", "d/out.txt", "r.json", "gone"]  # names the verifiers read

names = st.one_of(
    st.sampled_from(READ[:1] + READ[1:3] + READ[4:]),
    st.text(
        st.characters(blacklist_characters="/\0", blacklist_categories=("Cs",)),
        min_size=1,
        max_size=40,
    ).filter(lambda n: n not in (".", "..") and len(n.encode()) < 250),
)
targets = st.one_of(
    st.sampled_from(
        [
            "/etc/passwd",
            "/home/agent/.verifier",
            "../home/agent",
            "/proc/self/environ",
            "/dev/zero",
            "..",
            "/",
            "a",
            "out.txt",
            "d/../../..",
            "r.json",
        ]
    ),
    names,
)
contents = st.one_of(
    st.binary(max_size=200),
    st.sampled_from([b"42", b'{"a": [1]}', b"[" * 100_000, b'{"a": ' + b"[" * 990]),
)
entry = st.one_of(
    st.tuples(st.just("file"), names, contents),
    st.tuples(st.just("link"), names, targets),
    st.tuples(st.just("dir"), names, st.sampled_from([1, 3, 40, 130, 200])),
    st.tuples(st.just("fifo"), names, st.none()),
    st.tuples(st.just("sparse"), names, st.sampled_from([1 << 30, 1 << 40])),
    st.tuples(st.just("wide"), names, st.integers(0, 300)),
)


def _write_new(path: Path, data: bytes = b"", size: int | None = None) -> None:
    """``path`` created or truncated, then ``data`` written (or its size set, sparse), never
    through a link (it could lead to this host's files) nor into a FIFO (no reader: it would
    block): OSError then."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK
    fd = os.open(path, flags, 0o644)
    try:
        os.write(fd, data)
        if size is not None:
            os.ftruncate(fd, size)
    finally:
        os.close(fd)


def build(root: Path, entries: list[tuple[str, str, object]]) -> None:
    """Make ``entries`` under ``root`` (later ones over earlier ones where they can)."""
    for kind, name, arg in entries:
        sub = root / "d"  # never through a link: it could lead anywhere on this host
        here = sub if name.startswith("d") and sub.is_dir() and not sub.is_symlink() else root
        p = here / name
        try:
            if kind == "file":
                _write_new(p, arg)  # type: ignore[arg-type]
            elif kind == "link":
                os.symlink(str(arg), p)
            elif kind == "fifo":
                os.mkfifo(p)
            elif kind == "sparse":
                _write_new(p, size=int(arg))  # type: ignore[call-overload]
            elif kind == "dir":
                fd = os.open(here, os.O_RDONLY | os.O_DIRECTORY)
                for _ in range(int(arg)):  # type: ignore[call-overload]
                    os.mkdir(name, dir_fd=fd)
                    nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
                    os.close(fd)
                    fd = nxt
                os.close(fd)
            else:  # wide
                p.mkdir()
                for i in range(int(arg)):  # type: ignore[call-overload]
                    (p / f"f{i}").write_text(json.dumps({"a": [i]}))
        except (OSError, ValueError):
            continue  # the name is taken by something else: as an agent's clash would leave it


@pytest.fixture
def boxes(tmp_path: Path) -> Callable[[], LocalSandbox]:
    def make() -> LocalSandbox:
        return LocalSandbox(root=tmp_path / "boxes", isolation="required")

    return make


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,  # the same 25 workspaces on every run (CI stays reproducible)
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(entry, max_size=8))
def test_any_workspace_is_scored_and_leaves_nothing(
    tmp_path: Path, boxes: Callable[[], LocalSandbox], entries: list
) -> None:
    agent = boxes()
    agent.create(SandboxSpec(labels={"run": "fuzz"}))
    ws = agent.host_workspace
    (ws / "d").mkdir()
    build(ws, entries)
    copy = tmp_path / "copy"
    try:
        data = pack_dir(ws)
    except ArchiveTooLarge:
        data = None
    if data is not None:
        unpack_into(copy, data)
        assert rmtree(copy)
    verdict = run_verifier(TASK, agent, None, boxes)
    assert 0.0 <= verdict.reward <= 1.0
    assert verdict.detail
    root = tmp_path / "boxes"
    assert not root.exists() or os.listdir(root) == []  # every sandbox folder removed

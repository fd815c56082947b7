"""The private dockerd: started under a root, reused or refused, a crashed owner's daemon
stopped by its pid, and a clear refusal without dockerd. Real daemons, each a second or so."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from forge.sandboxes import dockerd

pytestmark = pytest.mark.docker
REPO = str(Path(__file__).resolve().parents[3])


@pytest.fixture
def root() -> Iterator[Path]:
    # short: containerd's sockets live under <root>/exec and Unix socket paths are ~108 bytes
    d = Path(tempfile.mkdtemp(prefix="ofd-t", dir="/tmp"))
    yield d
    daemon = dockerd.running(d)
    if daemon is not None:
        dockerd.stop_daemon(daemon)
    shutil.rmtree(d, ignore_errors=True)


needs_dockerd = pytest.mark.skipif(
    shutil.which("dockerd") is None or os.geteuid() != 0,
    reason="needs Debian's docker.io (dockerd) and root",
)


def test_missing_dockerd_is_refused_clearly(root: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(root))
    monkeypatch.setattr(dockerd, "DOCKERD_PATHS", ())
    with pytest.raises(dockerd.DaemonError, match=r"dockerd not found.*apt-get install docker\.io"):
        dockerd.start_daemon(root)


@needs_dockerd
def test_start_reuse_refuse_and_stop(root: Path) -> None:
    d = dockerd.start_daemon(root)
    try:
        assert d.started and dockerd.answers(d.socket)
        assert d.host == f"unix://{root}/sock"
        again = dockerd.start_daemon(root, reuse=True)
        assert (again.pid, again.started) == (d.pid, False)
        with pytest.raises(dockerd.DaemonError, match="in use"):
            dockerd.start_daemon(root)  # its owner (this process) lives
    finally:
        dockerd.stop_daemon(d)
    assert dockerd.running(root) is None and not dockerd.answers(d.socket)
    mounts = Path("/proc/self/mounts").read_text().split()
    assert not [m for m in mounts if m.startswith(f"{root.resolve()}/")]  # netns file unmounted
    dockerd.stop_daemon(d)  # idempotent


@needs_dockerd
def test_daemon_of_a_crashed_owner_is_stopped_by_pid(root: Path) -> None:
    code = f"from forge.sandboxes import dockerd; print(dockerd.start_daemon({str(root)!r}).pid)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    stale = int(out.stdout.split()[-1])  # its owner has exited: nobody will stop it
    assert dockerd.running(root) is not None and dockerd.running(root).pid == stale
    fresh = dockerd.start_daemon(root)
    try:
        assert fresh.pid != stale and not dockerd._alive(stale)
        assert dockerd.answers(fresh.socket)
    finally:
        dockerd.stop_daemon(fresh)


@needs_dockerd
def test_sweep_stale_stops_and_deletes_dead_owners_roots(root: Path) -> None:
    sub = root / "s1"
    code = f"from forge.sandboxes import dockerd; dockerd.start_daemon({str(sub)!r})"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)
    pid = dockerd.running(sub).pid
    assert dockerd.sweep_stale(root) == 1
    assert not sub.exists() and not dockerd._alive(pid)

"""Disk quotas made ahead and released behind (forge.sandboxes.disk_pool), on real loop-mounted
file systems as root: a spare is a fresh disk handed to one sandbox only; a destroyed sandbox's
path is gone when destroy returns and its disk released after; a process killed with spares
and releases in hand leaves nothing the reconcile pass does not remove."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from forge.sandboxes import disk_pool, quota
from forge.sandboxes.base import SandboxSpec
from forge.sandboxes.local import LocalSandbox
from forge.sandboxes.orphans import SPARE_ROLE, TRASH, reap_orphans

pytestmark = pytest.mark.skipif(
    quota.quota_problem() is not None, reason=f"local disk quotas: {quota.quota_problem()}"
)
MB = 24


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    yield root
    disk_pool.drain()


def mounts_under(root: Path) -> list[str]:
    prefix = str(root) + "/"
    lines = Path("/proc/self/mounts").read_text().splitlines()
    return [line.split()[1] for line in lines if line.split()[1].startswith(prefix)]


def wait_for_spares(root: Path, n: int) -> list[Path]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        spares = sorted(root.glob(".spare-*"))
        if len(spares) >= n and all(os.path.ismount(s / quota.DISK) for s in spares):
            return spares
        time.sleep(0.05)
    raise AssertionError(f"no {n} spares under {root}: {list(root.iterdir())}")


def test_spares_are_fresh_and_each_handed_out_once(root: Path) -> None:
    assert disk_pool.take(root, "first", MB) is None  # none ready yet: one is made
    wait_for_spares(root, 1)
    taken: list[Path | None] = []
    threads = [
        threading.Thread(target=lambda: taken.append(disk_pool.take(root, "t", MB)))
        for _ in range(disk_pool.SPARES + 2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = [d for d in taken if d is not None]
    assert len(got) >= 1 and len(set(got)) == len(got)  # never one twice
    wait_for_spares(root, disk_pool.SPARES)  # more asked for, more kept ready
    got += [d for _ in range(disk_pool.SPARES) if (d := disk_pool.take(root, "t", MB))]
    assert len(got) >= 1 + disk_pool.SPARES and len(set(got)) == len(got)
    for d in got:
        assert d.name.startswith("t-") and os.path.ismount(d / quota.DISK)
        # a fresh file system, with the sandbox's empty folders
        assert sorted(os.listdir(d / quota.DISK)) == sorted(["lost+found", *disk_pool.FOLDERS])
        assert not any(os.listdir(d / quota.DISK / sub) for sub in disk_pool.FOLDERS)
        (d / quota.DISK / "mine").write_text(d.name)
    for d in got:
        assert (d / quota.DISK / "mine").read_text() == d.name  # no two share a disk
        disk_pool.discard(d)
        assert not d.exists()
    disk_pool.drain()
    assert mounts_under(root) == [] and list(root.iterdir()) == []


def test_a_sandbox_takes_a_spare_and_releases_it_behind(root: Path) -> None:
    boxes = []
    for n in range(3):
        box = LocalSandbox(root=root, isolation="none", disk_mb=MB)
        box.create(SandboxSpec(labels={"run": "r", "attempt": str(n)}))
        boxes.append(box)
        wait_for_spares(root, 1)
    for box in boxes:
        assert box.dir is not None and os.path.ismount(box.dir / quota.DISK)
        assert box.host_workspace.is_dir() and box.host_home.is_dir()
        assert (box.dir / quota.DISK / "tmp").is_dir()
        assert box.exec(["sh", "-c", "echo hi > f; cat f"], 10).stdout == "hi\n"
    later = boxes[-1]  # made from a spare: its disk is the sandbox's own, with the quota
    r = later.exec(["sh", "-c", "yes > big; echo rc=$?"], 60)
    assert "No space left on device" in r.stderr
    d = later.dir
    assert d is not None
    later.destroy()
    assert not d.exists()  # gone at once; the disk is released behind
    for box in boxes[:-1]:
        box.destroy()
    disk_pool.drain()
    assert mounts_under(root) == []
    assert [p.name for p in root.iterdir()] == []


CRASH = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from forge.sandboxes import disk_pool
    from forge.sandboxes.base import SandboxSpec
    from forge.sandboxes.local import LocalSandbox
    root = Path(sys.argv[1])
    box = LocalSandbox(root=root, isolation="none", disk_mb=24)
    box.create(SandboxSpec(labels={"run": "crashed"}))
    while not list(root.glob(".spare-*")):
        time.sleep(0.05)
    print(box.dir, flush=True)
    time.sleep(600)
    """
)


def test_a_killed_process_leaves_nothing_the_reconcile_pass_keeps(root: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", CRASH, str(root)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line, "the child made no sandbox"
        time.sleep(0.5)  # spares counted are mounted or being mounted: let the last one land
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    try:
        assert len(mounts_under(root)) >= 1 + 1  # its sandbox and its spares are still mounted
        spares = len(list(root.glob(".spare-*")))
        assert spares >= 1 and reap_orphans(root, run="another") == spares
        assert [p.name for p in root.iterdir()] == [Path(line).name]  # another run's is kept
    finally:
        reap_orphans(root, run="crashed")
    assert mounts_under(root) == [] and list(root.iterdir()) == []


def test_a_folder_being_released_is_left_to_its_living_process(root: Path) -> None:
    trash = root / f"{TRASH}x"
    trash.mkdir()
    host = socket.gethostname()
    labels = f'{{"labels": {{"run": "r"}}, "pid": {os.getpid()}, "host": "{host}", "deadline": 0}}'
    (trash / ".forge-labels.json").write_text(labels)
    spare = root / ".spare-y"
    spare.mkdir()
    (spare / ".forge-labels.json").write_text(
        labels.replace('"run": "r"', f'"role": "{SPARE_ROLE}"')
    )
    assert reap_orphans(root, run="r") == 1
    assert trash.exists()  # past its deadline, but its process is releasing it
    assert not spare.exists()  # a spare past its deadline is any run's to reap

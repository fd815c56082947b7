"""A local sandbox's /etc as one shared, read-only folder (forge.sandboxes.etc_tree): the
allowlisted host entries and the synthesised identity files, one copy per process and root,
with real bubblewrap sandboxes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from forge.sandboxes import etc_tree
from forge.sandboxes.base import SandboxSpec
from forge.sandboxes.bwrap import SYNTHESISED, bwrap_works, etc_paths
from forge.sandboxes.local import LocalSandbox
from forge.sandboxes.orphans import pid_start

needs_bwrap = pytest.mark.skipif(not bwrap_works(), reason="needs bubblewrap")
LOOK = (
    "import os, sys\n"
    "print(sorted(os.listdir('/etc')))\n"
    "print(open('/etc/hostname').read().strip())\n"
    "try:\n"
    "    open('/etc/hostname', 'w').write('mine')\n"
    "    print('written')\n"
    "except OSError as e:\n"
    "    print(type(e).__name__)\n"
)


@needs_bwrap
def test_sandboxes_share_one_read_only_etc_of_the_allowlist(tmp_path: Path) -> None:
    root = tmp_path / "boxes"
    seen = []
    for _ in range(2):
        box = LocalSandbox(root=root, disk_mb=None)
        box.create(SandboxSpec())
        try:
            r = box.exec(["python3", "-c", LOOK], 30)
        finally:
            box.destroy()
        assert r.exit_code == 0, r.stderr
        seen.append(r.stdout.splitlines())
    names = {p.split("/")[2] for p in etc_paths()} | set(SYNTHESISED)
    assert seen[0] == seen[1] == [str(sorted(names)), "sandbox", "OSError"]
    assert os.listdir(root) == []  # the copy is not the sandboxes' to leave behind
    tree = Path(etc_tree.etc_tree())  # one copy for both: the one this process uses
    assert tree.name.startswith(f"{etc_tree.PREFIX}{os.getpid()}-")
    assert (tree / "hostname").read_text() == "sandbox\n"  # not written through


def test_a_gone_process_tree_is_removed_and_a_live_one_kept(tmp_path: Path) -> None:
    root = tmp_path / "etc"
    root.mkdir(mode=0o700)
    gone = root / f"{etc_tree.PREFIX}999999999-1-abc"
    parent = os.getppid()
    live = root / f"{etc_tree.PREFIX}{parent}-{pid_start(parent)}-abc"
    reused = root / f"{etc_tree.PREFIX}{parent}-1-abc"  # its pid, another start: another process
    for d in (gone, live, reused):
        (d / "ssl").mkdir(parents=True)
    made = etc_tree.etc_tree(root)
    assert sorted(os.listdir(root)) == sorted([live.name, Path(made).name])
    assert etc_tree.etc_tree(root) == made  # the host's /etc unchanged: the same folder


@needs_bwrap
def test_a_mount_inside_etc_gets_the_entries_one_by_one(tmp_path: Path) -> None:
    """bwrap cannot make a mount point inside the read-only copy (Chromium's policies are
    mounted at /etc/chromium/policies/managed): such a sandbox's /etc is bound entry by entry."""
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "p.json").write_text("{}")
    box = LocalSandbox(root=tmp_path / "boxes", disk_mb=None)
    box.create(SandboxSpec(ro_mounts={str(policies): "/etc/chromium/policies/managed"}))
    try:
        r = box.exec(["sh", "-c", "ls /etc/chromium/policies/managed; cat /etc/hostname"], 30)
    finally:
        box.destroy()
    assert (r.exit_code, r.stdout) == (0, "p.json\nsandbox\n"), r.stderr

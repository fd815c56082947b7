"""Disk quotas on local (bubblewrap) sandboxes, and shared temp roots with owner and mode
checks: a full disk is ENOSPC inside the sandbox, never the host's; a root another user made
or can write into is refused, naming it."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest

from forge.config import SandboxConfig
from forge.sandboxes import quota
from forge.sandboxes.base import SandboxSpec
from forge.sandboxes.bwrap import bwrap_works
from forge.sandboxes.local import LocalSandbox
from forge.sandboxes.registry import sandbox_for
from forge.sandboxes.tmproot import UnsafeTempRoot, private_root

needs_quota = pytest.mark.skipif(
    quota.quota_problem() is not None or not bwrap_works(),
    reason=f"local disk quotas: {quota.quota_problem()}",
)


@needs_quota
@pytest.mark.parametrize("isolation", ["required", "none"])
def test_a_full_disk_is_enospc_inside_the_quota(tmp_path: Path, isolation: str) -> None:
    cfg = SandboxConfig(root=str(tmp_path / "root"), isolation=isolation, disk_mb=24)  # type: ignore[arg-type]
    sb = sandbox_for(cfg, None)
    assert isinstance(sb, LocalSandbox)
    sb.create(SandboxSpec(labels={"run": "q", "attempt": "0"}))
    try:
        tmp = "/tmp" if isolation == "required" else "$TMPDIR"
        for where in ("f", "$HOME/f", f"{tmp}/f"):
            r = sb.exec(["sh", "-c", f"yes > {where}; echo rc=$?; du -m {where} | cut -f1"], 60)
            assert "No space left on device" in r.stderr, (where, r)
            assert int(r.stdout.split()[-1]) <= 24, (where, r)
            sb.exec(["sh", "-c", f"rm {where}"], 10)
        r = sb.exec(["sh", "-c", "echo ok > ok; cat ok"], 10)
        assert r.stdout == "ok\n"  # the sandbox goes on: the policy can clean up and carry on
        assert sb.get_file("ok") == b"ok\n"
        disk = sb.dir / quota.DISK  # type: ignore[operator]
        assert os.path.ismount(disk)
    finally:
        sb.destroy()
    assert not os.path.exists(disk) and not os.path.ismount(disk)  # unmounted and removed


def test_without_a_quota_setting_nothing_is_mounted(tmp_path: Path) -> None:
    sb = LocalSandbox(root=tmp_path, isolation="none")
    sb.create(SandboxSpec())
    try:
        assert not (sb.dir / quota.DISK).exists()  # type: ignore[operator]
        assert sb.host_workspace == sb.dir / "workspace"  # type: ignore[operator]
    finally:
        sb.destroy()


def test_config_describes_the_quota() -> None:
    field = SandboxConfig.model_fields["disk_mb"]
    assert field.default == 2048 and "ENOSPC" in (field.description or "")
    with pytest.raises(ValueError, match="disk_mb"):
        SandboxConfig(disk_mb=1)


def test_private_root_is_created_closed(tmp_path: Path) -> None:
    root = private_root(tmp_path / "a" / "openforge-x")
    assert root.is_dir() and (root.stat().st_mode & 0o777) == 0o700
    os.chmod(root, 0o755)  # ours but readable by others: closed again
    assert (private_root(root).stat().st_mode & 0o777) == 0o700


def test_a_root_others_can_write_into_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "openforge-sandboxes"
    root.mkdir()
    os.chmod(root, 0o777)
    with pytest.raises(UnsafeTempRoot, match=r"mode 777: other users can write"):
        private_root(root)
    with pytest.raises(UnsafeTempRoot, match=str(root)):
        LocalSandbox(root=root, isolation="none").create(SandboxSpec())


def test_a_link_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    (tmp_path / "openforge-sandboxes").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafeTempRoot, match="not a directory"):
        private_root(tmp_path / "openforge-sandboxes")


@pytest.mark.skipif(os.geteuid() != 0, reason="making a folder another user's needs root")
def test_a_root_another_user_owns_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "openforge-sandboxes"
    root.mkdir(mode=0o700)
    os.chown(root, 65534, 65534)
    with pytest.raises(UnsafeTempRoot, match="owned by uid 65534, not by this user"):
        LocalSandbox(root=root, isolation="none").create(SandboxSpec())
    assert os.listdir(root) == []  # nothing was put there


@needs_quota
def test_reaping_an_orphan_unmounts_its_disk(tmp_path: Path) -> None:
    """A sandbox whose creator died with its quota mounted: the reconcile pass unmounts the
    disk (releasing its loop device) and removes the folder, instead of leaving both."""
    from forge.sandboxes.orphans import LABELS_FILE, reap_orphans

    sb = LocalSandbox(root=tmp_path / "root", isolation="none", disk_mb=24)
    sb.create(SandboxSpec(labels={"run": "crashed", "attempt": "0"}))
    d = sb.dir
    assert d is not None and os.path.ismount(d / quota.DISK)
    labels = d / LABELS_FILE
    record = labels.read_text().replace('"pid": ', '"pid": 999999999, "was": ', 1)
    labels.write_text(record)  # its creator is gone
    try:
        assert reap_orphans(tmp_path / "root", run="crashed") == 1
        assert not os.path.ismount(d / quota.DISK) and not d.exists()
    finally:
        quota.release(d)


def _loop_devices_of(image: Path) -> list[str]:
    """The loop devices whose backing file is ``image``."""
    found = []
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        with contextlib.suppress(OSError):
            if backing.read_text().strip() == str(image):
                found.append(backing.parent.parent.name)
    return found


@needs_quota
@pytest.mark.parametrize("way", ["system calls", "commands"])
def test_a_disk_holds_its_size_and_leaves_no_loop_device(tmp_path: Path, way, monkeypatch) -> None:
    """The disk is a fresh copy of the process's template file system, mounted with the loop and
    mount system calls (or the mount command where those fail); unmounting releases its loop
    device either way."""
    if way == "commands":

        def refused(image: Path, mnt: Path) -> None:
            raise PermissionError(1, "as where the system calls are refused")

        monkeypatch.setattr(quota, "_mount_loop", refused)
    folders = [tmp_path / "a", tmp_path / "b"]
    try:
        for folder in folders:
            folder.mkdir()
            mnt = quota.mount_disk(folder, 24)
            assert os.path.ismount(mnt) and _loop_devices_of(folder / quota.IMAGE)
            options = next(line.split()[3] for line in Path("/proc/mounts").read_text().splitlines()
                           if line.split()[1] == str(mnt))  # fmt: skip
            assert {"nosuid", "nodev", "noatime"} <= set(options.split(","))
            (mnt / "mine").write_text(folder.name)  # each its own file system
            st = os.statvfs(mnt)
            assert 16 << 20 <= st.f_blocks * st.f_frsize <= 24 << 20
            assert os.stat(mnt).st_uid == os.geteuid()  # owned by this user
        assert [(f / quota.DISK / "mine").read_text() for f in folders] == ["a", "b"]
    finally:  # released whatever failed (a mount left behind outlives the test)
        released = [quota.release(folder) for folder in folders]
    assert released == [True, True]
    for folder in folders:
        assert not os.path.ismount(folder / quota.DISK)
        deadline = time.monotonic() + 10  # the kernel clears a loop device after its unmount
        while _loop_devices_of(folder / quota.IMAGE) and time.monotonic() < deadline:
            time.sleep(0.05)  # (asynchronously: under load, seen to take a while)
        assert _loop_devices_of(folder / quota.IMAGE) == []

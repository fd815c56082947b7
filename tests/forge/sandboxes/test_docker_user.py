"""Containers as in bubblewrap: the harness runs as an unprivileged user that cannot reach the
sandbox agent (its socket, its token, its memory and environment), and a command that fills
the disk gets ENOSPC inside the sandbox's quota instead of filling the host."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from forge.config import SandboxConfig
from forge.sandboxes.agent_boot import HARNESS_UID
from forge.sandboxes.base import SandboxSpec
from forge.sandboxes.docker import DockerSandbox
from forge.sandboxes.registry import sandbox_for
from forge.sandboxes.tmproot import UnsafeTempRoot

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def config(docker_daemon, docker_images) -> SandboxConfig:
    return SandboxConfig(
        backend="docker",
        docker_host=docker_daemon.host,
        cpus=0.5,
        memory_mb=512,
        pids=128,
        disk_mb=32,
    )


@pytest.fixture
def make(config) -> Iterator:
    made: list[DockerSandbox] = []

    def _make(harness: str | None = None, cfg: SandboxConfig | None = None) -> DockerSandbox:
        sb = sandbox_for(cfg or config, harness)
        assert isinstance(sb, DockerSandbox)
        labels = {"run": "ru", "pod": "p0", "episode": "e1", "attempt": str(len(made))}
        sb.create(SandboxSpec(labels=labels))
        made.append(sb)
        return sb

    yield _make
    for sb in made:
        sb.destroy()


def sh(sb: DockerSandbox, script: str, **kw: object):
    return sb.exec(["sh", "-c", script], 30, **kw)  # type: ignore[arg-type]


def test_the_harness_runs_as_the_unprivileged_user(make) -> None:
    sb = make("react")
    r = sh(sb, "id -u; id -g; id -G; whoami; stat -c '%u %a' /workspace /home/agent")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.split("\n")
    assert lines[:4] == [str(HARNESS_UID)] * 3 + ["agent"]
    assert lines[4:6] == [f"{HARNESS_UID} 755"] * 2
    sb.put_file("given.txt", "x")  # files the backend puts are the user's to change
    sb.put_file("/home/agent/.cfg/a", "y")
    r = sh(sb, "stat -c %u given.txt /home/agent/.cfg /home/agent/.cfg/a; echo z >> given.txt")
    assert r.exit_code == 0 and r.stdout.split() == [str(HARNESS_UID)] * 3, r
    # nothing of the image's root is writable: not /etc, not the agent's code
    r = sh(sb, "for p in /etc/passwd /opt/forge/agent/x /usr/bin/x; do (: >> $p) || echo no; done")
    assert r.stdout.split() == ["no"] * 3
    # a verifier may run as its own user (Harbor's verifier.user), root included
    assert sh(sb, "id -u", user="root").stdout.strip() == "0"
    assert sh(sb, "id -u", user="65534").stdout.strip() == "65534"


def test_the_harness_cannot_reach_the_agents_socket_token_or_memory(make) -> None:
    sb = make("react")
    token = sb._state.agent._auth.removeprefix("Bearer ")
    r = sh(sb, "ls /run/forge; cat /run/forge/token; rm -f /run/forge/agent.sock; echo rc=$?")
    assert "Permission denied" in r.stderr and "rc=1" in r.stdout, r
    assert token not in r.stdout
    # no process's environment or command line readable to this user shows the token, and
    # the root processes' /proc files (environ, mem, fds) are closed to it
    r = sh(sb, "for d in /proc/[0-9]*; do cat $d/cmdline $d/environ; echo; done 2>/dev/null")
    assert "FORGE" not in r.stdout and token not in r.stdout and "PATH=" in r.stdout
    script = (
        'for d in /proc/[0-9]*; do [ "$(stat -c %u $d)" = 0 ] || continue; echo root $d; '
        "cat $d/environ >/dev/null 2>&1 && echo readable $d/environ; "
        "ls $d/fd >/dev/null 2>&1 && echo readable $d/fd; "
        "head -c1 $d/mem >/dev/null 2>&1 && echo readable $d/mem; done; echo end"
    )
    r = sh(sb, script)
    assert "readable" not in r.stdout and r.stdout.count("root /proc/") >= 2, r
    # the agent still answers the host, and as root (with its token) sees everything
    assert sh(sb, "cat /run/forge/token", user="root").stdout == token


def test_a_full_disk_is_enospc_inside_the_quota(make, config) -> None:
    sb = make()
    for where in ("/workspace/f", "/home/agent/f", "/tmp/f", "/var/tmp/f"):
        r = sh(sb, f"yes > {where}; echo rc=$?; du -m {where} | cut -f1")
        assert "No space left on device" in r.stderr, (where, r)
        assert int(r.stdout.split()[-1]) <= config.disk_mb, (where, r)
        sh(sb, f"rm {where}")
    # the sandbox still works: the episode goes on, and the files are the policy's to clean
    assert sh(sb, "echo ok > /workspace/ok && cat /workspace/ok").stdout == "ok\n"
    assert sb.get_file("ok") == b"ok\n"


def test_a_socket_folder_the_user_can_reach_is_refused(make, config) -> None:
    tmp_path = Path(tempfile.mkdtemp(prefix="fq", dir="/tmp"))  # short: a socket path's limit
    shared = tmp_path / "shared"
    (shared / "openforge-docker").mkdir(parents=True)
    os.chmod(shared / "openforge-docker", 0o777)
    with pytest.raises(UnsafeTempRoot, match="other users can write"):
        make(cfg=config.model_copy(update={"root": str(shared)}))
    theirs = tmp_path / "theirs"
    (theirs / "openforge-docker").mkdir(parents=True)
    os.chown(theirs / "openforge-docker", HARNESS_UID, HARNESS_UID)
    with pytest.raises(UnsafeTempRoot, match=f"owned by uid {HARNESS_UID}"):
        make(cfg=config.model_copy(update={"root": str(theirs)}))
    shutil.rmtree(tmp_path)

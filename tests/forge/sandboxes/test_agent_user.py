"""The sandbox agent as root with ``--user``: commands run as that unprivileged user, files it
writes are that user's, and the user can reach neither the agent's token (its environment or
memory) nor its socket's folder (the agent refuses to serve from one it could)."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.forge.sandboxes.test_agent import (
    SYSTEM_PYTHON,
    TOKEN,
    Agent,
    start_agent,
    stop_agent,
    write_tree,
)

NOBODY = 65534
pytestmark = [
    pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON), reason="needs the system python3"),
    pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user needs root"),
]


@pytest.fixture
def box() -> Iterator[Path]:
    """A folder the unprivileged user can traverse (pytest's own are 0700)."""
    d = Path(tempfile.mkdtemp(prefix="forge-agent-user-"))
    os.chmod(d, 0o755)
    (d / "run").mkdir(mode=0o700)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def agent(box: Path) -> Iterator[Agent]:
    (box / "box" / "workspace" / "from-image").mkdir(parents=True)  # what an image put there
    (box / "box" / "workspace" / "from-image" / "f").write_text("x")
    a = start_agent(box, "unix", extra=["--user", f"{NOBODY}:{NOBODY}"])
    yield a
    stop_agent(a)


def test_commands_run_as_the_user_with_no_other_group(agent: Agent) -> None:
    r = agent.client.exec(["sh", "-c", "id -u; id -g; id -G"], 10)
    assert r.stdout.split() == [str(NOBODY)] * 3, r
    assert agent.client.exec(["id", "-u"], 10, user="root").stdout == "0\n"
    assert agent.client.exec(["id", "-u"], 10, user="nobody").stdout == f"{NOBODY}\n"
    assert agent.client.exec(["id", "-G"], 10, user="12:34").stdout == "34\n"
    with pytest.raises(ValueError, match="user 'no-such-user'"):
        agent.client.exec(["true"], 10, user="no-such-user")


def test_files_are_the_users(agent: Agent) -> None:
    owner = lambda p: p.lstat().st_uid  # noqa: E731
    assert owner(agent.workspace) == owner(agent.home) == NOBODY  # handed over at start
    assert owner(agent.workspace / "from-image" / "f") == NOBODY
    agent.client.put_file("a/b/c.txt", "hi", mode=0o600)
    assert {owner(agent.workspace / p) for p in ("a", "a/b", "a/b/c.txt")} == {NOBODY}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo("d/e.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"yo"))
    agent.client.put_archive("t", out.getvalue())
    assert {owner(agent.workspace / p) for p in ("t", "t/d", "t/d/e.txt")} == {NOBODY}
    r = agent.client.exec(["sh", "-c", "echo more >> a/b/c.txt && cat a/b/c.txt t/d/e.txt"], 10)
    assert r.stdout == "himore\nyo", r
    # the agent writes as the user: a path only root could write is refused, not written
    os.chmod(agent.workspace / "a", 0o555)
    with pytest.raises(OSError, match="Permission denied"):
        agent.client.put_file("a/x", "no")
    assert not (agent.workspace / "a" / "x").exists()


def test_the_token_in_the_agents_environment_is_out_of_reach(agent: Agent) -> None:
    pid = agent.proc.pid
    assert TOKEN.encode() in Path(f"/proc/{pid}/environ").read_bytes()  # there, as in a pod
    script = f"cat /proc/{pid}/environ; head -c1 /proc/{pid}/mem; ls /proc/{pid}/fd"
    r = agent.client.exec(["sh", "-c", script], 10)
    assert TOKEN not in r.stdout and r.stderr.count("Permission denied") == 3, r
    r = agent.client.exec(["sh", "-c", f"ls {agent.address[5:]}"], 10)  # the socket's folder
    assert "Permission denied" in r.stderr


@pytest.mark.parametrize("unsafe", ["owned by the user", "open to others"])
def test_a_socket_folder_the_user_could_reach_is_refused(box: Path, unsafe: str) -> None:
    tree = write_tree(box / "tree")
    run = box / "run"
    if unsafe == "owned by the user":
        os.chown(run, NOBODY, NOBODY)
    else:
        os.chmod(run, 0o711)
    argv = [SYSTEM_PYTHON, "-s", "-m", "forge.sandboxes.agent", "--unix", str(run / "a.sock")]
    argv += ["--workspace", str(box / "ws"), "--home", str(box / "home")]
    argv += ["--user", f"{NOBODY}:{NOBODY}"]
    env = {"PATH": "/usr/bin:/bin", "FORGE_AGENT_TOKEN": TOKEN, "PYTHONPATH": str(tree)}
    done = subprocess.run(argv, env=env, cwd=tree, capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and f"folder {run}" in done.stderr, done.stderr
    assert "must be another user's (root's) with mode 0700" in done.stderr
    assert not (run / "a.sock").exists()

"""The sandbox agent, run for real from its minimal tree under the system python3, on a Unix
socket and on loopback TCP: exec, process-group kills, auth, /kill, the proxy relay, shutdown."""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from forge.sandboxes.agent_boot import agent_command, agent_tar, agent_tree
from forge.sandboxes.agent_client import AgentClient, AgentUnavailable
from tests.forge.httpstub import StubServer

SYSTEM_PYTHON = "/usr/bin/python3"
TOKEN = "t0ken-" + "x" * 32

pytestmark = pytest.mark.skipif(
    not os.path.exists(SYSTEM_PYTHON), reason="needs the system python3 (>= 3.11)"
)


@dataclass
class Agent:
    proc: subprocess.Popen[str]
    client: AgentClient
    workspace: Path
    home: Path
    address: str


def _alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _gone(pid: int, within_s: float = 5.0) -> bool:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.02)
    return False


def write_tree(root: Path) -> Path:
    for rel, data in agent_tree().items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def start_agent(tmp: Path, transport: str, extra: list[str] | None = None) -> Agent:
    """The agent from a copy of its minimal tree, under the system python3, cwd elsewhere and
    an environment with nothing of this repository or its virtualenv."""
    tree = write_tree(tmp / "tree")
    ws, home = tmp / "box" / "workspace", tmp / "box" / "home"
    (tmp / "elsewhere").mkdir(exist_ok=True)
    env = {"PATH": "/usr/bin:/bin", "FORGE_AGENT_TOKEN": TOKEN}
    common = ["--workspace", str(ws), "--home", str(home), *(extra or [])]
    if transport == "unix":  # the documented form: -m with PYTHONPATH
        env["PYTHONPATH"] = str(tree)
        argv = [SYSTEM_PYTHON, "-s", "-m", "forge.sandboxes.agent"]
        argv += ["--unix", str(tmp / "run" / "agent.sock"), *common]
    else:  # the isolated form backends use: agent_command() (-I, no environment needed)
        argv = agent_command(
            listen="127.0.0.1:0", python=SYSTEM_PYTHON, agent_dir=str(tree),
            workspace=str(ws), home=str(home), extra=extra,
        )  # fmt: skip
    proc = subprocess.Popen(argv, cwd=tmp / "elsewhere", env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, f"agent exited with {proc.wait(5)}"
    address = json.loads(line)["listening"]
    client = AgentClient(address, TOKEN)
    client.wait_ready(10)
    return Agent(proc, client, ws, home, address)


def stop_agent(agent: Agent) -> None:
    agent.client.close()
    if agent.proc.poll() is None:
        agent.proc.send_signal(signal.SIGTERM)
        try:
            agent.proc.wait(10)
        except subprocess.TimeoutExpired:
            agent.proc.kill()
            agent.proc.wait()
    assert agent.proc.stdout is not None
    agent.proc.stdout.close()


@pytest.fixture(params=["unix", "tcp"])
def agent(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Agent]:
    a = start_agent(tmp_path, request.param)
    yield a
    stop_agent(a)


@pytest.fixture
def unix_agent(tmp_path: Path) -> Iterator[Agent]:
    a = start_agent(tmp_path, "unix")
    yield a
    stop_agent(a)


# -- the tree -------------------------------------------------------------------------------


def test_tree_is_minimal_and_stdlib_only(tmp_path: Path) -> None:
    tree = agent_tree()
    mods = ["base", "process", "archive", "bridge", "agent_user", "agent"]
    assert set(tree) == {"forge/__init__.py", "forge/sandboxes/__init__.py"} | {
        f"forge/sandboxes/{m}.py" for m in mods
    }
    assert tree["forge/__init__.py"] == tree["forge/sandboxes/__init__.py"] == b""
    allowed = {f"forge.sandboxes.{m}" for m in mods}
    stdlib = set(sys.stdlib_module_names)
    for rel, data in tree.items():
        for node in ast.walk(ast.parse(data)):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module in ("forge", "forge.sandboxes"):
                    names = [f"{node.module}.{n.name}" for n in node.names]
                else:
                    names = [node.module]
            elif isinstance(node, ast.Import):
                names = [n.name for n in node.names]
            else:
                continue
            for name in names:
                ok = name in allowed if name.startswith("forge") else name.split(".")[0] in stdlib
                assert ok, f"{rel} imports {name}, which the agent's tree lacks"
    with tarfile.open(fileobj=io.BytesIO(agent_tar("opt/forge/agent"))) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]
    assert files == {f"opt/forge/agent/{k}": v for k, v in tree.items()}


def test_agent_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    tree = write_tree(tmp_path / "tree")
    argv = [SYSTEM_PYTHON, "-s", "-m", "forge.sandboxes.agent", "--listen", "127.0.0.1:0"]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tree)}
    done = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "no token" in done.stderr


# -- exec -----------------------------------------------------------------------------------


def test_exec_exit_codes_output_and_exact_env(agent: Agent) -> None:
    c = agent.client
    res = c.exec(["sh", "-c", "echo out; echo err >&2; exit 3"], 10)
    assert (res.exit_code, res.stdout, res.stderr, res.timed_out) == (3, "out\n", "err\n", False)
    env = c.exec(["/usr/bin/env"], 10, {"EXTRA": "1", "TZ": "Europe/Paris"}).stdout
    got = dict(line.split("=", 1) for line in env.splitlines())
    assert got == {**c.base_env, "EXTRA": "1", "TZ": "Europe/Paris"}
    assert "FORGE_AGENT_TOKEN" not in env and TOKEN not in env
    assert c.exec(["pwd"], 10).stdout.strip() == str(agent.workspace)
    (agent.workspace / "sub").mkdir()
    assert c.exec(["pwd"], 10, cwd="sub").stdout.strip() == str(agent.workspace / "sub")
    missing = c.exec(["no-such-program-here"], 10)
    assert missing.exit_code == 127 and "no-such-program-here" in missing.stderr


def test_exec_timeout_kills_the_whole_group(agent: Agent) -> None:
    t0 = time.monotonic()
    res = agent.client.exec(["sh", "-c", "sleep 100 & echo $!; sleep 100"], 0.5)
    assert res.timed_out and res.exit_code == -1
    assert time.monotonic() - t0 < 5
    assert _gone(int(res.stdout.split()[0]))


def test_background_children_die_with_their_leader(agent: Agent) -> None:
    res = agent.client.exec(["sh", "-c", "sleep 100 & echo $!"], 10)
    assert res.exit_code == 0 and not res.timed_out
    assert _gone(int(res.stdout.split()[0]))
    for _ in range(3):  # orphans the agent inherits (a subreaper) are reaped, not left zombies
        agent.client.exec(["sh", "-c", "(sleep 0.1 &) ; exit 0"], 10)
    end = time.monotonic() + 5
    while time.monotonic() < end and _zombies(agent.proc.pid):
        time.sleep(0.05)
    assert not _zombies(agent.proc.pid)


def test_a_burst_of_exiting_orphans_never_hangs_an_exec(agent: Agent) -> None:
    """Hundreds of orphans exiting at once (as Chromium's processes do at an episode's end) send
    the agent SIGCHLDs back to back; a handler that took a lock could land inside itself and
    hang the agent (it did, with ``threading.Event.set``). Every exec returns; none is left."""
    burst = "for i in $(seq 150); do (sleep 0.2 &); done; sleep 0.25; echo done"
    for _ in range(4):
        res = agent.client.exec(["sh", "-c", burst], 30)
        assert (res.exit_code, res.stdout.strip()) == (0, "done")
    end = time.monotonic() + 10
    while time.monotonic() < end and _zombies(agent.proc.pid):
        time.sleep(0.05)
    assert not _zombies(agent.proc.pid)
    assert agent.client.exec(["true"], 5).exit_code == 0


def _zombies(parent: int) -> list[int]:
    out = []
    for p in os.listdir("/proc"):
        with contextlib.suppress(OSError, IndexError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            if p.isdigit() and fields[0] == "Z" and int(fields[1]) == parent:
                out.append(int(p))
    return out


def test_output_is_capped_to_the_tail(agent: Agent) -> None:
    script = "head -c 100000 /dev/zero | tr '\\0' x; echo END"
    res = agent.client.exec(["sh", "-c", script], 10, output_cap=1000)
    assert res.stdout.endswith("xxEND\n") and "bytes dropped" in res.stdout
    assert len(res.stdout) < 1100


def test_concurrent_execs_run_in_parallel(unix_agent: Agent) -> None:
    results: list[int] = []

    def one() -> None:
        results.append(unix_agent.client.exec(["sleep", "0.5"], 10).exit_code)

    threads = [threading.Thread(target=one) for _ in range(8)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [0] * 8
    assert time.monotonic() - t0 < 3.0


def test_exec_round_trip_is_fast(agent: Agent) -> None:
    for _ in range(5):
        agent.client.exec(["true"], 10)
    times = []
    for _ in range(30):
        t0 = time.perf_counter()
        assert agent.client.exec(["true"], 10).exit_code == 0
        times.append(time.perf_counter() - t0)
    assert sorted(times)[len(times) // 2] < 0.05


# -- kill, proxy, lifecycle ------------------------------------------------------------------


def test_kill_ends_running_execs_and_escaped_sessions(agent: Agent) -> None:
    c = agent.client
    escape = "setsid sh -c 'echo $$ > pid; exec sleep 100' > /dev/null 2>&1 &"
    script = escape + " while [ ! -s pid ]; do sleep 0.01; done"
    assert c.exec(["sh", "-c", script], 10).exit_code == 0
    pid = int((agent.workspace / "pid").read_text())
    assert _alive(pid)  # it left the exec's group: the exec's end did not kill it
    running: list = []
    t = threading.Thread(target=lambda: running.append(c.exec(["sleep", "100"], 100)))
    t.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    assert c.kill() >= 2
    t.join(10)
    assert running and running[0].exit_code == -signal.SIGKILL and not running[0].timed_out
    assert time.monotonic() - t0 < 5
    assert _gone(pid)
    assert c.exec(["echo", "still serving"], 10).stdout == "still serving\n"


def test_proxy_relay_reaches_the_unix_socket(tmp_path: Path) -> None:
    sock = tmp_path / "proxy.sock"
    stub = StubServer(lambda m, p, h, b: (200, {"via": p}, {}), unix_path=str(sock))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    a = start_agent(tmp_path, "tcp", ["--proxy", f"127.0.0.1:{port}={sock}"])
    try:
        code = (
            "import urllib.request as u;"
            f"print(u.urlopen('http://127.0.0.1:{port}/v1/models', timeout=5).read().decode())"
        )
        res = a.client.exec(["python3", "-c", code], 20)
        assert res.exit_code == 0, res.stderr
        assert json.loads(res.stdout) == {"via": "/v1/models"}
    finally:
        stop_agent(a)
        stub.close()


def test_sigterm_shuts_down_cleanly(tmp_path: Path) -> None:
    a = start_agent(tmp_path, "unix")
    t = threading.Thread(target=lambda: a.client.exec(["sh", "-c", "sleep 100"], 100), daemon=True)
    t.start()
    time.sleep(0.5)
    children = [
        int(p) for p in os.listdir("/proc")
        if p.isdigit() and _ppid(int(p)) == a.proc.pid
    ]  # fmt: skip
    assert children
    a.proc.send_signal(signal.SIGTERM)
    assert a.proc.wait(10) == 0
    assert not os.path.exists(a.address[5:])
    assert all(_gone(pid) for pid in children)
    with pytest.raises(AgentUnavailable):
        a.client.exec(["true"], 5)
    stop_agent(a)


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def test_wait_ready_reports_the_last_failure(tmp_path: Path) -> None:
    c = AgentClient(f"unix:{tmp_path}/none.sock", TOKEN)
    t0 = time.monotonic()
    with pytest.raises(AgentUnavailable, match=r"not ready after 0\.3s.*FileNotFoundError"):
        c.wait_ready(0.3)
    assert time.monotonic() - t0 < 2
    with pytest.raises(AgentUnavailable, match="ConnectionRefused"):
        AgentClient("http://127.0.0.1:9", TOKEN).health()
    with pytest.raises(ValueError):
        AgentClient("tcp://x:1", TOKEN)
    assert TOKEN not in repr(c)


def test_client_survives_an_agent_restart(tmp_path: Path) -> None:
    a = start_agent(tmp_path, "unix")
    assert a.client.health()["ok"]
    a.proc.send_signal(signal.SIGTERM)  # the client's kept-alive connection goes stale
    assert a.proc.wait(10) == 0
    b = start_agent(tmp_path, "unix")
    try:
        assert a.client.health()["pid"] == b.proc.pid  # replaced by a new one, once
    finally:
        stop_agent(b)
        stop_agent(a)

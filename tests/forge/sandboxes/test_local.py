from __future__ import annotations

import gc
import json
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

from forge.sandboxes.base import SandboxSpec
from forge.sandboxes.bwrap import bwrap_works
from forge.sandboxes.local import LocalSandbox, SandboxExpired, reap_orphans
from forge.sandboxes.orphans import LABELS_FILE, pid_start
from forge.sandboxes.registry import make_sandbox
from tests.forge.httpstub import StubServer

needs_bwrap = pytest.mark.skipif(
    not bwrap_works(), reason="bubblewrap missing or cannot create namespaces here"
)
MODES = [pytest.param("required", marks=needs_bwrap), "none"]
REPO = str(Path(__file__).resolve().parents[3])


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "sandboxes"


@pytest.fixture
def make(root: Path) -> Iterator:
    made: list[LocalSandbox] = []

    def _make(isolation: str = "required", **spec_kw: object) -> LocalSandbox:
        kw = {k: spec_kw.pop(k) for k in ("output_cap", "kill_grace_s") if k in spec_kw}
        sb = LocalSandbox(root=root, isolation=isolation, **kw)  # type: ignore[arg-type]
        spec_kw.setdefault("labels", {"run": "r1", "pod": "p0", "attempt": str(len(made))})
        sb.create(SandboxSpec(**spec_kw))  # type: ignore[arg-type]
        made.append(sb)
        return sb

    yield _make
    for sb in made:
        sb.destroy()


def py(sb: LocalSandbox, code: str, timeout_s: float = 30.0) -> tuple[int, str, str]:
    r = sb.exec(["python3", "-c", textwrap.dedent(code)], timeout_s)
    return r.exit_code, r.stdout, r.stderr


def test_make_sandbox_registry() -> None:
    assert isinstance(make_sandbox("local", isolation="none"), LocalSandbox)
    with pytest.raises(ValueError, match=r"unknown sandbox backend .nope.; known: .*local"):
        make_sandbox("nope")


@pytest.mark.parametrize("mode", MODES)
def test_layout_labels_and_fixed_env(make, mode: str) -> None:
    sb = make(mode, env={"FOO": "bar"})
    assert sb.dir is not None
    labels = json.loads((sb.dir / LABELS_FILE).read_text())
    assert labels["labels"]["run"] == "r1" and labels["pid"] == os.getpid()
    assert labels["deadline"] > time.time()
    assert sb.dir.name.startswith("r1-p0-0-")
    assert not (sb.host_workspace / LABELS_FILE).exists()
    r = sb.exec(["sh", "-c", 'pwd; echo "$HOME|$TZ|$LANG|$FOO|$BAZ"'], 10, env={"BAZ": "q"})
    assert r.exit_code == 0, r.stderr
    cwd, env_line = r.stdout.splitlines()
    assert cwd == sb.workspace
    home = "/home/agent" if mode == "required" else str(sb.host_home)
    assert env_line == f"{home}|UTC|C.UTF-8|bar|q"
    if mode == "required":
        assert sb.workspace == "/workspace" and sb.path_map() == {}
    else:
        assert sb.workspace == str(sb.host_workspace)
        assert sb.path_map()["/workspace"] == str(sb.host_workspace)


@needs_bwrap
def test_isolation_hides_host_and_other_sandboxes(make, tmp_path: Path) -> None:
    a, b = make(), make()
    a.put_file("secret.txt", "a's secret")
    (tmp_path / "host-marker").write_text("x")
    home = Path.home()
    home_entries = [str(p) for p in home.iterdir()]
    prefix = os.path.realpath(sys.base_prefix)
    code, out, err = py(
        b,
        f"""
        import json, os
        paths = {[str(a.host_workspace), str(a.dir), REPO, str(tmp_path / "host-marker")]!r}
        home = [p for p in {home_entries!r} if os.path.lexists(p)]
        print(json.dumps([[p for p in paths if os.path.lexists(p)], home,
                          os.path.exists('/workspace/secret.txt'), os.listdir('/workspace')]))
        """,
    )
    assert code == 0, err
    visible, home_visible, secret, listing = json.loads(out)
    assert visible == [] and not secret and listing == []
    # Only the way down to the real Python installation may show in the host's home.
    assert all(prefix.startswith(p + "/") for p in home_visible), home_visible


@needs_bwrap
def test_workspace_writable_system_readonly(make) -> None:
    sb = make()
    r = sb.exec(["sh", "-c", "echo hi > made.txt && mkdir -p d && echo x > /home/agent/h"], 10)
    assert r.exit_code == 0, r.stderr
    assert sb.get_file("made.txt") == b"hi\n"
    assert (sb.host_home / "h").read_text() == "x\n"
    assert sb.exec(["cat", "/home/agent/h"], 10).stdout == "x\n"  # home persists across execs
    for target in ("/usr/forge-test", "/etc/forge-test", "/forge-test"):
        r = sb.exec(["sh", "-c", f"echo x > {target}"], 10)
        assert r.exit_code != 0, target
    assert not Path("/usr/forge-test").exists() and not Path("/etc/forge-test").exists()


@pytest.mark.parametrize("mode", MODES)
def test_timeout_kills_whole_process_group(make, mode: str) -> None:
    sb = make(mode, kill_grace_s=0.5)
    script = "trap '' TERM; (sleep 1.5; touch late) & echo started; sleep 60"
    t0 = time.monotonic()
    r = sb.exec(["sh", "-c", script], 0.5)
    took = time.monotonic() - t0
    assert r.timed_out and r.exit_code == -1
    assert "started" in r.stdout
    assert took < 5, took
    time.sleep(1.5)
    assert not (sb.host_workspace / "late").exists(), "grandchild outlived the timeout"


@pytest.mark.parametrize("mode", MODES)
def test_leftover_background_processes_are_killed(make, mode: str) -> None:
    sb = make(mode)
    t0 = time.monotonic()
    r = sb.exec(["sh", "-c", "(sleep 2; touch late) & echo done"], 10)
    assert r.exit_code == 0 and r.stdout == "done\n" and time.monotonic() - t0 < 1.8
    time.sleep(2.5)
    assert not (sb.host_workspace / "late").exists()


def test_output_is_capped_to_the_tail(make) -> None:
    sb = make("none", output_cap=1000)
    r = sb.exec(["python3", "-c", "print('a' * 5000 + 'END')"], 10)
    assert r.stdout.endswith("aaaEND\n") and "bytes dropped" in r.stdout
    assert len(r.stdout) < 1100


@pytest.mark.parametrize("mode", MODES)
def test_deadline_clips_and_then_refuses(make, mode: str) -> None:
    sb = make(mode, deadline_s=1.0)
    t0 = time.monotonic()
    r = sb.exec(["sleep", "30"], 30)
    assert r.timed_out and time.monotonic() - t0 < 5
    time.sleep(max(0.0, sb.deadline - time.time()) + 0.05)
    with pytest.raises(SandboxExpired, match="deadline"):
        sb.exec(["true"], 5)


@pytest.mark.parametrize("mode", MODES)
def test_file_paths_stay_inside(make, mode: str) -> None:
    sb = make(mode)
    sb.put_file("sub/dir/f.txt", "hello", mode=0o600)
    assert (sb.host_workspace / "sub/dir/f.txt").stat().st_mode & 0o777 == 0o600
    assert sb.get_file("/workspace/sub/dir/f.txt") == b"hello"
    assert sb.get_file(f"{sb.workspace}/sub/dir/f.txt") == b"hello"
    sb.put_file("/home/agent/.config/x", b"\x00\x01")
    assert (sb.host_home / ".config/x").read_bytes() == b"\x00\x01"
    assert sb.get_file("missing") is None and sb.get_file("sub") is None
    for bad in ("../x", "/etc/passwd", "/workspace/../etc/passwd", "sub/../../x", "/home/agentx"):
        with pytest.raises(ValueError):
            sb.put_file(bad, "x")
        with pytest.raises(ValueError):
            sb.get_file(bad)
    ws = sb.host_workspace
    os.symlink("/etc/passwd", ws / "abs_out")
    os.symlink("../../../../../../etc/passwd", ws / "rel_out")
    os.symlink(str(Path(REPO) / "pyproject.toml"), ws / "repo_out")
    os.symlink("/workspace/sub/dir/f.txt", ws / "abs_in")
    os.symlink("sub/dir", ws / "rel_in")
    for link in ("abs_out", "rel_out", "repo_out"):
        with pytest.raises(ValueError):
            sb.get_file(link)
        with pytest.raises(ValueError):
            sb.put_file(link, "overwrite")
    assert Path("/etc/passwd").read_text() != "overwrite"
    assert sb.get_file("abs_in") == b"hello"
    assert sb.get_file("rel_in/f.txt") == b"hello"


@pytest.mark.parametrize("mode", MODES)
def test_destroy_kills_processes_and_removes_dirs(make, root: Path, mode: str) -> None:
    sb = make(mode)
    d = sb.dir
    assert d is not None and d.exists()
    results = []
    worker = threading.Thread(
        target=lambda: results.append(sb.exec(["sh", "-c", "sleep 60 & sleep 60"], 60))
    )
    worker.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    sb.destroy()
    worker.join(10)
    assert not worker.is_alive() and time.monotonic() - t0 < 10
    assert results[0].exit_code != 0
    assert not d.exists()
    sb.destroy()  # idempotent
    with pytest.raises(RuntimeError, match="destroyed"):
        sb.exec(["true"], 5)


def test_garbage_collected_sandbox_cleans_up(root: Path) -> None:
    sb = LocalSandbox(root=root, isolation="none")
    sb.create(SandboxSpec(labels={"run": "gc"}))
    d = sb.dir
    assert d is not None and d.exists()
    del sb
    gc.collect()
    assert not d.exists()


def _fake_sandbox(root: Path, name: str, run: str, pid: int, start: str | None, dl: float) -> Path:
    d = root / name
    (d / "workspace").mkdir(parents=True)
    record = {"labels": {"run": run}, "pid": pid, "pid_start": start, "deadline": dl}
    record["host"] = socket.gethostname()
    (d / LABELS_FILE).write_text(json.dumps(record))
    return d


def test_reap_orphans(root: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    me, start, later = os.getpid(), pid_start(os.getpid()), time.time() + 600
    live = _fake_sandbox(root, "live", "r", me, start, later)
    gone = _fake_sandbox(root, "dead", "r", dead.pid, None, later)
    late = _fake_sandbox(root, "late", "r", me, start, time.time() - 1)
    reused = _fake_sandbox(root, "reused", "r", me, "1", later)  # our pid, another process
    other = _fake_sandbox(root, "other-run", "r2", dead.pid, None, later)
    (root / "not-a-sandbox").mkdir()
    assert reap_orphans(root, run="r") == 3
    assert live.exists() and other.exists() and (root / "not-a-sandbox").exists()
    assert not gone.exists() and not late.exists() and not reused.exists()
    assert reap_orphans(root) == 1 and not other.exists()
    assert reap_orphans(root / "missing") == 0


def test_reap_orphans_after_creator_is_killed(root: Path) -> None:
    code = f"""
import os, signal
from forge.sandboxes.local import LocalSandbox
from forge.sandboxes.base import SandboxSpec
sb = LocalSandbox(root={str(root)!r}, isolation="none")
sb.create(SandboxSpec(labels={{"run": "killed"}}))
print(sb.dir, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == -signal.SIGKILL, done.stderr
    d = Path(done.stdout.strip())
    assert d.exists()
    assert reap_orphans(root, run="other") == 0 and d.exists()
    assert reap_orphans(root, run="killed") == 1 and not d.exists()


# -- network: the proxy bridge --------------------------------------------------------------


def _echo(method: str, path: str, headers: dict[str, str], body: object):
    return 200, {"method": method, "path": path, "body": body}, {}


CLIENT = """
import json, socket, sys, threading, urllib.request
base = "http://" + sys.argv[1]
out = {}
with urllib.request.urlopen(base + "/v1/hello") as r:
    out["get"] = json.loads(r.read())
big = {"blob": "x" * 1_000_000}
req = urllib.request.Request(base + "/big", json.dumps(big).encode(), method="POST")
with urllib.request.urlopen(req) as r:
    out["big"] = len(json.loads(r.read())["body"]["blob"])
res = []
def one(i):
    with urllib.request.urlopen(f"{base}/c/{i}") as r:
        res.append(json.loads(r.read())["path"])
ts = [threading.Thread(target=one, args=(i,)) for i in range(16)]
[t.start() for t in ts]; [t.join() for t in ts]
out["concurrent"] = sorted(res)
host, port = sys.argv[1].split(":")
s = socket.create_connection((host, int(port)))
s.sendall(b"GET /half HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n")
s.shutdown(socket.SHUT_WR)
data = b""
while chunk := s.recv(65536):
    data += chunk
out["half_close"] = data.split(b"\\r\\n")[0].decode()
out["ifaces"] = [n for _, n in socket.if_nameindex()]
blocked = {}
for p in sys.argv[2:]:
    try:
        socket.create_connection(("127.0.0.1", int(p)), timeout=2).close()
        blocked[p] = "connected"
    except OSError as e:
        blocked[p] = type(e).__name__
out["other_ports"] = blocked
print(json.dumps(out))
"""


@pytest.fixture
def unix_stub(tmp_path: Path) -> Iterator[StubServer]:
    stub = StubServer(_echo, unix_path=str(tmp_path / "proxy.sock"))
    yield stub
    stub.close()


@pytest.fixture
def tcp_stub() -> Iterator[StubServer]:
    stub = StubServer(_echo)
    yield stub
    stub.close()


@pytest.fixture(params=["host", "bridge"])
def way(request, monkeypatch) -> str:
    """Each way out of a sandbox (forge.sandboxes.netns): relayed by this process, where it can
    enter the sandbox's network namespace, or by bridge.py inside, where it cannot."""
    from forge.sandboxes import netns

    if request.param == "host" and not netns.host_relays_work():
        pytest.skip("this process cannot enter network namespaces (needs CAP_SYS_ADMIN)")
    monkeypatch.setattr(netns, "_works", request.param == "host")
    return request.param


@needs_bwrap
def test_bridge_relays_to_unix_socket_and_nothing_else(make, unix_stub, tcp_stub, way) -> None:
    sb = make(proxy_socket=unix_stub.address, proxy_port=18931)
    assert sb.proxy_host_port() == "127.0.0.1:18931"
    host_port = tcp_stub.address.split(":")[1]  # a server on the host's loopback
    sb.put_file("client.py", CLIENT)
    r = sb.exec(["python3", "client.py", sb.proxy_host_port(), host_port], 60)
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["get"]["path"] == "/v1/hello"
    assert out["big"] == 1_000_000
    assert out["concurrent"] == sorted(f"/c/{i}" for i in range(16))
    assert out["half_close"].endswith("200 OK")
    assert out["ifaces"] == ["lo"]
    assert out["other_ports"] == {host_port: "ConnectionRefusedError"}
    assert tcp_stub.requests == []
    assert sb.exec(["sh", "-c", "exit 7"], 10).exit_code == 7  # exit status through the bridge


@needs_bwrap
def test_bridge_to_tcp_proxy_through_private_socket(make, tcp_stub, way) -> None:
    sb = make(proxy_tcp=tcp_stub.address)
    sb.put_file("client.py", CLIENT)
    r = sb.exec(["python3", "client.py", sb.proxy_host_port()], 60)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["get"]["path"] == "/v1/hello"


@needs_bwrap
def test_no_proxy_means_no_network(make, tcp_stub) -> None:
    sb = make()
    with pytest.raises(RuntimeError, match="no proxy"):
        sb.proxy_host_port()
    port = tcp_stub.address.split(":")[1]
    code, _, err = py(sb, f"import socket; socket.create_connection(('127.0.0.1', {port}), 2)")
    assert code != 0 and "ConnectionRefusedError" in err


@pytest.mark.parametrize("kind", ["tcp", "unix"])
def test_unisolated_sandbox_shares_host_network(make, unix_stub, tcp_stub, kind: str) -> None:
    if kind == "tcp":
        sb = make("none", proxy_tcp=tcp_stub.address)
        assert sb.proxy_host_port() == tcp_stub.address
    else:
        sb = make("none", proxy_socket=unix_stub.address)
    sb.put_file("client.py", CLIENT)
    r = sb.exec(["python3", "client.py", sb.proxy_host_port()], 60)
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["get"]["path"] == "/v1/hello" and out["big"] == 1_000_000

"""The Sandbox contract on DockerSandbox, with real containers in the session's own dockerd."""

from __future__ import annotations

import io
import json
import os
import socket
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from forge.config import SandboxConfig
from forge.harnesses.react import PROGRAM, PROGRAM_HOST
from forge.sandboxes.base import SandboxSpec
from forge.sandboxes.docker import DockerSandbox
from forge.sandboxes.docker_api import (
    DockerUnavailable,
    client_for,
    reap_containers,
    require_image,
)
from forge.sandboxes.local import SandboxExpired
from forge.sandboxes.registry import check_isolation, reap_sandboxes, sandbox_for
from tests.forge.httpstub import StubServer

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def config(docker_daemon, docker_images) -> SandboxConfig:
    return SandboxConfig(
        backend="docker", docker_host=docker_daemon.host, cpus=0.5, memory_mb=256, pids=128
    )


@pytest.fixture(scope="module")
def client(config):
    return client_for(config.docker_host)


@pytest.fixture
def make(config) -> Iterator:
    made: list[DockerSandbox] = []

    def _make(harness: str | None = None, **spec_kw: object) -> DockerSandbox:
        sb = sandbox_for(config, harness)
        assert isinstance(sb, DockerSandbox)
        spec_kw.setdefault(
            "labels", {"run": "rt", "pod": "p0", "episode": "e1", "attempt": str(len(made))}
        )
        sb.create(SandboxSpec(**spec_kw))  # type: ignore[arg-type]
        made.append(sb)
        return sb

    yield _make
    for sb in made:
        sb.destroy()


def sh(sb: DockerSandbox, script: str, timeout_s: float = 30.0):
    return sb.exec(["sh", "-c", script], timeout_s)


def test_exec_layout_env_and_latency(make, docker_images) -> None:
    t0 = time.perf_counter()
    sb = make("react")
    created = time.perf_counter() - t0
    assert sb.image == docker_images["react"]  # the harness's own image
    first = sb.exec(["true"], 10).duration_s
    t1 = time.perf_counter()
    r = sh(sb, 'echo "$PWD $HOME $TZ $LANG"; python3 -c "import sys; print(sys.version_info[:2])"')
    exec_s = time.perf_counter() - t1
    assert r.exit_code == 0, r.stderr
    assert r.stdout.split("\n")[0] == "/workspace /home/agent UTC C.UTF-8"
    assert r.stdout.split("\n")[1] == "(3, 11)"
    assert sb.workspace == "/workspace" and sb.path_map() == {}
    assert sh(sb, "stat -f -c %T /tmp").stdout.strip() == "tmpfs"
    assert sb.exec(["sh", "-c", "echo $PATH"], 10).stdout.strip() == sb.default_path()
    assert sb.exec(["cat", PROGRAM], 10).stdout == Path(PROGRAM_HOST).read_text()
    r = sb.exec(["sh", "-c", "echo $X; exit 3"], 10, env={"X": "y"})
    assert (r.exit_code, r.stdout) == (3, "y\n")
    for tool in ("bash", "sed", "awk", "grep", "find", "tar", "gzip", "jq", "curl", "git", "ps"):
        assert sb.exec(["sh", "-c", f"command -v {tool}"], 10).exit_code == 0, tool
    t2 = time.perf_counter()
    sb.destroy()
    print(
        f"\n[docker] create {created * 1000:.0f} ms, first exec {first * 1000:.1f} ms (in the "
        f"agent), exec round trip {exec_s * 1000:.1f} ms, destroy "
        f"{(time.perf_counter() - t2) * 1000:.0f} ms"
    )
    assert exec_s < 1.0


def test_timeout_kills_the_process_group(make) -> None:
    sb = make()
    t0 = time.monotonic()
    r = sh(sb, "sleep 300 & sleep 301; echo never", timeout_s=1.0)
    assert r.timed_out and r.exit_code == -1 and "never" not in r.stdout
    assert time.monotonic() - t0 < 10
    ps = sh(sb, "ps -eo args").stdout
    assert "sleep 30" not in ps, ps


def test_deadline_refuses_after(make) -> None:
    sb = make(deadline_s=1.5)
    r = sh(sb, "sleep 30", timeout_s=60)
    assert r.timed_out  # clipped to the deadline
    with pytest.raises(SandboxExpired):
        sh(sb, "true")


def test_files_and_paths_stay_inside(make) -> None:
    sb = make()
    sb.put_file("a/b.txt", "hello")
    sb.put_file("/home/agent/.cfg", b"\x00\x01", mode=0o600)
    assert sb.get_file("/workspace/a/b.txt") == b"hello"
    assert sb.get_file("/home/agent/.cfg") == b"\x00\x01"
    assert sh(sb, "stat -c %a /home/agent/.cfg").stdout.strip() == "600"
    assert sb.get_file("missing.txt") is None
    sh(sb, "ln -s /etc/passwd leak; ln -s /etc escape")
    for bad in ("/etc/passwd", "../etc/passwd", "leak", "escape/hostname"):
        with pytest.raises(ValueError):
            sb.get_file(bad)
    with pytest.raises(ValueError):
        sb.put_file("escape/evil", "x")
    with pytest.raises(ValueError):
        sb.put_file("/opt/forge/evil", "x")


def test_archives_round_trip(make) -> None:
    a, b = make(), make()
    sh(a, "mkdir -p d/sub && echo one > d/sub/f && ln -s sub/f d/link && printf x > d/top")
    data = a.get_archive("d")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        names = {m.name: m for m in tar.getmembers()}
    assert names["link"].issym() and names["link"].linkname == "sub/f"
    b.put_archive("copy", data)
    assert b.get_file("copy/sub/f") == b"one\n" and b.get_file("copy/link") == b"one\n"
    assert sh(b, "readlink copy/link").stdout.strip() == "sub/f"
    with pytest.raises(NotADirectoryError):
        a.get_archive("d/top")
    bad = io.BytesIO()
    with tarfile.open(fileobj=bad, mode="w") as tar:
        info = tarfile.TarInfo("../../etc/x")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(ValueError):
        b.put_archive("copy", bad.getvalue())


def test_labels_limits_and_destroy(make, client, config) -> None:
    sb = make(labels={"run": "rl", "pod": "pod-9", "episode": "ep-3", "attempt": "2"})
    cid = sb._state.container_id
    attrs = client.api.inspect_container(cid)
    labels = attrs["Config"]["Labels"]
    assert {k: labels[f"openforge.{k}"] for k in ("run", "pod", "episode", "attempt")} == {
        "run": "rl",
        "pod": "pod-9",
        "episode": "ep-3",
        "attempt": "2",
    }
    assert abs(float(labels["openforge.deadline"]) - sb.deadline) < 2
    host = attrs["HostConfig"]
    assert host["NanoCpus"] == int(config.cpus * 1e9)
    assert host["Memory"] == config.memory_mb << 20
    assert host["PidsLimit"] == config.pids
    assert host["NetworkMode"] == "none"
    r = sh(sb, "for i in $(seq 200); do sleep 5 & done; echo all started")
    assert r.exit_code != 0 and "fork" in r.stderr and "all started" not in r.stdout  # pids limit
    d = sb._state.dir
    assert d is not None and (d / "agent.sock").exists()
    sb.destroy()
    sb.destroy()  # idempotent
    assert client.api.containers(all=True, filters={"id": cid}) == []
    assert not d.exists()
    with pytest.raises(RuntimeError, match="destroyed"):
        sh(sb, "true")


def test_base_image_with_read_only_mounts(make, docker_images) -> None:
    sb = make(None, ro_mounts={PROGRAM_HOST: PROGRAM})  # a verifier's sandbox: the base image
    assert sb.image == docker_images["base"]
    assert sb.exec(["cat", PROGRAM], 10).stdout == Path(PROGRAM_HOST).read_text()
    r = sh(sb, f"echo x >> {PROGRAM}")
    assert r.exit_code != 0 and "Permission denied" in r.stderr  # the harness's user
    r = sb.exec(["sh", "-c", f"echo x >> {PROGRAM}"], 10, user="root")  # root: the mount
    assert r.exit_code != 0 and "Read-only" in r.stderr


def _echo(method, path, headers, body):
    return 200, {"path": path, "method": method}, {}


NET_PROBE = """
import json, socket, sys, urllib.request
out = {"ifaces": [n for _, n in socket.if_nameindex()]}
out["proxy"] = json.load(urllib.request.urlopen(f"http://{sys.argv[1]}/v1/hello", timeout=10))
blocked = {}
for host, port in (a.rsplit(":", 1) for a in sys.argv[2:]):
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        blocked[host] = "connected"
    except OSError as e:
        blocked[host] = type(e).__name__
out["blocked"] = blocked
print(json.dumps(out))
"""


def test_network_is_only_the_proxy(make, tmp_path: Path) -> None:
    proxy = StubServer(_echo, unix_path=str(tmp_path / "proxy.sock"))
    os.chmod(proxy.address, 0o666)
    host_tcp = StubServer(_echo)  # a server on the host's loopback
    try:
        sb = make(proxy_socket=proxy.address, proxy_port=18931)
        assert sb.proxy_host_port() == "127.0.0.1:18931"
        port = host_tcp.address.split(":")[1]
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        probe.connect(("192.0.2.1", 9))  # no packet is sent: just this host's own address
        host_ip = probe.getsockname()[0]
        probe.close()
        sb.put_file("probe.py", NET_PROBE)
        r = sb.exec(
            ["python3", "probe.py", sb.proxy_host_port(), f"127.0.0.1:{port}", f"{host_ip}:{port}"],
            60,
        )
        assert r.exit_code == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["ifaces"] == ["lo"]
        assert out["proxy"] == {"path": "/v1/hello", "method": "GET"}
        assert set(out["blocked"].values()) <= {"ConnectionRefusedError", "OSError"}, out
        assert host_tcp.requests == [] and len(proxy.requests) == 1
    finally:
        proxy.close()
        host_tcp.close()


def test_proxy_tcp_is_relayed_through_a_host_socket(make) -> None:
    tcp = StubServer(_echo)
    try:
        sb = make(proxy_tcp=tcp.address)
        url = f"http://{sb.proxy_host_port()}/v1/x"
        r = sb.exec(
            ["python3", "-c", f"import urllib.request as u; print(u.urlopen({url!r}).read())"], 30
        )
        assert r.exit_code == 0 and "/v1/x" in r.stdout, r.stderr
    finally:
        tcp.close()


def test_reap_by_run_and_by_deadline(config, client) -> None:
    mine = DockerSandbox(config, None)
    mine.create(SandboxSpec(labels={"run": "reap-me", "pod": "p", "attempt": "0"}))
    expired = DockerSandbox(config, None)
    expired.create(SandboxSpec(labels={"run": "other", "pod": "p", "attempt": "0"}, deadline_s=1))
    kept = DockerSandbox(config, None)
    kept.create(SandboxSpec(labels={"run": "other", "pod": "p", "attempt": "1"}))

    def exists(sb: DockerSandbox) -> bool:
        return client.api.containers(all=True, filters={"id": sb._state.container_id}) != []

    try:
        # its creator lives: mine stays (the expired one may already go, on a slow machine)
        first = reap_containers(client, "reap-me", orphans_only=True)
        assert exists(mine) and exists(kept) and first == (0 if exists(expired) else 1)
        time.sleep(2.1)
        # all of the run, and the expired one (and any other test's expired sandbox in the
        # shared test daemon: the checks per container below are exact)
        assert first + reap_sandboxes(config, "reap-me") >= 2
        for sb, gone in ((mine, True), (expired, True), (kept, False)):
            found = client.api.containers(all=True, filters={"id": sb._state.container_id})
            assert (found == []) is gone
        assert not mine._state.dir.exists()
    finally:
        for sb in (mine, expired, kept):
            sb.destroy()


def test_missing_daemon_or_image_is_a_clear_error(config, client) -> None:
    check_isolation(config)  # daemon and base image there: the run may start
    with pytest.raises(DockerUnavailable, match="forge image build pi"):
        require_image(client, "openforge/pi:0-none", "pi")
    bad = config.model_copy(update={"docker_host": "unix:///nonexistent/docker.sock"})
    with pytest.raises(DockerUnavailable, match="no Docker daemon answers"):
        check_isolation(bad)
    other = config.model_copy(update={"image": "openforge/absent:1"})
    with pytest.raises(DockerUnavailable, match="openforge/absent:1"):
        DockerSandbox(other, None).create(SandboxSpec(labels={"run": "x"}))


def test_failed_start_says_why_and_leaves_nothing(config, client) -> None:
    from forge.images import tags as images
    from forge.sandboxes.agent_client import AgentUnavailable

    no_agent = config.model_copy(update={"image": images.rootfs_tag()})  # python3, no agent
    sb = DockerSandbox(no_agent, None)
    t0 = time.monotonic()
    with pytest.raises(AgentUnavailable, match="did not start") as err:
        sb.create(SandboxSpec(labels={"run": "failed-start"}))
    assert time.monotonic() - t0 < 10 and "No module named" in str(err.value)  # its log
    assert client.api.containers(all=True, filters={"label": "openforge.run=failed-start"}) == []
    assert sb._state.dir is not None and not sb._state.dir.exists()


def test_burst_of_sandboxes_in_parallel(config) -> None:
    from concurrent.futures import ThreadPoolExecutor

    def one(i: int) -> str:
        sb = DockerSandbox(config, "react")
        sb.create(SandboxSpec(labels={"run": "burst", "attempt": str(i)}))
        try:
            return sb.exec(["sh", "-c", f"echo {i}"], 30).stdout.strip()
        finally:
            sb.destroy()

    t0 = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        assert sorted(pool.map(one, range(8)), key=int) == [str(i) for i in range(8)]
    print(
        f"\n[docker] 8 sandboxes created, used and destroyed at once in "
        f"{time.perf_counter() - t0:.2f}s"
    )

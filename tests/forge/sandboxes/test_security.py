"""What a probe inside an isolated sandbox can reach of the host (issue 10 item 12, DESIGN.md
decision 8): none of the host's home, the repository, other sandboxes' workspaces or the host's
secrets; no host port but its own proxy; no other attempt through its own key; and its key is
in no process's argv and in no log."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import pwd
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forge.harnesses.registry import HARNESSES, get_harness
from forge.sandboxes.base import SandboxSpec
from forge.sandboxes.bwrap import (
    SHARED_CACHES,
    SYNTHESISED,
    bwrap_works,
    etc_paths,
    python_prefix,
)
from forge.sandboxes.local import LocalSandbox
from tests.forge.harnesses.helpers import attempt_ctx

needs_bwrap = pytest.mark.skipif(
    not bwrap_works(), reason="bubblewrap missing or cannot create namespaces here"
)
REPO = Path(__file__).resolve().parents[3]

# -- files and processes ----------------------------------------------------------------------

PROBE_FILES = """
import json, os
def state(p):
    try:
        if os.path.isdir(p):
            os.listdir(p)
            return "listed"
        if os.path.lexists(p):
            with open(p, "rb") as f:
                f.read(1)
            return "read"
        return "absent"
    except FileNotFoundError:
        return "absent"
    except OSError as e:
        return type(e).__name__
procs = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            procs.append(f.read().decode(errors="replace"))
    except OSError:
        pass
print(json.dumps({
    "paths": {p: state(p) for p in json.load(open("targets.json"))},
    "root": sorted(os.listdir("/")),
    "etc": sorted(os.listdir("/etc")),
    "passwd": open("/etc/passwd").read(),
    "env": dict(os.environ),
    "procs": procs,
}))
"""


@pytest.fixture
def sandboxes(tmp_path: Path) -> Iterator[list[LocalSandbox]]:
    made = []
    for i in range(2):
        sb = LocalSandbox(root=tmp_path / "sandboxes", isolation="required")
        sb.create(SandboxSpec(labels={"run": "sec", "pod": "p", "attempt": str(i)}))
        made.append(sb)
    yield made
    for sb in made:
        sb.destroy()


@contextlib.contextmanager
def _marker(path: Path) -> Iterator[Path]:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("host secret\n")
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


@needs_bwrap
def test_probe_reads_nothing_of_the_host(sandboxes, tmp_path: Path, monkeypatch) -> None:
    victim, probe = sandboxes
    victim.put_file("secret.txt", "the other attempt's work")
    victim.put_file("/home/agent/.config/token", "the other attempt's token")
    token = uuid.uuid4().hex
    fake_home = tmp_path / "host-home"
    monkeypatch.setenv("HOME", str(fake_home))
    monkeypatch.setenv("FORGE_TEST_HOST_SECRET", token)
    host_proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", token])
    real_home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    try:
        with (
            _marker(real_home / f".forge-security-{token}") as home_marker,
            _marker(fake_home / ".ssh" / "id_ed25519") as fake_key,
        ):
            must_hide = [
                str(home_marker),
                str(fake_key),
                str(REPO),
                str(REPO / "pyproject.toml"),
                str(REPO / ".git"),
                str(victim.host_workspace / "secret.txt"),
                str(victim.host_home / ".config" / "token"),
                str(victim.dir),
                str(victim.root),
                "/etc/shadow",
                "/etc/passwd-",
            ]
            optional = ["/etc/gshadow", "/etc/ssh", "/etc/ssl/private", "/etc/sudoers"]
            # of /var only the fontconfig cache is shared (SHARED_CACHES); nothing else of it
            optional += ["/var/lib", "/var/log", "/var/mail", "/var/spool", "/var/backups"]
            optional += ["/var/cache/apt", "/var/cache/debconf", "/var/tmp"]
            optional += [] if SHARED_CACHES else ["/var"]
            optional += ["/run/secrets", "/etc/machine-id", "/etc/pip.conf", "/etc/gitconfig"]
            for p in must_hide:  # each is there to be found: the probe could fail
                assert os.path.lexists(p), p
            targets = must_hide + [p for p in optional if os.path.lexists(p)]
            probe.put_file("probe.py", PROBE_FILES)
            probe.put_file("targets.json", json.dumps(targets))
            r = probe.exec(["python3", "probe.py"], 60)
            with open(f"/proc/{host_proc.pid}/cmdline", "rb") as f:
                assert token in f.read().decode()  # the host process was there to be seen
    finally:
        host_proc.kill()
        host_proc.wait()
    assert r.exit_code == 0, r.stderr
    seen = json.loads(r.stdout)
    assert {p: s for p, s in seen["paths"].items() if s != "absent"} == {}
    # The root holds the system, its own workspace and home, /tmp, /dev, /proc, and the way
    # down to the real Python installation; nothing else of the host.
    allowed = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "tmp", "dev"}
    allowed |= {"proc", "workspace", "home"}
    allowed |= {"var"} if any(os.path.isdir(d) for d in SHARED_CACHES) else set()
    prefix = python_prefix()
    if prefix:
        allowed.add(prefix.strip("/").split("/")[0])
    assert set(seen["root"]) <= allowed, set(seen["root"]) - allowed
    # /etc: the allowlist and the synthesised identity files, exactly.
    expected_etc = {p.split("/")[2] for p in etc_paths()} | set(SYNTHESISED)
    assert set(seen["etc"]) == expected_etc
    assert "shadow" not in seen["etc"] and "ssh" not in seen["etc"]
    users = {line.split(":")[0] for line in seen["passwd"].splitlines()}
    host_users = {line.split(":")[0] for line in Path("/etc/passwd").read_text().splitlines()}
    assert users <= {"root", "nobody", "agent", pwd.getpwuid(os.getuid()).pw_name}, users
    assert host_users - users  # the host's other users stay out of sight
    # Its environment is its own; the host's processes are out of sight.
    assert token not in json.dumps(seen["env"]) and "FORGE_TEST_HOST_SECRET" not in seen["env"]
    assert seen["env"]["HOME"] == "/home/agent"
    assert not any(token in cmd for cmd in seen["procs"]) and len(seen["procs"]) < 10


# -- the key in argv ----------------------------------------------------------------------------

KEY = "forge-argv-probe-" + "k" * 24


@pytest.mark.parametrize(
    "name",
    [
        n
        for n in sorted(HARNESSES)
        if n != "command"  # its argv is whatever its config says
    ],
)
def test_no_harness_puts_the_key_in_argv(name: str) -> None:
    harness = get_harness(name)
    argv = harness.command(attempt_ctx(api_key=KEY))
    assert not [a for a in argv if KEY in a]


# -- the network and the key, on a real HarnessPod ------------------------------------------------

PROBE_NET = """
import json, os, socket, time, urllib.error, urllib.request
t = json.load(open(os.path.join(os.environ["HOME"], "targets.json")))
base, key = os.environ["PROBE_URL"], os.environ["PROBE_KEY"]
open("/workspace/ready", "w").close()
deadline = time.time() + 120
while not os.path.exists("/workspace/go") and time.time() < deadline:
    time.sleep(0.05)

def connect(host, port):
    try:
        socket.create_connection((host, port), timeout=3).close()
        return "connected"
    except OSError as e:
        return type(e).__name__

def call(url, body=None):
    data = json.dumps(body).encode() if body else None
    headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data, headers), timeout=60) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError as e:
        return type(e).__name__

chat = {"model": t["model"], "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
origin = base.split("/episodes/")[0]
out = {
    "ports": {name: connect(h, p) for name, (h, p) in t["ports"].items()},
    "own_models": call(base + "/models"),
    "own_chat": call(base + "/chat/completions", chat),
    "victim_models": call(origin + t["victim"] + "/v1/models"),
    "victim_chat": call(origin + t["victim"] + "/v1/chat/completions", chat),
    "unknown": call(origin + "/episodes/nope/attempts/0/v1/models"),
}
print(json.dumps({"probe": out}))
"""
EPISODE = "ep-probe"


def _connects(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=2).close()
        return True
    except OSError:
        return False


def _host_ip() -> str | None:
    """This host's address on its default route (no packet is sent), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
            ip = s.getsockname()[0]
        except OSError:
            return None
    return None if ip.startswith("127.") else ip


def _listen(host: str, port: int = 0) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port))
    s.listen(16)
    return s


def _ray_ports(ray: Any) -> dict[str, tuple[str, int]]:
    """GCS and every port Ray reports for this node (raylet, object manager, agents)."""
    gcs_host, gcs_port = ray.get_runtime_context().gcs_address.rsplit(":", 1)
    ports = {"ray_gcs": (gcs_host, int(gcs_port))}
    node = next(n for n in ray.nodes() if n["Alive"])
    for key, value in node.items():
        if key.endswith("Port") and isinstance(value, int) and value > 0:
            ports[f"ray_{key}"] = (node["NodeManagerAddress"], value)
    return ports


def _scan_argv() -> dict[int, str]:
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
            found[int(pid)] = f.read().replace(b"\0", b" ").decode(errors="replace")
    return found


def _wait_for(pattern: str, root: Path, timeout_s: float = 120) -> Path:
    """The first match of ``pattern`` under ``root``, or of it below a sandbox's disk quota
    mount (``*/disk/...``: the workspace lives there when the quota is on)."""
    end = time.monotonic() + timeout_s
    quota = pattern.replace("*/", "*/disk/", 1)
    while time.monotonic() < end:
        hits = list(root.glob(pattern)) or list(root.glob(quota))
        if hits:
            return hits[0]
        time.sleep(0.05)
    raise TimeoutError(f"no {pattern} under {root}")


async def _probe_episode(handle: Any, root: Path, ray: Any) -> dict[str, Any]:
    from actors.harness_pod import HarnessPod

    pod = HarnessPod(handle, pod_id="sec-a", run="sec", sandbox={"root": str(root)})
    other = HarnessPod(handle, pod_id="sec-b", run="sec")
    await pod.start()
    await other.start()
    listeners = [_listen("127.0.0.1"), _listen("0.0.0.0")]
    try:
        ports = _ray_ports(ray)
        ports["own_pod_tcp"] = ("127.0.0.1", pod.port)
        ports["other_pod_tcp"] = ("127.0.0.1", other.port)
        ports["host_loopback_listener"] = listeners[0].getsockname()
        ip = _host_ip()
        if ip:
            ports["host_address_listener"] = (ip, listeners[1].getsockname()[1])
        if _connects("127.0.0.1", 8265):
            ports["ray_dashboard"] = ("127.0.0.1", 8265)
        else:  # nothing there: stand in for the dashboard on its port
            with contextlib.suppress(OSError):
                listeners.append(_listen("127.0.0.1", 8265))
                ports["ray_dashboard"] = ("127.0.0.1", 8265)
        unreachable = {n: hp for n, hp in ports.items() if not _connects(*hp)}
        assert not unreachable, f"the host itself cannot reach {unreachable}"
        victim = pod.open_attempt("ep-victim", 0)
        targets = {"ports": ports, "victim": victim["path"], "model": pod.model}
        options = {
            "name": "security-probe",
            "command": ["python3", "{home}/probe.py"],
            "files": {"{home}/probe.py": PROBE_NET, "{home}/targets.json": json.dumps(targets)},
            "env": {"PROBE_URL": "{base_url}", "PROBE_KEY": "{api_key}"},
            "answer": {"json_field": "probe"},
        }
        task = {
            "id": "security-probe",
            "instruction": "probe the sandbox",
            "verifier": {"type": "file_exists", "path": "ready"},
            "limits": {"timeout_s": 180, "max_turns": 5},
        }

        async def host_side() -> tuple[str, dict[int, str]]:
            ready = await asyncio.to_thread(_wait_for, "*/workspace/ready", root)
            key = pod._attempts[(EPISODE, 0)].key  # the attempt is running now
            argv = await asyncio.to_thread(_scan_argv)
            (ready.parent / "go").touch()
            return key, argv

        ep, (key, argv) = await asyncio.gather(
            pod.run_episode(task, "command", episode_id=EPISODE, harness_options=options),
            host_side(),
        )
        victim_turns = pod.close_attempt("ep-victim", 0).turns
    finally:
        for s in listeners:
            s.close()
        await pod.stop()
        await other.stop()
    return {"episode": ep, "key": key, "argv": argv, "victim_turns": victim_turns}


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.lines.append(logging.Formatter("%(name)s %(message)s").format(record))


@pytest.fixture(scope="module")
def probe_run(ray_cluster, tmp_path_factory) -> dict[str, Any]:
    if not bwrap_works():
        pytest.skip("bubblewrap missing or cannot create namespaces here")
    from forge.config import PolicyConfig
    from serve.policy import deploy_policy

    config = PolicyConfig(engine={"name": "scripted", "mode": "noop"}, num_cpus=0.25)
    handle = deploy_policy(config, "security-probe")
    root = tmp_path_factory.mktemp("security") / "sandboxes"
    logs = _Collect()
    top = logging.getLogger()
    old_level = top.level
    top.addHandler(logs)
    top.setLevel(logging.DEBUG)  # whatever the pod and its sandbox log, at any level
    try:
        run = asyncio.run(_probe_episode(handle, root, ray_cluster))
    finally:
        top.removeHandler(logs)
        top.setLevel(old_level)
    run["logs"] = logs.lines
    run["root"] = root
    return run


@pytest.mark.ray
def test_probe_reaches_no_host_port_but_its_own_proxy(probe_run) -> None:
    ep = probe_run["episode"]
    assert ep.status == "ok", (ep.failure, ep.harness_log)
    seen = json.loads(ep.final_answer)
    assert {"ray_gcs", "ray_NodeManagerPort", "ray_dashboard", "other_pod_tcp"} <= set(
        seen["ports"]
    )
    assert {n: s for n, s in seen["ports"].items() if s == "connected"} == {}
    assert seen["own_models"] == 200 and seen["own_chat"] == 200
    assert len(ep.turns) == 1  # its own call was served and recorded


@pytest.mark.ray
def test_its_key_opens_no_other_attempt(probe_run) -> None:
    seen = json.loads(probe_run["episode"].final_answer)
    assert seen["victim_models"] == 401 and seen["victim_chat"] == 401
    assert seen["unknown"] == 404
    assert probe_run["victim_turns"] == []  # nothing was written into the other attempt


@pytest.mark.ray
def test_key_is_in_no_argv_and_no_log(probe_run, ray_cluster) -> None:
    key, argv, ep = probe_run["key"], probe_run["argv"], probe_run["episode"]
    assert key.startswith("forge-") and len(key) > 20
    # the scan ran while the harness did: its bwrap and itself were in the process list
    assert any("bwrap" in cmd and str(probe_run["root"]) in cmd for cmd in argv.values())
    assert any("/home/agent/probe.py" in cmd for cmd in argv.values())
    assert {pid: cmd for pid, cmd in argv.items() if key in cmd} == {}
    assert key not in ep.harness_log and key not in json.dumps(ep.to_dict())
    assert any("pod sec-a proxy on" in line for line in probe_run["logs"])  # logs were captured
    assert [line for line in probe_run["logs"] if key in line] == []
    node = getattr(ray_cluster._private.worker, "_global_node", None)
    if node is None:
        return  # not in this process: the driver joined a cluster it did not start
    leaked = []
    for path in Path(node.get_logs_dir_path()).rglob("*"):
        with contextlib.suppress(OSError):
            if path.is_file() and key.encode() in path.read_bytes():
                leaked.append(str(path))
    assert leaked == []

"""Warm sandbox pools on docker (``sandbox.warm_pool``), with real containers in the session's
own dockerd: a handover takes a container made ahead, a warm container is never handed out
twice, a crash leaves nothing after the reap pass, and a pool of size 0 changes nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forge.config import SandboxConfig
from forge.sandboxes import warm_pool
from forge.sandboxes.base import SandboxSpec
from forge.sandboxes.docker import DockerSandbox
from forge.sandboxes.docker_api import DockerUnavailable, client_for, reap_containers
from forge.sandboxes.registry import prewarm, sandbox_for
from tests.forge.httpstub import StubServer

REPO = Path(__file__).resolve().parents[3]
FILL_S = 180.0  # generous: a shared 2-core machine


def spec(run: str, attempt: int = 0, **kw: Any) -> SandboxSpec:
    labels = {"run": run, "pod": "hp-0", "episode": f"e{attempt}", "attempt": str(attempt)}
    return SandboxSpec(labels={**labels, "network": "proxy-only"}, deadline_s=300, **kw)


def test_what_a_pool_serves() -> None:
    on = SandboxConfig(backend="docker", warm_pool={"size": 2, "max_attempt_s": 600}).warm_pool
    assert warm_pool.poolable(on, spec("r"))
    assert not warm_pool.poolable(SandboxConfig().warm_pool, spec("r"))  # size 0: off
    verifier = spec("r")
    verifier.labels["role"] = "verifier"
    assert not warm_pool.poolable(on, verifier)
    assert not warm_pool.poolable(on, spec("r", environment={"workdir": "/app"}))
    assert not warm_pool.poolable(on, SandboxSpec(labels={"run": "r"}, deadline_s=601))
    assert not warm_pool.poolable(on, SandboxSpec(labels={"run": "r", "warm": "x-1"}))
    # the attempt's labels, deadline and environment are not the pool's kind; the rest is
    a, b = spec("r", 0, env={"A": "1"}), spec("r", 5)
    b.deadline_s = 30
    assert warm_pool.spec_key(a) == warm_pool.spec_key(b)
    for other in (spec("s"), spec("r", egress_socket="/x.sock"), spec("r", ro_mounts={"/a": "/b"})):
        assert warm_pool.spec_key(other) != warm_pool.spec_key(a)


def test_bad_settings_name_the_field() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=r"warm_pool\.size"):
        SandboxConfig(warm_pool={"size": -1})
    with pytest.raises(ValidationError, match=r"warm_pool\.sizes"):
        SandboxConfig(warm_pool={"sizes": 2})


class _SlowBox:
    """A sandbox of a fake backend whose create takes ``CREATE_S``."""

    CREATE_S = 1.0
    made: list[_SlowBox] = []

    def __init__(self, config: SandboxConfig) -> None:
        self.config, self.destroyed = config, False

    def warm_key(self) -> tuple[Any, ...]:
        return ("slow",)

    def warm_factory(self) -> Any:
        return lambda: _SlowBox(self.config)

    def create(self, spec: SandboxSpec) -> None:
        _SlowBox.made.append(self)
        time.sleep(self.CREATE_S)

    def destroy(self) -> None:
        self.destroyed = True


def test_closing_waits_for_the_sandbox_being_made_and_destroys_it() -> None:
    """A HarnessPod's stop waits as long as a warm create may take (its backend's start
    timeout): the sandbox its filler was making is destroyed before the pod's process ends,
    not left to the reap pass."""
    config = SandboxConfig(backend="docker", warm_pool={"size": 1})
    assert warm_pool.longest_create_s(config) > config.start_timeout_s
    kube = SandboxConfig(backend="kubernetes", warm_pool={"size": 1})
    assert warm_pool.longest_create_s(kube) > kube.kubernetes.pod_start_timeout_s
    _SlowBox.made.clear()
    pool = warm_pool.pool_for(_SlowBox(config), spec("slow-run"))
    assert pool is not None
    while not _SlowBox.made:  # its filler is making one
        time.sleep(0.01)
    closed = warm_pool.shutdown({"run": "slow-run"}, warm_pool.longest_create_s(config))
    assert closed == 1 and [box.destroyed for box in _SlowBox.made] == [True]


@pytest.fixture(scope="module")
def base(docker_daemon, docker_images) -> SandboxConfig:
    return SandboxConfig(
        backend="docker", docker_host=docker_daemon.host, cpus=0.5, memory_mb=256, pids=128
    )


@pytest.fixture
def warm(base: SandboxConfig) -> Iterator[SandboxConfig]:
    yield base.model_copy(update={"warm_pool": base.warm_pool.model_copy(update={"size": 2})})
    warm_pool.shutdown()


def ids(client: Any, run: str) -> set[str]:
    return {
        c["Id"] for c in client.api.containers(all=True, filters={"label": f"openforge.run={run}"})
    }


def _echo(method: str, path: str, headers: Any, body: Any) -> tuple[int, dict, dict]:
    return 200, {"path": path}, {}


@pytest.mark.docker
def test_handover_takes_a_ready_container(
    warm: SandboxConfig, docker_images: dict[str, str], tmp_path: Path
) -> None:
    client = client_for(warm.docker_host)
    proxy = StubServer(_echo, unix_path=str(tmp_path / "proxy.sock"))
    os.chmod(proxy.address, 0o666)
    s = lambda i, **kw: spec("warm-hand", i, proxy_socket=proxy.address, **kw)  # noqa: E731
    try:
        pool = prewarm(warm, "react", s(0))
        assert pool is not None and pool.wait_full(FILL_S)
        ready = {b._state.container_id for b in pool.ready_sandboxes()}
        assert ids(client, "warm-hand") == ready  # the pool's two, labelled as any other
        t0 = time.time()
        sb = sandbox_for(warm, "react")
        sb.create(s(7, env={"X": "from-the-attempt"}))
        cid = sb._state.container_id
        assert cid in ready and pool.handed == 1  # made before create was called: no create
        labels = client.api.inspect_container(cid)["Config"]["Labels"]
        assert labels["openforge.warm"].startswith(pool.id) and "openforge.episode" not in labels
        assert labels["openforge.run"] == "warm-hand" and labels["openforge.pod"] == "hp-0"
        assert int(labels["openforge.deadline"]) >= t0 + 300  # creation + max_age + max_attempt
        record = json.loads((sb._state.dir / "attempt.json").read_text())  # who it served
        assert record["labels"]["episode"] == "e7" and record["labels"]["attempt"] == "7"
        assert t0 + 300 <= sb.deadline <= time.time() + 300  # counts from the handover
        assert sb.spec.labels["attempt"] == "7" and sb.image == docker_images["react"]
        r = sb.exec(["sh", "-c", "echo $X; cat /workspace/* 2>/dev/null | wc -c"], 30)
        assert r.stdout.split() == ["from-the-attempt", "0"], r.stderr  # fresh and empty
        url = f"http://{sb.proxy_host_port()}/episodes/e7/v1/x"
        py = f"import urllib.request as u; print(u.urlopen({url!r}).read().decode())"
        r = sb.exec(["python3", "-c", py], 30)
        assert r.exit_code == 0 and "/episodes/e7/v1/x" in r.stdout, r.stderr
        folder = sb._state.dir
        sb.destroy()  # after use: gone, never back in the pool
        assert cid not in ids(client, "warm-hand") and not folder.exists()
        assert pool.wait_full(FILL_S)  # refilled with a new one
        now = {b._state.container_id for b in pool.ready_sandboxes()}
        assert cid not in now and len(now) == 2 and pool.created == 3
    finally:
        warm_pool.shutdown()
        proxy.close()
    assert ids(client, "warm-hand") == set()  # closing the pool destroyed its ready ones


@pytest.mark.docker
@pytest.mark.slow
def test_a_warm_container_is_never_handed_out_twice(warm: SandboxConfig) -> None:
    client = client_for(warm.docker_host)
    size, attempts = 6, 10  # more attempts than ready containers: the rest make their own
    cfg = warm.model_copy(update={"warm_pool": warm.warm_pool.model_copy(update={"size": size})})
    pool = prewarm(cfg, None, spec("warm-twice"))
    assert pool is not None and pool.wait_full(FILL_S)
    ready = {b._state.container_id for b in pool.ready_sandboxes()}
    boxes = [sandbox_for(cfg, None) for _ in range(attempts)]
    gate = threading.Barrier(attempts)
    errors: list[BaseException] = []

    def one(i: int) -> None:
        gate.wait()
        try:
            boxes[i].create(spec("warm-twice", i))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(attempts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        got = [b._state.container_id for b in boxes]
        assert len(set(got)) == attempts  # every attempt its own container
        warm_ones = [c for c in got if c in ready]
        assert len(warm_ones) == pool.handed <= size and pool.handed >= 1
        for i, b in enumerate(boxes):  # each answers as its own attempt
            b.put_file("who", str(i))
        assert [b.get_file("who") for b in boxes] == [str(i).encode() for i in range(attempts)]
        for b in boxes:
            b.destroy()
        assert pool.wait_full(FILL_S)  # refilled
        assert not {b._state.container_id for b in pool.ready_sandboxes()} & set(got)
    finally:
        for b in boxes:
            b.destroy()
        warm_pool.shutdown()
    assert ids(client, "warm-twice") == set()


@pytest.mark.docker
def test_an_aged_warm_container_is_replaced(warm: SandboxConfig) -> None:
    client = client_for(warm.docker_host)
    pool_cfg = warm.warm_pool.model_copy(update={"size": 1, "max_age_s": 1.0})
    cfg = warm.model_copy(update={"warm_pool": pool_cfg})
    pool = prewarm(cfg, None, spec("warm-age"))
    assert pool is not None and pool.wait_full(FILL_S)
    [first] = [b._state.container_id for b in pool.ready_sandboxes()]
    end = time.monotonic() + FILL_S
    while first in ids(client, "warm-age") and time.monotonic() < end:
        time.sleep(0.1)
    assert first not in ids(client, "warm-age") and pool.expired >= 1  # destroyed, not handed
    assert pool.wait_full(FILL_S) and pool.created >= 2


CHILD = """
import json, os, sys, time
from forge.config import SandboxConfig
from forge.sandboxes.base import SandboxSpec
from forge.sandboxes.registry import prewarm
cfg = SandboxConfig.model_validate_json(sys.argv[1])
labels = {"run": sys.argv[2], "pod": "hp-0", "episode": "e", "attempt": "0"}
pool = prewarm(cfg, None, SandboxSpec(labels=labels, deadline_s=300))
assert pool.wait_full(180), "pool did not fill"
print(json.dumps([[b._state.container_id, str(b._state.dir)] for b in pool.ready_sandboxes()]),
      flush=True)
if sys.argv[3] == "crash":
    time.sleep(600)  # SIGKILLed here
"""


def child(cfg: SandboxConfig, run: str, how: str) -> tuple[subprocess.Popen, list[list[str]]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, cfg.model_dump_json(), run, how],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, f"the child made no pool (exit {proc.wait(30)})"
    return proc, json.loads(line)


@pytest.mark.docker
def test_a_crash_leaves_nothing_after_the_reap_pass(warm: SandboxConfig) -> None:
    client = client_for(warm.docker_host)
    live = prewarm(warm, None, spec("warm-crash"))  # this process's pool, same run: it stays
    proc, made = child(warm, "warm-crash", "crash")
    try:
        assert live is not None and live.wait_full(FILL_S)
        mine = {b._state.container_id for b in live.ready_sandboxes()}
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        theirs = {cid for cid, _ in made}
        assert len(theirs) == 2 and theirs <= ids(client, "warm-crash")  # left by the crash
        assert reap_containers(client, "warm-crash", orphans_only=True) >= 2  # + any expired
        assert ids(client, "warm-crash") == mine  # the dead creator's went, the live one's not
        assert not any(Path(d).exists() for _, d in made)  # their host folders too
    finally:
        proc.kill()
        warm_pool.shutdown()
    assert ids(client, "warm-crash") == set()


@pytest.mark.docker
def test_a_clean_exit_destroys_the_pool(warm: SandboxConfig) -> None:
    client = client_for(warm.docker_host)
    proc, made = child(warm, "warm-exit", "exit")
    assert proc.wait(60) == 0 and len(made) == 2
    assert ids(client, "warm-exit") == set()
    assert not any(Path(d).exists() for _, d in made)


@pytest.mark.docker
def test_a_failed_warm_create_is_logged_never_fatal(
    warm: SandboxConfig, caplog: pytest.LogCaptureFixture
) -> None:
    bad = warm.model_copy(update={"image": "openforge/absent:1"})
    pool = prewarm(bad, None, spec("warm-bad"))
    assert pool is not None
    end = time.monotonic() + 60
    while pool.failed == 0 and time.monotonic() < end:
        time.sleep(0.05)
    assert pool.failed >= 1 and pool.ready() == 0
    assert "creating a sandbox failed" in caplog.text and "openforge/absent:1" in caplog.text
    with pytest.raises(DockerUnavailable, match="openforge/absent:1"):  # its own create, as ever
        sandbox_for(bad, None).create(spec("warm-bad", 1))
    assert pool.missed == 1


@pytest.mark.docker
def test_size_0_changes_nothing(base: SandboxConfig) -> None:
    client = client_for(base.docker_host)
    sb = sandbox_for(base, None)
    assert isinstance(sb, DockerSandbox)
    sb.create(spec("warm-off", 3))
    try:
        assert warm_pool.pools() == [] and prewarm(base, None, spec("warm-off")) is None
        labels = client.api.inspect_container(sb._state.container_id)["Config"]["Labels"]
        assert labels["openforge.episode"] == "e3" and "openforge.warm" not in labels
        assert not (sb._state.dir / "attempt.json").exists()
        assert ids(client, "warm-off") == {sb._state.container_id}
    finally:
        sb.destroy()


@pytest.mark.docker
@pytest.mark.ray
@pytest.mark.slow
def test_episodes_in_a_harness_pod_take_warm_containers(
    ray_cluster, docker_daemon, docker_images, tmp_path
):
    """The wiring as a run has it: a HarnessPod (a real Ray actor, before a real Serve Policy
    with the scripted engine) plays react episodes with sandbox.warm_pool; the first makes the
    pool and its own container, the next is handed a warm one, verifiers never are, and the
    pod's stop destroys what it made ahead (a crash's leftovers: the reap tests above)."""
    from actors.harness_pod import HarnessPod
    from forge.config import PolicyConfig
    from forge.sandboxes.registry import reap_sandboxes
    from serve.policy import deploy_policy
    from tasks.loader import load_suite

    ray, run = ray_cluster, "warm-episode"
    client = client_for(docker_daemon.host)
    # a root of its own: the reap pass below counts the spare disks other tests' killed
    # processes left in the shared default root (spares belong to no run), not this run's
    sandbox = {"backend": "docker", "docker_host": docker_daemon.host, "warm_pool": {"size": 1},
               "root": str(tmp_path)}  # fmt: skip
    oracle = deploy_policy(PolicyConfig(engine={"name": "scripted"}, num_cpus=0.25), "wp-oracle")
    pod = ray.remote(HarnessPod).options(num_cpus=0.25).remote(oracle, pod_id="wp-a", run=run,
                                                               sandbox=sandbox)  # fmt: skip
    task = next(t for t in load_suite("smoke") if t.id == "json_extract")
    # a command first: it gets a verifier container of its own; the JSON checks read the copy
    task = task.model_copy(
        update={"verifier": [{"type": "command", "cmd": "true"}, *task.verifier]}
    )
    since, episodes = int(time.time()) - 1, []
    try:
        ray.get(pod.start.remote())
        for i in range(2):
            episodes.append(ray.get(pod.run_episode.remote(task.model_dump(), "react",
                                                           episode_id=f"w{i}")))  # fmt: skip
            end = time.monotonic() + FILL_S  # the pool, made by the first, is full
            warm_label = {"label": [f"openforge.run={run}", "openforge.warm"], "status": "running"}
            while not client.api.containers(filters=warm_label) and time.monotonic() < end:
                time.sleep(0.1)
        warm = {"label": [f"openforge.run={run}", "openforge.warm"]}
        assert len(client.api.containers(all=True, filters=warm)) == 1  # w1's refill
        ray.get(pod.stop.remote())
    finally:
        ray.kill(pod)
    for ep in episodes:
        assert (ep.status, ep.reward, ep.failure) == ("ok", 1.0, None), ep.harness_log
    created = {"label": f"openforge.run={run}", "event": "create"}
    events = client.api.events(since=since, until=int(time.time()) + 1, decode=True,
                               filters=created)  # fmt: skip
    made = [e["Actor"]["Attributes"] for e in events]
    harness = [a for a in made if a["image"] == docker_images["react"]]
    assert [a.get("openforge.episode") for a in harness if "openforge.warm" not in a] == ["w0"]
    assert len([a for a in harness if "openforge.warm" in a]) == 2  # w1's, then its refill
    verifiers = [a for a in made if a.get("openforge.role") == "verifier"]
    assert verifiers and not any("openforge.warm" in a for a in verifiers)
    assert client.api.containers(all=True, filters={"label": f"openforge.run={run}"}) == []
    assert reap_sandboxes(SandboxConfig.model_validate(sandbox), run) == 0  # nothing left

"""Network by phase through whole episodes (DESIGN.md decision 13): a real HarnessPod and its
proxies in this process, the scripted oracle behind a real Policy, the react harness in real
bubblewrap sandboxes, and a stand-in "internet" (an HTTP server on 127.0.0.2, outside every
sandbox's network namespace). The agent phase reaches it exactly when sandbox.network.agent
allows, the verify phase exactly when sandbox.network.verify does; each episode's egress log
says what each phase reached or was refused. Docker: sandboxes/test_docker_egress.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.harness_pod import HarnessPod
from forge.sandboxes.bwrap import bwrap_works
from forge.types import Episode
from serve.policy import LocalHandle, Policy
from tasks.schema import Task
from tests.forge.sandboxes.standin import FETCH, STAND_IN, serve_internet

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not bwrap_works(), reason="needs bubblewrap")]


@pytest.fixture(scope="module")
def internet() -> Iterator[str]:
    for port in serve_internet():
        yield f"http://{STAND_IN}:{port}"


def _tasks(url: str) -> dict[str, Task]:
    fetch = {"fetch.py": FETCH}
    return {
        "agent": Task.model_validate({
            "id": "fetch-agent", "instruction": "Save what the URL says.", "files": fetch,
            "solution": [f"python3 fetch.py {url}/agent > got.txt"],
            "verifier": {"type": "file_regex", "path": "got.txt", "pattern": "internet: /agent"},
        }),
        "verify": Task.model_validate({
            "id": "fetch-verify", "instruction": "Nothing to do.", "files": fetch,
            "verifier": {"type": "command", "cmd": f"python3 fetch.py {url}/verify | "
                         "grep -q 'internet: /verify'"},
        }),
    }  # fmt: skip


def _play(tmp_path: Path, task: Task, network: dict[str, Any]) -> Episode:
    async def main() -> Episode:
        policy = Policy({"engine": {"name": "scripted", "model": "tiny"}, "batch_wait_ms": 0})
        sandbox = {"root": str(tmp_path / "sandboxes"), "network": network}
        pod = HarnessPod(LocalHandle(policy), pod_id="p", run="net", sandbox=sandbox)
        await pod.start()
        try:
            return await pod.run_episode(task.model_dump(), "react")
        finally:
            await pod.stop()

    return asyncio.run(main())


def test_each_phase_reaches_out_exactly_as_its_network_allows(tmp_path, internet) -> None:
    port = int(internet.rsplit(":", 1)[1])
    listed = {"mode": "allowlist", "cidrs": [f"{STAND_IN}/32"], "ports": [port]}
    tasks = _tasks(internet)
    # the defaults: each phase its proxy alone; nothing is tried through the egress proxy
    for task in tasks.values():
        ep = _play(tmp_path, task, {})
        assert (ep.status, ep.reward, ep.egress) == ("ok", 0.0, []), ep.verifier_detail
    ep = _play(tmp_path, tasks["agent"], {"agent": listed})
    assert (ep.status, ep.reward) == ("ok", 1.0), ep.verifier_detail
    assert [(e["phase"], e["allowed"]) for e in ep.egress] == [("agent", True)]
    ep = _play(tmp_path, tasks["verify"], {"agent": listed})  # the agent's grant is not theirs
    assert (ep.status, ep.reward) == ("ok", 0.0), ep.verifier_detail
    ep = _play(tmp_path, tasks["verify"], {"verify": listed})
    assert (ep.status, ep.reward) == ("ok", 1.0), ep.verifier_detail
    assert [(e["phase"], e["allowed"]) for e in ep.egress] == [("verify", True)]
    # a task that asks for the internet gets open phases: public addresses, never the loopback
    asks = tasks["agent"].model_copy(update={"allow_internet": True})
    ep = _play(tmp_path, asks, {})
    assert ep.reward == 0.0 and ep.egress[0]["why"] == f"port {port} is not among [80, 443]"
    ep = _play(tmp_path, asks, {"agent": {"ports": []}})  # any port: still not the loopback
    assert ep.reward == 0.0 and ep.egress[0]["allowed"] is False
    assert "is not public" in ep.egress[0]["why"]
    ep = _play(tmp_path, asks, {"honour_task_requests": False, "agent": {"ports": []}})
    assert ep.egress == []  # the run did not give what the task asked

"""The verifier's sandboxes in a whole episode (a real HarnessPod in this process, real
bubblewrap sandboxes, the react harness, the scripted oracle as the model): a verifier that runs
commands gets a fresh sandbox with the pod's disk quota, as the agent did; file checks get no
sandbox at all (they read the copy of the workspace: ``forge.sandboxes.archive_view``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from actors.harness_pod import HarnessPod
from forge.sandboxes import quota
from forge.sandboxes.bwrap import bwrap_works
from serve.policy import LocalHandle, Policy
from tasks.loader import load_suite

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not bwrap_works(), reason="needs bubblewrap"),
    pytest.mark.skipif(quota.quota_problem() is not None, reason=f"{quota.quota_problem()}"),
]
SMALL_DISK = 24  # MiB
FITS = f"test \"$(df -Pm . | awk 'NR==2 {{print $2}}')\" -le {SMALL_DISK}"  # on the small disk


class Made(set):
    """The pod's set of live sandboxes, remembering every sandbox it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.all: list[Any] = []

    def add(self, box: Any) -> None:
        self.all.append(box)
        super().add(box)


@pytest.mark.parametrize(
    ("check", "verifier_disks"),
    [
        ({"type": "file_equals", "path": "hello.txt", "content": "Hello, OpenForge!"}, []),
        ({"type": "command", "cmd": FITS, "timeout_s": 30}, [SMALL_DISK]),
    ],
)
def test_only_a_verifier_that_runs_commands_gets_a_sandbox_with_the_disk_quota(
    tmp_path: Path, check: dict[str, Any], verifier_disks: list[int]
) -> None:
    hello = next(t for t in load_suite("smoke") if t.id == "hello_file")
    task = hello.model_copy(update={"verifier": [hello.verifier, check]})

    async def main() -> tuple[Any, list[Any]]:
        policy = Policy({"engine": {"name": "scripted", "model": "tiny"}, "batch_wait_ms": 0})
        sandbox = {"root": str(tmp_path / "sandboxes"), "disk_mb": SMALL_DISK}
        pod = HarnessPod(LocalHandle(policy), pod_id="p", run="t", sandbox=sandbox)
        pod.sandboxes = made = Made()
        await pod.start()
        try:
            return await pod.run_episode(task.model_dump(), "react"), made.all
        finally:
            await pod.stop()

    ep, boxes = asyncio.run(main())
    assert (ep.status, ep.reward) == ("ok", 1.0), (ep.verifier_detail, ep.harness_log)
    agent, *verifiers = boxes
    assert agent.disk_mb == SMALL_DISK
    assert [box.disk_mb for box in verifiers] == verifier_disks

"""Where an attempt's time goes (``run_attempt``'s ``stages``, read by the episode-overhead
benchmark): every stage is reported, in seconds, for a whole react episode in a real HarnessPod
in this process, with real bubblewrap sandboxes and the scripted oracle as the model."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from actors.harness_pod import HarnessPod
from forge.episode import run_attempt
from forge.sandboxes.bwrap import bwrap_works
from forge.stages import STAGES, stage_marks
from serve.policy import LocalHandle, Policy
from tasks.loader import load_suite


def test_marks_add_up_per_stage_and_nothing_without_a_record() -> None:
    stages: dict[str, float] = {}
    mark = stage_marks(stages)
    mark("a")
    mark("b")
    first_a = stages["a"]
    mark("a")  # a stage met twice adds up
    assert list(stages) == ["a", "b"]
    assert stages["a"] >= first_a >= 0.0 and stages["b"] >= 0.0
    stage_marks(None)("a")  # no record: nothing to do, nothing raised


@pytest.mark.slow
@pytest.mark.skipif(not bwrap_works(), reason="needs bubblewrap")
def test_a_react_episode_reports_every_stage(tmp_path: Path) -> None:
    task = next(t for t in load_suite("smoke") if t.id == "hello_file")
    stages: dict[str, float] = {}

    async def main() -> None:
        policy = Policy({"engine": {"name": "scripted", "model": "tiny"}, "batch_wait_ms": 0})
        pod = HarnessPod(LocalHandle(policy), pod_id="p", run="t",
                         sandbox={"root": str(tmp_path / "sandboxes")})  # fmt: skip
        await pod.start()
        try:
            ep = await run_attempt(pod, task, "react", 0, "e1", {}, stages=stages)
        finally:
            await pod.stop()
        assert (ep.status, ep.reward) == ("ok", 1.0), ep.harness_log

    asyncio.run(main())
    assert list(stages) == list(STAGES)
    assert all(s >= 0.0 for s in stages.values())

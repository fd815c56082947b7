"""``forge run`` in asynchronous mode: collection overlaps training, within the staleness bound."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.chaos.runner import letters_suite
from tests.forge.test_cli import FORGE, _env
from tests.verl_engine import VERL_MISSING

ROOT = Path(__file__).resolve().parents[2]


def _steps(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.timeout(1000)
def test_async_mode_never_trains_on_samples_older_than_the_bound(tmp_path: Path) -> None:
    suite = letters_suite(tmp_path, max_tokens=16)
    args = [
        "run",
        str(ROOT / "examples" / "quickstart.yaml"),
        f"runs_dir={tmp_path}",
        f"tasks={suite}",
        "name=async",
        "steps=4",  # step 1 on fresh weights; steps 2-4 may train on groups one version old
        "rollout.mode=async",
        "rollout.max_staleness=1",
        "rollout.group_size=4",
        "rollout.groups_per_step=2",
    ]
    r = subprocess.run([*FORGE, *args], capture_output=True, text=True, timeout=900, env=_env())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run_dir = tmp_path / "async"
    steps = _steps(run_dir)
    assert [s["step"] for s in steps] == list(range(1, 5))
    staleness = [s["staleness_max"] for s in steps]
    print("staleness per step:", staleness, "versions:", [s["policy_version"] for s in steps])
    assert all(0 <= x <= 1 for x in staleness), staleness
    assert steps[-1]["policy_version"] >= 3, steps  # the trainer stepped on (nearly) every step
    # Asynchronous for real: some step trained on groups sampled by the previous weights.
    assert max(staleness) == 1, staleness
    # Whatever the buffer evicted as stale is on disk with its reason, and counted.
    dropped = [
        json.loads(x) for x in (run_dir / "episodes" / "dropped.jsonl").read_text().splitlines()
    ]
    stale = [d for d in dropped if d["reason"] == "stale"]
    assert len(stale) == steps[-1]["evicted_stale_groups"]


@pytest.mark.slow
@pytest.mark.timeout(1000)
@pytest.mark.full  # ~110 s: -m full; in CI collective sync is tested in
# tests/serve/test_weight_sync.py and
# tests/serve/engines/test_vllm.py, the veRL ranks in tests/actors/test_verl_trainer.py
def test_collective_weight_sync_carries_every_trainer_step(tmp_path: Path) -> None:
    """``weight_sync.strategy=collective``: the trainer broadcasts to both replicas (gloo on a
    CPU) each step; every step samples with the weights the step before published, and so do
    the evaluations (before the first step and after the second). The trainer is the veRL
    backend (2 FSDP ranks, its rank 0 streaming the weights from the shards) where veRL is
    installed, as the set-up does; the torch Trainer's broadcast is tested in
    tests/serve/test_weight_sync.py."""
    backend = "torch" if VERL_MISSING else "verl"
    args = [
        "run",
        f"trainer.backend={backend}",
        str(ROOT / "examples" / "quickstart.yaml"),
        f"runs_dir={tmp_path}",
        f"tasks={letters_suite(tmp_path, max_tokens=16)}",
        "name=collective",
        "steps=2",
        "policy.replicas=2",
        "policy.num_cpus=0.5",
        "rollout.group_size=4",
        "rollout.groups_per_step=2",
        "weight_sync.strategy=collective",
        "eval_every=2",  # and once before the first step
        "eval_k=3",
    ]
    r = subprocess.run([*FORGE, *args], capture_output=True, text=True, timeout=900, env=_env())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run_dir = tmp_path / "collective"
    before, *steps = _steps(run_dir)
    assert [s["policy_version"] for s in steps] == [1, 2]
    # the held-out curve starts before training: step 0 on version 0, step 2 on version 2
    assert before["step"] == 0 and "reward_mean" not in before, before
    for step, version in ((0, 0), (2, 2)):
        evals = [json.loads(x) for x in (run_dir / "eval" / f"step_{step}.jsonl").open()]
        assert len(evals) == 3  # eval_k attempts of the one task
        assert {t["policy_version"] for e in evals for t in e["turns"]} == {version}
        rate = sum(e["reward"] >= 1.0 for e in evals) / 3
        assert (before if step == 0 else steps[-1])["eval_pass_rate"] == rate
    assert all(s["weight_sync_mib"] > 17 for s in steps)  # the tiny model's 17.4 MiB
    episodes = [json.loads(x) for x in (run_dir / "episodes" / "episodes.jsonl").open()]
    versions = [max(t["policy_version"] for t in e["turns"]) for e in episodes]
    assert versions == [0] * 8 + [1] * 8  # step 2 sampled with what step 1 published

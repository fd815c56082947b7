"""The README's main command learns: ``forge run examples/quickstart.yaml`` through the whole
stack (Serve Policy, HarnessPod proxies, react in sandboxes, ReplayBuffer, Trainer, weight sync),
then ``forge serve`` loads the checkpoint it left."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.forge.test_cli import FORGE, _env, forge_serve
from tests.verl_engine import VERL_MISSING

ROOT = Path(__file__).resolve().parents[2]


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.full  # ~190-330 s: -m full (its numbers: docs/results/training.md); in CI the
# whole stack trains every step (tests/forge/test_driver.py, test_driver_mix.py), an update
# raises what it rewards (tests/actors/test_trainer.py) and forge serve answers (test_cli.py)
def test_quickstart_learns_and_its_checkpoint_serves(tmp_path: Path) -> None:
    """The README's quickstart, 10 of its 16 steps (suite time): the reward rises by half, the
    policy versions rise with the steps, and the checkpoint serves sevens."""
    config = ROOT / "examples" / "quickstart.yaml"
    t0 = time.monotonic()
    r = subprocess.run(
        [*FORGE, "run", str(config), f"runs_dir={tmp_path}", "steps=10", "checkpoint_every=10"],
        capture_output=True,
        text=True,
        timeout=900,
        env=_env(),
        cwd=ROOT,
    )
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run_dir = tmp_path / "quickstart"
    # A calm terminal: only OpenForge's own lines; Ray's, Serve's and the workers' in forge.log.
    assert all(line.startswith("[forge] ") for line in r.stdout.splitlines() if line), r.stdout
    assert r.stderr.strip() == "", r.stderr[-3000:]
    log = (run_dir / "forge.log").read_text()
    assert "Started a local Ray instance" in log and "ray.serve" in log and "ray.workers" in log
    assert f"[forge] logs: {run_dir / 'forge.log'}" in r.stdout
    steps = _read_jsonl(run_dir / "metrics.jsonl")
    assert [s["step"] for s in steps] == list(range(1, 11))
    for s in steps:
        assert {"reward_mean", "policy_version", "episodes", "dropped_groups"} <= set(s)
    first, last3 = steps[0]["reward_mean"], [s["reward_mean"] for s in steps[-3:]]
    print(f"quickstart: {took:.0f}s; reward first step {first:.3f}, last three {last3}")
    assert sum(last3) / 3 >= first + 0.5, [s["reward_mean"] for s in steps]

    # Episodes carry token ids, and the policy versions that produced them rise with the steps.
    episodes = _read_jsonl(run_dir / "episodes" / "episodes.jsonl")
    assert len(episodes) == 10 * 4 * 8
    turns = [t for e in episodes for t in e["turns"]]
    assert all(t["prompt_ids"] and t["completion_ids"] for t in turns)
    versions = [max(t["policy_version"] for t in e["turns"]) for e in episodes]
    # The last step samples with the weights published by the step before it.
    assert versions[:32] == [0] * 32 and max(versions) == steps[-2]["policy_version"] >= 7
    assert versions == sorted(versions)  # synchronous mode: each step on the newest weights

    # The checkpoint is a Hugging Face model directory that `forge serve` loads and answers from.
    ckpt = run_dir / "checkpoints" / "step_10"
    assert (ckpt / "config.json").exists() and (ckpt / "trainer_state.json").exists()
    with forge_serve("--model", str(ckpt)) as (port, _):
        body = {
            "model": str(ckpt),
            "messages": [{"role": "user", "content": "Answer with a row of sevens."}],
            "max_tokens": 16,
            "temperature": 0,
        }
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=60)
        assert reply.status_code == 200, reply.text
        text = reply.json()["choices"][0]["message"]["content"]
        assert text.count("7") >= len(text.strip()) // 2, text  # it learned to answer in sevens


@pytest.mark.slow
@pytest.mark.full  # ~100 s; in CI the veRL backend trains through the real driver in
# tests/forge/test_driver.py (collective sync) and matches the torch backend in
# tests/actors/test_verl_trainer.py
@pytest.mark.timeout(900)
@pytest.mark.skipif(bool(VERL_MISSING), reason=VERL_MISSING)
def test_quickstart_learns_with_the_verl_backend(tmp_path: Path) -> None:
    """The quickstart, shortened to 8 steps, with trainer.backend=verl: veRL's FSDP2 actor on 2
    ranks (gloo) trains, and its weights reach the Policy (the episodes' versions rise). A step
    whose groups all scored alike has nothing to learn from and publishes no new version."""
    config = ROOT / "examples" / "quickstart.yaml"
    args = ["trainer.backend=verl", "steps=8", "checkpoint_every=0", f"runs_dir={tmp_path}"]
    r = subprocess.run(
        [*FORGE, "run", str(config), *args],
        capture_output=True,
        text=True,
        timeout=800,
        env=_env(),
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run_dir = tmp_path / "quickstart"
    steps = _read_jsonl(run_dir / "metrics.jsonl")
    rewards = [s["reward_mean"] for s in steps]
    print(f"quickstart (verl backend): rewards per step {[round(x, 3) for x in rewards]}")
    assert len(steps) == 8
    updated = sum(int(s["updated"]) for s in steps)
    assert steps[-1]["policy_version"] == updated >= 5, steps
    assert sum(rewards[-2:]) / 2 >= rewards[0] + 0.15, rewards  # measured: 0.000 -> 0.612 at step 8
    episodes = _read_jsonl(run_dir / "episodes" / "episodes.jsonl")
    versions = [max(t["policy_version"] for t in e["turns"]) for e in episodes]
    assert versions == sorted(versions) and versions[-1] == steps[-2]["policy_version"]
    ckpt = run_dir / "checkpoints" / "step_8"
    assert (ckpt / "verl").is_dir() and (ckpt / "model.safetensors").exists()

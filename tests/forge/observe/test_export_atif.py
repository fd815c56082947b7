"""forge export --format atif: a run's episodes as Harbor's ATIF, checked with harbor's own
Trajectory model (installed by scripts/setup.sh)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from forge.observe.export_atif import trajectory, validator
from tests.forge.observe.view.test_view import _episode, record_run
from tests.forge.test_cli import FORGE


def test_an_episode_keeps_its_tokens_calls_and_results() -> None:
    ep = {"group_id": "g", **_episode("e1", 3, 1.0, "gita").to_dict()}
    doc = trajectory(ep, "tiny")
    user, call, answer = doc["steps"]
    assert (user["source"], user["message"]) == ("user", "Reply with the word in tag.txt.")
    assert call["tool_calls"][0]["arguments"] == {"command": "cat tag.txt"}
    assert call["observation"]["results"][0]["content"] == "stdout:\ngita"
    first = ep["turns"][0]
    assert call["metrics"]["prompt_token_ids"] == first["prompt_ids"]
    assert call["metrics"]["logprobs"] == first["logprobs"]
    assert answer["message"] == "gita" and "observation" not in answer
    assert doc["extra"]["reward"] == 1.0 and doc["final_metrics"]["total_steps"] == 3
    model = validator()
    if model is None:
        pytest.skip("harbor is not installed (scripts/setup.sh installs it)")
    parsed = model.model_validate(doc)
    assert parsed.steps[1].metrics.completion_token_ids == first["completion_ids"]


def test_forge_export_writes_every_episode_validated(tmp_path: Path) -> None:
    if validator() is None:
        pytest.skip("harbor is not installed (scripts/setup.sh installs it)")
    run = tmp_path / "run"
    n = record_run(run)["episodes"]
    r = subprocess.run([*FORGE, "export", str(run)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f"{n} episodes as ATIF" in r.stdout and "validated with harbor's" in r.stdout
    docs = [json.loads(p.read_text()) for p in sorted((run / "atif").glob("*.json"))]
    assert len(docs) == n and {d["schema_version"] for d in docs} == {"ATIF-v1.6"}

"""``tiny-claw``, the main job's student (forge/train/student.py): made on first use from the
oracle's episodes through the react harness, kept under a digest of its recipe, found again without
being made twice, and named by its path in the config a command runs. A small one here (three
tasks, a few SFT steps) on the test session's Ray cluster; the full one is what the main job
makes (README)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from forge import cli
from forge.config import load_config
from forge.train import student

pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[3]
TASKS = ["read_word-000", "read_word-001", "read_word-002"]


def test_the_cache_name_follows_the_recipe(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FORGE_CACHE", str(tmp_path))
    first = student.checkpoint_dir()
    assert first.parent == tmp_path and first.name.startswith("tiny-claw-")
    monkeypatch.setitem(student.RECIPE, "sft_steps", 401)
    assert student.checkpoint_dir() != first  # a changed recipe never reuses a stale one
    assert student.model_path("tiny") == "tiny"  # other names pass through


def test_made_once_then_found(
    ray_cluster: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from serve.chat_template import COMPACT_TEMPLATE
    from serve.models import load_model

    monkeypatch.setenv("FORGE_CACHE", str(tmp_path / "cache"))
    like = load_config(ROOT / "examples" / "claw.yaml", [f"sandbox.root={tmp_path / 'sb'}"])
    out = student.checkpoint_dir()
    student.build(out, like=like, steps=3, task_ids=TASKS)
    _, tok = load_model(str(out))
    assert tok.chat_template == COMPACT_TEMPLATE
    curve = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in curve] == [1, 2, 3]
    lrs = [r["lr"] for r in curve]  # a 1-step warm-up at 3 steps, then cosine decay
    assert lrs[0] == student.RECIPE["sft_lr"] > lrs[1] > lrs[2] > 0, lrs
    teacher = json.loads((out / "collect.json").read_text())
    assert teacher["kept"] == len(TASKS) and teacher["pass@1"] == 1.0, teacher
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # no work folder left

    made = (out / "model.safetensors").stat().st_mtime_ns
    resolved = student.resolve(like)  # found: not made again
    assert resolved.policy.engine.model == str(out)
    assert (out / "model.safetensors").stat().st_mtime_ns == made
    assert resolved.model_dump(exclude={"policy"}) == like.model_dump(exclude={"policy"})

    seen: dict[str, str] = {}  # `forge sft --model tiny-claw` trains the checkpoint itself
    monkeypatch.setattr(
        "forge.train.sft.train", lambda folder, model, o, **kw: seen.update(model=model)
    )
    assert cli.main(["sft", str(tmp_path), "--model", "tiny-claw", "--out", str(tmp_path)]) == 0
    assert seen == {"model": str(out)}

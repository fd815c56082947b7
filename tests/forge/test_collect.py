"""``forge collect`` on the test session's Ray cluster: teacher episodes through the react harness
in bubblewrap sandboxes and the recording proxy, from the scripted oracle and from a teacher at
an OpenAI-compatible URL (this project's own server, playing a task's reference solution);
then ``forge sft`` on what was kept."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from forge.collect import collect, keep, teacher_engine
from forge.config import load_config

pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[2]
TASKS = ["read_word-192", "read_word-193", "count_lines-012"]


def config(tmp: Path, *extra: str) -> Any:
    return load_config(
        ROOT / "examples" / "oracle.yaml",
        [
            f"runs_dir={tmp}",
            f"sandbox.root={tmp / 'sandboxes'}",
            "rollout.min_pods=2",
            "rollout.max_pods=3",
            *extra,
        ],
    )


def test_teacher_names_and_what_is_kept() -> None:
    cfg = load_config(ROOT / "examples" / "oracle.yaml", [])
    assert teacher_engine(cfg, "oracle", None)["name"] == "scripted"
    remote = teacher_engine(cfg, "http://127.0.0.1:9/v1", "big")
    assert remote == {
        "name": "remote",
        "model": "tiny",
        "base_url": "http://127.0.0.1:9/v1",
        "served_model": "big",
    }
    claw = load_config(ROOT / "examples" / "claw.yaml", [])
    own = teacher_engine(claw, "self", None)  # the student's own engine, seed and all
    assert own == claw.policy.engine.model_dump() and own["name"] == "torch"
    with pytest.raises(ValueError, match="--teacher"):
        teacher_engine(cfg, "gpt-teacher", None)
    eps = [
        {"task_id": "a", "reward": 1.0, "turns": [{"text": "x"}]},
        {"task_id": "a", "reward": 1.0, "turns": [{"text": "x"}]},
        {"task_id": "a", "reward": 1.0, "turns": [{"text": "y"}]},
        {"task_id": "b", "reward": 0.5, "turns": [{"text": "x"}]},
        {"task_id": "c", "reward": 1.0, "turns": []},
    ]
    kept, dropped = keep(eps, 1.0)
    assert [e["turns"][0]["text"] for e in kept] == ["x", "y"]
    assert dropped == {"below_min_reward": 1, "duplicate": 1, "no_turns": 1}


def test_the_sft_schedule_warms_up_then_decays() -> None:
    from forge.train.sft import lr_at

    lrs = [lr_at(step, 100, 1e-3) for step in range(1, 101)]
    assert lrs[:5] == pytest.approx([2e-4, 4e-4, 6e-4, 8e-4, 1e-3])  # 5% warm-up
    assert all(a > b for a, b in pairwise(lrs[4:]))  # then down
    assert 0 < lrs[-1] < 1e-5  # toward 0, never 0: the last update still counts


@pytest.mark.full  # ~45 s: -m full; in CI collect then SFT make the student in
# tests/forge/train/test_student.py, and forge sft's schedule is checked above
def test_oracle_episodes_then_sft(ray_cluster: Any, tmp_path: Path) -> None:
    from forge.train.sft import load_set, student_turns, train
    from serve.models import build_byte_tokenizer, load_model

    out = tmp_path / "teacher"
    out.mkdir()
    cfg = config(tmp_path, f"task_ids={json.dumps(TASKS)}")
    summary = collect(cfg, "oracle", "claw-gen/test", 2, out)
    assert summary["played"] == 6 and summary["pass@1"] == 1.0, summary
    # the oracle plays each task the same way twice: one of each is kept
    assert summary["kept"] == 3 and summary["dropped"]["duplicate"] == 3, summary
    records = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    assert sorted(r["task_id"] for r in records) == sorted(TASKS)
    tok = build_byte_tokenizer()
    for record in records:
        first = record["turns"][0]["request"]
        assert [t["function"]["name"] for t in first["tools"]] == [
            "shell",
            "read_file",
            "write_file",
            "finish",
        ]
        # rendered again for the same student, every turn is token for token what was served
        for mine, served in zip(student_turns(record, tok), record["turns"], strict=True):
            assert mine.prompt_ids == served["prompt_ids"]
            assert mine.completion_ids == served["completion_ids"]
    data = load_set(out, tok, share=0.5)
    assert len(data.train) + len(data.heldout) == 3
    for ep in data.train + data.heldout:
        masked = sum(sum(s.loss_mask) for s in ep.segments)
        # one segment per episode (the history came back unchanged); only the replies trained
        assert len(ep.segments) == 1 and 0 < masked < len(ep.segments[0].tokens) / 4, ep.task_id

    ckpt = tmp_path / "student"
    # one episode per update (an update costs its tokens: ~2,000 an episode, most of this
    # test's time): the curve falls as it does on all three, to 0.69 of its start
    last = train(out, "tiny", ckpt, steps=8, batch=1, eval_every=4)
    curve = [json.loads(x) for x in (ckpt / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in curve] == list(range(1, 9))
    assert curve[-1]["loss"] < 0.7 * curve[0]["loss"], [r["loss"] for r in curve]
    assert last == curve[-1]
    model, _ = load_model(str(ckpt))  # a policy.engine.model for run, eval and serve
    assert sum(p.numel() for p in model.parameters()) > 1e6
    state = json.loads((ckpt / "trainer_state.json").read_text())
    assert state["step"] == 8


@pytest.mark.full  # ~20 s: -m full; in CI the oracle as teacher makes the student (test_student.py)
def test_the_student_as_its_own_teacher(ray_cluster: Any, tmp_path: Path) -> None:
    """``--teacher self``: the config's own policy (here the untrained ``tiny``) plays; what it
    sampled is recorded with its own logprobs, and only attempts the verifier passes are kept."""
    out = tmp_path / "self"
    out.mkdir()
    cfg = config(tmp_path, f"task_ids={json.dumps(TASKS[:2])}", "policy.engine.name=torch")
    summary = collect(cfg, "self", "claw-gen/test", 1, out)
    played = [
        json.loads(x) for x in (out / "play" / "react" / "episodes.jsonl").read_text().splitlines()
    ]
    assert summary["teacher"] == "self" and summary["played"] == 2 == len(played), summary
    passed = sum(ep["reward"] >= 1.0 for ep in played)
    assert summary["kept"] == passed and summary["dropped"]["below_min_reward"] == 2 - passed
    sampled = [lp for ep in played for t in ep["turns"] for lp in t["logprobs"]]
    assert sampled and any(lp < 0 for lp in sampled)  # the student's sampling, not a script's


@pytest.mark.full  # ~20 s: -m full; in CI the oracle as teacher makes the student (test_student.py)
def test_a_teacher_at_a_url(ray_cluster: Any, tmp_path: Path) -> None:
    """The teacher is this project's own server with the scripted engine playing one task's
    reference solution: the episode it leads, through the real harness, scores 1."""
    from forge.config import EngineConfig, PolicyConfig
    from serve.policy import deploy_policy
    from serve.server import BackgroundServer, make_app
    from tasks.loader import load_suite

    task = next(t for t in load_suite("claw-gen/test/read_word") if t.id == TASKS[0])
    handle = deploy_policy(
        PolicyConfig(engine=EngineConfig(name="scripted")), app_name="forge-teacher"
    )
    out = tmp_path / "teacher"
    out.mkdir()
    try:
        app = make_app(handle, "teacher", None, task.reference_script())
        with BackgroundServer(app) as url:
            cfg = config(tmp_path, f"task_ids=[{TASKS[0]}]")
            summary = collect(cfg, f"{url}/v1", "claw-gen/test", 1, out, model="teacher")
    finally:
        from ray import serve

        serve.delete("forge-teacher")
    assert summary["kept"] == 1, summary
    record = json.loads((out / "episodes.jsonl").read_text())
    calls = [c for t in record["turns"] for c in t["tool_calls"]]
    assert calls[0]["name"] == "shell" and "cat memo.txt" in calls[0]["arguments"]
    assert record["final_answer"] == task.answer and record["reward"] == 1.0

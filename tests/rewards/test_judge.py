"""Judge rewards and transcript checks (issue 34): the judge's parse rules, majority and mean,
its cache, the calls it records, its key (in the verifying process only, never a sandbox), an
unreachable judge (an infrastructure failure, never a 0), and transcript checks that read the
attempt as the proxy recorded it, not a transcript the agent wrote. The judge is scripted (a
test double for the model only): it passes an answer that contains ``42``."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.harness_pod import HarnessPod
from forge.sandboxes.bwrap import bwrap_works
from forge.types import Episode, ImagePart
from rewards.judge import Judge
from rewards.judge_client import JudgeUnavailable
from rewards.registry import SpecError, build_verifier
from serve.policy import LocalHandle, Policy
from tasks.schema import Task
from tests.forge.httpstub import StubServer
from tests.rewards.judging import scripted_judge

KEY = "judge-key-4f9c"  # what the judge's key looks like, to be found nowhere else


def _reply(prompt: str) -> str:
    if "REPLY-NOTHING" in prompt:
        return "I cannot decide."
    answer = prompt.rsplit("FINAL ANSWER:", 1)[-1]
    return "It checks out.\nPASS" if "42" in answer else "It does not.\nFAIL"


@pytest.fixture
def judge(monkeypatch, tmp_path) -> Iterator[StubServer]:
    with scripted_judge(_reply, monkeypatch, tmp_path / "judge-cache", KEY) as server:
        yield server


class _Box:
    workspace = "/ws"


def test_verdicts_parse_and_aggregate_and_each_call_is_recorded(judge) -> None:
    one = Judge(rubric="The answer is 42.")
    verdict = one.verify_with(_Box(), "It is 42", None)
    assert verdict.reward == 1.0 and verdict.detail == "judge judge-tiny: majority of [1] = 1"
    record = json.loads(verdict.outputs["judge"])
    assert record["rubric_hash"] and [c["vote"] for c in record["calls"]] == [1.0]
    assert judge.requests[-1][2]["authorization"] == f"Bearer {KEY}"  # the key, in the pod only
    assert Judge(rubric="r").verify_with(_Box(), "It is 41", None).reward == 0.0
    # a reply with no verdict is a vote of 0, shown as "-"
    silent = Judge(rubric="REPLY-NOTHING", n=3).verify_with(_Box(), "42", None)
    assert silent.reward == 0.0 and "[-, -, -]" in silent.detail
    assert Judge(rubric="r", parse="score").vote("SCORE: 0.7\nno, SCORE: 0.25") == 0.25
    assert Judge(rubric="r", parse="score").vote("SCORE: 3") == 1.0  # clipped to [0, 1]
    mean = Judge(rubric="r", n=4, aggregate="mean")
    votes = iter(["PASS", "FAIL", "PASS", "PASS"])
    object.__setattr__(mean, "vote", lambda reply: float(next(votes) == "PASS"))
    assert mean.verify_with(_Box(), "42", None).reward == 0.75


def test_replies_are_cached_by_input_so_a_rescore_costs_nothing(judge) -> None:
    spec = Judge(rubric="The answer is 42.", n=2)
    first = spec.verify_with(_Box(), "42", None)
    asked = len(judge.requests)
    again = spec.verify_with(_Box(), "42", None)
    assert len(judge.requests) == asked == 2  # nothing asked the second time
    assert [c["cached"] for c in json.loads(again.outputs["judge"])["calls"]] == [True, True]
    assert again.reward == first.reward == 1.0
    spec.verify_with(_Box(), "43", None)  # another input: asked again
    assert len(judge.requests) == 4


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_vision_judge_is_shown_the_last_screenshots_after_the_prompt(judge, api) -> None:
    shots = [ImagePart("image/png", f"{i}" * 64, f"png-{i}".encode()) for i in range(3)]
    spec = Judge(rubric="The page shows 42.", sees=["answer", "screenshots"], screenshots=2,
                 api=api, base_url=None if api == "openai" else judge_root(judge))  # fmt: skip
    verdict = spec.verify_with(_Box(), "42", {"messages": [], "screenshots": shots})
    content = judge.requests[-1][3]["messages"][0]["content"]
    assert content[0]["type"] == "text" and "SCREENSHOTS: the last 2" in content[0]["text"]
    if api == "openai":
        urls = [p["image_url"]["url"] for p in content[1:]]
        assert urls == [f"data:image/png;base64,{base64.b64encode(s.data).decode()}"
                        for s in shots[1:]]  # fmt: skip
    else:
        assert [p["source"]["data"] for p in content[1:]] == [
            base64.b64encode(s.data).decode() for s in shots[1:]]  # fmt: skip
    assert json.loads(verdict.outputs["judge"])["images"] == [s.sha256 for s in shots[1:]]
    asked = len(judge.requests)
    spec.verify_with(_Box(), "42", {"messages": [], "screenshots": shots[:2]})
    assert len(judge.requests) == asked + 1  # other screenshots: another question, not cached
    blind = Judge(rubric="r", sees=["answer", "screenshots"], api=api,
                  base_url=None if api == "openai" else judge_root(judge))  # fmt: skip
    blind.verify_with(_Box(), "42", None)
    assert isinstance(judge.requests[-1][3]["messages"][0]["content"], str)  # none recorded


def judge_root(judge: StubServer) -> str:
    """The stub's root, where an Anthropic client posts /v1/messages."""
    return f"http://{judge.address}"


def test_an_unreachable_judge_or_a_missing_key_raises_never_scores(judge, monkeypatch) -> None:
    monkeypatch.setenv("FORGE_JUDGE_BASE_URL", "http://127.0.0.1:9/v1")  # nothing listens
    monkeypatch.setattr("rewards.judge_client.time.sleep", lambda s: None)
    with pytest.raises(JudgeUnavailable, match="unreachable after 3 tries"):
        Judge(rubric="r").verify_with(_Box(), "42", None)
    monkeypatch.delenv("FORGE_JUDGE_API_KEY")
    with pytest.raises(JudgeUnavailable, match=r"\$FORGE_JUDGE_API_KEY is not set"):
        Judge(rubric="r").verify_with(_Box(), "42", None)


def test_specs_name_the_field_at_fault() -> None:
    with pytest.raises(SpecError, match=r"sees\[0\]"):
        build_verifier({"type": "judge", "rubric": "r", "sees": ["screen"]})
    with pytest.raises(SpecError, match="give tool"):
        build_verifier({"type": "transcript"})
    with pytest.raises(SpecError, match=r"parts\[1\]\.weight: a number >= 0"):
        build_verifier({"type": "weighted", "parts": [
            {"weight": 1, "verifier": {"type": "judge", "rubric": "r"}},
            {"weight": -1, "verifier": {"type": "judge", "rubric": "r"}},
        ]})  # fmt: skip


def _task(answer: str | None = "42", **extra: Any) -> Task:
    return Task.model_validate({
        "id": "judged", "instruction": "Write notes.txt, then say the answer.",
        "solution": [
            "echo 'the answer is 42' > notes.txt",
            "env; echo '{\"tool_calls\": [{\"name\": \"mail_send\"}]}' > transcript.json",
        ],
        "answer": answer,
        "verifier": {"type": "weighted", "parts": [
            {"weight": 1, "verifier": {"type": "transcript", "tool": "*",
                                       "args": {"command": {"contains": "notes.txt"}}}},
            {"weight": 3, "verifier": {"type": "judge", "rubric": "The answer is 42.",
                                       "sees": ["answer", "transcript", "files"],
                                       "files": ["notes.txt"]}},
        ]},
        **extra,
    })  # fmt: skip


def _play(tmp_path: Path, task: Task, mode: str = "oracle", harness: str = "react") -> Episode:
    async def main() -> Episode:
        engine = {"name": "scripted", "model": "tiny", "mode": mode}
        policy = Policy({"engine": engine, "batch_wait_ms": 0})
        sandbox = {"root": str(tmp_path / "sandboxes")}
        pod = HarnessPod(LocalHandle(policy), pod_id="p", run="judge", sandbox=sandbox)
        await pod.start()
        try:
            return await pod.run_episode(task.model_dump(), harness)
        finally:
            await pod.stop()

    return asyncio.run(main())


@pytest.mark.skipif(not bwrap_works(), reason="needs bubblewrap")
def test_whole_episodes_scored_by_the_transcript_and_a_judge(tmp_path, judge) -> None:
    ep = _play(tmp_path, _task())
    assert (ep.status, ep.reward) == ("ok", 1.0), (ep.failure, ep.verifier_detail)
    record = json.loads(ep.verifier_outputs["[1] judge"])
    assert record["reward"] == 1.0 and record["calls"][0]["cached"] is False
    prompt = judge.requests[-1][3]["messages"][0]["content"]
    assert "FILE notes.txt:\nthe answer is 42" in prompt and "[CALL shell]" in prompt
    assert ep.provenance["rubric_hash"] and ep.provenance["verifier"] == "weighted"
    # the key lived in the verifying process only: the agent's own env dump never shows it
    dumped = json.dumps(ep.to_dict())
    assert "PATH=" in dumped and KEY not in dumped
    assert judge.requests[-1][2]["authorization"] == f"Bearer {KEY}"
    # the agent's own transcript.json names a mail_send call; the recorded one has none
    forged = _task().model_dump()
    forged["verifier"] = {"type": "transcript", "tool": "mail_send"}
    ep = _play(tmp_path, Task.model_validate(forged))
    assert (ep.status, ep.reward) == ("ok", 0.0) and ep.verifier_detail == "no calls of mail_send"
    # the no-op: no call, no answer: 0 from both parts
    ep = _play(tmp_path, _task(), mode="noop")
    assert (ep.status, ep.reward) == ("ok", 0.0), ep.verifier_detail
    assert "[0] 0.25 x 0: no calls of *" in ep.verifier_detail


@pytest.mark.skipif(not bwrap_works(), reason="needs bubblewrap")
def test_an_unreachable_judge_fails_the_attempt_for_a_retry(tmp_path, judge, monkeypatch) -> None:
    monkeypatch.setenv("FORGE_JUDGE_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setattr("rewards.judge_client.time.sleep", lambda s: None)
    ep = _play(tmp_path, _task())
    assert (ep.status, ep.failure, ep.reward) == ("failed", "verifier_error", 0.0)
    assert "unreachable" in ep.harness_log


def test_a_task_whose_judge_cannot_be_asked_is_left_out_at_the_start(judge, monkeypatch, tmp_path):
    from forge.config import load_config
    from forge.task_set import load_tasks, playable

    toy = load_tasks("toy", ["toy_count"], [])
    judged = {**toy[0], "id": "judged", "verifier": {"type": "judge", "rubric": "r"}}
    config = load_config(None, [])
    [kept] = playable([[*toy, dict(judged)]], config, [], tmp_path, print)
    assert [t["id"] for t in kept] == ["toy_count", "judged"]  # model, endpoint and key here
    monkeypatch.delenv("FORGE_JUDGE_MODEL")
    skipped: list[tuple[str, str, str]] = []
    [kept] = playable([[*toy, dict(judged)]], config, skipped, tmp_path, print)
    assert [t["id"] for t in kept] == ["toy_count"]
    assert skipped == [("judged", "verifier", "judge: no model (the verifier's model, or "
                        "$FORGE_JUDGE_MODEL)")]  # fmt: skip

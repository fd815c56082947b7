"""What the policy caused is the policy's (issue 30 item 4), through whole episodes: a real
HarnessPod and its proxy in this process, a real Policy on the scripted model double, real
bubblewrap sandboxes, and the `command` harness (the built-in ReAct program as a third-party
agent, or a small agent program given inline)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

from actors.harness_pod import HarnessPod
from forge.config import load_config
from forge.sandboxes.bwrap import bwrap_works
from forge.types import Episode
from serve.policy import LocalHandle, Policy
from tasks.loader import load_suite
from tasks.schema import Task

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not bwrap_works(), reason="needs bubblewrap"),
]
ROOT = Path(__file__).resolve().parents[2]
REACT = load_config(ROOT / "examples" / "command-harness.yaml").harness_options

# A small agent that ignores its turn limit: CALLS chat calls (each after the first padded by
# PAD bytes of history), then on a refusal: `crash` (exit 1), `answer` (exit 0 with the error as
# its answer) or `write` (writes hello.txt, the task's answer, and exits 0).
AGENT = r"""
import json, os, sys, urllib.error, urllib.request
calls, on_refusal, pad = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
answer, history = "", [{"role": "user", "content": "hi"}]
for i in range(calls):
    body = {"model": os.environ["FORGE_MODEL"], "messages": history}
    req = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions", json.dumps(body).encode(),
        {"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
         "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            answer = json.load(r)["choices"][0]["message"]["content"] or "."
    except urllib.error.HTTPError as e:
        answer = f"error {e.code}: {e.read().decode()}"
        if on_refusal == "crash":
            sys.exit(1)
        if on_refusal == "write":
            open("hello.txt", "w").write("Hello, OpenForge!\n")
        break
    history += [{"role": "assistant", "content": answer}, {"role": "user", "content": "x" * pad}]
print(json.dumps({"final_answer": answer}))
"""


def agent(calls: int, on_refusal: str, pad: int = 0, model: str = "{model}") -> dict[str, Any]:
    return {
        "name": "inline-agent",
        "env": {
            "OPENAI_BASE_URL": "{base_url}",
            "OPENAI_API_KEY": "{api_key}",
            "FORGE_MODEL": model,
        },
        "command": ["python3", "-c", AGENT, str(calls), on_refusal, str(pad)],
        "answer": {"json_field": "final_answer"},
    }


def stalling(policy: Policy, stall_s: float, nth: int = 1) -> asyncio.Event:
    """The model double answers its ``nth`` request only after ``stall_s`` seconds, as a
    Policy does whose requests queue or wait out a weight update; or sooner once the event it
    returns is set (:func:`play` sets it when the attempt has ended: the pod's proxy, stopping,
    would otherwise wait out a stall no harness waits on any more)."""
    engine, seen, release = policy.engine, [0], asyncio.Event()
    generate = engine.generate

    async def slow(requests: list[Any]) -> list[Any]:
        seen[0] += 1
        if seen[0] == nth:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(release.wait(), stall_s)
        return await generate(requests)

    engine.generate = slow  # type: ignore[method-assign]
    return release


def play(
    tmp_path: Path,
    task: Task,
    options: dict[str, Any] | None = None,
    stall_s: float = 0.0,
    stall_nth: int = 1,
    proxy: dict[str, Any] | None = None,
    attempt_timeout_s: float | None = None,
) -> Episode:
    """One attempt of ``task`` through the `command` harness (the ReAct program unless
    ``options`` say otherwise), the scripted oracle behind a Policy in this process."""

    async def main() -> Episode:
        policy = Policy({"engine": {"name": "scripted", "model": "tiny"}, "batch_wait_ms": 0})
        release = stalling(policy, stall_s, stall_nth) if stall_s else asyncio.Event()
        pod = HarnessPod(
            LocalHandle(policy), pod_id="p", run="t", proxy=proxy,
            sandbox={"root": str(tmp_path / "sandboxes")},
        )  # fmt: skip
        await pod.start()
        try:
            return await pod.run_episode(
                task.model_dump(),
                "command",
                harness_options=options or REACT,
                attempt_timeout_s=attempt_timeout_s,
            )
        finally:
            release.set()  # the attempt is over: a stall still running ends now
            await pod.stop()

    return asyncio.run(main())


def smoke(task_id: str, **limits: Any) -> Task:
    task = next(t for t in load_suite("smoke") if t.id == task_id)
    return task.model_copy(update={"limits": task.limits.model_copy(update=limits)})


def outcome(ep: Episode) -> tuple[str, str | None, str | None, float]:
    return ep.status, ep.failure, ep.truncated, ep.reward


CLAW_LITE = ["contacts_csv_to_json", "dedupe_subscribers", "docs_index"]


@pytest.mark.parametrize("task_id", CLAW_LITE)
def test_a_model_command_that_kills_its_harness_is_the_policys(tmp_path, task_id) -> None:
    """The model's first command is `kill -9 $PPID` (its harness): was `harness_killed`, an
    infrastructure failure retried and never scored; now a real episode scored 0."""
    task = next(t for t in load_suite("claw-lite") if t.id == task_id)
    killer = task.model_copy(update={"solution": ["kill -9 $PPID"]})
    ep = play(tmp_path, killer)
    assert outcome(ep) == ("ok", None, "harness_killed_by_policy", 0.0), ep.harness_log[-2000:]
    assert len(ep.turns) == 1 and ep.harness_exit_code not in (0, None)


def test_the_oracle_still_scores_through_the_same_harness(tmp_path) -> None:
    task = next(t for t in load_suite("claw-lite") if t.id == CLAW_LITE[0])
    ep = play(tmp_path, task)
    assert outcome(ep) == ("ok", None, None, 1.0), ep.harness_log[-2000:]


@pytest.mark.parametrize("nth", [1, 2])
def test_time_waiting_on_the_policy_is_not_the_agents(tmp_path, nth) -> None:
    """The Policy holds an answer past the task's whole time limit (a queue, a weight update):
    was `timeout`, scored 0 (the second call; the first: `harness_hung`, retried); the agent's
    own time was short, so now it is verified."""
    task = smoke("hello_file", timeout_s=9)  # the agent's own time: ~3 s on a loaded machine
    ep = play(tmp_path, task, stall_s=12, stall_nth=nth, attempt_timeout_s=300)
    assert outcome(ep) == ("ok", None, None, 1.0), ep.harness_log[-2000:]
    assert ep.turns[nth - 1].latency_s >= 12 > task.limits.timeout_s


def test_a_policy_slower_than_the_attempt_allows_is_infrastructure(tmp_path) -> None:
    """Past the harness's wall-clock cap (what attempt_timeout_s leaves over) while its own
    time was left: `policy_stalled`, retried (was `timeout`, scored 0)."""
    task = smoke("hello_file", timeout_s=6)
    ep = play(tmp_path, task, stall_s=18, stall_nth=2, attempt_timeout_s=36 + 6)  # cap: 12 s
    assert outcome(ep)[:3] == ("failed", "policy_stalled", None), ep.harness_log[-2000:]


def test_the_harness_is_still_stopped_when_its_own_time_runs_out(tmp_path) -> None:
    task = smoke("hello_file", timeout_s=5).model_copy(update={"solution": ["sleep 600"]})
    ep = play(tmp_path, task, attempt_timeout_s=300)
    assert outcome(ep) == ("ok", None, "timeout", 0.0), ep.harness_log[-2000:]


def test_the_tasks_turn_limit_is_enforced_by_the_proxy(tmp_path) -> None:
    """An agent that ignores its turn limit of 2: its third call is refused (429) and the
    attempt ends as `turn_limit` (was: every call answered, the attempt verified)."""
    ep = play(tmp_path, smoke("hello_file", max_turns=2), agent(5, "crash"))
    assert outcome(ep) == ("ok", None, "turn_limit", 0.0), ep.harness_log[-2000:]
    assert len(ep.turns) == 2 and "429" in ep.harness_log


def test_a_refused_call_then_a_recovery_is_verified(tmp_path) -> None:
    """The proxy's call limit refuses the third call; the agent then does the task and exits
    0: the verifier scores it (was: forced to `turn_limit`, 0)."""
    options = agent(3, "write")
    ep = play(tmp_path, smoke("hello_file"), options, proxy={"max_turns_per_attempt": 2})
    assert outcome(ep) == ("ok", None, None, 1.0), ep.harness_log[-2000:]


def test_a_history_grown_past_the_proxys_limit_is_the_policys(tmp_path) -> None:
    """The second request carries 5,000 bytes more history than the proxy's 4,096: was
    `proxy_rejected` (retried), now `history_too_large`, scored 0."""
    options = agent(3, "crash", pad=5000)
    ep = play(tmp_path, smoke("hello_file"), options, proxy={"max_body_bytes": 4096})
    assert outcome(ep) == ("ok", None, "history_too_large", 0.0), ep.harness_log[-2000:]
    assert len(ep.turns) == 1


def test_every_call_refused_then_exit_0_is_proxy_rejected(tmp_path) -> None:
    """A wrong model name: every call refused, and the agent prints the error as its answer
    and exits 0. Was a wrong answer (reward 0, no failure, 0 turns); now `proxy_rejected`."""
    ep = play(tmp_path, smoke("hello_file"), agent(3, "answer", model="no-such-model"))
    assert outcome(ep)[:3] == ("failed", "proxy_rejected", None), ep.harness_log[-2000:]
    assert ep.turns == [] and "unknown model" in ep.harness_log

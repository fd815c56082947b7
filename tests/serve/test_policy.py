"""The Policy in process (no Ray): prompt/completion ids, tool calls, batching, atomic swaps."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import torch

from forge.config import PolicyConfig
from forge.types import ChatRequest, Completion, Message, SamplingParams, Tool
from serve.chat_template import render
from serve.engines.base import EngineOutput, EngineRequest
from serve.engines.torch_engine import TorchEngine
from serve.policy import LocalHandle, Policy

SHELL = Tool(
    name="shell",
    description="Run a shell command.",
    parameters={"type": "object", "properties": {"command": {"type": "string"}}},
)
SCRIPT = {"steps": ["echo hi > a.txt"], "answer": "wrote a.txt"}
CALL_TEXT = 'Sure.\n<tool_call>\n{"name": "shell", "arguments": {"command": "ls"}}\n</tool_call>'


def scripted_policy(**config: Any) -> Policy:
    return Policy({"engine": {"name": "scripted", "model": "tiny"}, **config})


def chat(
    text: str = "Write a.txt.",
    tools: list[Tool] | None = None,
    script: dict[str, Any] | None = SCRIPT,
    **sampling: Any,
) -> ChatRequest:
    return ChatRequest(
        messages=[Message("system", "You are terse."), Message("user", text)],
        tools=list(tools or []),
        sampling=SamplingParams(**sampling),
        script=script,
    )


class FixedTextEngine:
    """An engine double that always 'samples' one text, to test the Policy's parsing alone."""

    def __init__(self, tokenizer: Any, text: str) -> None:
        self.tokenizer = tokenizer
        self.text = text

    async def generate(self, requests: list[EngineRequest]) -> list[EngineOutput]:
        ids = [*self.tokenizer(self.text, add_special_tokens=False).input_ids]
        ids.append(self.tokenizer.eos_token_id)
        return [self._cut(ids, r.sampling.max_tokens) for r in requests]

    @staticmethod
    def _cut(ids: list[int], limit: int) -> EngineOutput:
        if len(ids) > limit:
            return EngineOutput(ids[:limit], [-0.25] * limit, "length")
        return EngineOutput(list(ids), [-0.25] * len(ids), "stop")

    def load_weights(self, state_dict: dict[str, Any]) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {}


def test_generate_returns_exact_prompt_and_completion_ids() -> None:
    policy = scripted_policy()
    tok = policy.tokenizer
    request = chat(tools=[SHELL], max_tokens=256)
    out = asyncio.run(policy.generate(request))
    assert isinstance(out, Completion)
    expected_prompt = tok(render(request.messages, [SHELL]), add_special_tokens=False).input_ids
    assert out.prompt_ids == expected_prompt
    assert out.prompt_ids == policy.tokenize_prompt(request)
    assert tok.decode(out.completion_ids, skip_special_tokens=True) == out.text
    assert out.completion_ids[-1] == tok.eos_token_id
    assert len(out.logprobs) == len(out.completion_ids)
    assert out.policy_version == 0
    # The scripted oracle calls the shell tool; the Policy parses it.
    [call] = out.tool_calls
    assert call.name == "shell"
    assert json.loads(call.arguments) == {"command": "echo hi > a.txt"}
    assert out.content == ""
    assert out.finish_reason == "tool_calls"


def test_tool_calls_parsed_only_when_tools_are_offered() -> None:
    policy = scripted_policy()
    policy.engine = FixedTextEngine(policy.tokenizer, CALL_TEXT)

    async def both() -> tuple[Completion, Completion]:
        with_tools = await policy.generate(chat(tools=[SHELL], max_tokens=64))
        without = await policy.generate(chat(tools=[], max_tokens=64))
        return with_tools, without

    with_tools, without = asyncio.run(both())
    assert with_tools.text == without.text == CALL_TEXT
    assert [c.name for c in with_tools.tool_calls] == ["shell"]
    assert with_tools.content == "Sure."
    assert with_tools.finish_reason == "tool_calls"
    assert without.tool_calls == []
    assert without.content == CALL_TEXT
    assert without.finish_reason == "stop"


def test_length_finish_is_kept_even_with_a_call_in_the_text() -> None:
    policy = scripted_policy()
    policy.engine = FixedTextEngine(policy.tokenizer, CALL_TEXT)
    out = asyncio.run(policy.generate(chat(tools=[SHELL], max_tokens=4)))
    assert out.finish_reason == "length"
    assert len(out.completion_ids) == 4


def test_default_max_tokens_applies_when_the_request_says_zero() -> None:
    policy = scripted_policy(default_max_tokens=3)
    out = asyncio.run(policy.generate(chat(script=None, max_tokens=0)))
    assert len(out.completion_ids) == 3
    assert out.finish_reason == "length"


def test_concurrent_requests_are_batched_through_a_local_handle() -> None:
    policy = scripted_policy(max_batch_size=3, batch_wait_ms=50)
    handle = LocalHandle(policy)

    async def many() -> list[Completion]:
        futures = [handle.generate.remote(chat(f"task {i}", max_tokens=64)) for i in range(8)]
        return list(await asyncio.gather(*futures))

    outs = asyncio.run(many())
    assert len(outs) == 8
    # Each answer belongs to its own request (batching does not shuffle them).
    for i, out in enumerate(outs):
        assert policy.tokenizer.decode(out.prompt_ids).count(f"task {i}") == 1
    assert policy.stats["requests"] == 8
    assert 3 <= policy.stats["batches"] < 8
    assert policy.stats["completion_tokens"] == sum(len(o.completion_ids) for o in outs)

    async def stats() -> dict[str, Any]:
        return await handle.get_stats.remote()

    assert asyncio.run(stats())["version"] == 0


# --- atomic weight swaps ------------------------------------------------------------------------

PROMPTS = [f"Question {i}: {'why ' * (i % 4)}is the sky blue?" for i in range(8)]
MAX_TOKENS = 8


def perturbed(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    out = {k: v + 0.05 * torch.randn(v.shape, generator=gen) for k, v in state.items()}
    if "lm_head.weight" in out and "model.embed_tokens.weight" in out:  # tied in the tiny model
        out["lm_head.weight"] = out["model.embed_tokens.weight"].clone()
    return out


def greedy_ids(engine: TorchEngine, prompts: list[list[int]]) -> list[list[int]]:
    return [
        engine.generate_sync(
            [EngineRequest(p, SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS))]
        )[0].completion_ids
        for p in prompts
    ]


def test_weight_swap_is_atomic_per_completion() -> None:
    policy = Policy(
        {"engine": {"name": "torch", "model": "tiny"}, "max_batch_size": 4, "batch_wait_ms": 5}
    )
    old = {k: v.clone() for k, v in policy.engine.state_dict().items()}
    new = perturbed(old)
    requests = [chat(p, script=None, temperature=0.0, max_tokens=MAX_TOKENS) for p in PROMPTS]
    prompt_ids = [policy.tokenize_prompt(r) for r in requests]

    # The greedy answers under each version, from separate engines, one prompt at a time.
    reference = TorchEngine(model="tiny")
    expected_v0 = greedy_ids(reference, prompt_ids)
    reference.load_weights(new)
    expected_v1 = greedy_ids(reference, prompt_ids)
    assert all(a != b for a, b in zip(expected_v0, expected_v1, strict=True)), (
        "the perturbation must change every answer for the test to tell versions apart"
    )

    first_batch_started = asyncio.Event()
    inner = policy.engine.generate

    async def watched(batch: list[EngineRequest]) -> list[EngineOutput]:
        first_batch_started.set()
        return await inner(batch)

    policy.engine.generate = watched  # type: ignore[method-assign]

    async def scenario() -> tuple[list[Completion], list[Completion], Completion]:
        # Wave A is running when the swap is asked for; wave B is queued around it.
        wave_a = [asyncio.ensure_future(policy.generate(r)) for r in requests[:4]]
        await first_batch_started.wait()
        wave_b = [asyncio.ensure_future(policy.generate(r)) for r in requests[4:6]]
        swap = asyncio.ensure_future(policy.update_weights(new, 1))
        wave_b += [asyncio.ensure_future(policy.generate(r)) for r in requests[6:]]
        await swap
        after = await policy.generate(requests[0])
        return list(await asyncio.gather(*wave_a)), list(await asyncio.gather(*wave_b)), after

    wave_a, wave_b, after = asyncio.run(scenario())
    outs = wave_a + wave_b
    for i, out in enumerate(outs):
        assert out.prompt_ids == prompt_ids[i]
        expected = {0: expected_v0, 1: expected_v1}[out.policy_version][i]
        assert out.completion_ids == expected, f"request {i} (version {out.policy_version})"
    # Wave A was already running on the old weights when the swap was asked for.
    assert [o.policy_version for o in wave_a] == [0] * 4
    # Requests after the swap run on the new weights and say so.
    assert after.policy_version == 1
    assert after.completion_ids == expected_v1[0]
    assert policy.get_version() == 1
    assert policy.get_stats()["version"] == 1


def test_update_weights_through_a_local_handle_returns_seconds() -> None:
    policy = scripted_policy()
    handle = LocalHandle(policy)

    async def swap() -> tuple[float, int, Completion]:
        took = await handle.update_weights.remote({}, 7)
        version = await handle.get_version.remote()
        out = await handle.generate.remote(chat(max_tokens=32))
        return took, version, out

    took, version, out = asyncio.run(swap())
    assert isinstance(took, float)
    assert took >= 0.0
    assert version == 7
    assert out.policy_version == 7


@pytest.mark.parametrize(
    "bad", [{"engine": {"name": "sglang"}}, {"max_batch_size": 0}, {"engine": {"inflight": "x"}}]
)
def test_invalid_config_is_rejected(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Policy(bad)


def test_vllm_without_its_environment_names_the_fix(monkeypatch, tmp_path) -> None:
    from serve.policy import policy_app

    monkeypatch.setenv("FORGE_VLLM_PYTHON", str(tmp_path / "missing" / "python"))
    with pytest.raises(RuntimeError, match=r"scripts/setup_vllm\.sh"):
        policy_app(PolicyConfig(engine={"name": "vllm"}))


def test_unparseable_tool_calls_stay_text_and_are_counted() -> None:
    policy = scripted_policy()
    broken = '<tool_call>\n{"name": "shell", "arguments": {"command": "ls"\n</tool_call>'
    policy.engine = FixedTextEngine(policy.tokenizer, f"{CALL_TEXT}\n{broken}")
    out = asyncio.run(policy.generate(chat(tools=[SHELL], max_tokens=256)))
    assert [c.name for c in out.tool_calls] == ["shell"]
    assert out.invalid_tool_calls == 1
    assert broken in out.content
    plain = asyncio.run(policy.generate(chat(tools=[], max_tokens=256)))
    assert plain.invalid_tool_calls == 0  # no tools offered: the text is only text

"""The torch engine on the tiny model: batching, sampling, stopping, logprobs, weight swaps."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch

from forge.types import SamplingParams
from serve.engines.base import ContextLengthError, EngineOutput, EngineRequest
from serve.engines.torch_engine import TorchEngine

PROMPTS = [
    "hi",
    "<|im_start|>user\nHello there, how are you today?<|im_end|>\n<|im_start|>assistant\n",
    "abc",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nList the "
    "files in the current directory, please.<|im_end|>\n<|im_start|>assistant\n",
]


@pytest.fixture(scope="module")
def engine() -> TorchEngine:
    return TorchEngine(model="tiny", seed=0, max_context=512)


def ids_of(engine: TorchEngine, text: str) -> list[int]:
    return engine.tokenizer(text, add_special_tokens=False).input_ids


def req(prompt: list[int], **sampling: Any) -> EngineRequest:
    return EngineRequest(prompt, SamplingParams(**sampling))


def run(engine: TorchEngine, requests: list[EngineRequest]) -> list[EngineOutput]:
    return asyncio.run(engine.generate(requests))


def recompute_logprobs(
    engine: TorchEngine, prompt: list[int], completion: list[int], temperature: float = 0.0
) -> list[float]:
    """The log-probability of each completion token under the model's logits divided by
    ``temperature`` (raw when greedy), from one plain forward pass."""
    full = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = engine.model(input_ids=full).logits[0].float()
    if temperature > 0:
        logits = logits / temperature
    logp = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    return logp.gather(1, torch.tensor(completion).unsqueeze(1)).squeeze(1).tolist()


TIED = ("model.embed_tokens.weight", "lm_head.weight")  # the tiny model ties these


def perturb(state: dict[str, torch.Tensor], scale: float = 0.05) -> dict[str, torch.Tensor]:
    """Seeded noise on every weight, the same noise on both names of the tied embedding."""
    gen = torch.Generator().manual_seed(0)
    out = {k: v + scale * torch.randn(v.shape, generator=gen) for k, v in state.items()}
    if all(k in out for k in TIED):
        out[TIED[1]] = out[TIED[0]].clone()
    return out


def test_batch_of_mixed_lengths_matches_each_prompt_alone(engine: TorchEngine) -> None:
    prompts = [ids_of(engine, p) for p in PROMPTS]
    assert len({len(p) for p in prompts}) == len(prompts)
    batch = run(engine, [req(p, temperature=0.0, max_tokens=12) for p in prompts])
    assert len(batch) == len(prompts)
    for p, out in zip(prompts, batch, strict=True):
        [alone] = run(engine, [req(p, temperature=0.0, max_tokens=12)])
        assert out.completion_ids == alone.completion_ids
        assert out.finish_reason == alone.finish_reason
        assert torch.allclose(torch.tensor(out.logprobs), torch.tensor(alone.logprobs), atol=1e-4)


def test_greedy_is_the_argmax_of_the_model(engine: TorchEngine) -> None:
    prompt = ids_of(engine, PROMPTS[1])
    [out] = run(engine, [req(prompt, temperature=0.0, max_tokens=6)])
    seq = list(prompt)
    for tok in out.completion_ids:
        with torch.no_grad():
            logits = engine.model(input_ids=torch.tensor([seq])).logits[0, -1]
        assert tok == int(torch.argmax(logits))
        seq.append(tok)


def test_seeded_sampling_is_reproducible_and_seeds_differ(engine: TorchEngine) -> None:
    prompt = ids_of(engine, PROMPTS[0])
    other = ids_of(engine, PROMPTS[3])
    first = run(engine, [req(prompt, temperature=1.0, max_tokens=24, seed=s) for s in (7, 8)])
    # Same seed again, in a different batch (other row, other padding): same tokens.
    again = run(
        engine,
        [
            req(other, temperature=1.0, max_tokens=5, seed=1),
            req(prompt, temperature=1.0, max_tokens=24, seed=7),
        ],
    )
    assert again[1].completion_ids == first[0].completion_ids
    assert first[0].completion_ids != first[1].completion_ids
    # Two rows with one seed in one batch are independent streams of the same draws.
    twins = run(engine, [req(prompt, temperature=1.0, max_tokens=24, seed=7)] * 2)
    assert twins[0].completion_ids == twins[1].completion_ids == first[0].completion_ids


def test_top_p_restricts_to_the_nucleus(engine: TorchEngine) -> None:
    prompt = ids_of(engine, PROMPTS[2])
    # A nucleus this small holds only the most likely token: sampling becomes greedy.
    [nucleus] = run(engine, [req(prompt, temperature=1.0, top_p=1e-6, max_tokens=10, seed=3)])
    [greedy] = run(engine, [req(prompt, temperature=0.0, max_tokens=10)])
    assert nucleus.completion_ids == greedy.completion_ids


def test_max_tokens_per_row_with_finish_length(engine: TorchEngine) -> None:
    prompts = [ids_of(engine, p) for p in PROMPTS[:3]]
    limits = [1, 7, 15]
    outs = run(
        engine,
        [req(p, temperature=0.0, max_tokens=n) for p, n in zip(prompts, limits, strict=True)],
    )
    for out, n in zip(outs, limits, strict=True):
        assert engine.tokenizer.eos_token_id not in out.completion_ids
        assert len(out.completion_ids) == len(out.logprobs) == n
        assert out.finish_reason == "length"


def test_eos_stops_a_row_with_finish_stop(engine: TorchEngine) -> None:
    # At a high temperature the tiny model's distribution is close to uniform, so some of these
    # 32 seeded rows sample <|im_end|> within 64 tokens; those stop right there.
    eos = engine.tokenizer.eos_token_id
    assert engine.eos_ids == {eos}
    prompt = ids_of(engine, PROMPTS[0])
    outs = run(engine, [req(prompt, temperature=5.0, max_tokens=64, seed=s) for s in range(32)])
    stopped = [o for o in outs if o.finish_reason == "stop"]
    assert stopped, "no row sampled the end-of-turn token"
    for out in outs:
        assert len(out.completion_ids) == len(out.logprobs)
        if out.finish_reason == "stop":
            assert out.completion_ids[-1] == eos
            assert eos not in out.completion_ids[:-1]
            assert len(out.completion_ids) <= 64
        else:
            assert out.finish_reason == "length"
            assert eos not in out.completion_ids
            assert len(out.completion_ids) == 64


def test_stop_string_stops_at_the_token_that_completes_it(engine: TorchEngine) -> None:
    tok = engine.tokenizer
    for text in PROMPTS:
        prompt = ids_of(engine, text)
        [ref] = run(engine, [req(prompt, temperature=0.0, max_tokens=16)])
        decoded = tok.decode(ref.completion_ids, skip_special_tokens=True)
        if len(decoded) >= 6 and decoded.isascii():
            break
    else:
        pytest.fail("no prompt gives an ASCII greedy continuation")
    stop = decoded[3:5]
    expected = next(
        j
        for j in range(1, len(ref.completion_ids) + 1)
        if stop in tok.decode(ref.completion_ids[:j], skip_special_tokens=True)
    )
    [out] = run(engine, [req(prompt, temperature=0.0, max_tokens=16, stop=["zzzz-never", stop])])
    assert out.finish_reason == "stop"
    assert out.completion_ids == ref.completion_ids[:expected]
    assert expected < 16
    assert out.logprobs == pytest.approx(ref.logprobs[:expected], abs=1e-5)


@pytest.mark.parametrize("sampling", [{"temperature": 0.0}, {"temperature": 1.3, "top_p": 0.9}])
def test_logprobs_are_the_models_own(engine: TorchEngine, sampling: dict[str, Any]) -> None:
    prompts = [ids_of(engine, p) for p in PROMPTS]
    outs = run(
        engine, [req(p, max_tokens=20, seed=11 + i, **sampling) for i, p in enumerate(prompts)]
    )
    for p, out in zip(prompts, outs, strict=True):
        assert len(out.logprobs) == len(out.completion_ids) > 0
        assert all(lp <= 0.0 for lp in out.logprobs)
        temperature = sampling["temperature"]  # the engine records the tempered logprobs
        expected = recompute_logprobs(engine, p, out.completion_ids, temperature)
        assert out.logprobs == pytest.approx(expected, abs=1e-4)


def test_load_weights_changes_outputs_and_round_trip_restores_them(engine: TorchEngine) -> None:
    prompts = [ids_of(engine, p) for p in PROMPTS[:2]]

    def greedy() -> list[EngineOutput]:
        return run(engine, [req(p, temperature=0.0, max_tokens=10) for p in prompts])

    # state_dict() may alias the live weights on CPU: keep a real copy to restore from.
    original = {k: v.clone() for k, v in engine.state_dict().items()}
    before = greedy()
    perturbed = perturb(original)
    try:
        engine.load_weights(perturbed)
        changed = greedy()
        assert [o.logprobs for o in changed] != [o.logprobs for o in before]
        assert [o.completion_ids for o in changed] != [o.completion_ids for o in before]
        saved = engine.state_dict()
        assert all(torch.equal(saved[k], perturbed[k]) for k in perturbed)
    finally:
        engine.load_weights(original)
    after = greedy()
    assert [o.completion_ids for o in after] == [o.completion_ids for o in before]
    assert [o.logprobs for o in after] == [o.logprobs for o in before]


def test_state_dict_is_detached_on_cpu(engine: TorchEngine) -> None:
    sd = engine.state_dict()
    key = next(iter(sd))
    assert not sd[key].requires_grad
    assert sd[key].device == torch.device("cpu")


def test_load_weights_rejects_a_wrong_state_dict(engine: TorchEngine) -> None:
    sd = engine.state_dict()
    sd.pop(next(iter(sd)))
    with pytest.raises(RuntimeError):
        engine.load_weights(sd)


def test_over_long_prompt_is_a_context_length_error(engine: TorchEngine) -> None:
    prompt = [ord("a") % 256] * 500
    with pytest.raises(ContextLengthError, match="exceeds the model's context of 512") as info:
        run(engine, [req(prompt, temperature=0.0, max_tokens=13)])
    assert (info.value.prompt_tokens, info.value.max_tokens, info.value.limit) == (500, 13, 512)
    # It fits once max_tokens does.
    [out] = run(engine, [req(prompt, temperature=0.0, max_tokens=12)])
    assert len(out.completion_ids) <= 12


def test_empty_prompt_is_a_value_error(engine: TorchEngine) -> None:
    with pytest.raises(ValueError, match="empty prompt"):
        run(engine, [req([], temperature=0.0, max_tokens=4)])


def test_extreme_seeds_and_temperatures_never_fail_a_batch(engine: TorchEngine) -> None:
    prompt = ids_of(engine, PROMPTS[1])
    outs = run(
        engine,
        [
            req(prompt, max_tokens=4, seed=2**80),  # beyond a torch seed: reduced, not raised
            req(prompt, max_tokens=4, seed=-(2**70)),
            req(prompt, max_tokens=4, temperature=1e-45),  # overflows the logits: greedy
        ],
    )
    greedy = run(engine, [req(prompt, max_tokens=4, temperature=0.0)])[0]
    assert all(len(o.completion_ids) > 0 for o in outs)
    assert outs[2].completion_ids == greedy.completion_ids


def test_context_comes_from_the_run_config_bounded_by_the_model() -> None:
    from forge.config import EngineConfig
    from serve.engines.registry import make_engine

    small = make_engine("torch", **EngineConfig(max_model_len=64).engine_options())
    assert small.max_context == 64
    big = make_engine("torch", **EngineConfig(max_model_len=100_000).engine_options())
    assert big.max_context == 8192  # the tiny model's own positions

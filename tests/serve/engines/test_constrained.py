"""Structured output in the torch engine: every reply a document of the request's schema,
sampled from random weights, with the model's own logprobs recorded."""

from __future__ import annotations

import asyncio
import json

import pytest
import torch

from forge.types import SamplingParams
from serve.engines.base import EngineRequest
from serve.engines.constrained import Constraint, json_grammar
from serve.engines.torch_engine import TorchEngine

SCHEMA = {
    "type": "object",
    "properties": {
        "action": {"enum": ["click", "type", "done"]},
        "x": {"type": "integer", "minimum": 0, "maximum": 1000},
        "text": {"type": "string", "maxLength": 10},
        "keys": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
    },
    "required": ["action", "x", "text", "keys"],
    "additionalProperties": False,
}
PROMPT = "<|im_start|>user\nAct on the page.<|im_end|>\n<|im_start|>assistant\n"


def _valid(doc: dict) -> bool:
    return (
        list(doc) == ["action", "x", "text", "keys"]  # the schema's order
        and doc["action"] in ("click", "type", "done")
        and isinstance(doc["x"], int)
        and 0 <= doc["x"] <= 1000
        and len(doc["text"]) <= 10
        and len(doc["keys"]) <= 3
        and all(isinstance(k, bool) for k in doc["keys"])
    )


@pytest.fixture(scope="module")
def engine() -> TorchEngine:
    return TorchEngine(model="tiny", seed=0, max_context=512)


def _generate(engine: TorchEngine, schemas: list, temperature: float = 1.0) -> list:
    prompt = engine.tokenizer(PROMPT, add_special_tokens=False).input_ids
    requests = [
        EngineRequest(
            prompt,
            SamplingParams(temperature=temperature, max_tokens=160, seed=seed, json_schema=s),
        )
        for seed, s in enumerate(schemas)
    ]
    return list(zip(requests, asyncio.run(engine.generate(requests)), strict=True))


def test_every_reply_is_a_document_of_its_schema(engine: TorchEngine) -> None:
    """Random weights at temperature 1: unconstrained rows are noise, constrained rows in the
    same batch parse (strict JSON: no control characters in strings, even length-bounded ones)
    and follow the schema, and end with the stop token."""
    results = _generate(engine, [SCHEMA, None, SCHEMA, None, SCHEMA, SCHEMA])
    for request, out in results:
        text = engine.tokenizer.decode(out.completion_ids, skip_special_tokens=True)
        if request.sampling.json_schema is None:
            with pytest.raises(ValueError):
                json.loads(text)
            continue
        assert out.finish_reason == "stop", text
        assert out.completion_ids[-1] == engine.tokenizer.eos_token_id
        doc = json.loads(text)  # strict: refuses raw control characters
        assert _valid(doc), doc
        assert text.startswith('{"action":"') and "\n" not in text  # compact, as vLLM's


def test_logprobs_stay_the_models_own(engine: TorchEngine) -> None:
    """The mask decides what can be sampled; the logprob recorded is the unmasked model's (what
    the Trainer recomputes), so it is below the masked distribution's wherever the mask cut
    probability away."""
    ((request, out),) = _generate(engine, [SCHEMA])
    ids = torch.tensor([request.prompt_ids + out.completion_ids])
    with torch.no_grad():
        logits = engine.model(ids).logits[0, len(request.prompt_ids) - 1 : -1].float()
    own = torch.log_softmax(logits, -1).gather(1, torch.tensor(out.completion_ids)[:, None])[:, 0]
    assert torch.allclose(own, torch.tensor(out.logprobs), atol=1e-4)
    assert float(own.sum()) < -20  # random weights: the unmasked model finds this reply unlikely


def test_greedy_follows_the_mask(engine: TorchEngine) -> None:
    ((_, out),) = _generate(engine, [SCHEMA], temperature=0.0)
    doc = json.loads(engine.tokenizer.decode(out.completion_ids, skip_special_tokens=True))
    assert _valid(doc)


def test_a_vision_model_follows_the_schema_too() -> None:
    vlm = TorchEngine(model="tiny-vl", seed=0, max_context=1024)
    ((_, out),) = _generate(vlm, [SCHEMA])
    doc = json.loads(vlm.tokenizer.decode(out.completion_ids, skip_special_tokens=True))
    assert _valid(doc) and out.finish_reason == "stop"


def test_a_schema_the_grammar_cannot_follow_is_refused(engine: TorchEngine) -> None:
    with pytest.raises(ValueError, match="schema"):
        Constraint(engine.tokenizer, engine.vocab_size, {"type": "object", "required": 3})
    grammar = json_grammar({"type": "object", "properties": {"t": {"maxLength": 4}}})
    assert "root" in grammar

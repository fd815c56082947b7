"""The models API's wire forms (serve.protocol.models); the SDKs read them in test_http_app."""

from __future__ import annotations

import pytest

from serve.protocol.common import ProtocolError
from serve.protocol.models import ModelCard, find_model, model_list, model_object, wire_of

CARDS = [ModelCard("tiny", 8192), ModelCard("/ckpt/step_40")]


def test_each_wire_carries_the_context_length_in_its_own_field():
    openai_form = model_object("chat", CARDS[0])
    assert openai_form["max_model_len"] == 8192 and openai_form["object"] == "model"
    assert "type" not in openai_form
    anthropic_form = model_object("anthropic", CARDS[0])
    assert anthropic_form["max_input_tokens"] == 8192 and anthropic_form["type"] == "model"
    assert "object" not in anthropic_form
    assert model_object("chat", CARDS[1])["max_model_len"] is None


def test_lists_page_as_each_wire_does():
    assert model_list("chat", CARDS)["object"] == "list"
    page = model_list("anthropic", CARDS)
    assert (page["first_id"], page["last_id"], page["has_more"]) == ("tiny", "/ckpt/step_40", False)
    assert model_list("anthropic", [])["first_id"] is None


def test_an_unknown_model_is_a_404_naming_the_served_ones():
    assert find_model(CARDS, "/ckpt/step_40") is CARDS[1]
    with pytest.raises(ProtocolError) as info:
        find_model(CARDS, "gpt-9")
    err = info.value
    assert (err.status, err.field) == (404, "model")
    assert "'gpt-9'" in err.message and "'tiny'" in err.message


def test_the_anthropic_header_picks_the_wire():
    assert wire_of({"anthropic-version": "2023-06-01"}) == "anthropic"
    assert wire_of({"authorization": "Bearer k"}) == "chat"

"""The page_state verifier: a web application's recorded state, not the agent's answer."""

from __future__ import annotations

import json

import pytest

from rewards import SpecError, build_verifier, verify
from rewards.json_check import lookup

STATE = {
    "orders": [{"number": 1, "items": [{"name": "Blue mug", "qty": 2}], "total": 9.0}],
    "sent": [{"to": "ana@example.com", "subject": "Lunch", "body": "See you on Tuesday"}],
    "archived": ["m2", "m5"],
    "flag": True,
}


@pytest.fixture
def state(sandbox):
    sandbox.put_file(".app/state.json", json.dumps(STATE))
    return sandbox


def test_expect_shorthand_and_length(state) -> None:
    spec = {
        "type": "page_state",
        "expect": {"orders.length": 1, "orders[0].items[0].name": "Blue mug", "flag": True},
    }
    v = verify(spec, state, None)
    assert v.reward == 1.0 and "all 3 expectations hold" in v.detail
    assert verify({**spec, "expect": {"orders.length": 2}}, state, None).reward == 0.0
    assert verify({**spec, "expect": {"flag": 1}}, state, None).reward == 0.0  # bool is not 1


def test_answer_plays_no_part(sandbox) -> None:
    spec = {"type": "page_state", "expect": {"orders.length": 1}}
    v = verify(spec, sandbox, "I placed the order.")
    assert v.reward == 0.0 and "no application state" in v.detail


@pytest.mark.parametrize(
    ("check", "reward"),
    [
        ({"path": "sent[0].body", "contains": "Tuesday"}, 1.0),
        ({"path": "sent[0].body", "contains": "tuesday"}, 0.0),
        ({"path": "sent[0].body", "contains": "tuesday", "ignore_case": True}, 1.0),
        ({"path": "sent[0].to", "equals": "ANA@example.com", "ignore_case": True}, 1.0),
        ({"path": "archived", "contains": "m5"}, 1.0),
        ({"path": "archived", "contains": "m3"}, 0.0),
        ({"path": "orders[0].items[0]", "contains": "qty"}, 1.0),
        ({"path": "orders[0].total", "contains": 9}, 0.0),  # a number contains nothing
        ({"path": "orders[-1].number", "equals": 1}, 1.0),
    ],
)
def test_checks(state, check: dict, reward: float) -> None:
    assert verify({"type": "page_state", "checks": [check]}, state, None).reward == reward


def test_failures_are_all_named(state) -> None:
    spec = {
        "type": "page_state",
        "expect": {"orders[0].total": 10, "sent[3].to": "x"},
        "checks": [{"path": "sent[0].subject", "equals": "Lunch"}],
    }
    v = verify(spec, state, None)
    assert v.reward == 0.0
    assert "orders[0].total is 9.0, expected it to equals 10" in v.detail
    assert "index 3 out of range" in v.detail
    assert "sent[0].subject" not in v.detail


def test_other_state_file_and_bad_json(sandbox) -> None:
    sandbox.put_file("s.json", "{broken")
    v = verify({"type": "page_state", "path": "s.json", "expect": {"a": 1}}, sandbox, None)
    assert v.reward == 0.0 and "not valid JSON" in v.detail


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({}, "expects nothing"),
        ({"checks": [{"path": "a"}]}, "checks[0]: give exactly one of equals, contains (got 0)"),
        ({"checks": [{"path": "a", "equals": 1, "contains": 1}]}, "checks[0]: give exactly one"),
        ({"checks": [{"path": "a", "equls": 1}]}, "checks[0].equls"),
        ({"expect": {"a..b": 1}}, "expect: path 'a..b' has an empty part"),
        ({"expect": {"a": 1}, "colour": "red"}, "colour: unknown field for page_state"),
        ({"expect": {"a": 1}, "path": "/etc/passwd"}, "path: '/etc/passwd' must be a path inside"),
        ({"expect": {"a": 1}, "path": "../x.json"}, "path: '../x.json' must be a path inside"),
    ],
)
def test_spec_errors_name_the_field(spec: dict, message: str) -> None:
    with pytest.raises(SpecError) as err:
        build_verifier({"type": "page_state", **spec})
    assert message in str(err.value)


def test_equals_null_is_an_expectation() -> None:
    build_verifier({"type": "page_state", "checks": [{"path": "a", "equals": None}]})


def test_lookup_brackets_and_length() -> None:
    doc = {"a": [{"b": "xyz"}, {"length": 5}]}
    assert lookup(doc, "a[0].b") == ("xyz", "")
    assert lookup(doc, "a.length") == (2, "")
    assert lookup(doc, "a[0].b.length") == (3, "")
    assert lookup(doc, "a[1].length") == (5, "")  # an object's own key wins

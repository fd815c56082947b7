"""The page_state verifier: a web application's recorded state, kept by the HarnessPod (handed
in as ``apps["page"]``), not the agent's answer nor any file in its workspace."""

from __future__ import annotations

import json

import pytest

from rewards.base import Verdict
from rewards.common import SpecError
from rewards.json_check import lookup
from rewards.page_state import PAGE
from rewards.registry import build_verifier

STATE = {
    "orders": [{"number": 1, "items": [{"name": "Blue mug", "qty": 2}], "total": 9.0}],
    "sent": [{"to": "ana@example.com", "subject": "Lunch", "body": "See you on Tuesday"}],
    "archived": ["m2", "m5"],
    "flag": True,
}


@pytest.fixture
def state() -> dict:
    return {PAGE: STATE}


def verify(spec: dict, apps: dict | None, answer: str | None) -> Verdict:
    return build_verifier(spec).verify_state(apps)  # type: ignore[attr-defined]


def test_expect_shorthand_and_length(state) -> None:
    spec = {
        "type": "page_state",
        "expect": {"orders.length": 1, "orders[0].items[0].name": "Blue mug", "flag": True},
    }
    v = verify(spec, state, None)
    assert v.reward == 1.0 and "all 3 expectations hold" in v.detail
    assert verify({**spec, "expect": {"orders.length": 2}}, state, None).reward == 0.0
    assert verify({**spec, "expect": {"flag": 1}}, state, None).reward == 0.0  # bool is not 1


def test_answer_and_workspace_play_no_part(sandbox) -> None:
    """The old verifier read ``.app/state.json`` from the workspace, which the agent writes."""
    spec = {"type": "page_state", "expect": {"done": True, "raw_reward": 1}}
    sandbox.put_file(".app/state.json", json.dumps({"done": True, "raw_reward": 1}))
    verifier = build_verifier(spec)
    assert verifier.reads_sandbox is False
    with pytest.raises(RuntimeError, match="verify_state"):
        verifier.verify(sandbox, "I placed the order.")
    v = verify(spec, None, "I placed the order.")
    assert v.reward == 0.0 and "no application state" in v.detail
    assert verify(spec, {PAGE: {"done": False}}, None).reward == 0.0


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


def test_bad_and_deep_json_score_zero() -> None:
    """A state file of 100,000 '[' (the development tools' path) and a state nested past the
    recursion limit are a 0 with the reason, not a RecursionError."""
    verifier = build_verifier({"type": "page_state", "expect": {"a": 1}})
    v = verifier.verify_text("{broken")  # type: ignore[attr-defined]
    assert v.reward == 0.0 and "not valid JSON" in v.detail
    v = verifier.verify_text("[" * 100_000)  # type: ignore[attr-defined]
    assert v.reward == 0.0 and "nested too deeply" in v.detail
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    spec = {"type": "page_state", "checks": [{"path": "a", "contains": [1]}]}
    v = verify(spec, {PAGE: {"a": deep}}, None)
    assert v.reward == 0.0 and "nested too deeply" in v.detail, v.detail


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({}, "expects nothing"),
        ({"checks": [{"path": "a"}]}, "checks[0]: give exactly one of equals, contains (got 0)"),
        ({"checks": [{"path": "a", "equals": 1, "contains": 1}]}, "checks[0]: give exactly one"),
        ({"checks": [{"path": "a", "equls": 1}]}, "checks[0].equls"),
        ({"expect": {"a..b": 1}}, "expect: path 'a..b' has an empty part"),
        ({"expect": {"a": 1}, "colour": "red"}, "colour: unknown field for page_state"),
        ({"expect": {"a": 1}, "path": ".app/state.json"}, "path: unknown field for page_state"),
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

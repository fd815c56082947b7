"""json_field on what an agent may write: nesting no parser takes is a wrong answer."""

from __future__ import annotations

from rewards.registry import build_verifier


def test_json_nested_past_the_parser_is_a_wrong_answer(sandbox) -> None:
    """100,000 '[' made json.loads raise RecursionError (an infrastructure failure)."""
    v = build_verifier({"type": "json_field", "path": "r.json", "field": "a", "equals": 1})
    sandbox.put_file("r.json", "[" * 100_000)
    verdict = v.verify(sandbox, None)
    assert verdict.reward == 0.0 and "nested too deeply" in verdict.detail
    sandbox.put_file("r.json", '{"a": ' + "[" * 900 + "]" * 900 + "}")
    verdict = v.verify(sandbox, None)  # parses; shown (or said to be too deep), never raised
    assert verdict.reward == 0.0 and "r.json: a is" in verdict.detail
    sandbox.put_file("r.json", '{"a": 1}')
    assert v.verify(sandbox, None).reward == 1.0

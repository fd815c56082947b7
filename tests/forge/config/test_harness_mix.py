"""``harness`` as one name or a weighted mix; ``harness_options`` keyed by harness name."""

from __future__ import annotations

import pytest

from forge.config import ConfigError, load_config


def _load(*overrides: str):
    return load_config(None, list(overrides))


def test_a_mix_and_its_options_by_harness() -> None:
    config = _load(
        "harness={react: 2, pi: 1}",
        "harness_options={pi: {tools: [read, bash]}}",
        "eval_harnesses=[codex]",
    )
    assert config.harnesses == ["react", "pi"]
    assert config.options_for("pi") == {"tools": ["read", "bash"]}
    assert config.options_for("react") == {}
    assert config.eval_harness_list == ["react", "pi", "codex"]


def test_one_harness_keeps_its_options_flat() -> None:
    config = _load("harness=react", "harness_options={tools: []}")
    assert config.harnesses == ["react"] and not config.mixed
    assert config.options_for("react") == {"tools": []}
    assert config.options_for("pi") == {}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["harness={react: 1, nosuch: 1}"], "harness: unknown harness 'nosuch'"),
        (["harness={react: 0, pi: 1}"], "harness.react: weight 0 must be above 0"),
        (["harness={react: -1}"], "harness.react: weight -1 must be above 0"),
        (["harness={react: .nan}"], "harness.react: weight nan must be above 0"),
        (["harness={react: many}"], "harness.react: weight 'many' is not a number"),
        (["harness={}"], "harness: an empty mix"),
        (["eval_harnesses=[nosuch]"], "eval_harnesses: unknown harness 'nosuch'"),
        (
            ["harness={react: 1, pi: 1}", "harness_options={tools: []}"],
            "harness_options.tools: with a harness mix, options are keyed by harness name",
        ),
        (
            ["harness={react: 1, pi: 1}", "harness_options={pi: {bogus: 1}}"],
            "harness_options.pi: unknown option(s) ['bogus']",
        ),
        (
            ["harness={react: 1, pi: 1}", "harness_mix=adaptive", "harness_floor=0.6"],
            "harness_floor: 0.6 for each of 2 harnesses is more than all the draws",
        ),
    ],
)
def test_a_bad_mix_is_refused_naming_the_field(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        _load(*overrides)
    assert message in str(e.value)

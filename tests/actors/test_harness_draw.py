"""The harness draw of a mix: fixed shares, the adaptive bandit, and its saved state."""

from __future__ import annotations

from collections import Counter

from actors.harness_draw import HarnessDraw


def test_fixed_draws_follow_the_weights() -> None:
    draw = HarnessDraw({"react": 2, "pi": 1, "codex": 1}, seed=3)
    seen = Counter(draw.draw() for _ in range(4000))
    assert abs(seen["react"] / 4000 - 0.5) < 0.03, seen
    assert abs(seen["pi"] / 4000 - 0.25) < 0.03, seen
    draw.record("pi", [0.0] * 64)  # a fixed mix does not move
    assert draw.shares() == {"react": 0.5, "pi": 0.25, "codex": 0.25}


def test_one_harness_always_draws_it() -> None:
    draw = HarnessDraw({"react": 1.0})
    assert {draw.draw() for _ in range(10)} == {"react"}
    assert draw.state()["draws"] == 0


def test_adaptive_moves_weight_to_the_harness_that_fails_and_keeps_the_floor() -> None:
    draw = HarnessDraw({"react": 1, "pi": 1}, mode="adaptive", floor=0.1, seed=0)
    for _ in range(8):  # the policy passes in react and fails in pi
        draw.record("react", [1.0, 1.0, 1.0, 1.0])
        draw.record("pi", [0.0, 0.0, 0.0, 0.0])
    shares = draw.shares()
    assert shares["pi"] > 0.85, shares
    assert shares["react"] >= 0.1 - 1e-9, shares  # the floor: react never starves
    assert abs(sum(shares.values()) - 1) < 1e-9
    seen = Counter(draw.draw() for _ in range(1000))
    assert seen["pi"] > 800 and seen["react"] > 50, seen


def test_adaptive_favours_a_rising_pass_rate_over_a_flat_one() -> None:
    draw = HarnessDraw({"react": 1, "pi": 1}, mode="adaptive", floor=0.05)
    for i in range(16):  # both pass half the time overall; pi from 0 to 1, react steady
        draw.record("react", [1.0 if i % 2 else 0.0] * 4)
        draw.record("pi", [1.0 if i >= 8 else 0.0] * 4)
    shares = draw.shares()
    assert shares["pi"] > shares["react"], shares


def test_a_resumed_draw_goes_on_as_the_first_would_have() -> None:
    first = HarnessDraw({"react": 1, "pi": 3}, mode="adaptive", seed=7)
    for _ in range(5):
        first.draw()
    first.record("pi", [1.0, 0.0, 1.0])
    resumed = HarnessDraw({"react": 1, "pi": 3}, mode="adaptive", seed=7, state=first.state())
    assert resumed.shares() == first.shares()
    assert [resumed.draw() for _ in range(50)] == [first.draw() for _ in range(50)]

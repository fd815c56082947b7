"""A step's batch split by harness (forge/train/groups.py): each group in one harness, the
split adding up to the batch, and each harness's wire fidelity when there are several."""

from __future__ import annotations

from forge.train.groups import by_harness
from forge.types import Episode, Turn


def _turn(i: int, messages: list[dict], calls: list[dict]) -> Turn:
    request = {"messages": messages}
    return Turn("e", 0, i, "chat", request, [1], [2] * (i + 1), [0.0], "", calls, "stop", 0, 0, 0)


def _episode(harness: str, reward: float, kept: bool) -> Episode:
    call = {"id": "c1", "name": "shell", "arguments": '{"cmd": "ls"}'}
    first = [{"role": "user", "content": "go"}]
    echoed = {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
              "function": {"name": "shell", "arguments": call["arguments"]}}]}  # fmt: skip
    second = [*first, echoed] if kept else [{"role": "user", "content": "rewritten"}]
    turns = [_turn(0, first, [call]), _turn(1, second, [])]
    return Episode("e", "t", 0, harness, reward, "ok", turns=turns, provenance={"harness": harness})


def test_the_split_adds_up_and_says_what_each_harness_does_on_the_wire() -> None:
    groups = [
        [_episode("react", 1.0, kept=True), _episode("react", 0.0, kept=True)],
        [_episode("pi", 1.0, kept=False)] * 3,
    ]
    split = by_harness(groups)
    assert {h: (s["groups"], s["episodes"]) for h, s in split.items()} == {
        "react": (1.0, 2.0),
        "pi": (1.0, 3.0),
    }
    assert split["react"]["reward_mean"] == 0.5 and split["pi"]["pass_rate"] == 1.0
    assert split["react"]["turns_mean"] == 2.0 and split["pi"]["tokens_sampled"] == 9.0
    assert split["react"]["wire"]["history_kept"] == 1.0
    assert split["pi"]["wire"]["history_kept"] == 0.0
    one = by_harness(groups[:1])  # one harness: no wire split to pay for
    assert "wire" not in one["react"]


def test_judge_calls_are_counted_and_timed_for_the_step() -> None:
    import json

    from forge.train.groups import judge_stats

    record = {"calls": [{"cached": False, "seconds": 1.5}, {"cached": True, "seconds": 0.0}]}
    judged = Episode("j", "t", 0, "react", 1.0, "ok", duration_s=6.0,
                     verifier_outputs={"[1] judge": json.dumps(record)})  # fmt: skip
    plain = Episode("p", "t", 0, "react", 0.0, "ok", duration_s=4.0)
    assert judge_stats([[judged, plain]]) == {
        "judge_calls": 2.0, "judge_cached": 1.0, "judge_s": 1.5, "judge_share": 0.15
    }  # fmt: skip
    assert judge_stats([[plain]]) == {}  # no judge: no such metrics

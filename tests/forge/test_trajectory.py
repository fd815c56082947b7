from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forge.trajectory import RESET_REASONS, assemble, sampled_tokens, segment_stats
from forge.types import Segment, Turn


def turn(
    index: int,
    prompt: list[int],
    completion: list[int],
    logprobs: list[float] | None = None,
    version: int = 0,
) -> Turn:
    if logprobs is None:
        logprobs = [-(t % 7 + 1) / 10 for t in completion]
    return Turn(
        episode_id="ep",
        attempt=0,
        index=index,
        protocol="chat",
        request={},
        prompt_ids=prompt,
        completion_ids=completion,
        logprobs=logprobs,
        text="",
        tool_calls=[],
        finish_reason="stop",
        policy_version=version,
        latency_s=0.0,
        started_at=0.0,
    )


def conversation() -> list[Turn]:
    """System+user [1,2,3] -> [4,5]; tool result [6,7] -> [8]; user [9] -> [10,11]."""
    return [
        turn(0, [1, 2, 3], [4, 5], [-0.1, -0.2]),
        turn(1, [1, 2, 3, 4, 5, 6, 7], [8], [-0.3], version=1),
        turn(2, [1, 2, 3, 4, 5, 6, 7, 8, 9], [10, 11], [-0.4, -0.5], version=1),
    ]


def test_clean_conversation_is_one_segment() -> None:
    segments, resets = assemble(conversation())
    assert resets == {}
    [seg] = segments
    assert seg.tokens == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
    assert seg.loss_mask == [0, 0, 0, 1, 1, 0, 0, 1, 0, 1, 1]
    assert seg.logprobs == [0.0, 0.0, 0.0, -0.1, -0.2, 0.0, 0.0, -0.3, 0.0, -0.4, -0.5]
    assert seg.turn_indices == [0, 1, 2]
    assert seg.policy_versions == [0, 1, 1]
    assert seg.prompt_len == 3
    assert sampled_tokens(seg) == ([4, 5, 8, 10, 11], [-0.1, -0.2, -0.3, -0.4, -0.5])


def test_turns_are_not_mutated_and_segments_do_not_alias_them() -> None:
    turns = conversation()
    [seg], _ = assemble(turns)
    assert turns[0].prompt_ids == [1, 2, 3]
    seg.tokens.append(99)
    assert turns[0].prompt_ids == [1, 2, 3]


def test_prompt_equal_to_previous_sequence_extends() -> None:
    """A continuation (e.g. after finish_reason=length) adds no prompt tokens."""
    [seg], resets = assemble([turn(0, [1, 2], [3]), turn(1, [1, 2, 3], [4])])
    assert resets == {}
    assert seg.tokens == [1, 2, 3, 4] and seg.loss_mask == [0, 0, 1, 1]


def test_empty_completion() -> None:
    turns = [turn(0, [1, 2], []), turn(1, [1, 2, 5], [6]), turn(2, [1, 2, 5, 6], [])]
    [seg], resets = assemble(turns)
    assert resets == {}
    assert seg.tokens == [1, 2, 5, 6]
    assert seg.loss_mask == [0, 0, 0, 1]
    assert seg.turn_indices == [0, 1, 2]


def test_first_turn_alone() -> None:
    segments, resets = assemble([turn(0, [1], [2])])
    assert resets == {} and len(segments) == 1
    assert assemble([]) == ([], {})


@pytest.mark.parametrize(
    ("prompt", "reason"),
    [
        # previous sequence: [1, 2, 3 | 4, 5 | 6, 7 | 8, 9]  (first prompt 3, last completion 8, 9)
        ([1, 2, 3, 4, 5], "prompt_truncated"),  # cut from the end
        ([1], "prompt_truncated"),
        ([1, 2, 3, 4, 5, 6, 7, 8, 99, 10], "completion_rewritten"),  # re-serialised arguments
        ([1, 2, 3, 4, 5, 6, 7, 9, 10], "completion_rewritten"),  # stripped reasoning token
        ([1, 2, 3, 4, 5, 6, 7, 10], "completion_rewritten"),  # completion dropped entirely
        ([1, 2, 3, 4, 5, 66, 7, 8, 9, 10], "history_rewritten"),  # an old tool result edited
        ([1, 2, 3, 44, 5, 6, 7, 8, 9, 10], "history_rewritten"),  # an older completion edited
        ([1, 2, 33, 4, 5], "context_changed"),  # new system prompt tail
        ([50, 51, 52], "context_changed"),  # a subagent with its own context
        ([1, 2, 3, 77], "history_rewritten"),  # compaction after the first prompt
    ],
)
def test_break_reasons(prompt: list[int], reason: str) -> None:
    turns = [turn(0, [1, 2, 3], [4, 5]), turn(1, [1, 2, 3, 4, 5, 6, 7], [8, 9])]
    turns.append(turn(2, prompt, [100]))
    segments, resets = assemble(turns)
    assert resets == {reason: 1}
    assert len(segments) == 2
    assert segments[1].tokens == [*prompt, 100]
    assert segments[1].loss_mask == [0] * len(prompt) + [1]
    assert segments[1].prompt_len == len(prompt)
    assert segments[1].turn_indices == [2]


def test_new_segment_keeps_growing_after_a_break() -> None:
    turns = [
        turn(0, [1, 2], [3]),
        turn(1, [9, 9], [4]),  # context_changed
        turn(2, [9, 9, 4, 5], [6]),
        turn(3, [9, 9, 4, 5, 6, 7], [8]),
    ]
    segments, resets = assemble(turns)
    assert resets == {"context_changed": 1}
    assert [s.turn_indices for s in segments] == [[0], [1, 2, 3]]
    assert segments[1].loss_mask == [0, 0, 1, 0, 1, 0, 1]


def test_subagent_interleaving_is_two_segments_and_one_reset() -> None:
    """Parent A and subagent B alternate; each keeps growing by exact prefix. Only B's first
    call is a reset; going back to A (or to B) is not, because its context still matches."""
    turns = [
        turn(0, [1, 2, 3], [4]),  # A
        turn(1, [7, 8], [9]),  # B starts: context_changed
        turn(2, [1, 2, 3, 4, 5], [6]),  # A again
        turn(3, [7, 8, 9, 10], [11]),  # B again
        turn(4, [1, 2, 3, 4, 5, 6, 12], [13]),  # A
    ]
    segments, resets = assemble(turns)
    assert resets == {"context_changed": 1}
    a, b = segments
    assert a.turn_indices == [0, 2, 4] and b.turn_indices == [1, 3]
    assert a.tokens == [1, 2, 3, 4, 5, 6, 12, 13]
    assert a.loss_mask == [0, 0, 0, 1, 0, 1, 0, 1]
    assert b.tokens == [7, 8, 9, 10, 11]
    assert b.loss_mask == [0, 0, 1, 0, 1]


def test_break_is_classified_against_the_most_recent_segment() -> None:
    turns = [
        turn(0, [1, 2, 3], [4]),  # A
        turn(1, [7, 8], [9]),  # B: context_changed (vs A)
        turn(2, [7, 8, 99], [5]),  # vs B: differs at B's completion -> completion_rewritten
    ]
    _, resets = assemble(turns)
    assert resets == {"context_changed": 1, "completion_rewritten": 1}


def test_longest_matching_segment_wins() -> None:
    turns = [
        turn(0, [1, 2], [3]),  # seg0 = [1, 2, 3]
        turn(1, [1], [2, 3, 4]),  # truncated: seg1 = [1, 2, 3, 4]
        turn(2, [1, 2, 3, 4, 5], [6]),  # both are prefixes; the longer one, seg1, is extended
    ]
    segments, resets = assemble(turns)
    assert resets == {"prompt_truncated": 1}
    assert [s.turn_indices for s in segments] == [[0], [1, 2]]


def test_logprob_length_mismatch_is_an_error() -> None:
    with pytest.raises(ValueError, match="turn 0: 2 completion ids but 1 logprobs"):
        assemble([turn(0, [1], [2, 3], [-0.1])])


def test_segment_stats() -> None:
    segments, _ = assemble([*conversation(), turn(3, [42], [43, 44])])
    assert segment_stats(segments) == {"segments": 2, "tokens": 14, "sampled_tokens": 7}
    assert segment_stats([]) == {"segments": 0, "tokens": 0, "sampled_tokens": 0}


# --- property: every sampled token is some turn's completion, in place, with its logprob ------

TOKENS = st.integers(min_value=0, max_value=3)  # a tiny vocabulary, so accidental prefixes occur


@st.composite
def turn_lists(draw: st.DrawFn) -> list[Turn]:
    turns: list[Turn] = []
    for i in range(draw(st.integers(min_value=0, max_value=12))):
        mode = draw(st.sampled_from(["extend", "extend", "extend", "truncate", "fresh"]))
        if turns and mode != "fresh":
            base = draw(st.sampled_from(turns))
            seq = base.prompt_ids + base.completion_ids
            if mode == "extend":
                prompt = seq + draw(st.lists(TOKENS, max_size=3))
            else:
                prompt = seq[: draw(st.integers(min_value=0, max_value=len(seq)))]
        else:
            prompt = draw(st.lists(TOKENS, max_size=5))
        completion = draw(st.lists(TOKENS, max_size=3))
        lps = draw(
            st.lists(
                st.floats(min_value=-20, max_value=-0.001),
                min_size=len(completion),
                max_size=len(completion),
            )
        )
        turns.append(turn(i, prompt, completion, lps, version=i // 3))
    return turns


def check_invariants(turns: list[Turn], segments: list[Segment], resets: dict[str, int]) -> None:
    by_index = {t.index: t for t in turns}
    placed = [i for s in segments for i in s.turn_indices]
    assert sorted(placed) == sorted(by_index)  # every turn in exactly one segment
    assert sum(resets.values()) == max(len(segments) - 1, 0)
    assert set(resets) <= set(RESET_REASONS)
    for seg in segments:
        assert len(seg.tokens) == len(seg.loss_mask) == len(seg.logprobs)
        assert all(lp == 0.0 for lp, m in zip(seg.logprobs, seg.loss_mask, strict=True) if not m)
        assert seg.policy_versions == [by_index[i].policy_version for i in seg.turn_indices]
        mine = [by_index[i] for i in seg.turn_indices]
        assert seg.prompt_len == len(mine[0].prompt_ids)
        ids, lps = sampled_tokens(seg)
        assert ids == [t for x in mine for t in x.completion_ids]
        assert lps == [lp for x in mine for lp in x.logprobs]
        for t in mine:  # each turn's prompt and completion sit in place in its segment
            p, c = len(t.prompt_ids), len(t.completion_ids)
            assert seg.tokens[:p] == t.prompt_ids
            assert seg.tokens[p : p + c] == t.completion_ids
            assert seg.loss_mask[p : p + c] == [1] * c
    if placed == sorted(placed):  # segments do not interleave: flat order is turn order
        flat = [t for s in segments for t in sampled_tokens(s)[0]]
        assert flat == [t for x in turns for t in x.completion_ids]


@settings(max_examples=400, deadline=None)
@given(turn_lists())
def test_assembly_invariants(turns: list[Turn]) -> None:
    segments, resets = assemble(turns)
    check_invariants(turns, segments, resets)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(TOKENS, max_size=3), st.lists(TOKENS, max_size=3)), max_size=8))
def test_always_extending_is_one_segment(steps: list[tuple[list[int], list[int]]]) -> None:
    seq: list[int] = [0]
    turns = []
    for i, (extra, completion) in enumerate(steps):
        prompt = seq + extra
        turns.append(turn(i, prompt, completion))
        seq = prompt + completion
    segments, resets = assemble(turns)
    assert resets == {}
    assert len(segments) == (1 if turns else 0)
    check_invariants(turns, segments, resets)


def timed(t: Turn, started_at: float, latency_s: float = 1.0) -> Turn:
    t.started_at, t.latency_s = started_at, latency_s
    return t


@pytest.mark.parametrize(
    ("prompt", "reason"),
    [
        ([1, 2, 3], "fork"),  # the first context sampled again
        ([1, 2, 3, 4, 5, 6, 7], "fork"),  # the last context sampled again
        ([1, 2, 3, 4, 5, 66], "fork"),  # a branch after the first answer, second one dropped
        ([1, 2, 3, 4, 5, 66, 7, 8, 9, 10], "history_rewritten"),  # the second answer is kept
    ],
)
def test_forks(prompt: list[int], reason: str) -> None:
    turns = [turn(0, [1, 2, 3], [4, 5]), turn(1, [1, 2, 3, 4, 5, 6, 7], [8, 9])]
    turns = [timed(t, i * 10.0) for i, t in enumerate(turns)]
    turns.append(timed(turn(2, prompt, [100]), 30.0))
    _, resets = assemble(turns)
    assert resets == {reason: 1}


def test_parallel_calls_are_their_own_reason() -> None:
    """Two calls in flight at once (parallel subagents): the second cannot continue the first."""
    turns = [
        timed(turn(0, [1, 2, 3], [4]), 0.0, latency_s=5.0),
        timed(turn(1, [1, 2, 9], [8]), 1.0, latency_s=5.0),  # started before turn 0 answered
        timed(turn(2, [1, 2, 3, 4, 6], [7]), 10.0),  # turn 0's context goes on: no reset
    ]
    segments, resets = assemble(turns)
    assert resets == {"parallel_call": 1}
    assert [s.turn_indices for s in segments] == [[0, 2], [1]]


def test_temperature_change_starts_a_segment() -> None:
    first = turn(0, [1, 2], [3])
    second = turn(1, [1, 2, 3, 4], [5])
    second.temperature = 0.7
    segments, resets = assemble([first, second])
    assert resets == {"sampling_changed": 1}
    assert [s.temperature for s in segments] == [1.0, 0.7]


def test_undelivered_turn_is_left_out() -> None:
    """An SDK timeout: the answer never reached the harness, which asked again with the same
    prompt. The lost answer is not trained on and does not break the segment."""
    lost = turn(1, [1, 2, 3, 4, 5], [6, 6, 6])
    lost.delivered = False
    turns = [
        turn(0, [1, 2, 3], [4]),
        lost,
        turn(2, [1, 2, 3, 4, 5], [7]),
        turn(3, [1, 2, 3, 4, 5, 7, 8], [9]),
    ]
    [seg], resets = assemble(turns)
    assert resets == {}
    assert seg.turn_indices == [0, 2, 3]
    assert 6 not in seg.tokens

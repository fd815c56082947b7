"""Exact-prefix merging of an attempt's turns into training segments (design decision 3).

A harness talks to the policy one call at a time; each call is recorded as a :class:`Turn` with
the exact prompt ids the engine saw and the completion ids it sampled. When the next call's prompt
begins with exactly the tokens of an earlier sequence (its prompts plus its completions), the two
calls are one conversation and merge into one :class:`Segment`: the tokens in between (tool
results, the next user message, chat-template glue) enter with loss mask 0, the new completion
with loss mask 1 and its sampling logprobs.

When no segment is a prefix of the prompt (the harness compacted its history, re-serialised tool
arguments, dropped reasoning, or started a subagent with its own system prompt) a new segment
starts and a *reset* is counted, with a reason found by comparing the prompt against the segment
the previous turn went into:

``prompt_truncated``
    the new prompt is a strict prefix of that sequence (history cut from the end);
``completion_rewritten``
    the first differing token lies inside the previous turn's completion (the harness sent back
    a different rendering of what the model said: re-serialised tool arguments, stripped
    reasoning);
``history_rewritten``
    the first difference lies in an earlier part of the sequence, after its first prompt (an old
    tool result or assistant message was edited);
``context_changed``
    the first difference lies inside the segment's first prompt (a new system prompt, a
    subagent, compaction into a summary).

A turn may extend *any* earlier segment, not only the latest one, and always picks the longest
one that is a prefix. So a subagent whose calls interleave with its parent's produces two
segments, each growing by exact prefix, and counts exactly one reset (when the subagent's first
call arrives); returning to the parent context is not a reset.

Invariant: every turn's completion appears, in order, as the loss-masked tokens of exactly one
segment, with its logprobs aligned. When segments do not interleave, concatenating the sampled
tokens of all segments equals concatenating every turn's completion in turn order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from forge.types import Segment, Turn

RESET_REASONS = ("prompt_truncated", "completion_rewritten", "history_rewritten", "context_changed")


class _Builder:
    """A segment under construction, with what classification needs about its last turn."""

    def __init__(self, turn: Turn) -> None:
        prompt = list(turn.prompt_ids)
        self.segment = Segment(
            tokens=prompt,
            loss_mask=[0] * len(prompt),
            logprobs=[0.0] * len(prompt),
            turn_indices=[],
            policy_versions=[],
            prompt_len=len(prompt),
        )
        self.last_completion_start = len(prompt)
        self._add_completion(turn)

    def is_prefix_of(self, prompt: Sequence[int]) -> bool:
        tokens = self.segment.tokens
        return len(tokens) <= len(prompt) and list(prompt[: len(tokens)]) == tokens

    def extend(self, turn: Turn) -> None:
        seg = self.segment
        extra = list(turn.prompt_ids[len(seg.tokens) :])
        seg.tokens.extend(extra)
        seg.loss_mask.extend([0] * len(extra))
        seg.logprobs.extend([0.0] * len(extra))
        self.last_completion_start = len(seg.tokens)
        self._add_completion(turn)

    def _add_completion(self, turn: Turn) -> None:
        seg = self.segment
        seg.tokens.extend(turn.completion_ids)
        seg.loss_mask.extend([1] * len(turn.completion_ids))
        seg.logprobs.extend(float(lp) for lp in turn.logprobs)
        seg.turn_indices.append(turn.index)
        seg.policy_versions.append(turn.policy_version)

    def classify_break(self, prompt: Sequence[int]) -> str:
        """Why ``prompt`` does not continue this segment (it must not be an extension of it)."""
        tokens = self.segment.tokens
        d = _common_prefix_len(tokens, prompt)
        if d == len(prompt) and len(prompt) < len(tokens):
            return "prompt_truncated"
        if d >= self.last_completion_start:
            return "completion_rewritten"
        if d < self.segment.prompt_len:
            return "context_changed"
        return "history_rewritten"


def _common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    if list(a[:n]) == list(b[:n]):
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if list(a[lo:mid]) == list(b[lo:mid]):
            lo = mid
        else:
            hi = mid
    return lo


def _check_turn(turn: Turn) -> None:
    if len(turn.logprobs) != len(turn.completion_ids):
        raise ValueError(
            f"turn {turn.index}: {len(turn.completion_ids)} completion ids but "
            f"{len(turn.logprobs)} logprobs (token in, token out needs one logprob per token)"
        )


def assemble(turns: Iterable[Turn]) -> tuple[list[Segment], dict[str, int]]:
    """Merge one attempt's turns, in recording order, into segments by exact token prefix.

    Returns the segments (in order of creation) and the number of resets by reason; reasons that
    never occurred are absent, so an attempt that merged cleanly returns ``{}``. The first turn
    opens the first segment and is not a reset.
    """
    builders: list[_Builder] = []
    resets: dict[str, int] = {}
    current: _Builder | None = None
    for turn in turns:
        _check_turn(turn)
        best: _Builder | None = None
        for b in builders:
            if b.is_prefix_of(turn.prompt_ids) and (
                best is None or len(b.segment.tokens) > len(best.segment.tokens)
            ):
                best = b
        if best is not None:
            best.extend(turn)
            current = best
            continue
        if current is not None:
            reason = current.classify_break(turn.prompt_ids)
            resets[reason] = resets.get(reason, 0) + 1
        current = _Builder(turn)
        builders.append(current)
    return [b.segment for b in builders], resets


def segment_stats(segments: Iterable[Segment]) -> dict[str, int]:
    """Counts for metrics: ``segments``, ``tokens`` (all) and ``sampled_tokens`` (loss mask 1)."""
    n = tokens = sampled = 0
    for seg in segments:
        n += 1
        tokens += len(seg.tokens)
        sampled += sum(seg.loss_mask)
    return {"segments": n, "tokens": tokens, "sampled_tokens": sampled}


def sampled_tokens(segment: Segment) -> tuple[list[int], list[float]]:
    """The tokens the policy sampled in ``segment`` (loss mask 1) and their logprobs."""
    ids = [t for t, m in zip(segment.tokens, segment.loss_mask, strict=True) if m]
    lps = [lp for lp, m in zip(segment.logprobs, segment.loss_mask, strict=True) if m]
    return ids, lps

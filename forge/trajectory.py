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
``reasoning_stripped``
    the first differing token lies inside a completion that held a reasoning block
    (``</think>``): the harness or the model's own chat template dropped it from the history
    (Qwen3's template does, for every turn before the last user message);
``completion_rewritten``
    the first differing token lies inside the previous turn's completion (the harness sent back
    a different rendering of what the model said: re-serialised tool arguments);
``history_rewritten``
    the first difference lies in an earlier part of the sequence, after its first prompt (an old
    tool result or assistant message was edited);
``context_changed``
    the first difference lies inside the segment's first prompt (a new system prompt, a
    subagent, compaction into a summary);
``fork``
    the harness went back to an earlier point of the conversation: the prompt repeats an
    earlier turn's prompt exactly (the same context sampled again), or branches off inside the
    completion of a turn that is not the segment's latest (later turns dropped);
``parallel_call``
    the call started before the previous one had answered, so it could not continue it
    (parallel tool calls or subagents of one harness);
``sampling_changed``
    the call was sampled at another temperature than the segment (one segment, one temperature
    for the trainer).

Turns whose answer never reached the harness (``delivered`` is False: the client had gone, for
example an SDK timeout followed by a retry) are left out: the harness never saw them, so they
are neither trained on nor compared against.

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

REASONING_END = "</think>"
RESET_REASONS = (
    "prompt_truncated",
    "completion_rewritten",
    "reasoning_stripped",
    "history_rewritten",
    "context_changed",
    "fork",
    "parallel_call",
    "sampling_changed",
)


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
            temperature=turn.temperature,
        )
        self.last_completion_start = len(prompt)
        self.turns: list[tuple[int, int]] = []  # (prompt end, completion end) of each turn
        self.reasoned: list[bool] = []  # each turn's completion held a reasoning block
        self.last_turn = turn
        self._add_completion(turn)

    def continues_with(self, turn: Turn) -> bool:
        """Whether ``turn`` extends this segment: same temperature, and its prompt starts with
        every token of the segment."""
        tokens, prompt = self.segment.tokens, turn.prompt_ids
        if turn.temperature != self.segment.temperature:
            return False
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
        self.turns.append((len(seg.tokens), len(seg.tokens) + len(turn.completion_ids)))
        self.reasoned.append(REASONING_END in turn.text)
        self.last_turn = turn
        seg.tokens.extend(turn.completion_ids)
        seg.loss_mask.extend([1] * len(turn.completion_ids))
        seg.logprobs.extend(float(lp) for lp in turn.logprobs)
        seg.turn_indices.append(turn.index)
        seg.policy_versions.append(turn.policy_version)

    def classify_break(self, turn: Turn) -> str:
        """Why ``turn`` does not continue this segment (it must not be an extension of it)."""
        last = self.last_turn
        if turn.started_at < last.started_at + last.latency_s:
            return "parallel_call"
        if turn.temperature != self.segment.temperature:
            return "sampling_changed"
        prompt, tokens = turn.prompt_ids, self.segment.tokens
        d = _common_prefix_len(tokens, prompt)
        for i, (prompt_end, completion_end) in enumerate(self.turns):
            if d == len(prompt) == prompt_end:  # the same context, sampled again
                return "fork"
            if i + 1 < len(self.turns) and d == completion_end < len(prompt):
                # new text right after turn i's answer, without the next answer: a branch
                nxt = self.turns[i + 1]
                if not _contains(prompt[d:], tokens[nxt[0] : nxt[1]]):
                    return "fork"
        if d == len(prompt) and len(prompt) < len(tokens):
            return "prompt_truncated"
        for (start, end), reasoned in zip(self.turns, self.reasoned, strict=True):
            if reasoned and start <= d < end:  # the template or harness dropped its reasoning
                return "reasoning_stripped"
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


def _contains(hay: Sequence[int], needle: Sequence[int]) -> bool:
    """Whether ``needle`` occurs in ``hay`` as a contiguous run (an empty needle does not)."""
    n = len(needle)
    if n == 0:
        return False
    first, rest = needle[0], list(needle)
    return any(x == first and list(hay[i : i + n]) == rest for i, x in enumerate(hay))


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
        if not turn.delivered:
            continue
        _check_turn(turn)
        best: _Builder | None = None
        for b in builders:
            if b.continues_with(turn) and (
                best is None or len(b.segment.tokens) > len(best.segment.tokens)
            ):
                best = b
        if best is not None:
            best.extend(turn)
            current = best
            continue
        if current is not None:
            reason = current.classify_break(turn)
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

"""Answer checks: the final answer the harness gave equals a value or matches a regex."""

from __future__ import annotations

from difflib import SequenceMatcher
from typing import ClassVar, Literal

from pydantic import Field, field_validator

from forge.sandboxes.base import Sandbox
from rewards.base import Verdict
from rewards.common import VerifierModel, check_flags, check_pattern, compile_pattern, short

_WRAPPERS = ("**", "`", '"', "'", "*")


def normalize_answer(text: str) -> str:
    """Case-fold, collapse whitespace, drop wrapping quotes/backticks/markdown emphasis and a
    trailing full stop: ``'  **Dana  Whitfield.** '`` -> ``'dana whitfield'``."""
    s = " ".join(text.split()).casefold()
    changed = True
    while changed and s:
        changed = False
        s = s.rstrip(".!").strip()
        for w in _WRAPPERS:
            if len(s) >= 2 * len(w) and s.startswith(w) and s.endswith(w):
                s = s[len(w) : -len(w)].strip()
                changed = True
    return s


class AnswerEquals(VerifierModel):
    """Reward 1 when the final answer equals ``value`` (after normalisation, by default)."""

    kind: ClassVar[str] = "answer_equals"
    reads_sandbox: ClassVar[bool] = False
    value: str | int | float = Field(description="The expected final answer.")
    normalize: bool = Field(
        default=True,
        description="Compare case-folded, whitespace-collapsed text without wrapping quotes, "
        "markdown emphasis or a trailing full stop; false compares exactly.",
    )
    partial_credit: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        description="A wrong answer earns this times its similarity to the value (difflib's "
        "ratio, 0 to 1): a denser reward for training small models; only an equal answer "
        "scores 1, so pass rates still count exact answers. 0: none.",
    )

    def verify(self, sandbox: Sandbox, final_answer: str | None) -> Verdict:
        if final_answer is None:
            return Verdict(0.0, "no final answer")
        want = str(self.value)
        got = final_answer
        if self.normalize:
            want, got = normalize_answer(want), normalize_answer(got)
        if got == want:
            return Verdict(1.0, f"answer is {short(want)}")
        score = self.partial_credit * SequenceMatcher(None, got, want).ratio()
        return Verdict(score, f"answer {short(got)}, expected {short(want)}")


class AnswerRegex(VerifierModel):
    """Reward 1 when the final answer matches ``pattern``: the whole answer, without its
    surrounding whitespace (``re.fullmatch``, the default), or anywhere in it (``mode:
    search``).

    A whole-answer match is the default because a pattern searched for anywhere passes an answer
    that lists every candidate (every contact's number holds the right one): allow the prose you
    accept around the value in the pattern itself, e.g. ``\\D*\\+49 30 5550 4411\\D*`` (any
    text without another digit).
    """

    kind: ClassVar[str] = "answer_regex"
    reads_sandbox: ClassVar[bool] = False
    pattern: str = Field(description="Python regular expression the answer must match.")
    flags: str = Field(
        default="",
        description="Regex flag letters: i (ignore case), m (multiline), s (dot-all), x.",
    )
    mode: Literal["fullmatch", "search"] = Field(
        default="fullmatch",
        description="fullmatch: the pattern must match the whole answer (surrounding whitespace "
        "removed); search: anywhere in it, which passes an answer listing every candidate "
        "unless the pattern itself says what may surround the value.",
    )

    _check_pattern = field_validator("pattern")(check_pattern)
    _check_flags = field_validator("flags")(check_flags)

    def verify(self, sandbox: Sandbox, final_answer: str | None) -> Verdict:
        if final_answer is None:
            return Verdict(0.0, "no final answer")
        regex = compile_pattern(self.pattern, self.flags)
        if self.mode == "search":
            found, where = regex.search(final_answer), "anywhere in it"
        else:
            found, where = regex.fullmatch(final_answer.strip()), "as a whole"
        if found:
            return Verdict(1.0, f"answer matches {self.pattern!r} {where}")
        return Verdict(0.0, f"answer {short(final_answer)} does not match {self.pattern!r} {where}")


class AnswerChars(VerifierModel):
    """Partial credit: the share of the answer's non-space characters that are in ``chars``.

    A dense reward meant for learning tests with tiny models (the ``toy`` suite): every sample
    that uses more of the wanted characters scores a little higher.
    """

    kind: ClassVar[str] = "answer_chars"
    reads_sandbox: ClassVar[bool] = False
    chars: str = Field(min_length=1, description="The characters that earn credit.")
    min_length: int = Field(
        default=1, ge=1, description="Answers shorter than this (without spaces) score 0."
    )

    def verify(self, sandbox: Sandbox, final_answer: str | None) -> Verdict:
        text = "".join((final_answer or "").split())
        if len(text) < self.min_length:
            return Verdict(0.0, f"answer {short(text)} shorter than {self.min_length}")
        share = sum(1 for ch in text if ch in self.chars) / len(text)
        return Verdict(share, f"{share:.0%} of the answer is in {self.chars!r}")

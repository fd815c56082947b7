"""Shared pieces of the verifier families: the config base class, spec errors, sandbox reads, the
verifier's own folder."""

from __future__ import annotations

import re
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, ValidationInfo

from forge.sandboxes.base import Sandbox
from forge.sandboxes.bwrap import HOME
from rewards.base import Verdict, Verifier

VERIFIER_DIR = f"{HOME}/.verifier"  # prefix of the verifier's own folder (a random suffix)


class SpecError(ValueError):
    """A verifier spec that cannot be built. ``errors`` holds ``(field, message)`` pairs.

    ``field`` is a dotted path inside the spec (``type``, ``path``, ``[1].pattern``), empty when
    the spec itself is at fault.
    """

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{f}: {m}" if f else m for f, m in errors))

    def prefixed(self, prefix: str) -> SpecError:
        """The same errors with their fields placed under ``prefix`` (``[2]`` or ``name``)."""
        return SpecError([(join_field(prefix, f), m) for f, m in self.errors])


def join_field(prefix: str, field: str) -> str:
    """Join two dotted-path parts; list indices (``[3]``) attach without a dot."""
    if not prefix:
        return field
    if not field:
        return prefix
    return f"{prefix}{field}" if field.startswith("[") else f"{prefix}.{field}"


class VerifierModel(BaseModel):
    """Base of every verifier: its pydantic fields are the spec's fields (minus ``type``).

    Unknown fields are rejected so a typo in a task file fails at load time, not as a silent
    zero reward during training.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: ClassVar[str] = ""
    reads_sandbox: ClassVar[bool] = True  # False: judges the final answer alone
    runs_commands: ClassVar[bool] = False  # True: may change the sandbox it is given
    # True: it reads what the HarnessPod kept (services, page application), not a sandbox:
    # verify_state(apps, transcript, final_answer)
    reads_state: ClassVar[bool] = False

    def own_files(self) -> dict[str, str]:
        """The verifier's own files (relative path -> text), written under the verifier
        directory of the verifier's sandbox once the agent's workspace is in place."""
        return {}

    def verify(self, sandbox: Sandbox, final_answer: str | None) -> Verdict:
        raise NotImplementedError


class AllOf:
    """Every verifier of a list must pass. The reward is the lowest of their rewards; all of them
    run, so the detail says everything that was wrong."""

    kind = "all_of"

    def __init__(self, verifiers: list[Verifier]) -> None:
        if not verifiers:
            raise ValueError("all_of needs at least one verifier")
        self.verifiers = verifiers

    def verify(self, sandbox: Sandbox, final_answer: str | None) -> Verdict:
        return self.combine([v.verify(sandbox, final_answer) for v in self.verifiers])

    @staticmethod
    def combine(verdicts: list[Verdict]) -> Verdict:
        """The lowest reward; the details of all, numbered."""
        reward = min(v.reward for v in verdicts)
        detail = "; ".join(f"[{i}] {v.detail}" for i, v in enumerate(verdicts))
        outputs = {f"[{i}] {k}": t for i, v in enumerate(verdicts) for k, t in v.outputs.items()}
        return Verdict(reward=reward, detail=detail, outputs=outputs)


class Weighted:
    """Hybrid scoring: the weighted mean of its parts' rewards (``{type: weighted, parts:
    [{weight: 0.4, verifier: {...}}, {weight: 0.6, verifier: {type: judge, ...}}]}``), as a
    benchmark weighs its rule checks and its judge. Weights are normalised to sum to 1."""

    kind = "weighted"

    def __init__(self, verifiers: list[Verifier], weights: list[float]) -> None:
        if not verifiers or len(verifiers) != len(weights) or min(weights) < 0 or not sum(weights):
            raise ValueError("weighted needs parts with weights >= 0 that do not sum to 0")
        self.verifiers = verifiers
        self.weights = [w / sum(weights) for w in weights]

    def verify(self, sandbox: Sandbox, final_answer: str | None) -> Verdict:
        return self.combine([v.verify(sandbox, final_answer) for v in self.verifiers])

    def combine(self, verdicts: list[Verdict]) -> Verdict:
        reward = sum(w * v.reward for w, v in zip(self.weights, verdicts, strict=True))
        detail = "; ".join(
            f"[{i}] {w:.2f} x {v.reward:g}: {v.detail}"
            for i, (w, v) in enumerate(zip(self.weights, verdicts, strict=True))
        )
        outputs = {f"[{i}] {k}": t for i, v in enumerate(verdicts) for k, t in v.outputs.items()}
        return Verdict(reward=reward, detail=detail, outputs=outputs)


def read_text(sandbox: Sandbox, path: str) -> tuple[str | None, str]:
    """The text of a sandbox file, or ``None`` and why not (missing, unreadable, a directory).

    Only errors that describe the sandbox's state are absorbed; anything else (the sandbox
    itself failing) propagates, so the attempt is marked failed rather than scored 0.
    """
    try:
        data = sandbox.get_file(path)
    except (OSError, ValueError) as e:
        return None, f"cannot read {path}: {type(e).__name__}: {e}"
    if data is None:
        return None, f"{path} does not exist"
    if isinstance(data, bytes):
        return data.decode("utf-8", errors="replace"), ""
    return str(data), ""


def clip(text: str, limit: int = 120) -> str:
    """``text`` cut to ``limit`` characters, for verdict details."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def short(text: str, limit: int = 120) -> str:
    """``repr`` of ``text`` cut to ``limit`` characters, for verdict details."""
    return clip(repr(text), limit)


_FLAG_LETTERS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE}


def regex_flags(flags: str) -> int:
    """Regex flags from letters: i (ignore case), m (multiline), s (dot-all), x (verbose)."""
    value = 0
    for ch in flags:
        if ch not in _FLAG_LETTERS:
            raise ValueError(f"unknown regex flag {ch!r} (known: {', '.join(_FLAG_LETTERS)})")
        value |= _FLAG_LETTERS[ch]
    return value


def compile_pattern(pattern: str, flags: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, regex_flags(flags))
    except re.error as e:
        raise ValueError(f"invalid regex {pattern!r}: {e}") from e


def check_pattern(cls: type, v: str) -> str:
    """Field validator: ``v`` compiles as a regex (flags are checked with the flags field)."""
    compile_pattern(v, "")
    return v


def check_flags(cls: type, v: str, info: ValidationInfo) -> str:
    """Field validator: ``v`` is flag letters, and the pattern compiles with them."""
    regex_flags(v)
    if isinstance(info.data.get("pattern"), str):
        compile_pattern(info.data["pattern"], v)
    return v


def verifier_dir(sandbox: Sandbox) -> str:
    """The verifier's own folder in ``sandbox`` (a sandbox path, for ``put_file`` and
    ``put_archive``): random per verifier sandbox (:mod:`rewards.runner`); :data:`VERIFIER_DIR`
    itself elsewhere."""
    return getattr(sandbox, "verifier_dir", VERIFIER_DIR)

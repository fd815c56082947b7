"""Verifiers: turn the state a harness left behind (and its final answer) into a reward.

A task's ``verifier`` is a mapping with ``type`` plus that type's fields, or a list of such
mappings that must all pass::

    verifier:
      - {type: file_exists, path: out.txt}
      - {type: command, cmd: "python3 check.py", expect_exit: 0}

:data:`VERIFIERS` maps each ``type`` to its class (one module per family); a class's pydantic
fields are the spec's fields and unknown ones are rejected.

In an episode, verifiers never run where the agent ran: :func:`rewards.runner.run_verifier`
copies the agent's workspace out, destroys its sandbox and runs them in fresh sandboxes with a
clean interpreter, home and PATH (DESIGN.md decision 10). :func:`verify` runs a spec against
whatever sandbox it is given (tests, tools).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from forge.sandboxes.base import Sandbox
from rewards.answer import AnswerChars, AnswerEquals, AnswerRegex
from rewards.app_state import AppState
from rewards.base import Verdict, Verifier, VerifierSpec
from rewards.claims import Claims
from rewards.claweval import ClawEval
from rewards.command import Command
from rewards.common import AllOf, SpecError, VerifierModel, Weighted, join_field
from rewards.files import FileAbsent, FileEquals, FileExists, FileRegex
from rewards.harbor_tests import HarborTests
from rewards.json_check import JsonField
from rewards.judge import Judge
from rewards.page_state import PageState
from rewards.qwenclawbench import QwenClawBench
from rewards.transcript_check import TranscriptCheck

VERIFIERS: dict[str, type[VerifierModel]] = {
    cls.kind: cls
    for cls in (
        FileExists,
        FileEquals,
        FileRegex,
        FileAbsent,
        JsonField,
        PageState,
        AppState,
        Command,
        HarborTests,
        AnswerEquals,
        AnswerRegex,
        AnswerChars,
        TranscriptCheck,
        Judge,
        QwenClawBench,
        ClawEval,
        Claims,
    )
}


def _pydantic_errors(kind: str, cls: type[VerifierModel], err: ValidationError) -> SpecError:
    errors: list[tuple[str, str]] = []
    for e in err.errors():
        field = ""
        for part in e["loc"]:
            field = join_field(field, f"[{part}]" if isinstance(part, int) else str(part))
        if e["type"] == "extra_forbidden":
            msg = f"unknown field for {kind} (fields: {', '.join(cls.model_fields)})"
        elif e["type"] == "missing":
            msg = f"required by {kind}"
        else:
            msg = e["msg"].removeprefix("Value error, ")
        errors.append((field, msg))
    return SpecError(errors)


def _build_weighted(spec: dict[str, Any]) -> Weighted:
    parts = spec.get("parts")
    if set(spec) - {"type", "parts"}:
        raise SpecError([("", "unknown field for weighted (fields: parts)")])
    if not isinstance(parts, list) or not parts:
        raise SpecError([("parts", "a list of {weight, verifier} (at least one)")])
    verifiers: list[Verifier] = []
    weights: list[float] = []
    errors: list[tuple[str, str]] = []
    for i, part in enumerate(parts):
        weight = part.get("weight") if isinstance(part, dict) else None
        if not isinstance(weight, int | float) or isinstance(weight, bool) or weight < 0:
            errors.append((f"parts[{i}].weight", "a number >= 0"))
            continue
        try:
            verifiers.append(build_verifier(part.get("verifier")))
            weights.append(float(weight))
        except SpecError as e:
            errors.extend(e.prefixed(f"parts[{i}].verifier").errors)
    if errors:
        raise SpecError(errors)
    if not sum(weights):
        raise SpecError([("parts", "the weights sum to 0")])
    return Weighted(verifiers, weights)


def _build_one(spec: Any) -> Any:
    if not isinstance(spec, dict):
        raise SpecError([("", f"a verifier is a mapping with 'type', got {type(spec).__name__}")])
    if spec.get("type") == Weighted.kind:
        return _build_weighted(spec)
    known = ", ".join(sorted([*VERIFIERS, Weighted.kind]))
    if "type" not in spec:
        raise SpecError([("type", f"missing (known: {known})")])
    kind = spec["type"]
    if not isinstance(kind, str) or kind not in VERIFIERS:
        raise SpecError([("type", f"unknown verifier {kind!r} (known: {known})")])
    cls = VERIFIERS[kind]
    try:
        return cls.model_validate({k: v for k, v in spec.items() if k != "type"})
    except ValidationError as e:
        raise _pydantic_errors(kind, cls, e) from None


def build_verifier(spec: VerifierSpec | list[VerifierSpec]) -> Verifier:
    """Build the verifier a spec describes; a list builds an :class:`AllOf`.

    Raises :class:`SpecError` (a ``ValueError``) naming every field at fault, e.g.
    ``[1].type: unknown verifier 'fil_exists' (known: ...)``.
    """
    if isinstance(spec, list):
        if not spec:
            raise SpecError([("", "an empty verifier list (give at least one verifier)")])
        verifiers: list[Verifier] = []
        errors: list[tuple[str, str]] = []
        for i, item in enumerate(spec):
            try:
                verifiers.append(_build_one(item))
            except SpecError as e:
                errors.extend(e.prefixed(f"[{i}]").errors)
        if errors:
            raise SpecError(errors)
        return AllOf(verifiers)
    return _build_one(spec)


def leaves(verifier: Any) -> list[VerifierModel]:
    """The verifiers a built one is made of (an all_of's and a weighted's parts), in order."""
    if isinstance(verifier, AllOf | Weighted):
        return [v for inner in verifier.verifiers for v in leaves(inner)]
    return [verifier]


def judges(spec: Any) -> list[Judge]:
    """The judges a verifier spec asks (each verifier's ``judges()``, where it has one)."""
    return [j for v in leaves(build_verifier(spec)) for j in getattr(v, "judges", list)()]


def validate_spec(spec: Any) -> None:
    """Raise :class:`SpecError` when ``spec`` would not build; used when tasks are loaded."""
    build_verifier(spec)


def verify(
    spec: VerifierSpec | list[VerifierSpec], sandbox: Sandbox, final_answer: str | None
) -> Verdict:
    """Build the spec's verifier and run it against ``sandbox`` and the final answer, in place
    (an episode uses :func:`rewards.runner.run_verifier` instead)."""
    return build_verifier(spec).verify(sandbox, final_answer)


__all__ = [
    "VERIFIERS",
    "AllOf",
    "SpecError",
    "Verdict",
    "Verifier",
    "VerifierModel",
    "Weighted",
    "build_verifier",
    "judges",
    "leaves",
    "validate_spec",
    "verify",
]

"""The ``harness`` field of a run: one harness by name, or a weighted mix of them.

    harness: react                      # every group in react
    harness: {react: 2, pi: 1}          # each group one task in one harness, drawn 2:1
    harness_options: {pi: {tools: [read, bash]}}   # with a mix: keyed by harness name

These checks run in :class:`forge.config.RunConfig`'s validators; their messages name the field.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

HarnessField = str | dict[str, float]


def _known() -> dict[str, type]:
    from forge.harnesses.registry import HARNESSES

    return HARNESSES


def check_harness(value: HarnessField) -> HarnessField:
    """One known name, or a mix of known names with finite weights above 0."""
    known = _known()
    if not isinstance(value, str | dict):
        raise ValueError(f"expected a harness name or a mix {{name: weight}}, got {value!r}")
    names = [value] if isinstance(value, str) else list(value)
    if not names:
        raise ValueError("an empty mix; name one harness or give {name: weight, ...}")
    for name in names:
        if name not in known:
            raise ValueError(f"unknown harness {name!r}; known: {', '.join(sorted(known))}")
    if isinstance(value, dict):
        for name, weight in value.items():
            if isinstance(weight, bool) or not isinstance(weight, int | float):
                raise ValueError(f"{name}: weight {weight!r} is not a number")
            if not math.isfinite(weight) or weight <= 0:
                raise ValueError(f"{name}: weight {weight!r} must be above 0")
    return value


def check_options(adapter: type, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` as ``adapter`` takes them (normalized); ValueError naming an unknown one."""
    known = [p for p in inspect.signature(adapter).parameters if p != "self"]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ValueError(f"unknown option(s) {unknown}; {adapter.__name__} takes {known}")
    normalize = getattr(adapter, "normalize_options", None)
    if normalize is not None:  # e.g. host paths made absolute while the cwd is known
        options = normalize(options)
    try:
        adapter(**options)  # the adapter's own checks
    except TypeError as e:  # a required option missing
        raise ValueError(str(e).replace(".__init__()", ":")) from None
    return options


def check_mix_options(
    names: list[str], options: dict[str, Any], extra: list[str]
) -> dict[str, Any]:
    """A mix's ``harness_options``: keyed by a harness of the mix (or of ``extra``, the
    evaluation-only harnesses), each checked as that harness takes it."""
    known = _known()
    allowed = list(dict.fromkeys([*names, *extra]))
    out: dict[str, Any] = {}
    for name, opts in options.items():
        if name not in allowed:
            raise ValueError(
                f"{name}: with a harness mix, options are keyed by harness name; "
                f"{name!r} is not one of {allowed}"
            )
        if not isinstance(opts, dict):
            raise ValueError(f"{name}: expected a mapping of options, got {opts!r}")
        try:
            out[name] = check_options(known[name], opts)
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
    return out


def weights(value: HarnessField) -> dict[str, float]:
    """``{name: share}`` summing to 1 (one harness: ``{name: 1.0}``)."""
    if isinstance(value, str):
        return {value: 1.0}
    total = float(sum(value.values()))
    return {name: float(w) / total for name, w in value.items()}

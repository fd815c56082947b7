"""``claw-gen``: a generated claw suite with a held-out split.

Each family (:mod:`tasks.claw_gen.families`) turns a seeded random generator into one task
instance: randomised file names and content, a verifier that reads the workspace (or the final
answer checked against what the files hold) and a reference solution the oracle plays.
Instance ``i`` of family ``f`` is drawn from ``random.Random("claw-gen:f:i")``, so every machine
builds the same suite. The split is by instance: the first instances of every family are
``train``, the next ones ``test`` (the same skills, content never seen in training); most
families have 12 and 4, ``read_word`` (the skill the embedded ``tiny`` model learns by default)
192 and 48.

Suite names::

    claw-gen                  every instance of every family (train, then test)
    claw-gen/train            the training split
    claw-gen/test             the held-out split
    claw-gen/test/read_code,count_lines    a split restricted to some families
"""

from __future__ import annotations

import random
import re
from typing import Any

from tasks.claw_gen.families import FAMILIES
from tasks.schema import Task

SUITE = "claw-gen"
SPLITS = ("train", "test")
_NAME = re.compile(r"claw-gen(?:/(?P<split>[^/]*)(?:/(?P<families>[^/]*))?)?")


def is_generated(name: str) -> bool:
    """Whether ``name`` is a claw-gen suite name (valid or not: :func:`load` says what is
    wrong with it)."""
    return name == SUITE or name.startswith(SUITE + "/")


def split_range(family: str, split: str) -> range:
    """The instance indices of ``family`` in ``split``."""
    train, test = FAMILIES[family][1]
    return range(train) if split == "train" else range(train, train + test)


def instance(family: str, index: int) -> dict[str, Any]:
    """Instance ``index`` of ``family`` as a task mapping (validated by :func:`load`)."""
    make, (train, _) = FAMILIES[family]
    spec = make(random.Random(f"{SUITE}:{family}:{index}"), index)
    return {
        "id": f"{family}-{index:03d}",
        "limits": {"max_turns": 6, "timeout_s": 60, "max_tokens_per_turn": 256},
        **spec,
        "tags": ["claw-gen", family, "train" if index < train else "test"],
    }


def parse(name: str) -> tuple[list[str], list[str]]:
    """The splits and families a suite name selects; ``ValueError`` naming the part at fault
    otherwise."""
    m = _NAME.fullmatch(name)
    if not m:
        raise ValueError(f"{name}: expected claw-gen[/train|test[/FAMILY,...]]")
    split = m.group("split")
    if split is not None and split not in SPLITS:
        raise ValueError(f"{name}: unknown split {split!r} (known: train, test)")
    families = list(FAMILIES)
    if m.group("families") is not None:
        families = [f.strip() for f in m.group("families").split(",") if f.strip()]
        unknown = [f for f in families if f not in FAMILIES]
        if unknown or not families:
            raise ValueError(
                f"{name}: unknown family {unknown[0] if unknown else '(none)'!r} "
                f"(known: {', '.join(FAMILIES)})"
            )
    return ([split] if split else list(SPLITS)), families


def load(name: str) -> list[Task]:
    """The tasks of suite ``name``, family by family, instance by instance."""
    splits, families = parse(name)
    return [
        Task.model_validate(instance(f, i))
        for f in families
        for split in splits
        for i in split_range(f, split)
    ]


__all__ = [
    "FAMILIES",
    "SPLITS",
    "SUITE",
    "instance",
    "is_generated",
    "load",
    "parse",
    "split_range",
]

"""The words, names and helpers the claw-gen task families (:mod:`tasks.claw_gen.families`,
:mod:`tasks.claw_gen.formats`) draw from."""

from __future__ import annotations

import random
from typing import Any

Spec = dict[str, Any]
WORDS = [
    "amber",
    "basil",
    "cedar",
    "delta",
    "ember",
    "fjord",
    "garnet",
    "harbor",
    "indigo",
    "juniper",
    "kestrel",
    "lagoon",
    "maple",
    "nectar",
    "onyx",
    "pepper",
    "quartz",
    "raven",
    "saffron",
    "tundra",
    "umber",
    "velvet",
    "willow",
    "yarrow",
    "zephyr",
]
NAMES = [
    "ana",
    "ben",
    "chloe",
    "dev",
    "elif",
    "farid",
    "gita",
    "hugo",
    "ines",
    "jonas",
    "kira",
    "liam",
    "mei",
    "nora",
    "omar",
]
CITIES = ["Oslo", "Lima", "Pune", "Quito", "Riga", "Sofia", "Turin", "Vigo"]
DOMAINS = ("example.org", "mail.test", "corp.example")
EXTS = ("txt", "md", "log", "csv")


def _word(rng: random.Random) -> str:
    return rng.choice(WORDS)


def _file(rng: random.Random, ext: str = "txt") -> str:
    return f"{_word(rng)}_{rng.randint(10, 99)}.{ext}"


def _answer(value: Any) -> dict[str, Any]:
    return {"type": "answer_equals", "value": str(value)}


def _py(code: str) -> str:
    """A shell step that runs ``code`` with python3 (a quoted heredoc: nothing expands)."""
    return f"python3 - <<'PY'\n{code.strip()}\nPY"

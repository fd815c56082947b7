"""The Verifier interface: turns the state a harness left behind into a reward."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from forge.sandboxes.base import Sandbox


@dataclass
class Verdict:
    reward: float  # 1.0 right, 0.0 wrong (partial credit only where a verifier says so)
    detail: str = ""
    # What the verifier's own run printed or wrote, by name (Harbor's test stdout, ctrf.json),
    # and what the agent changed outside its workdir: kept with the episode, shown by the viewer
    outputs: dict[str, str] = field(default_factory=dict)


class Verifier(Protocol):
    """Built from the ``verifier`` mapping of a task (``type`` picks the class)."""

    def verify(self, sandbox: Sandbox, final_answer: str | None) -> Verdict: ...


VerifierSpec = dict[str, Any]

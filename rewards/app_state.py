"""App state: what a task's services (``tasks.services``) hold after the episode.

The state is the HarnessPod's (the agent reaches it only through the services' operations),
handed to the verifier by the episode, so only what was done counts (the mail actually sent,
the event actually moved), never what the agent said::

    verifier:
      - type: app_state
        service: mail
        collection: messages
        match: {folder: sent, to: priya@northwind.example, subject: {contains: budget}}
      - {type: app_state, service: calendar, collection: events, match: {id: ev-004},
         expect: {start: "2026-03-06 15:00"}}
      - {type: app_state, service: mail, collection: messages,
         match: {folder: sent, to: sam.ortiz@harbor.example}, count: 0}   # a distractor

``match`` selects records of the collection: a field equals a value (strings compared without
case or surrounding space; a list field contains it), or ``{contains: TEXT}`` (a substring,
any list element), ``{not: VALUE}``, ``{in: [VALUES]}``, ``{all: [VALUES]}`` (a list field
holds each). ``count``: exactly that many match (default: at least one). ``expect``: every
matched record also satisfies these (same forms), so a wrong change reads as "found, but".
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from pydantic import Field

from forge.sandboxes.base import Sandbox
from rewards.base import Verdict
from rewards.common import VerifierModel, clip

OPS = ("contains", "not", "in", "all")


def _norm(value: Any) -> Any:
    return value.strip().casefold() if isinstance(value, str) else value


def _equal(have: Any, want: Any) -> bool:
    if isinstance(have, list) and not isinstance(want, list):
        return any(_norm(h) == _norm(want) for h in have)
    if isinstance(have, list) and isinstance(want, list):
        return sorted(map(json.dumps, map(_norm, have))) == sorted(
            map(json.dumps, map(_norm, want))
        )
    return _norm(have) == _norm(want)


def holds(have: Any, want: Any) -> bool:
    """Whether a record's field value ``have`` satisfies ``want`` (see the module docstring)."""
    if isinstance(want, dict) and len(want) == 1 and next(iter(want)) in OPS:
        op, arg = next(iter(want.items()))
        if op == "contains":
            texts = have if isinstance(have, list) else [have]
            return any(str(arg).casefold() in str(t).casefold() for t in texts)
        if op == "not":
            return not _equal(have, arg)
        if op == "in":
            return any(_equal(have, a) for a in arg)
        return all(_equal(have, a) for a in arg)  # all
    return _equal(have, want)


def _satisfies(record: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    """The fields of ``spec`` that ``record`` does not satisfy."""
    return [k for k, want in spec.items() if not holds(record.get(k), want)]


class AppState(VerifierModel):
    kind: ClassVar[str] = "app_state"
    reads_sandbox: ClassVar[bool] = False  # it reads the services' state, not the workspace
    reads_state: ClassVar[bool] = True

    service: str = Field(description="The service whose state is read (mail, calendar, ...).")
    collection: str = Field(
        description="The list in its state: messages, events, contacts, notes, items."
    )
    match: dict[str, Any] = Field(default_factory=dict, description="Which records (see above).")
    count: int | None = Field(
        default=None, ge=0, description="Exactly this many match (default: at least one)."
    )
    expect: dict[str, Any] = Field(
        default_factory=dict, description="What every matched record must also hold."
    )

    def verify(self, sandbox: Sandbox, final_answer: str | None) -> Verdict:
        raise RuntimeError("app_state reads the services' state: verify_state(apps)")

    def verify_state(
        self, apps: dict[str, Any] | None, transcript: Any = None, final_answer: str | None = None
    ) -> Verdict:
        state = (apps or {}).get(self.service)
        if state is None:
            return Verdict(0.0, f"{self.service}: this attempt had no such service")
        records = state.get(self.collection)
        if not isinstance(records, list):
            return Verdict(0.0, f"{self.service}: no collection {self.collection!r}")
        found = [r for r in records if isinstance(r, dict) and not _satisfies(r, self.match)]
        what = f"{self.service}.{self.collection} matching {clip(json.dumps(self.match), 200)}"
        if self.count is not None and len(found) != self.count:
            return Verdict(0.0, f"{len(found)} of {what}, expected {self.count}")
        if self.count is None and not found:
            return Verdict(0.0, f"no {what}")
        for record in found:
            wrong = _satisfies(record, self.expect)
            if wrong:
                shown = {k: record.get(k) for k in wrong}
                return Verdict(0.0, f"{what} found, but {clip(json.dumps(shown), 300)}")
        return Verdict(1.0, f"{len(found)} of {what}")

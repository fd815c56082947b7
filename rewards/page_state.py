"""Page state: a web application's recorded state holds what the task asked for.

The application (``tasks/webapps/server.py``, or a MiniWoB page's ``miniwob_server.py``) is kept
by the HarnessPod outside the agent's sandbox (:mod:`tasks.webapps.hosted`); the browser in the
sandbox reaches it through a relay, and its state after the episode is handed to the verifier
(``apps["page"]``), so nothing the agent writes into its sandbox is read. The agent's final
answer plays no part either: only what the application recorded (orders placed, mails sent,
slots booked, events moved, MiniWoB's own reward) counts::

    verifier:
      type: page_state
      expect: {orders.length: 1, "orders[0].items[0].name": Blue mug}
      checks:
        - {path: "sent[0].body", contains: tuesday, ignore_case: true}

Paths are those of ``json_field`` (``a.b[0].c``; ``length`` of a list), see
:func:`rewards.json_check.lookup`.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from forge.sandboxes.base import Sandbox
from rewards.base import Verdict
from rewards.common import VerifierModel, clip
from rewards.json_check import _MISSING, json_equal, lookup, path_parts

PAGE = "page"  # the page application's state in ``apps`` (tasks.webapps.hosted.PAGE)
OPS = ("equals", "contains")


def _check_path(path: str) -> str:
    if not path.strip() or any(not p for p in path_parts(path)):
        raise ValueError(f"path {path!r} has an empty part")
    return path


class Check(BaseModel):
    """One expectation: the value at ``path`` ``equals`` a JSON value, or ``contains`` one (a
    substring of a string, an element of a list, a key of an object)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    path: str = Field(min_length=1, description="Dotted path into the state ('a.b[0].c').")
    equals: Any = Field(default=None, description="The expected JSON value.")
    contains: Any = Field(default=None, description="A substring, list element or key.")
    ignore_case: bool = Field(default=False, description="Compare strings case-insensitively.")

    @field_validator("path")
    @classmethod
    def _path_parts(cls, v: str) -> str:
        return _check_path(v)

    @model_validator(mode="after")
    def _one_op(self) -> Check:
        given = [op for op in OPS if op in self.model_fields_set]
        if len(given) != 1:
            raise ValueError(f"give exactly one of {', '.join(OPS)} (got {len(given)})")
        return self

    @property
    def op(self) -> str:
        return "equals" if "equals" in self.model_fields_set else "contains"

    def holds(self, value: Any) -> bool:
        want = self.equals if self.op == "equals" else self.contains
        fold = self.ignore_case

        def same(a: Any, b: Any) -> bool:
            if fold and isinstance(a, str) and isinstance(b, str):
                return a.casefold() == b.casefold()
            return json_equal(a, b)

        if self.op == "equals":
            return same(value, want)
        if isinstance(value, str) and isinstance(want, str):
            return want.casefold() in value.casefold() if fold else want in value
        if isinstance(value, list):
            return any(same(item, want) for item in value)
        if isinstance(value, dict):
            return any(same(key, want) for key in value)
        return False


class PageState(VerifierModel):
    """Reward 1 when the page application's state holds every expectation."""

    kind: ClassVar[str] = "page_state"
    reads_sandbox: ClassVar[bool] = False  # it reads the state the HarnessPod kept
    reads_state: ClassVar[bool] = True
    expect: dict[str, Any] = Field(
        default_factory=dict, description="Shorthand: path -> the JSON value it equals."
    )
    checks: list[Check] = Field(
        default_factory=list, description="Expectations: {path, equals | contains, ignore_case}."
    )

    @field_validator("expect")
    @classmethod
    def _expect_paths(cls, v: dict[str, Any]) -> dict[str, Any]:
        for path in v:
            _check_path(path)
        return v

    @model_validator(mode="after")
    def _something_expected(self) -> PageState:
        if not self.expect and not self.checks:
            raise ValueError("expects nothing: give expect or checks")
        return self

    def all_checks(self) -> list[Check]:
        shorthand = [Check(path=p, equals=v) for p, v in self.expect.items()]
        return shorthand + list(self.checks)

    def verify(self, sandbox: Sandbox, final_answer: str | None) -> Verdict:
        raise RuntimeError("page_state reads the page application's state: verify_state(apps)")

    def verify_state(
        self, apps: dict[str, Any] | None, transcript: Any = None, final_answer: str | None = None
    ) -> Verdict:
        """The verdict on the state the HarnessPod kept (``apps["page"]``)."""
        doc = (apps or {}).get(PAGE)
        if doc is None:
            return Verdict(0.0, "no application state: this attempt had no page application")
        try:
            return self._check(doc)
        except RecursionError:  # nested too deep to walk: not the state any task asks for
            return Verdict(0.0, "the application state is nested too deeply to check")

    def verify_text(self, text: str) -> Verdict:
        """The verdict on a state file's text (the development tools that run an application
        on its own, with ``--state``)."""
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            return Verdict(0.0, f"the application state is not valid JSON: {e}")
        except RecursionError:
            return Verdict(0.0, "the application state is nested too deeply to parse")
        return self.verify_state({PAGE: doc})

    def _check(self, doc: Any) -> Verdict:
        checks = self.all_checks()
        failed: list[str] = []
        for check in checks:
            value, why = lookup(doc, check.path)
            want = json.dumps(check.equals if check.op == "equals" else check.contains)
            if value is _MISSING:
                failed.append(f"{check.path}: {why}")
            elif not check.holds(value):
                shown = clip(json.dumps(value, default=str))
                failed.append(f"{check.path} is {shown}, expected it to {check.op} {clip(want)}")
        if failed:
            return Verdict(0.0, "page state: " + "; ".join(failed))
        return Verdict(1.0, f"page state: all {len(checks)} expectations hold")

"""Rule checks over the transcript (:mod:`forge.transcript`): the episode as the model proxy
recorded it, never a transcript the agent wrote. What the agent *did* through its tools is
checked where no file shows it (a search it ran, a message it sent through a tool)::

    verifier:
      - {type: transcript, tool: "mail*", args: {to: {contains: priya}}}   # a call like this
      - {type: transcript, tool: bash, args: {command: {contains: "rm -rf"}}, count: 0}
      - {type: transcript, said: "(?i)the total is 555"}      # an assistant message says it

``tool``: a tool name (glob); ``args``: each argument holds (the forms of ``app_state``:
a value, ``{contains: ...}``, ``{not: ...}``, ``{in: [...]}``, ``{all: [...]}``);
``result_contains``: its result holds this text; ``count``: exactly this many calls match
(default: at least one). ``said``: a regex some assistant message (or the final answer)
matches.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any, ClassVar

from pydantic import Field, model_validator

from forge.sandboxes.base import Sandbox
from rewards.app_state import holds
from rewards.base import Verdict
from rewards.common import VerifierModel, clip


class TranscriptCheck(VerifierModel):
    kind: ClassVar[str] = "transcript"
    reads_sandbox: ClassVar[bool] = False
    reads_transcript: ClassVar[bool] = True

    tool: str | None = Field(default=None, description="A tool name the call has (a glob).")
    args: dict[str, Any] = Field(default_factory=dict, description="What its arguments hold.")
    result_contains: str | None = Field(default=None, description="Text its result holds.")
    count: int | None = Field(
        default=None, ge=0, description="Exactly this many calls match (default: at least one)."
    )
    said: str | None = Field(
        default=None, description="A regex some assistant message or the final answer matches."
    )

    @model_validator(mode="after")
    def _something(self) -> TranscriptCheck:
        if self.tool is None and self.said is None:
            raise ValueError("give tool (a call to look for) or said (a regex), or both")
        if self.said is not None:
            re.compile(self.said)
        return self

    def verify(self, sandbox: Sandbox, final_answer: str | None) -> Verdict:
        return Verdict(0.0, "transcript: no transcript was handed to this verifier")

    def verify_with(
        self, sandbox: Sandbox, final_answer: str | None, transcript: dict[str, Any] | None
    ) -> Verdict:
        if transcript is None:
            return self.verify(sandbox, final_answer)
        notes = []
        if self.said is not None:
            texts = [m.get("content") or "" for m in transcript.get("messages") or []
                     if m.get("role") == "assistant"] + [final_answer or ""]  # fmt: skip
            if not any(re.search(self.said, t) for t in texts):
                return Verdict(0.0, f"no assistant message matches {self.said!r}")
            notes.append(f"said {self.said!r}")
        if self.tool is not None:
            found = [c for c in transcript.get("tool_calls") or [] if self._matches(c)]
            what = f"calls of {self.tool}" + (
                f" with {clip(str(self.args), 160)}" if self.args else ""
            )
            if self.count is not None and len(found) != self.count:
                return Verdict(0.0, f"{len(found)} {what}, expected {self.count}")
            if self.count is None and not found:
                return Verdict(0.0, f"no {what}")
            notes.append(f"{len(found)} {what}")
        return Verdict(1.0, "; ".join(notes))

    def _matches(self, call: dict[str, Any]) -> bool:
        if not fnmatch.fnmatchcase(str(call.get("name", "")), self.tool or "*"):
            return False
        arguments = call.get("arguments") or {}
        if any(not holds(arguments.get(k), want) for k, want in self.args.items()):
            return False
        result = call.get("result") or ""
        return self.result_contains is None or self.result_contains in result

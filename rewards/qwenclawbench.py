"""QwenClawBench's scoring (``tasks: qwenclawbench:PATH``, :mod:`tasks.qwenclawbench`), as the
benchmark scores a task: its automated part, the task's own ``grade(transcript, workspace)``
function (the mean of the scores it returns), and its judge part, a model reading the task, its
expected behaviour and rubric, combined with the benchmark's gate::

    reward = (w_auto * auto + w_judge * judge * [auto >= 0.75]) / (w_auto + w_judge)

``grade()`` runs in a verifier sandbox of its own (a copy of the agent's workspace; its code
may run the agent's), handed the transcript as the proxy recorded it in the shape the
benchmark's graders read: OpenClaw's session entries (``{"type": "message", "message": {"role":
"assistant", "content": [{"type": "toolCall", "name", "arguments"}]}}``, tool results as role
``toolResult``). A ``grade()`` that raises or prints no scores is an automated part of 0 (its
error kept with the episode). When the automated part is under the gate the judge, which could
not change the reward, is not asked.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from forge.sandboxes.base import Sandbox
from rewards.base import Verdict
from rewards.command import INTERPRETER_ENV
from rewards.common import VerifierModel
from rewards.judge import Judge

GATE = 0.75
FOLDER = "qwenclawbench"
RUNNER = """\
import json, os, sys
here = os.path.join(os.environ["VERIFIER_DIR"], "qwenclawbench")
space = {"__name__": "qwenclawbench_checks"}
exec(compile(open(os.path.join(here, "checks.py")).read(), "checks.py", "exec"), space)
with open(os.path.join(here, "transcript.json")) as f:
    transcript = json.load(f)
scores = space["grade"](transcript, sys.argv[1])
print("FORGE-SCORES " + json.dumps(scores, default=str))
"""


def openclaw_session(transcript: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The transcript (:mod:`forge.transcript`) as OpenClaw's session entries."""
    entries: list[dict[str, Any]] = []
    for m in (transcript or {}).get("messages") or []:
        if m["role"] == "user":
            message = {"role": "user", "content": [{"type": "text", "text": m["content"]}]}
        elif m["role"] == "assistant":
            content = [{"type": "text", "text": m["content"]}] if m.get("content") else []
            content += [
                {"type": "toolCall", "id": c["id"], "name": c["name"], "arguments": c["arguments"]}
                for c in m.get("tool_calls") or []
            ]
            message = {"role": "assistant", "content": content}
        elif m["role"] == "tool":
            message = {"role": "toolResult", "toolCallId": m["tool_call_id"],
                       "toolName": m.get("name", ""), "isError": False,
                       "content": [{"type": "text", "text": m["content"]}]}  # fmt: skip
        else:
            continue
        entries.append({"type": "message", "message": message})
    return entries


def _mean(scores: Any) -> float | None:
    if not isinstance(scores, dict):
        return None
    values = [float(v) for v in scores.values() if isinstance(v, int | float)]
    return sum(values) / len(values) if values else 0.0


class QwenClawBench(VerifierModel):
    kind: ClassVar[str] = "qwenclawbench"
    runs_commands: ClassVar[bool] = True
    reads_transcript: ClassVar[bool] = True

    grading_type: Literal["automated", "hybrid", "llm_judge"] = Field(
        description="Which parts score the task."
    )
    grade: str | None = Field(default=None, description="The task's grade() function (Python).")
    weights: dict[Literal["automated", "llm_judge"], float] = Field(
        default={"automated": 0.5, "llm_judge": 0.5}, description="Each part's weight."
    )
    rubric: str = Field(default="", description="What the judge reads: task, behaviour, rubric.")
    judge: dict[str, Any] = Field(
        default_factory=dict, description="Options of the judge (rewards.judge.Judge)."
    )
    timeout_s: float = Field(default=120.0, gt=0, description="Most seconds grade() runs.")

    @model_validator(mode="after")
    def _judge_options(self) -> QwenClawBench:
        if self.grading_type != "automated":
            self._judge()  # its options, checked at load
        return self

    def _judge(self) -> Judge:
        options = {"sees": ["transcript", "answer"], "parse": "json", **self.judge}
        return Judge(rubric=self.rubric or "-", **options)

    def judges(self) -> list[Judge]:
        """The judge it asks, if its judge part counts (:func:`rewards.registry.judges`)."""
        scored = self.grading_type != "automated" and self.weights.get("llm_judge", 0.5) > 0
        return [self._judge()] if scored else []

    def own_files(self) -> dict[str, str]:
        if self.grade is None:
            return {}
        return {f"{FOLDER}/checks.py": self.grade, f"{FOLDER}/run.py": RUNNER}

    def verify(self, sandbox: Sandbox, final_answer: str | None) -> Verdict:
        return self.verify_with(sandbox, final_answer, None)

    def _automated(self, sandbox: Any, transcript: Any) -> tuple[float, dict[str, str]]:
        if self.grade is None:
            return 0.0, {"grade": "no grade() in the task"}
        here = f"{sandbox.verifier_dir}/{FOLDER}"
        sandbox.put_file(f"{here}/transcript.json", json.dumps(openclaw_session(transcript)))
        result = sandbox.exec(
            ["python3", f"{here}/run.py", sandbox.workspace], self.timeout_s, INTERPRETER_ENV
        )
        line = next((ln for ln in reversed(result.stdout.splitlines())
                     if ln.startswith("FORGE-SCORES ")), None)  # fmt: skip
        scores = json.loads(line.removeprefix("FORGE-SCORES ")) if line else None
        auto = _mean(scores)
        if auto is None:
            why = "timed out" if result.timed_out else f"exited {result.exit_code}"
            return 0.0, {"grade": f"grade() {why}: {result.stderr[-2000:]}"}
        return auto, {"grade": json.dumps(scores)}

    def verify_with(self, sandbox: Sandbox, final_answer: str | None, transcript: Any) -> Verdict:
        wa, wl = self.weights.get("automated", 0.5), self.weights.get("llm_judge", 0.5)
        if self.grading_type == "llm_judge":
            wa = 0.0
        auto, outputs = (0.0, {}) if wa == 0 else self._automated(sandbox, transcript)
        detail = f"automated {auto:.3f}"
        if self.grading_type == "automated" or wl == 0:
            return Verdict(auto, detail, outputs)
        if wa and auto < GATE:
            return Verdict(wa * auto / (wa + wl), f"{detail} (under {GATE}: judge not asked)",
                           outputs)  # fmt: skip
        verdict = self._judge().verify_with(sandbox, final_answer, transcript)
        reward = (wa * auto + wl * verdict.reward) / (wa + wl)
        return Verdict(reward, f"{detail}; {verdict.detail}", {**outputs, **verdict.outputs})

"""Runs one ClawEval task's grader, as a script, with the benchmark checkout's ``src/`` on the
path and the checkout as its working folder (:mod:`rewards.claweval` starts it).

    python claweval_grade.py INPUT.json

INPUT holds the task folder, the transcript as ClawEval's messages, the tool dispatches the
HarnessPod recorded and each service's audit. The grader's judge is a relay: each question is
one JSON line on this program's original stdout, answered by one line on its stdin (the
verifier asks the run's judge). The last line out is ``{"scores": ..., "task_score": ...}``.
Whatever the grader prints goes to stderr.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import IO, Any


class JudgeRelay:
    """Stands in for ClawEval's ``LLMJudge``: the same methods, answered by the verifier."""

    def __init__(self, wire: IO[str], answers: IO[str]) -> None:
        self.wire, self.answers = wire, answers
        self.calls: list[dict[str, Any]] = []

    def _ask(self, method: str, **fields: Any) -> Any:
        self.wire.write(json.dumps({"judge": method, **fields}, default=str) + "\n")
        self.wire.flush()
        answer = json.loads(self.answers.readline() or "{}")
        if "score" not in answer:
            raise RuntimeError(f"judge relay: {answer.get('error') or 'no answer'}")
        self.calls.append({"method": method, "score": answer["score"]})
        return _result(float(answer["score"]), str(answer.get("reasoning", "")))

    def evaluate(
        self, task_prompt: str, conversation: str, actions_summary: str, rubric: str
    ) -> Any:
        return self._ask("evaluate", task_prompt=task_prompt, conversation=conversation,
                         actions_summary=actions_summary, rubric=rubric)  # fmt: skip

    def evaluate_actions(self, task_prompt: str, artifacts: str, rubric: str) -> Any:
        return self._ask("evaluate_actions", task_prompt=task_prompt, artifacts=artifacts,
                         rubric=rubric)  # fmt: skip

    def evaluate_visual(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a visual judge (images) is not supported by OpenForge's relay")

    def get_call_log(self) -> list[dict[str, Any]]:
        return list(self.calls)

    def reset_call_log(self) -> None:
        self.calls.clear()


def _result(score: float, reasoning: str) -> Any:
    try:  # the benchmark's own result type where it can be had
        from claw_eval.graders.llm_judge import JudgeResult

        return JudgeResult(score=score, reasoning=reasoning)
    except Exception:  # its module needs the openai client; a plain record will do
        return SimpleNamespace(score=score, reasoning=reasoning)


def main(argv: list[str]) -> int:
    wire = os.fdopen(os.dup(1), "w")  # the relay's channel: the grader's prints go to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    data = json.loads(Path(argv[1]).read_text())
    from claw_eval.graders.registry import get_grader
    from claw_eval.models.scoring import compute_task_score
    from claw_eval.models.task import TaskDefinition
    from claw_eval.models.trace import ToolDispatch, TraceMessage

    task_dir = Path(data["task_dir"])
    task = TaskDefinition.from_yaml(task_dir / "task.yaml")
    grader = get_grader(task.task_id, tasks_dir=task_dir.parent, task_dir=task_dir)
    messages = [TraceMessage(trace_id="forge", message=m) for m in data["messages"]]
    dispatches = [ToolDispatch(trace_id="forge", **d) for d in data["dispatches"]]
    kwargs: dict[str, Any] = {"audit_data": data["audit"], "judge": JudgeRelay(wire, sys.stdin)}
    if "media_events" in inspect.signature(grader.grade).parameters:
        kwargs["media_events"] = []
    scores = grader.grade(messages, dispatches, task, **kwargs)
    out = {"scores": scores.model_dump(), "task_score": compute_task_score(scores)}
    wire.write(json.dumps(out) + "\n")
    wire.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

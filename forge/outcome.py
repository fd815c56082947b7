"""How an attempt ended, by cause (DESIGN.md decision 5), and how long an attempt may take.

An attempt's ``failure`` names what the infrastructure caused; it is retried in a fresh
sandbox, never scored:

- ``sandbox_error``: the sandbox broke (create, exec, files).
- ``service_failed``: one of the task's services or its X display never came up.
- ``proxy_error``: the Policy or the proxy erred on a call.
- ``policy_stalled``: the harness's wall-clock cap passed while its own time (wall time less the
  time its calls spent inside the Policy: queued, generating, held by a weight update) had not
  run out: the Policy was too slow, not the agent.
- ``harness_hung``: the harness ran out of time before any model call.
- ``harness_killed``: a signal ended the harness before the model's first answer reached it.
- ``harness_crash``: it exited non-zero before the model's first answer reached it, or while it
  waited on a model call (a client that gave up on a slow Policy), with nothing the model did
  to explain it.
- ``proxy_rejected``: the proxy refused what the harness sent (a 4xx it answered, listed first
  in the episode's log: a field it cannot parse, an unknown model) and the harness gave up,
  or exited 0 with no answer delivered (its "answer" then is the error it was shown).

``truncated`` names what the policy caused; the episode is real, scored 0 and trained on:

- ``context_full``: the Policy refused the prompt as longer than the model's context.
- ``history_too_large``: after the model's answers the history grew past the proxy's
  ``max_body_bytes`` (413); before any answer it is ``proxy_rejected``.
- ``turn_limit``: the proxy refused a call past ``proxy.max_turns_per_attempt`` or the task's
  ``max_turns`` (429), or the harness used up the task's turns and did not finish.
- ``token_limit``: the last answer was cut at the token limit.
- ``unparseable_tool_call``: the last answer held tool calls that could not be parsed.
- ``timeout``: the harness's own time (the task's ``timeout_s``, not counting time inside
  the Policy) ran out after a model call: it waited on the model's commands or froze after an
  answer (from outside the two look the same).
- ``harness_killed_by_policy``: a signal ended the harness after the model's answers reached
  it: the model's commands kill their harness (``kill -9 $PPID``), or hit the sandbox's own
  limits (a fork bomb, memory), or may have arranged it (a background ``kill``); from outside
  these look the same as a kill from elsewhere, and counting them as infrastructure would let
  the policy turn its failures into retries.
- ``harness_crash_after_reply``: the harness exited non-zero right after the model's answer
  reached it (none in flight): what it was handed, or what its commands did, ended it.

Both None: the harness finished (exit 0); its verifier decides, also after a refused call
from which the harness recovered. A harness that exits 0 after its last answer held a tool
call that could not be parsed still ends ``token_limit`` (when that answer was cut at the limit)
or ``unparseable_tool_call``: the action the model meant never happened. A plain answer cut at
the limit is still the answer the harness gave: its verifier decides (the toy suite's dense
reward counts the sevens of a cut reply). A wrong answer is reward 0 with neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from forge.config import ATTEMPT_SLACK_S
from forge.sandboxes import services
from forge.sandboxes.base import ExecResult

if TYPE_CHECKING:
    from actors.attempt_state import AttemptState
    from tasks.schema import Task

SANDBOX_SLACK_S = 60.0  # the agent's sandbox outlives the harness's cap by this much (copy-out)
INFRA_FAILURES = (
    "sandbox_error",
    "service_failed",
    "proxy_error",
    "policy_stalled",
    "harness_hung",
    "harness_killed",
    "harness_crash",
    "proxy_rejected",
)
POLICY_TRUNCATIONS = (
    "context_full",
    "history_too_large",
    "turn_limit",
    "token_limit",
    "unparseable_tool_call",
    "timeout",
    "harness_killed_by_policy",
    "harness_crash_after_reply",
)


def _policy_refusal(state: AttemptState, delivered: int) -> str | None:
    """The reason of a refused call that the policy caused, if any."""
    for reason in ("context_full", "turn_limit"):
        if state.rejected.get(reason):
            return reason
    if delivered and state.rejected.get("history_too_large"):
        return "history_too_large"  # its own answers grew the history past the proxy's limit
    return None


def _cut(last: Any) -> str | None:
    """``token_limit`` or ``unparseable_tool_call`` when the last answer delivered was cut at
    the token limit or held tool calls that could not be parsed."""
    if last is not None and last.finish_reason == "length":
        return "token_limit"
    if last is not None and last.invalid_tool_calls:
        return "unparseable_tool_call"
    return None


def classify_end(
    result: ExecResult | None, state: AttemptState, max_turns: int, stalled: bool = False
) -> tuple[str | None, str | None]:
    """``(failure, truncated)`` of an attempt whose harness has returned; see the module's
    docstring for each reason. ``stalled``: the harness was stopped at its wall-clock cap
    while its own time (less the time inside the Policy) had not run out."""
    if result is None:
        return "sandbox_error", None
    if services.service_failed(result):  # a service or the display never came up
        return "service_failed", None
    if state.errors:
        return "proxy_error", None
    delivered = [t for t in state.turns if t.delivered]
    by_policy = _policy_refusal(state, len(delivered))
    if result.timed_out:
        if stalled:
            return "policy_stalled", None
        if by_policy:
            return None, by_policy
        if state.turns:
            return None, "timeout"
        return ("proxy_rejected" if state.refusals else "harness_hung"), None
    last = delivered[-1] if delivered else None
    if result.exit_code == 0:  # finished: the verifier decides, unless nothing got through
        if state.refusals and not delivered and by_policy is None:
            return "proxy_rejected", None
        # or its last answer was an action that never happened (a tool call cut or unparseable)
        return None, _cut(last) if last is not None and last.invalid_tool_calls else None
    if by_policy:
        return None, by_policy
    if result.exit_code < 0 or result.exit_code > 128:  # a signal
        return (None, "harness_killed_by_policy") if delivered else ("harness_killed", None)
    if len(delivered) >= max_turns:
        return None, "turn_limit"
    if _cut(last):
        return None, _cut(last)
    if state.refusals:  # the proxy refused what the harness sent: not the harness's own crash
        return "proxy_rejected", None
    if last is not None and state.turns[-1].delivered and not state.waiting_at_close:
        return None, "harness_crash_after_reply"
    return "harness_crash", None


def attempt_seconds_needed(task: Task) -> float:
    """The least wall-clock time an attempt of ``task`` needs when the Policy answers at once:
    the harness's time limit, its verifiers' commands' and :data:`ATTEMPT_SLACK_S` (sandboxes
    made, the workspace copied out)."""
    from rewards.runner import verifier_seconds

    return task.limits.timeout_s + verifier_seconds(task) + ATTEMPT_SLACK_S


def check_attempt_timeout(
    attempt_timeout_s: float, tasks: list[Task] | list[dict[str, Any]]
) -> None:
    """:class:`~forge.config.ConfigError` naming ``rollout.attempt_timeout_s`` when it is
    shorter than what one of ``tasks`` needs (:func:`attempt_seconds_needed`): such an attempt
    would be cut off, and retried as an infrastructure failure, whatever the agent did."""
    from forge.config import ConfigError
    from tasks.schema import Task

    worst: tuple[float, str] | None = None
    for task in tasks:
        task = Task.model_validate(task) if isinstance(task, dict) else task
        need = attempt_seconds_needed(task)
        if need > attempt_timeout_s and (worst is None or need > worst[0]):
            worst = (need, task.id)
    if worst is not None:
        need, task_id = worst
        raise ConfigError(
            f"rollout.attempt_timeout_s: {attempt_timeout_s:g}s is shorter than task "
            f"{task_id!r} needs: {need:g}s (its limits.timeout_s, its verifiers' command "
            f"timeouts and {ATTEMPT_SLACK_S:g}s); raise it or lower the task's timeout_s"
        )


def harness_cap_s(task: Task, attempt_timeout_s: float | None) -> float:
    """The harness's wall-clock cap: its time limit plus what the Policy may keep it waiting,
    which is the attempt's time left over by :func:`attempt_seconds_needed` (without
    ``attempt_timeout_s``: the time limit once more)."""
    timeout = task.limits.timeout_s
    if attempt_timeout_s is None:
        return 2 * timeout
    return timeout + max(0.0, attempt_timeout_s - attempt_seconds_needed(task))

"""How an attempt ended: the policy's doing (scored 0, trained on) or the infrastructure's
(retried), from what the sandbox returned and what the proxy saw (DESIGN.md decision 5)."""

from __future__ import annotations

import pytest

from actors.harness_pod import AttemptState
from forge.episode import classify_end
from forge.sandboxes.base import ExecResult
from forge.sandboxes.services_launch import MARKER, SERVICE_FAILED
from forge.types import Turn


def _turn(i: int, finish: str = "stop", invalid: int = 0, delivered: bool = True) -> Turn:
    return Turn(
        "e",
        0,
        i,
        "chat",
        {},
        [1],
        [2],
        [0.0],
        "",
        [],
        finish,
        0,
        0.0,
        float(i),
        invalid_tool_calls=invalid,
        delivered=delivered,
    )


def _state(
    *turns: Turn, errors: tuple[str, ...] = (), refusals: tuple[str, ...] = (), **rejected: int
) -> AttemptState:
    state = AttemptState("e", 0, "k", turns=list(turns), errors=list(errors), rejected=rejected)
    state.refusals = list(refusals)
    return state


REFUSED = ("400 messages[1].role: unknown role 'wizard'",)


EXIT0 = ExecResult(0, "", "")
CRASH = ExecResult(1, "", "Traceback ...")
TIMEOUT = ExecResult(-1, "", "", timed_out=True)
SERVICE_DOWN = ExecResult(SERVICE_FAILED, "", f"{MARKER}: service 0 exited with status 3")


KILLED = ExecResult(-9, "", "")  # SIGKILL (local backend)
KILLED_SH = ExecResult(137, "", "")  # SIGKILL through a shell or container


def _waiting(state: AttemptState) -> AttemptState:
    state.waiting_at_close = True  # the harness ended while a call of it was in the Policy
    return state


@pytest.mark.parametrize(
    ("result", "state", "expected"),
    [
        (EXIT0, _state(_turn(0)), (None, None)),  # finished: the verifier decides
        (EXIT0, _state(), (None, None)),  # never called the model: its answer is judged
        # exited 0 after a tool call cut at the limit or unparseable: the action never happened
        (EXIT0, _state(_turn(0), _turn(1, finish="length", invalid=1)), (None, "token_limit")),
        (EXIT0, _state(_turn(0, invalid=1)), (None, "unparseable_tool_call")),
        (EXIT0, _state(_turn(0, invalid=1), _turn(1)), (None, None)),  # it recovered
        (EXIT0, _state(_turn(0, finish="length")), (None, None)),  # a cut reply is its answer
        (None, _state(), ("sandbox_error", None)),
        (SERVICE_DOWN, _state(), ("service_failed", None)),  # the launcher's own failure
        (ExecResult(SERVICE_FAILED, "", "no marker"), _state(), ("harness_crash", None)),
        (CRASH, _state(_turn(0), errors=("engine died",)), ("proxy_error", None)),
        (TIMEOUT, _state(), ("harness_hung", None)),  # never called the model
        (TIMEOUT, _state(_turn(0)), (None, "timeout")),  # waited on the model or its commands
        (CRASH, _state(_turn(0), context_full=1), (None, "context_full")),
        (CRASH, _state(_turn(0), turn_limit=1), (None, "turn_limit")),  # the proxy's 429
        (CRASH, _state(_turn(0), _turn(1), _turn(2)), (None, "turn_limit")),  # the task's limit
        (CRASH, _state(_turn(0, finish="length")), (None, "token_limit")),
        (CRASH, _state(_turn(0, invalid=1)), (None, "unparseable_tool_call")),
        # the proxy refused what the harness sent, and it gave up: never a disguised crash
        (CRASH, _state(_turn(0), refusals=REFUSED), ("proxy_rejected", None)),
        (CRASH, _state(refusals=REFUSED), ("proxy_rejected", None)),
        (TIMEOUT, _state(refusals=REFUSED), ("proxy_rejected", None)),  # retried it until killed
        (EXIT0, _state(_turn(0), refusals=REFUSED), (None, None)),  # it recovered: verifier says
        (CRASH, _state(_turn(0), refusals=REFUSED, context_full=1), (None, "context_full")),
        # before any answer reached the harness, nothing the model did explains its end
        (KILLED, _state(), ("harness_killed", None)),
        (KILLED_SH, _state(_turn(0, delivered=False)), ("harness_killed", None)),
        (CRASH, _state(), ("harness_crash", None)),
        # an answer the harness never got does not count towards the turn limit, and a crash
        # after it is a client that gave up on the Policy
        (CRASH, _state(_turn(0), _turn(1), _turn(2, delivered=False)), ("harness_crash", None)),
        (CRASH, _waiting(_state(_turn(0))), ("harness_crash", None)),  # a call in flight
        # issue 30 item 4 (was -> now):
        # killed after the model's answers (`kill -9 $PPID`, a fork bomb, the sandbox's memory
        # limit): harness_killed -> the policy's
        (KILLED_SH, _state(_turn(0, finish="length")), (None, "harness_killed_by_policy")),
        (KILLED, _state(_turn(0, invalid=1)), (None, "harness_killed_by_policy")),
        (KILLED, _waiting(_state(_turn(0))), (None, "harness_killed_by_policy")),
        # a crash right after an answer: harness_crash -> the policy's
        (CRASH, _state(_turn(0)), (None, "harness_crash_after_reply")),
        # a history past the proxy's body limit after answers: proxy_rejected -> the policy's
        (
            CRASH,
            _state(_turn(0), refusals=("413 body: exceeds the limit",), history_too_large=1),
            (None, "history_too_large"),
        ),
        (TIMEOUT, _state(_turn(0), history_too_large=1), (None, "history_too_large")),
        # ... but a first request over it is not the policy's: still proxy_rejected
        (
            CRASH,
            _state(refusals=("413 body: exceeds the limit",), history_too_large=1),
            ("proxy_rejected", None),
        ),
        # a refused call, then a recovery and exit 0: truncated -> the verifier decides
        (EXIT0, _state(_turn(0), refusals=REFUSED, context_full=1), (None, None)),
        (EXIT0, _state(_turn(0), _turn(1), turn_limit=1), (None, None)),
        (EXIT0, _state(_turn(0), history_too_large=1), (None, None)),
        # every request refused, exit 0 with the error as its answer: a wrong answer (None,
        # None) -> proxy_rejected
        (EXIT0, _state(refusals=REFUSED), ("proxy_rejected", None)),
        (EXIT0, _state(_turn(0, delivered=False), refusals=REFUSED), ("proxy_rejected", None)),
    ],
)
def test_classify_end(result, state, expected) -> None:
    assert classify_end(result, state, max_turns=3) == expected


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (_state(_turn(0)), ("policy_stalled", None)),  # its own time had not run out
        (_state(), ("policy_stalled", None)),
        (_state(_turn(0), context_full=1), ("policy_stalled", None)),
    ],
)
def test_a_harness_stopped_by_a_slow_policy_is_infrastructure(state, expected) -> None:
    """Stopped at its wall-clock cap while its time less the Policy's was left: the
    Policy's queue or a weight update kept it, not the agent (was `timeout`, scored 0)."""
    assert classify_end(TIMEOUT, state, max_turns=3, stalled=True) == expected

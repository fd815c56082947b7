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


@pytest.mark.parametrize(
    ("result", "state", "expected"),
    [
        (EXIT0, _state(_turn(0)), (None, None)),  # finished: the verifier decides
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
        (CRASH, _state(_turn(0)), ("harness_crash", None)),  # nothing the model did explains it
        # the proxy refused what the harness sent, and it gave up: never a disguised crash
        (CRASH, _state(_turn(0), refusals=REFUSED), ("proxy_rejected", None)),
        (CRASH, _state(refusals=REFUSED), ("proxy_rejected", None)),
        (TIMEOUT, _state(refusals=REFUSED), ("proxy_rejected", None)),  # retried it until killed
        (EXIT0, _state(_turn(0), refusals=REFUSED), (None, None)),  # it recovered: verifier says
        (CRASH, _state(_turn(0), refusals=REFUSED, context_full=1), (None, "context_full")),
        # killed by a signal (OOM killer, an operator): whatever its last answer was
        (ExecResult(137, "", ""), _state(_turn(0, finish="length")), ("harness_killed", None)),
        (ExecResult(-9, "", ""), _state(_turn(0, invalid=1)), ("harness_killed", None)),
        # an answer the harness never got does not count towards the turn limit
        (CRASH, _state(_turn(0), _turn(1), _turn(2, delivered=False)), ("harness_crash", None)),
    ],
)
def test_classify_end(result, state, expected) -> None:
    assert classify_end(result, state, max_turns=3) == expected

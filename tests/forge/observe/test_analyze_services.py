"""forge/observe/analyze_services.py: dedicated service-tool calls against shell calls, operation
coverage and reads after writes, from the calls the pod recorded."""

from __future__ import annotations

from forge.observe.analyze_services import service_rates, services_table
from forge.observe.tool_calls import _offered


def _call(service: str, op: str, via: str, turn: int, writes: bool, error: str = "") -> dict:
    out = {"service": service, "op": op, "via": via, "turn": turn, "writes": writes}
    return {**out, "error": error} if error else out


def _turn(*names: str) -> dict:
    return {"tool_calls": [{"name": n, "arguments": "{}"} for n in names]}


NATIVE = {  # a write, then a read of the same service: self-verified
    "services": ["kv"],
    "turns": [_turn("kv_set"), _turn("kv_get"), _turn("finish")],
    "service_calls": [_call("kv", "set", "tool", 1, True), _call("kv", "get", "tool", 2, False)],
}
SHELL = {  # the CLI through the shell, a refused write then an accepted one, no read after
    "services": ["kv", "notes"],
    "turns": [_turn("bash"), _turn("bash", "bash"), _turn()],
    "service_calls": [
        _call("kv", "get", "cli", 1, False),
        _call("kv", "set", "cli", 2, True, error="value: required by set"),
        _call("kv", "set", "cli", 2, True),
    ],
}


def test_counts_dedicated_calls_against_shell_calls() -> None:
    r = service_rates([NATIVE, SHELL, {"turns": [_turn("bash")]}])  # the last: no services
    assert r is not None
    assert (r["episodes"], r["service_calls"], r["dedicated"], r["via_cli"]) == (2, 5, 2, 3)
    assert (r["shell_calls"], r["shell_to_service"]) == (3, 3)
    assert r["dedicated_share"] == 2 / 5
    assert r["op_coverage"] == (2 / 4 + 2 / 10) / 2  # kv has 4 operations, notes 6
    assert r["self_verify"] == 1 / 2  # the shell episode read before its write, not after
    table = services_table({"a": r, "b": None})
    assert "| a | 2 | 5 | 2 | 3 | 3 | 3 | 0.40 |" in table and "| b |" not in table


def test_no_services_no_rates() -> None:
    assert service_rates([{"turns": [_turn("bash")]}]) is None


def test_codex_namespaced_tools_count_as_offered() -> None:
    request = {
        "tools": [
            {"type": "function", "name": "exec_command"},
            {"type": "namespace", "name": "mcp__kv", "tools": [{"name": "set"}, {"name": "get"}]},
        ]
    }
    assert _offered(request) == {"exec_command", "mcp__kv__set", "mcp__kv__get"}

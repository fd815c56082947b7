"""A task's own HTTP service (tasks/services/http.py): the fixture's mock notebook service, a
real FastAPI program, run the way the HarnessPod runs it for one attempt."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tasks.claweval import load
from tasks.services import World, catalog
from tasks.services.base import ServiceError

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "claweval"


def _apps() -> dict:
    [task] = [t for t in load(f"claweval:{FIXTURES}", []) if t.id == "f01_packing_list"]
    return task.apps


def _listening(port: int) -> list[str]:
    """The local addresses listening on ``port`` (from /proc/net/tcp)."""
    out = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if int(hex_port, 16) == port and state == "0A":
            out.append(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return out


def test_calls_are_recorded_the_audit_kept_and_the_program_stopped(monkeypatch) -> None:
    monkeypatch.setenv("FORGE_JUDGE_API_KEY", "pod-secret")
    world = World(_apps())
    try:
        [entry] = world.catalog()
        assert entry == catalog(_apps())[0] and entry["command"] == "forge-service notebook"
        assert [o["name"] for o in entry["ops"]] == ["list_notes", "add_note"]
        trip = world.call("notebook", "list_notes", {"tag": "trip"}, "tool", 1)
        assert [n["id"] for n in trip["notes"]] == ["n1", "n2"]
        with pytest.raises(ServiceError, match="HTTP 422"):  # the program's own refusal
            world.call("notebook", "add_note", {"title": "no body"}, "cli", 2)
        with pytest.raises(ServiceError, match="op: notebook has no operation 'drop'"):
            world.call("notebook", "drop", {})
        world.call("notebook", "add_note", {"title": "T", "body": "B"}, "mcp", 3)
        app = world.own["notebook"]
        assert _listening(app.port) == ["127.0.0.1"]  # asked for nothing wider, got loopback
        pid = app._proc.pid
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        assert b"pod-secret" not in environ and b"PORT=" in environ  # none of the pod's keys
    finally:
        world.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    kept = world.snapshot()["notebook"]
    assert [n["title"] for n in kept["audit"]["added"]] == ["T"]
    statuses = [(d["tool_name"][9:], d["response_status"]) for d in kept["dispatches"]]
    assert statuses == [("list_notes", 200), ("add_note", 422), ("add_note", 200)]
    calls = [(c["via"], c.get("error", "")[:8]) for c in world.calls]
    assert calls == [("tool", ""), ("cli", "HTTP 422"), ("api", "op: note"), ("mcp", "")]


def test_a_service_that_cannot_start_is_an_infrastructure_error() -> None:
    apps = _apps()
    apps["notebook"]["http"]["command"] = ["python", "mock_services/notebook/missing.py"]
    world = World(apps)
    try:
        why = r"(?s)service notebook did not start: .*missing\.py"
        with pytest.raises(RuntimeError, match=why):
            world.wait_ready()
    finally:
        world.close()

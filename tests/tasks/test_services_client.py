"""tasks/services: the operations' argument checks, the CLI's parsing, SKILL.md and the MCP
messages (the client over real transports: tests/forge/test_episode_apps.py)."""

from __future__ import annotations

import pytest

from tasks.services import APPS, ServiceError, World, catalog, check_apps, skill_md
from tasks.services.client import Refused, mcp_reply, parse_args


def test_arguments_are_checked_by_name() -> None:
    op = APPS["mail"].ops["send"]
    with pytest.raises(ServiceError, match="to: required by send"):
        op.check({"subject": "s", "body": "b"})
    with pytest.raises(ServiceError, match="bcc: unknown argument of send"):
        op.check({"to": ["a@b.example"], "subject": "s", "body": "b", "bcc": "x"})
    assert op.check({"to": "a@b.example, c@d.example", "subject": "s", "body": "b"})["to"] == [
        "a@b.example",
        "c@d.example",
    ]
    world = World({"calendar": "default"})
    with pytest.raises(ServiceError, match="start: a time as YYYY-MM-DD HH:MM"):
        world.call("calendar", "move", {"id": "ev-001", "start": "tomorrow"})
    with pytest.raises(ServiceError, match="service: 'mail' is not offered here"):
        world.call("mail", "list", {})
    assert [c.get("error", "") != "" for c in world.calls] == [True, True]
    with pytest.raises(ValueError, match="mailbox: unknown service"):
        check_apps({"mailbox": "default"})


def test_the_cli_types_its_arguments_by_the_schema() -> None:
    schema = APPS["mail"].ops["reply"].schema()
    assert parse_args(["--id", "m-001", "--body=hi there", "--all"], schema) == {
        "id": "m-001",
        "body": "hi there",
        "all": True,
    }
    with pytest.raises(Refused, match="--cc: unknown parameter"):
        parse_args(["--cc", "x"], schema)
    with pytest.raises(Refused, match="--body: needs a value"):
        parse_args(["--body"], schema)
    # a task's own HTTP service takes JSON Schema's other types from the command line too
    typed = {"properties": {k: {"type": k} for k in ("number", "object", "array")}}
    words = ["--number", "2.5", "--object", '{"a": 1}', "--array", "x, y"]
    assert parse_args(words, typed) == {"number": 2.5, "object": {"a": 1}, "array": ["x", "y"]}
    assert parse_args(["--array", '[1, "b"]'], typed) == {"array": [1, "b"]}
    with pytest.raises(Refused, match="--object: expected JSON"):
        parse_args(["--object", "{a"], typed)


def test_skill_md_describes_every_operation() -> None:
    text = skill_md(catalog({"calendar": "default"})[0])
    assert text.startswith("---\nname: calendar\n")
    for op in APPS["calendar"].ops:
        assert f"`calendar {op}" in text


def test_mcp_messages() -> None:
    world = World({"kv": "default"})
    entry = world.catalog()[0]

    def reply(message: dict) -> dict | None:
        return mcp_reply(message, "kv", lambda: entry, lambda op, a: world.call("kv", op, a))

    init = reply({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
    assert init is not None and init["result"]["capabilities"] == {"tools": {"listChanged": False}}
    assert reply({"jsonrpc": "2.0", "method": "notifications/initialized"}) is None
    tools = reply({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    assert tools is not None and len(tools["result"]["tools"]) == 4
    call = {"name": "get", "arguments": {"key": "nope"}}
    bad = reply({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": call})
    assert bad is not None and bad["result"]["isError"] and "no key 'nope'" in str(bad)
    unknown = reply({"jsonrpc": "2.0", "id": 4, "method": "resources/list"})
    assert unknown is not None and unknown["error"]["code"] == -32601

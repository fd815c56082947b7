"""The sandbox's side of a task's services: a command-line tool and an MCP server over stdio.

Standard library only: mounted read-only at ``/opt/forge/services`` and run by the sandbox's
``python3 -I``. Both talk to the attempt's service API on its HarnessPod
(``$FORGE_SERVICES_URL``, the attempt's key in ``$FORGE_SERVICES_KEY``), where the state is::

    client.py mail send --to a@x.example --subject Hi --body "See you"   # the CLI (bin/mail)
    client.py mail --help                                                # its operations
    client.py --mcp mail                                                 # MCP over stdio

The CLI prints the result as JSON (exit 0) or the service's refusal on stderr (exit 1). The MCP
server speaks JSON-RPC 2.0 in lines (``initialize``, ``tools/list``, ``tools/call``, ``ping``);
the HarnessPod serves the same methods over streamable HTTP (:func:`mcp_reply` is shared).
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

PROTOCOL = "2025-06-18"  # the MCP revision answered when the client names none


class Refused(Exception):
    """The service said no (an HTTP 4xx): the message says why."""


def _request(path: str, body: Any = None, via: str = "cli") -> Any:
    base = os.environ.get("FORGE_SERVICES_URL")
    if not base:
        raise Refused("FORGE_SERVICES_URL is not set: this task offers no services")
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        base.rstrip("/") + path,
        data=data,
        method="GET" if body is None else "POST",
        headers={
            "Authorization": f"Bearer {os.environ.get('FORGE_SERVICES_KEY', '')}",
            "Content-Type": "application/json",
            "X-Forge-Via": via,
        },
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy
    try:
        with opener.open(request, timeout=60) as reply:
            return json.loads(reply.read() or b"null")
    except urllib.error.HTTPError as e:
        try:
            detail = json.loads(e.read()).get("error", {}).get("message", "")
        except ValueError:
            detail = ""
        raise Refused(detail or f"HTTP {e.code}") from None


def catalog(service: str) -> dict[str, Any]:
    for entry in _request(""):
        if entry["service"] == service:
            return entry
    raise Refused(f"{service}: not offered by this task")


def call(service: str, op: str, args: dict[str, Any], via: str = "cli") -> Any:
    return _request(f"/{service}/{op}", args, via)


# -- the command-line tool -------------------------------------------------------------------


def usage(entry: dict[str, Any]) -> str:
    name = entry.get("command") or entry["service"]
    lines = [f"usage: {name} OPERATION [--param value ...]   ({entry['description']})", ""]
    for op in entry["ops"]:
        params = op["parameters"]
        required = set(params.get("required", []))
        shown = " ".join(
            f"--{k} {k.upper()}" if k in required else f"[--{k} {k.upper()}]"
            for k in params["properties"]
        )
        lines.append(f"  {name} {op['name']} {shown}".rstrip())
        lines.append(f"      {op['description']}")
    lines.append("")
    lines.append(
        "Lists are comma-separated (--to a@x.example,b@y.example), objects JSON; prints JSON."
    )
    return "\n".join(lines)


def parse_args(words: list[str], schema: dict[str, Any]) -> dict[str, Any]:
    """``--key value`` pairs (``--key=value`` too; a boolean alone is true) typed by the schema."""
    props = schema["properties"]
    out: dict[str, Any] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if not word.startswith("--"):
            raise Refused(f"{word!r}: expected --PARAM (parameters: {', '.join(props)})")
        key, _, value = word[2:].partition("=")
        key = key.replace("-", "_")
        kind = props.get(key, {}).get("type")
        if kind is None:
            raise Refused(f"--{key}: unknown parameter (parameters: {', '.join(props)})")
        if not value and "=" not in word:
            if kind == "boolean" and (i + 1 == len(words) or words[i + 1].startswith("--")):
                value = "true"
            elif i + 1 < len(words):
                i += 1
                value = words[i]
            else:
                raise Refused(f"--{key}: needs a value")
        if kind == "boolean":
            out[key] = value.lower() in ("1", "true", "yes", "on")
        elif kind == "integer":
            out[key] = int(value) if value.lstrip("-").isdigit() else value
        elif kind == "number":
            try:
                out[key] = float(value)
            except ValueError:
                out[key] = value
        elif kind == "object" or (kind == "array" and value.lstrip().startswith("[")):
            try:
                out[key] = json.loads(value)
            except ValueError:
                raise Refused(f"--{key}: expected JSON, got {value!r}") from None
        elif kind == "array":
            out[key] = [v.strip() for v in value.split(",") if v.strip()]
        else:
            out[key] = value
        i += 1
    return out


def cli(argv: list[str]) -> int:
    if not argv:
        print("usage: SERVICE OPERATION [--param value ...]", file=sys.stderr)
        return 2
    service, rest = argv[0], argv[1:]
    try:
        entry = catalog(service)
        if not rest or rest[0] in ("-h", "--help", "help"):
            print(usage(entry))
            return 0 if rest else 2
        ops = {op["name"]: op for op in entry["ops"]}
        op = ops.get(rest[0])
        if op is None:
            raise Refused(f"{rest[0]!r}: no such operation (operations: {', '.join(ops)})")
        if rest[1:2] in (["-h"], ["--help"]):
            print(usage({**entry, "ops": [op]}))
            return 0
        result = call(service, op["name"], parse_args(rest[1:], op["parameters"]))
    except Refused as e:
        print(f"{service}: {e}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as e:
        print(f"{service}: the service could not be reached: {e}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=1, ensure_ascii=False))
    return 0


# -- MCP ---------------------------------------------------------------------------------------


def mcp_tools(entry: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"name": op["name"], "description": op["description"], "inputSchema": op["parameters"]}
        for op in entry["ops"]
    ]


def _rpc_error(rid: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}


def mcp_reply(
    message: Any,
    service: str,
    entry: Callable[[], dict[str, Any]],
    invoke: Callable[[str, dict[str, Any]], Any],
) -> dict[str, Any] | None:
    """The JSON-RPC answer to one MCP message for ``service`` (None for a notification):
    ``entry()`` gives its catalog entry, ``invoke(op, args)`` runs an operation and raises
    :class:`Refused` (or the host's own error, shown as a tool error) when the service says
    no."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return _rpc_error(None, -32600, "not JSON-RPC 2.0")
    if "id" not in message:
        return None  # notifications/initialized and the like
    method, params, rid = message.get("method"), message.get("params") or {}, message["id"]

    def ok(result: dict[str, Any]) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": rid, "result": result}

    if method == "initialize":
        return ok(
            {
                "protocolVersion": params.get("protocolVersion") or PROTOCOL,
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": f"forge-{service}", "version": "1.0"},
                "instructions": entry()["description"],
            }
        )
    if method == "ping":
        return ok({})
    if method == "tools/list":
        return ok({"tools": mcp_tools(entry())})
    if method == "tools/call":
        name, args = params.get("name"), params.get("arguments") or {}
        try:
            text, failed = json.dumps(invoke(str(name), args), ensure_ascii=False), False
        except Exception as e:  # the service refused: the model sees why, as a tool error
            text, failed = f"{service} {name}: {e}", True
        return ok({"content": [{"type": "text", "text": text}], "isError": failed})
    return _rpc_error(rid, -32601, f"no method {method}")


def mcp_stdio(service: str) -> int:
    cached: dict[str, Any] = {}

    def entry() -> dict[str, Any]:
        if not cached:
            cached.update(catalog(service))
        return cached

    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
        except ValueError:
            reply: Any = _rpc_error(None, -32700, "parse error")
        else:
            reply = mcp_reply(message, service, entry, lambda op, a: call(service, op, a, "mcp"))
        if reply is not None:
            sys.stdout.write(json.dumps(reply, ensure_ascii=False) + "\n")
            sys.stdout.flush()
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--mcp"]:
        if len(argv) != 2:
            print("usage: client.py --mcp SERVICE", file=sys.stderr)
            return 2
        return mcp_stdio(argv[1])
    return cli(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

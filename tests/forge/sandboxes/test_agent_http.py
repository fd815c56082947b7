"""The sandbox agent's HTTP surface: the token, and requests it refuses (naming the field)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import time

import pytest

from forge.sandboxes.agent_client import AgentAuthError, AgentClient
from tests.forge.sandboxes.test_agent import SYSTEM_PYTHON, TOKEN, Agent, agent, unix_agent

__all__ = ["agent", "unix_agent"]  # fixtures

pytestmark = pytest.mark.skipif(
    not os.path.exists(SYSTEM_PYTHON), reason="needs the system python3 (>= 3.11)"
)


def _raw(a: Agent, method: str, path: str, body: bytes | None = None, **headers: str):
    if a.address.startswith("unix:"):
        conn: http.client.HTTPConnection = _UnixConn(a.address[5:])
    else:
        host, port = a.address[len("http://") :].split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request(method, path, body=body, headers=headers)
    resp = conn.getresponse()
    out = resp.status, resp.read()
    conn.close()
    return out


class _UnixConn(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=10)
        self.path_ = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(self.path_)


def test_auth_is_required(agent: Agent) -> None:
    assert _raw(agent, "GET", "/health")[0] == 401
    assert _raw(agent, "GET", "/health", Authorization="Bearer nope")[0] == 401
    assert _raw(agent, "GET", "/health", Authorization=f"Bearer {TOKEN}x")[0] == 401
    status, body = _raw(agent, "GET", "/health", Authorization=f"Bearer {TOKEN}")
    assert status == 200 and json.loads(body)["ok"] is True
    bad = AgentClient(agent.address, "wrong")
    with pytest.raises(AgentAuthError):
        bad.exec(["true"], 5)
    t0 = time.monotonic()
    with pytest.raises(AgentAuthError):
        bad.wait_ready(10)
    assert time.monotonic() - t0 < 2


def test_bad_requests_name_the_field(unix_agent: Agent) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    cases = {
        b'{"cmd": "ls", "timeout_s": 1}': "'cmd'",
        b'{"cmd": ["ls"]}': "'timeout_s'",
        b'{"cmd": ["ls"], "timeout_s": 1, "env": {"A": 1}}': "'env'",
        b'{"cmd": ["ls"], "timeout_s": 1, "output_cap": 0}': "'output_cap'",
        b'{"cmd": ["ls"], "timeout_s": 1, "cwd": "../.."}': "outside",
        b'{"cmd": ["ls"], "timeout_s": 1, "shell": true}': "shell",
        b"not json": "",
    }
    for body, needle in cases.items():
        status, out = _raw(unix_agent, "POST", "/exec", body, **auth)
        assert status == 400 and needle in json.loads(out)["error"], (body, out)
    status, out = _raw(unix_agent, "PUT", "/file?mode=420", b"x", **auth)
    assert status == 400 and "'path'" in json.loads(out)["error"]
    status, out = _raw(unix_agent, "PUT", "/file?path=a&mode=x", b"x", **auth)
    assert status == 400 and "'mode'" in json.loads(out)["error"]
    assert _raw(unix_agent, "GET", "/nothing", **auth)[0] == 404
    with pytest.raises(ValueError, match="'cmd'"):
        unix_agent.client.exec([], 5)


def test_oversized_bodies_are_refused_unread(unix_agent: Agent) -> None:
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(unix_agent.address[5:])
    head = f"POST /exec HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {1 << 40}"
    sock.sendall(head.encode() + b"\r\n\r\n")
    reply = sock.recv(4096).decode()
    sock.close()
    assert reply.startswith("HTTP/1.1 413") and "Connection: close" in reply

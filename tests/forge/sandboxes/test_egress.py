"""The egress proxy (forge.sandboxes.egress) before a stand-in "internet": an HTTP server on
another loopback address (127.0.0.2), reached through the proxy exactly when a grant allows it,
by a real HTTP client (httpx) and a raw CONNECT tunnel."""

from __future__ import annotations

import asyncio
import base64
import socket
from pathlib import Path

import httpx
import pytest

from forge.sandboxes.base import SandboxSpec
from forge.sandboxes.bwrap import bwrap_works
from forge.sandboxes.egress import MAX_LOG, EgressProxy, proxy_env
from forge.sandboxes.local import LocalSandbox

from .standin import FETCH, STAND_IN, policy


@pytest.fixture
def egress(served) -> tuple[EgressProxy, int]:
    return served[0], served[1]


def _get(port: int, key: str | None, url: str) -> httpx.Response:
    auth = f"forge:{key}@" if key else ""
    with httpx.Client(proxy=f"http://{auth}127.0.0.1:{port}", timeout=10) as client:
        return client.get(url)


def test_the_stand_in_is_reached_exactly_when_the_grant_allows_it(internet, egress) -> None:
    proxy, port = egress
    url = f"http://{STAND_IN}:{internet}/simple/pytest/"
    listed = proxy.grant(policy("allowlist", [], [f"{STAND_IN}/32"], [internet]))
    r = _get(port, listed, url)
    assert r.status_code == 200 and r.text.endswith("/simple/pytest/")
    other = proxy.grant(policy("allowlist", ["packages.example.com"], [], [internet]))
    r = _get(port, other, url)
    assert r.status_code == 403 and "not in the allowlist" in r.text
    wrong_port = proxy.grant(policy("allowlist", [], [f"{STAND_IN}/32"], [443]))
    assert "port" in _get(port, wrong_port, url).text
    # open reaches public addresses only: the loopback (the cluster's own) stays out of reach
    open_ = proxy.grant(policy("open", [], [], []))
    r = _get(port, open_, url)
    assert r.status_code == 403 and "is not public" in r.text
    assert [ok for _, _, ok, _ in proxy.grants[listed].log] == [True]
    # no key, or one revoked when its phase ended: 407
    assert _get(port, None, url).status_code == 407
    proxy.revoke(listed)
    assert _get(port, listed, url).status_code == 407


def test_a_host_pattern_and_a_connect_tunnel(internet, egress) -> None:
    proxy, port = egress
    key = proxy.grant(policy("allowlist", ["127.0.0.*"], [], []))  # a pattern over the name given
    auth = base64.b64encode(f"forge:{key}".encode()).decode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        head = f"CONNECT {STAND_IN}:{internet} HTTP/1.1\r\nProxy-Authorization: Basic {auth}"
        s.sendall(f"{head}\r\n\r\n".encode())
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        s.sendall(b"GET /through-the-tunnel HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(4096):
            data += chunk
    assert data.startswith(b"HTTP/1.0 200") and data.endswith(b"/through-the-tunnel")


def test_revoking_a_grant_closes_its_tunnels_and_the_log_is_bounded(internet) -> None:
    async def main() -> tuple[bytes, bytes, int]:
        proxy = EgressProxy()
        sock = socket.create_server(("127.0.0.1", 0))
        sock.setblocking(False)
        await proxy.start_tcp(sock)
        key = proxy.grant(policy("allowlist", [STAND_IN], [], []))
        auth = base64.b64encode(f"forge:{key}".encode()).decode()
        r, w = await asyncio.open_connection(*sock.getsockname()[:2])
        w.write(f"CONNECT {STAND_IN}:{internet} HTTP/1.1\r\n"
                f"Proxy-Authorization: Basic {auth}\r\n\r\n".encode())  # fmt: skip
        status = await r.readline()
        await r.readline()
        grant = proxy.revoke(key)  # the phase ended: its tunnel goes with it
        rest = await asyncio.wait_for(r.read(), 5)
        assert grant is not None
        for _ in range(MAX_LOG + 5):
            grant.note("h", 1, False, "x")
        await proxy.stop()
        return status, rest, grant.unlogged

    status, rest, unlogged = asyncio.run(main())
    assert status.startswith(b"HTTP/1.1 200") and rest == b"" and unlogged == 6


def test_proxy_env_points_every_client_at_the_sandboxes_relay() -> None:
    env = proxy_env("k3y")
    assert env["HTTPS_PROXY"] == env["http_proxy"] == "http://forge:k3y@127.0.0.1:8939"
    assert "127.0.0.1" in env["NO_PROXY"]  # the model's proxy stays direct


@pytest.mark.skipif(not bwrap_works(), reason="bubblewrap cannot make namespaces here")
def test_a_bwrap_sandbox_reaches_out_only_through_its_phases_grant(
    internet, served, tmp_path: Path
) -> None:
    """The local backend relays the egress socket into the sandbox's own network namespace:
    with a grant the stand-in answers through it; without the variables (proxy-only) or with a
    revoked key it does not, and nothing is reachable directly."""
    proxy, _, path = served
    url = f"http://{STAND_IN}:{internet}/from-the-sandbox"
    box = LocalSandbox(root=tmp_path / "boxes")
    box.create(SandboxSpec(labels={"run": "egress"}, egress_socket=path))
    try:
        box.put_file("fetch.py", FETCH)
        key = proxy.grant(policy("allowlist", [], [f"{STAND_IN}/32"], [internet]))
        r = box.exec(["python3", "fetch.py", url], 30, proxy_env(key))
        assert r.stdout.strip().endswith("/from-the-sandbox"), r.stdout + r.stderr
        direct = box.exec(["python3", "fetch.py", url], 30)  # proxy-only: no way there
        assert "Connection refused" in direct.stdout or "URLError" in direct.stdout
        proxy.revoke(key)
        r = box.exec(["python3", "fetch.py", url], 30, proxy_env(key))
        assert "407" in r.stdout
    finally:
        box.destroy()

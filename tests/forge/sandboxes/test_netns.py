"""The way out of a local sandbox relayed by this process (forge.sandboxes.netns): listeners
made in the sandbox's own network namespace before its command starts, with real bubblewrap and
a real proxy stand-in on a Unix socket; and the bridge's way where this process cannot."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from forge.sandboxes import netns
from forge.sandboxes.base import SandboxSpec
from forge.sandboxes.bwrap import bwrap_works
from forge.sandboxes.local import LocalSandbox
from tests.forge.httpstub import StubServer

needs_host_relays = pytest.mark.skipif(
    not bwrap_works() or not netns.host_relays_work(),
    reason="needs bubblewrap and a process that may enter network namespaces (CAP_SYS_ADMIN)",
)
FETCH = (
    "import json, os, sys, urllib.request\n"
    "with urllib.request.urlopen('http://127.0.0.1:8931/v1/x', timeout=10) as r:\n"
    "    print(json.dumps({'path': json.load(r)['path'], 'run': os.path.exists('/run/forge')}))\n"
)

READ = (
    "import urllib.request\n"
    "with urllib.request.urlopen('http://127.0.0.1:8931/v1/x', timeout=10) as r:\n"
    "    print(r.read().decode())\n"
)


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[StubServer]:
    stub = StubServer(lambda m, p, h, b: (200, {"path": p}, {}), unix_path=str(tmp_path / "p.sock"))
    yield stub
    stub.close()


@needs_host_relays
def test_the_sandbox_reaches_its_proxy_and_sees_no_socket_of_the_host(tmp_path, proxy) -> None:
    box = LocalSandbox(root=tmp_path / "boxes", disk_mb=None)
    box.create(SandboxSpec(proxy_socket=proxy.address))
    try:
        for _ in range(2):  # each exec its own namespace, listeners and relays
            r = box.exec(["python3", "-c", FETCH], 30)
            assert r.exit_code == 0, r.stderr
            assert r.stdout.strip() == '{"path": "/v1/x", "run": false}'
    finally:
        box.destroy()
    assert len(proxy.requests) == 2


@needs_host_relays
def test_a_bwrap_that_cannot_start_reports_why(tmp_path, proxy) -> None:
    gone = tmp_path / "gone.txt"
    gone.write_text("x")
    box = LocalSandbox(root=tmp_path / "boxes", disk_mb=None)
    box.create(SandboxSpec(proxy_socket=proxy.address, ro_mounts={str(gone): "/opt/gone.txt"}))
    gone.unlink()  # bwrap's mount of it fails before the sandbox is made
    try:
        r = box.exec(["true"], 30)
    finally:
        box.destroy()
    assert r.exit_code != 0 and "gone.txt" in r.stderr, r
    assert proxy.requests == []


def test_without_ports_nothing_is_relayed_and_the_bridge_binds_what_it_relays(
    monkeypatch,
) -> None:
    assert netns.way_out({}, ["true"]) == netns.WayOut(["true"])
    monkeypatch.setattr(netns, "_works", False)  # as in a process without CAP_SYS_ADMIN
    way = netns.way_out({8931: "/host/p.sock"}, ["true"])
    assert way.relays is None and way.binds == {"/host/p.sock": "/run/forge/8931.sock"}
    assert way.cmd[-2:] == ["--", "true"] and way.cmd[way.cmd.index(netns.BRIDGE) + 1 :][:2] == [
        "127.0.0.1:8931",
        "/run/forge/8931.sock",
    ]


@needs_host_relays
def test_execs_at_once_all_reach_their_proxy(tmp_path, proxy) -> None:
    """bwrap brings the namespace's loopback up while it reports its child: a listener made
    first must wait for it (seen as EADDRNOTAVAIL with several sandboxes starting at once)."""
    failures: list[str] = []

    def sandbox() -> None:
        box = LocalSandbox(root=tmp_path / "boxes", disk_mb=None)
        box.create(SandboxSpec(proxy_socket=proxy.address))
        try:
            for _ in range(3):
                r = box.exec(["python3", "-c", FETCH], 60)
                if r.exit_code != 0:
                    failures.append(r.stderr[-500:])
        except OSError as e:
            failures.append(repr(e))
        finally:
            box.destroy()

    threads = [threading.Thread(target=sandbox) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert len(proxy.requests) == 18


def _answer_on(listener: socket.socket, log: list[str]) -> Callable[[], None]:
    """A server of ``listener`` (as :func:`netns.serve_here` hands it over): each connection
    is answered with its path; returns what stops it."""
    listener.setblocking(True)

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # stopped
                return
            with conn:
                path = conn.recv(65536).split(b" ", 2)[1].decode()
                body = json.dumps({"path": path, "served": True}).encode()
                head = f"HTTP/1.1 200 OK\r\ncontent-length: {len(body)}\r\n"
                conn.sendall(head.encode() + b"connection: close\r\n\r\n" + body)

    threading.Thread(target=accept, daemon=True).start()

    def stop() -> None:
        log.append("stopped")
        listener.shutdown(socket.SHUT_RDWR)  # wakes the accept
        listener.close()

    return stop


@needs_host_relays
def test_a_socket_this_process_serves_gets_the_listener_itself(tmp_path, proxy) -> None:
    """The port of a Unix socket this process serves (the HarnessPod's proxy) is served on the
    sandbox's own listener, with no relay and no hop through the socket, until the exec ends;
    a server that declines (None) leaves it relayed."""
    log: list[str] = []
    box = LocalSandbox(root=tmp_path / "boxes", disk_mb=None)
    box.create(SandboxSpec(proxy_socket=proxy.address))
    netns.serve_here(proxy.address, lambda listener: _answer_on(listener, log))
    try:
        for n in range(2):
            r = box.exec(["python3", "-c", READ], 30)
            assert r.exit_code == 0, r.stderr
            assert json.loads(r.stdout) == {"path": "/v1/x", "served": True}
            assert log == ["stopped"] * (n + 1)  # each exec's own, stopped at its end
        assert proxy.requests == []  # nothing went through the Unix socket
        netns.serve_here(proxy.address, lambda listener: None)
        r = box.exec(["python3", "-c", FETCH], 30)
        assert r.exit_code == 0 and len(proxy.requests) == 1, r.stderr
    finally:
        netns.serve_here(proxy.address, None)
        box.destroy()

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from forge.sandboxes import bridge
from tests.forge.httpstub import StubServer

BRIDGE = str(Path(bridge.__file__).resolve())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def unix_stub(tmp_path: Path) -> Iterator[StubServer]:
    stub = StubServer(lambda m, p, h, b: (200, {"path": p}, {}), unix_path=str(tmp_path / "s"))
    yield stub
    stub.close()


def test_bridge_program_relays_and_returns_child_status(unix_stub: StubServer) -> None:
    port = _free_port()
    child = textwrap.dedent(
        f"""
        import sys, urllib.request
        with urllib.request.urlopen("http://127.0.0.1:{port}/x/y") as r:
            print(r.read().decode())
        sys.exit(5)
        """
    )
    argv = [sys.executable, BRIDGE, f"127.0.0.1:{port}", unix_stub.address, "--"]
    done = subprocess.run([*argv, sys.executable, "-c", child], capture_output=True, timeout=30)
    assert done.returncode == 5, done.stderr
    assert json.loads(done.stdout) == {"path": "/x/y"}


def test_bridge_forwards_sigterm(unix_stub: StubServer, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    child = textwrap.dedent(
        f"""
        import signal, sys, time, pathlib
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(9))
        pathlib.Path({str(ready)!r}).touch()
        time.sleep(60)
        """
    )
    argv = [sys.executable, BRIDGE, f"127.0.0.1:{_free_port()}", unix_stub.address, "--"]
    proc = subprocess.Popen([*argv, sys.executable, "-c", child])
    deadline = time.monotonic() + 20
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 9


def test_bridge_usage_and_missing_command(unix_stub: StubServer) -> None:
    assert subprocess.run([sys.executable, BRIDGE], capture_output=True).returncode == 2
    argv = [sys.executable, BRIDGE, f"127.0.0.1:{_free_port()}", unix_stub.address, "--"]
    done = subprocess.run([*argv, "/no/such/program"], capture_output=True)
    assert done.returncode == 127 and b"cannot run" in done.stderr

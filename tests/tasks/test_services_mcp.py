"""A task's own MCP server (tasks/services/mcp_app.py): the fixture's stdio servers, run the way
the HarnessPod runs them for one attempt, in a bubblewrap sandbox of their own."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from forge.sandboxes.bwrap import bwrap_works
from tasks.services import World, catalog
from tasks.services.base import ServiceError
from tasks.services.mcp_app import discover
from tasks.services.mcp_install import runnable

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "mcpatlas"
SERVERS = str(FIXTURES / "servers")
DATA = str(FIXTURES / "services" / "agent-environment" / "data")
SECRET = Path(__file__).resolve().parents[2] / "pyproject.toml"  # a host file it must not see
pytestmark = pytest.mark.skipif(not bwrap_works(), reason="needs bubblewrap")


def _files(tools: list[dict]) -> dict:
    return {"files": {"mcp": {"command": ["python3", f"{SERVERS}/fixture_server.py", "files"],
                              "data": DATA, "mounts": [SERVERS], "tools": tools}}}  # fmt: skip


TOOLS = [
    {"name": "read_file", "description": "Read a file.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}},
    {"name": "write_file", "description": "Write a file.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"},
                                                     "content": {"type": "string"}}}},
]  # fmt: skip


def test_tools_run_on_a_copy_of_the_data_in_a_sandbox_of_their_own(monkeypatch) -> None:
    monkeypatch.setenv("FORGE_JUDGE_API_KEY", "pod-secret")
    apps = _files(TOOLS)
    assert [o["name"] for o in catalog(apps)[0]["ops"]] == ["read_file", "write_file"]
    world = World(apps)
    try:
        world.wait_ready()
        assert world.call("files", "read_file", {"path": "Barber Shop.csv"}).startswith("name,")
        world.call("files", "write_file", {"path": "new.txt", "content": "x"}, "mcp")
        with pytest.raises(ServiceError, match="outside /data"):  # the server's own refusal
            world.call("files", "read_file", {"path": "../../etc/hostname"})
        with pytest.raises(ServiceError, match="op: files has no operation 'list_directory'"):
            world.call("files", "list_directory", {"path": "."})  # not offered by the task
        app = world.own["files"]
        copy = Path(app._tmp) / "data"
        assert (copy / "new.txt").read_text() == "x" and not Path(DATA, "new.txt").exists()
        environ = Path(f"/proc/{app._proc.pid}/environ").read_bytes()
        assert b"pod-secret" not in environ  # bwrap itself: the server's parent
    finally:
        world.close()
    assert not copy.exists()  # the attempt's copy goes with it
    kept = world.snapshot()["files"]["dispatches"]
    assert [(d["tool_name"], d["is_error"]) for d in kept] == [
        ("read_file", False), ("write_file", False), ("read_file", True)]  # fmt: skip


def test_the_server_sees_no_network_and_no_host_files() -> None:
    """What its sandbox hides: the host's files and the network (a server may run code)."""
    assert SECRET.exists()
    apps = _files(TOOLS)
    apps["files"]["mcp"]["command"] = ["python3", "-c", (
        "import os, socket, sys; s = socket.socket(); s.settimeout(2)\n"
        "try: s.connect(('1.1.1.1', 53)); net = 'open'\nexcept OSError: net = 'none'\n"
        f"sys.stderr.write(net + ' ' + str(os.path.exists({str(SECRET)!r})))"
    )]  # fmt: skip
    world = World(apps)
    try:
        with pytest.raises(RuntimeError, match="did not start"):
            world.wait_ready()
        assert "none False" in world.own["files"].tail()
    finally:
        world.close()
    assert os.environ.get("HOME")  # the test's own environment is untouched


@pytest.mark.skipif(not shutil.which("npm"), reason="needs npm (Debian's nodejs and npm)")
def test_the_benchmarks_own_filesystem_server_installed_once_and_sandboxed() -> None:
    """MCP-Atlas's filesystem server, the real npm package, installed into a folder of its own
    and run offline in its sandbox on a copy of the data."""
    argv, mounts = runnable("npx", ["@modelcontextprotocol/server-filesystem@2026.7.10", "/data"])
    assert argv[0] == "node" and runnable("npx", ["-y", "@modelcontextprotocol/server-filesystem"
                                                  "@2026.7.10", "/data"])[0] == argv  # fmt: skip
    spec = {"command": argv, "mounts": mounts, "data": DATA}
    tools = {t.name: t for t in discover(spec)}
    assert {"read_text_file", "write_file", "list_directory"} <= set(tools)
    world = World(
        {"filesystem": {"mcp": {**spec, "tools": [tools["read_text_file"].model_dump()]}}}
    )
    try:
        todo = world.call("filesystem", "read_text_file", {"path": "/data/notes/todo.txt"})
        assert todo.startswith("Lena asked")
        with pytest.raises(ServiceError, match="outside allowed directories"):
            world.call("filesystem", "read_text_file", {"path": "/etc/passwd"})
    finally:
        world.close()

"""A task's own MCP server: a program speaking MCP over stdio that the HarnessPod starts for each
attempt and whose tools it offers as operations (a benchmark's servers: MCP-Atlas's filesystem,
git, memory, calculator, ...).

A task names it in ``apps`` as ``{NAME: {mcp: {...}}}`` (:class:`McpService`): the command, its
environment, its tools (name, description, JSON Schema: what the agent is offered) and,
optionally, a ``data`` folder copied for each attempt (seen as ``/data`` and as its working
folder), so what one attempt changes the next never sees. The server runs in a bubblewrap
sandbox of its own, beside the agent's, never in it: the system read-only, its data copy and an
empty home writable, the folders it names in ``mounts`` read-only, no network and none of the
pod's environment (no key of the run's); some such servers run code or commands. The agent
reaches its tools only through the attempt's service API (native tools, MCP, the
``forge-service`` command), each call recorded with its arguments and result (a *dispatch*), as
for :mod:`tasks.services.http`.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from forge.sandboxes.bwrap import HOME, SYSTEM_PATH, bwrap_argv, write_etc
from forge.sandboxes.services_launch import die_with_parent
from tasks.services.base import ServiceError

PROTOCOL = "2025-06-18"
MAX_REPLY_CHARS = 20_000


def stop_group(proc: subprocess.Popen[Any]) -> None:
    """Kill a service's process and every process it started (its session), then reap it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


class McpTool(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="The tool's name on the server.")
    description: str = Field(default="", description="What it does, shown to the model.")
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="Its arguments (the server's inputSchema).",
    )


class McpService(BaseModel):
    """How to run a task's own MCP server (stdio) and which of its tools are offered."""

    model_config = ConfigDict(extra="forbid")

    command: list[str] = Field(min_length=1, description="Its argv, as its sandbox sees it.")
    env: dict[str, str] = Field(default_factory=dict, description="Its environment (PATH, HOME "
                                "and LANG besides; nothing of the pod's).")  # fmt: skip
    data: str | None = Field(default=None, description="A folder copied for each attempt, seen "
                             "as /data (and where it runs).")  # fmt: skip
    mounts: list[str] = Field(default_factory=list, description="Folders it sees read-only, at "
                              "the same path (its installed package).")  # fmt: skip
    description: str = Field(default="", description="What the server is, shown to the model.")
    ready_timeout_s: float = Field(default=60.0, gt=0, description="Longest wait to be up.")
    call_timeout_s: float = Field(default=120.0, gt=0, description="Longest wait for a call.")
    tools: list[McpTool] = Field(min_length=1, description="The tools offered.")

    @field_validator("data")
    @classmethod
    def _folder(cls, v: str | None) -> str | None:
        if v is not None and not Path(v).is_dir():
            raise ValueError(f"{v}: no such folder")
        return v


class McpApp:
    """One running instance of an :class:`McpService`, for one attempt."""

    def __init__(self, name: str, spec: McpService) -> None:
        self.name, self.spec = name, spec
        self.ops = {t.name: t for t in spec.tools}
        self.dispatches: list[dict[str, Any]] = []
        self.audit: Any = None
        self._tmp = tempfile.mkdtemp(prefix=f"forge-mcp-{name}-")
        data, home, etc = (str(Path(self._tmp) / d) for d in ("data", "home", "etc"))
        if spec.data is not None:
            shutil.copytree(spec.data, data, symlinks=True)
        os.makedirs(data, exist_ok=True)
        os.makedirs(home)
        write_etc(etc)
        jail = bwrap_argv(workspace=data, home=home, ro_mounts={m: m for m in spec.mounts},
                          binds={data: "/data"}, etc=etc)  # fmt: skip
        env = {"PATH": SYSTEM_PATH, "HOME": HOME, "LANG": "C.UTF-8", **spec.env}
        self._log = open(Path(self._tmp) / "stderr.log", "wb")  # noqa: SIM115 - while it runs
        self._proc = subprocess.Popen(  # the task's own program, in a sandbox of its own
            [*jail, "sh", "-c", 'cd /data && exec "$@"', "mcp", *spec.command], env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
            start_new_session=True, preexec_fn=die_with_parent,
        )  # fmt: skip
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(self._proc.stdout,), daemon=True).start()
        self._next_id, self._ready, self._gave_up = 0, False, False
        self._lock = threading.Lock()  # one request at a time on the pipe

    def _read(self, out: IO[bytes] | None) -> None:
        for line in out or []:
            self._lines.put(line.decode(errors="replace"))
        self._lines.put(None)

    def tail(self) -> str:
        log = Path(self._tmp) / "stderr.log"
        return log.read_text(errors="replace")[-1500:] if log.exists() else ""

    def _request(self, method: str, params: dict[str, Any], timeout_s: float) -> Any:
        """The result of one JSON-RPC request; RuntimeError when the server is gone or slow."""
        self._next_id += 1
        rid = self._next_id
        assert self._proc.stdin is not None
        message = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        try:
            self._proc.stdin.write((json.dumps(message) + "\n").encode())
            self._proc.stdin.flush()
        except OSError as e:
            raise RuntimeError(f"MCP server {self.name} is gone: {e}: {self.tail()}") from None
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError(f"MCP server {self.name}: no answer to {method} in "
                                   f"{timeout_s:g}s") from None  # fmt: skip
            if line is None:
                raise RuntimeError(f"MCP server {self.name} exited: {self.tail()}")
            try:
                reply = json.loads(line)
            except ValueError:
                continue  # a log line on stdout
            if isinstance(reply, dict) and reply.get("id") == rid:
                if "error" in reply:
                    raise ServiceError(str(reply["error"].get("message", reply["error"])))
                return reply.get("result")

    def wait_ready(self) -> None:
        """The MCP handshake; RuntimeError (an infrastructure failure) if it does not answer."""
        with self._lock:
            if self._ready:
                return
            if self._gave_up:
                raise RuntimeError(f"MCP server {self.name} did not start: {self.tail()}")
            try:
                self._request("initialize", {"protocolVersion": PROTOCOL, "capabilities": {},
                              "clientInfo": {"name": "openforge", "version": "1"}},
                              self.spec.ready_timeout_s)  # fmt: skip
            except (RuntimeError, ServiceError) as e:
                self._gave_up = True
                raise RuntimeError(f"MCP server {self.name} did not start: {e}") from None
            assert self._proc.stdin is not None
            note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            self._proc.stdin.write((json.dumps(note) + "\n").encode())
            self._proc.stdin.flush()
            self._ready = True

    def list_tools(self) -> list[McpTool]:
        """Every tool the server has (``tools/list``), whatever the task offers."""
        self.wait_ready()
        with self._lock:
            result = self._request("tools/list", {}, self.spec.call_timeout_s) or {}
        return [McpTool(name=t["name"], description=t.get("description") or "",
                        parameters=t.get("inputSchema") or {"type": "object", "properties": {}})
                for t in result.get("tools") or []]  # fmt: skip

    def call(self, op: str, args: Any) -> Any:
        if op not in self.ops:
            raise ServiceError(f"op: {self.name} has no operation {op!r} (it has: "
                               f"{', '.join(self.ops)})")  # fmt: skip
        if not isinstance(args, dict):
            raise ServiceError(f"{op}: the arguments are a JSON object")
        self.wait_ready()
        record: dict[str, Any] = {"tool_name": op, "request_body": args,
                                  "timestamp": datetime.now(UTC).isoformat()}  # fmt: skip
        self.dispatches.append(record)
        t0 = time.perf_counter()
        try:
            with self._lock:
                result = self._request("tools/call", {"name": op, "arguments": args},
                                       self.spec.call_timeout_s)  # fmt: skip
        except ServiceError as e:
            record.update(is_error=True, response_body=str(e))
            raise
        finally:
            record["latency_ms"] = round((time.perf_counter() - t0) * 1000, 2)
        text = "\n".join(str(c.get("text", json.dumps(c))) for c in (result or {}).get("content")
                         or [] if isinstance(c, dict))[:MAX_REPLY_CHARS]  # fmt: skip
        record.update(is_error=bool((result or {}).get("isError")), response_body=text)
        if record["is_error"]:
            raise ServiceError(text or "the tool failed")
        return text

    def close(self) -> None:
        """Stop it and every process it started; its copy of the data goes too (idempotent)."""
        stop_group(self._proc)
        self._log.close()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def snapshot(self) -> dict[str, Any]:
        return {"audit": self.audit, "dispatches": list(self.dispatches)}


def discover(spec: dict[str, Any]) -> list[McpTool]:
    """The tools of the server ``spec`` (an :class:`McpService`'s fields but its ``tools``) has,
    asked once in its sandbox; RuntimeError when it does not start."""
    app = McpApp("discovery", McpService.model_validate({**spec, "tools": [{"name": "-"}]}))
    try:
        return app.list_tools()
    finally:
        app.close()

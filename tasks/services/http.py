"""A task's own HTTP service: a program the HarnessPod starts for each attempt, on loopback, and
whose endpoints it offers as operations (a benchmark's mock services: ClawEval's Gmail, CRM,
helpdesk, ...).

A task names it in ``apps`` as ``{NAME: {http: {...}}}`` (:class:`HttpService`): the command
that starts it, where it runs, its tools (name, description, JSON Schema, the endpoint each
calls) and the endpoints that say it is up and what it did (``audit``). The sandbox never
reaches the program: it listens on a loopback port of the pod's host chosen for the attempt,
and the agent calls its tools through the attempt's service API like any built-in service
(native tools, MCP, the ``forge-service`` command), each call recorded with its request and
reply (a *dispatch*). When the attempt closes, the pod reads the program's audit endpoint and
stops it; the verifier reads both (``{NAME: {"audit": ..., "dispatches": [...]}}``).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator

from forge.sandboxes.services_launch import die_with_parent
from tasks.services.base import ServiceError
from tasks.services.mcp_app import McpApp, McpService, stop_group

WRITES = re.compile(
    r"(^|_)(send|create|add|update|edit|delete|remove|move|post|save|reply|set|schedule|cancel|"
    r"assign|close|approve|reject|mark|archive)",
    re.IGNORECASE,
)
MAX_REPLY_CHARS = 20_000
SHIM = str(Path(__file__).with_name("http_shim.py"))
BASE_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ")  # what any program expects


class HttpTool(BaseModel):
    """One tool of the service: an endpoint the agent calls with JSON arguments."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="The tool's name as the task defines it (gmail_send_message).")
    op: str = Field(description="Its operation name in the service (send_message).")
    description: str = Field(default="", description="What it does, shown to the model.")
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="Its arguments as a JSON Schema object.",
    )
    path: str = Field(description="The endpoint's path (/gmail/send).")
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = Field(default="POST")

    @field_validator("parameters")
    @classmethod
    def _object(cls, v: dict[str, Any]) -> dict[str, Any]:
        if v.get("type", "object") != "object":
            raise ValueError("a tool's parameters are a JSON Schema of type object")
        return {"type": "object", "properties": {}, **v}


class HttpService(BaseModel):
    """How to run a task's own HTTP service and what it offers."""

    model_config = ConfigDict(extra="forbid")

    command: list[str] = Field(
        min_length=1,
        description="Its argv; 'python PROGRAM.py' runs the pod's interpreter, on loopback "
        "only (tasks/services/http_shim.py).",
    )
    cwd: str = Field(description="The folder it runs in (a benchmark's checkout).")
    env: dict[str, str] = Field(default_factory=dict, description="Its environment, beside PORT.")
    pass_env: list[str] = Field(
        default_factory=list,
        description="Variables of the pod's environment it gets too (a search key); nothing "
        "else of the pod's (its judge's key) reaches it.",
    )
    description: str = Field(default="", description="What the service is, shown to the model.")
    health: str = Field(description="A path answering once it is up (/gmail/messages).")
    health_method: Literal["GET", "POST"] = Field(default="POST")
    audit: str | None = Field(default=None, description="A GET path returning what it did.")
    ready_timeout_s: float = Field(default=20.0, gt=0, description="Longest wait to be up.")
    tools: list[HttpTool] = Field(min_length=1, description="Its tools.")

    @field_validator("cwd")
    @classmethod
    def _folder(cls, v: str) -> str:
        if not Path(v).is_dir():
            raise ValueError(f"{v}: no such folder")
        return v


def writes(op: str) -> bool:
    """Whether an operation, by its name, changes what the service holds (a send, a create)."""
    return bool(WRITES.search(op))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HttpApp:
    """One running instance of an :class:`HttpService`, for one attempt."""

    def __init__(self, name: str, spec: HttpService) -> None:
        self.name, self.spec = name, spec
        self.ops = {t.op: t for t in spec.tools}
        self.dispatches: list[dict[str, Any]] = []
        self.audit: Any = None
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - open while the service runs
        argv = list(spec.command)
        if argv[0] in ("python", "python3") and argv[1:2] and argv[1].endswith(".py"):
            argv[:1] = [sys.executable, SHIM]  # the pod's interpreter, on loopback only
        base = {k: os.environ[k] for k in (*BASE_ENV, *spec.pass_env) if k in os.environ}
        env = {**base, **spec.env, "PORT": str(self.port), "HOST": "127.0.0.1"}
        self._proc = subprocess.Popen(  # the task's own program, never the agent's
            argv, cwd=spec.cwd, env=env, stdin=subprocess.DEVNULL, stdout=self._log,
            stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent,
        )  # fmt: skip
        self._ready = self._gave_up = False
        self._client = httpx.Client(timeout=30.0, trust_env=False)

    def wait_ready(self) -> None:
        if self._ready:
            return
        if self._gave_up:
            raise RuntimeError(f"service {self.name} did not start: {self.tail()}")
        deadline = time.monotonic() + self.spec.ready_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            try:
                r = self._client.request(
                    self.spec.health_method, self.base + self.spec.health, json={},
                    headers={"X-Health-Check": "1"}, timeout=2.0,
                )  # fmt: skip
                if r.status_code < 500:
                    self._ready = True
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        # the task's service did not come up: the infrastructure's fault, not the policy's
        self._gave_up = True
        raise RuntimeError(f"service {self.name} did not start: {self.tail()}")

    def tail(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-1500:]

    def call(self, op: str, args: Any) -> Any:
        tool = self.ops.get(op)
        if tool is None:
            raise ServiceError(f"op: {self.name} has no operation {op!r} (it has: "
                               f"{', '.join(self.ops)})")  # fmt: skip
        if not isinstance(args, dict):
            raise ServiceError(f"{op}: the arguments are a JSON object")
        self.wait_ready()
        url = self.base + tool.path
        record = {"tool_name": tool.name, "endpoint_url": url, "request_body": args,
                  "timestamp": datetime.now(UTC).isoformat()}  # fmt: skip
        t0 = time.perf_counter()
        try:
            r = self._client.request(tool.method, url, json=args)
            status = r.status_code
            try:
                body: Any = r.json()
            except ValueError:
                body = r.text
        except httpx.HTTPError as e:
            status, body = 500, {"error": str(e)}
        record.update(response_status=status, response_body=body,
                      latency_ms=round((time.perf_counter() - t0) * 1000, 2))  # fmt: skip
        self.dispatches.append(record)
        shown = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
        if len(shown) > MAX_REPLY_CHARS:
            shown = shown[:MAX_REPLY_CHARS] + " ...(cut)"
            body = shown
        if status >= 400:
            raise ServiceError(f"HTTP {status}: {shown}")
        return body

    def close(self) -> None:
        """Read what it did (its audit endpoint), then stop it and every process it started."""
        if self._proc.poll() is None and self.spec.audit:
            try:
                self.wait_ready()
                self.audit = self._client.get(self.base + self.spec.audit, timeout=10.0).json()
            except (RuntimeError, httpx.HTTPError, ValueError) as e:
                self.audit = {"error": f"audit unreadable: {e}"}
        stop_group(self._proc)
        self._client.close()
        self._log.close()

    def snapshot(self) -> dict[str, Any]:
        return {"audit": self.audit, "dispatches": list(self.dispatches)}


def catalog_entry(name: str, spec: HttpService | McpService) -> dict[str, Any]:
    """The service's entry in an attempt's catalog (as :meth:`tasks.services.World.catalog`)."""
    return {
        "service": name,
        "description": spec.description or f"The {name} service.",
        "ops": [
            {
                "name": op,
                "description": t.description,
                "writes": writes(op),
                "parameters": t.parameters,
            }
            for t in spec.tools
            if (op := t.op if isinstance(t, HttpTool) else t.name)
        ],
    }


def http_spec(seed: Any) -> HttpService | None:
    """The :class:`HttpService` of an ``apps`` entry that is one (``{http: {...}}``)."""
    if isinstance(seed, dict) and set(seed) == {"http"}:
        return HttpService.model_validate(seed["http"])
    return None


def own_spec(seed: Any) -> HttpService | McpService | None:
    """The task's own service an ``apps`` entry names (``{http: ...}`` or ``{mcp: ...}``), or
    None for a built-in service's seed."""
    if isinstance(seed, dict) and set(seed) == {"mcp"}:
        return McpService.model_validate(seed["mcp"])
    return http_spec(seed)


def own_app(name: str, spec: HttpService | McpService) -> HttpApp | McpApp:
    """A running instance of the task's own service, for one attempt."""
    return HttpApp(name, spec) if isinstance(spec, HttpService) else McpApp(name, spec)

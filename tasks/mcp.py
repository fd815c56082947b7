"""An MCP server a task offers its agent (a Harbor task's ``[[environment.mcp_servers]]``).

The server runs inside the task's environment: over ``stdio`` it is a command the harness starts
in the agent's sandbox; over ``streamable-http`` or ``sse`` it is a URL the sandbox reaches (a
compose service beside the agent's container, by its name). Harnesses that take MCP servers get
them in their own configuration (:mod:`forge.harnesses.task_tools`); a run whose harness takes
none leaves such a task out, naming why.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

TRANSPORTS = ("stdio", "streamable-http", "sse")


class McpServer(BaseModel):
    """One MCP server of a task."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_-]+$", description="Its name (a tool-name prefix).")
    transport: Literal["stdio", "streamable-http", "sse"] = Field(
        default="sse", description="How the harness speaks to it (Harbor's default: sse)."
    )
    url: str | None = Field(
        default=None, pattern=r"^https?://", description="streamable-http and sse: its URL."
    )
    command: str | None = Field(default=None, min_length=1, description="stdio: its program.")
    args: list[str] = Field(default_factory=list, description="stdio: the program's arguments.")

    @model_validator(mode="after")
    def _complete(self) -> McpServer:
        if self.transport == "stdio" and not self.command:
            raise ValueError(f"mcp server {self.name!r}: transport stdio needs a command")
        if self.transport != "stdio" and not self.url:
            raise ValueError(f"mcp server {self.name!r}: transport {self.transport} needs a url")
        return self

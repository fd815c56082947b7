"""ReactHarness: the plain ReAct loop of ``react_agent.py``, run by the sandbox's python3."""

from __future__ import annotations

from pathlib import Path

from forge.harnesses.base import AgentProgram, AttemptContext, agent_env

PROGRAM_HOST = str(Path(__file__).with_name("react_agent.py").resolve())
PROGRAM = "/opt/forge/harness/react_agent.py"  # where the sandbox sees it
TOOL_NAMES = ("shell", "read_file", "write_file", "finish")


class ReactHarness(AgentProgram):
    """Mounts ``react_agent.py`` read-only at :data:`PROGRAM` and runs it with the instruction.

    The command names the program through ``ctx.path(PROGRAM)``: under isolation that is
    :data:`PROGRAM` itself; where the sandbox runs commands on the host (``ctx.paths`` from
    ``Sandbox.path_map()``) it is the host file. The base URL is ``ctx.base_url`` as is: the
    pod builds it from ``Sandbox.proxy_host_port()``.
    """

    program = PROGRAM
    name = "react"
    protocol = "chat"

    def __init__(
        self,
        python: str = "python3",
        temperature: float | None = None,
        max_tokens: int | None = None,
        tool_timeout_s: float | None = None,
        tools: list[str] | None = None,
        system_prompt: str | None = None,
        service_tools: bool = True,
    ) -> None:
        """``tools``: the subset of shell, read_file, write_file, finish offered (None: all;
        []: none, a plain chat whose reply is the answer). ``system_prompt``: replaces the
        default ("" : no system message). ``service_tools``: offer a task's services as native
        tools (``mail_send``); False leaves only their command-line tools, through the shell."""
        unknown = set(tools or ()) - set(TOOL_NAMES)
        if unknown:
            raise ValueError(f"tools: unknown {sorted(unknown)}; known: {', '.join(TOOL_NAMES)}")
        self.python = python
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.tool_timeout_s = tool_timeout_s
        self.tools = tools
        self.system_prompt = system_prompt
        self.service_tools = service_tools
        self.services_via = "tool" if service_tools else "cli"

    def ro_mounts(self) -> dict[str, str]:
        return {PROGRAM_HOST: PROGRAM}

    def env(self, ctx: AttemptContext) -> dict[str, str]:
        return agent_env(
            ctx,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            tool_timeout=self.tool_timeout_s,
            tools=self.tools,
            system_prompt=self.system_prompt,
            service_tools=None if self.service_tools else "0",
        )

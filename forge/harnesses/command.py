"""CommandHarness: any CLI agent described by config alone (``harness: command``).

The options say what to mount, which files and environment point the agent at the attempt's
proxy, the command line of one episode, and where its final answer is. Strings may hold these
placeholders, replaced per attempt (any other braces are left alone, so JSON stays JSON):

    {base_url}            the attempt's OpenAI-style base URL (ends in /v1)
    {anthropic_base_url}  the same without /v1
    {api_key}             the attempt's key
    {model}               the model name to ask for
    {instruction}         the task's instruction
    {workspace}           the workspace as the agent sees it
    {home}                the sandbox's home directory

Example (``examples/command-harness.yaml`` runs the built-in ReAct program this way)::

    harness: command
    harness_options:
      name: my-agent
      mounts: {/opt/my-agent: /opt/my-agent}   # host (relative: to the cwd) -> sandbox, read-only
      files: {"{home}/.my-agent.json": '{"url": "{base_url}", "key": "{api_key}"}'}
      env: {MY_AGENT_MODEL: "{model}"}
      command: [/opt/my-agent/bin/agent, --yes, "{instruction}"]
      answer: {json_field: final_answer}               # or {last_line: true}
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from forge.harnesses.base import AttemptContext, last_json
from forge.sandboxes.base import ExecResult
from forge.sandboxes.bwrap import HOME

PLACEHOLDER = re.compile(
    r"\{(base_url|anthropic_base_url|api_key|model|instruction|workspace|home)\}"
)
PROTOCOLS = ("chat", "responses", "anthropic")


def fill(template: str, ctx: AttemptContext) -> str:
    """``template`` with the attempt's values in place of the placeholders."""
    values = {
        "base_url": ctx.base_url,
        "anthropic_base_url": ctx.anthropic_base_url,
        "api_key": ctx.api_key,
        "model": ctx.model,
        "instruction": ctx.instruction,
        "workspace": ctx.workspace,
        "home": ctx.path(HOME),
    }
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


class CommandHarness:
    source = "any CLI agent described in harness_options"

    def __init__(
        self,
        command: list[str],
        name: str = "command",
        protocol: str = "chat",
        mounts: dict[str, str] | None = None,
        files: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
        answer: dict[str, Any] | None = None,
    ) -> None:
        """``command``: the episode's argv (placeholders allowed). ``protocol``: the wire
        protocol the agent speaks (chat, responses, anthropic). ``mounts``: host path ->
        sandbox path, read-only. ``files``: sandbox path -> content, written before the episode
        (paths under {home} or the workspace). ``env``: extra environment. ``answer``:
        ``{json_field: F}`` (F of the last JSON line of stdout that has it) or ``{last_line:
        true}`` (the last non-empty stdout line, the default)."""
        if not command or not all(isinstance(a, str) for a in command):
            raise ValueError("command: a non-empty list of strings")
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol: {protocol!r} is not one of {', '.join(PROTOCOLS)}")
        answer = answer or {"last_line": True}
        if set(answer) - {"json_field", "last_line"} or len(answer) != 1:
            raise ValueError("answer: give exactly one of json_field: NAME or last_line: true")
        self.name, self.protocol = name, protocol
        self.argv = list(command)
        self.mounts = dict(mounts or {})
        self.templates = dict(files or {})
        self.extra_env = dict(env or {})
        self.answer = answer

    @staticmethod
    def normalize_options(options: dict[str, Any]) -> dict[str, Any]:
        """Relative mount sources made absolute against the cwd of whoever reads the config
        (the driver), not of the pod that runs the attempt."""
        mounts = options.get("mounts")
        if not isinstance(mounts, dict):
            return options
        return {**options, "mounts": {str(Path(h).resolve()): t for h, t in mounts.items()}}

    def ro_mounts(self) -> dict[str, str]:
        return self.mounts

    def files(self, ctx: AttemptContext) -> dict[str, str]:
        return {fill(path, ctx): fill(content, ctx) for path, content in self.templates.items()}

    def env(self, ctx: AttemptContext) -> dict[str, str]:
        return {k: fill(v, ctx) for k, v in self.extra_env.items()}

    def command(self, ctx: AttemptContext) -> list[str]:
        # Sandbox paths (a mounted program) map to host paths where commands run on the host.
        return [
            ctx.path(a) if a.startswith("/") else a for a in map(lambda t: fill(t, ctx), self.argv)
        ]

    def final_answer(self, result: ExecResult) -> str | None:
        lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
        field = self.answer.get("json_field")
        if field is None:
            return lines[-1] if lines else None
        record = last_json(result.stdout, lambda r: field in r)
        if record is None:
            return None
        value = record[field]
        return value if isinstance(value, str) else json.dumps(value)

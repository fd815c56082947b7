"""ZeroClawHarness: ZeroClaw (Rust, ``zeroclaw-labs/zeroclaw``), one ``zeroclaw agent -m`` episode.

No build of ZeroClaw is installable from PyPI, npm or Debian (the PyPI packages named
``zeroclaw`` and ``openclaw`` install an unrelated product), and its official routes, release
binaries and container images from its own project, cannot be reached here. So this adapter takes
the binary from config (``harness_options: {binary: /path/to/zeroclaw}``), mounts it read-only,
and runs only where one is given; a run without it stops with an error saying so.

We write ``$ZEROCLAW_CONFIG_DIR/config.toml`` with one custom provider whose ``uri`` and
``api_key`` are the attempt's proxy URL and key (``wire_api`` chat completions or responses), a
``full`` risk profile (every command allowed, no approvals, ZeroClaw's own sandbox off: the
sandbox is ours) and one agent, ``forge``, whose workspace is the task's. One episode is
``zeroclaw agent -a forge -m INSTRUCTION``; its reply on stdout is the final answer. Tools include
shell, file_read, file_write, file_edit, glob_search and content_search.

Reproducibility: HOME, the config dir, the workspace path and TZ are fixed by the sandbox.
"""

from __future__ import annotations

import json
from pathlib import Path

from forge.harnesses.base import AttemptContext
from forge.harnesses.install import HarnessNotInstalled
from forge.sandboxes.base import ExecResult
from forge.sandboxes.bwrap import HOME

MOUNT = "/opt/forge/harnesses/zeroclaw/zeroclaw"
CONFIG_DIR = f"{HOME}/.zeroclaw"
AGENT = "forge"
WIRE = {"chat": "chat_completions", "responses": "responses"}


def _toml(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


class ZeroClawHarness:
    name = "zeroclaw"
    source = "not installable here: give a binary in harness_options.binary"

    def __init__(self, binary: str | None = None, protocol: str = "chat") -> None:
        """``binary``: a ZeroClaw executable on the host; ``protocol``: chat or responses."""
        if protocol not in WIRE:
            raise ValueError(f"protocol must be one of {sorted(WIRE)}, not {protocol!r}")
        if binary is not None:
            path = Path(binary).expanduser().resolve()
            if not path.is_file():
                raise ValueError(f"binary {binary!r} is not a file")
            binary = str(path)
        self.binary = binary
        self.protocol = protocol

    def ro_mounts(self) -> dict[str, str]:
        if self.binary is None:
            raise HarnessNotInstalled(
                "harness 'zeroclaw' needs its binary: no build is installable from the package "
                "registries; set harness_options.binary to a zeroclaw executable"
            )
        return {self.binary: MOUNT}

    def config(self, ctx: AttemptContext) -> str:
        return "\n".join(
            [
                f"[providers.models.custom.{AGENT}]",
                f"uri = {_toml(ctx.base_url)}",
                f"api_key = {_toml(ctx.api_key)}",
                f"model = {_toml(ctx.model)}",
                f"wire_api = {_toml(WIRE[self.protocol])}",
                "",
                f"[risk_profiles.{AGENT}]",
                'level = "full"',
                'allowed_commands = ["*"]',
                "block_high_risk_commands = false",
                "require_approval_for_medium_risk = false",
                "sandbox_enabled = false",
                "",
                f"[agents.{AGENT}]",
                "enabled = true",
                f'model_provider = "custom.{AGENT}"',
                f'risk_profile = "{AGENT}"',
                "",
                f"[agents.{AGENT}.workspace]",
                f"path = {_toml(ctx.workspace)}",
                "",
            ]
        )

    def files(self, ctx: AttemptContext) -> dict[str, str]:
        return {f"{CONFIG_DIR}/config.toml": self.config(ctx)}

    def env(self, ctx: AttemptContext) -> dict[str, str]:
        return {"ZEROCLAW_CONFIG_DIR": ctx.path(CONFIG_DIR), "NO_COLOR": "1"}

    def command(self, ctx: AttemptContext) -> list[str]:
        return [ctx.path(MOUNT), "agent", "-a", AGENT, "-m", ctx.instruction]

    def final_answer(self, result: ExecResult) -> str | None:
        """The reply ZeroClaw prints for the one message."""
        text = result.stdout.strip()
        return text if result.exit_code == 0 and text else None

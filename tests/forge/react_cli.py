"""The built-in react program described as a third-party CLI agent (``harness: command``), as
examples/command-harness.yaml does, for tests that need a second harness."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def react_cli(name: str, cwd: str | None = None, **env: str) -> dict[str, Any]:
    """The command agent's options; ``cwd``: where it runs its commands (elsewhere than the
    workspace makes every answer miss); ``env``: more variables (``FORGE_TOOLS=""``)."""
    program = ["python3", "/opt/agent/react_agent.py", "{instruction}"]
    if cwd is not None:
        program = [
            "sh",
            "-c",
            f'cd {cwd} && exec python3 /opt/agent/react_agent.py "$0"',
            "{instruction}",
        ]
    return {
        "name": name,
        "protocol": "chat",
        "mounts": {
            str(ROOT / "forge" / "harnesses" / "react_agent.py"): "/opt/agent/react_agent.py"
        },
        "env": {
            "OPENAI_BASE_URL": "{base_url}",
            "OPENAI_API_KEY": "{api_key}",
            "FORGE_MODEL": "{model}",
            **env,
        },
        "command": program,
        "answer": {"json_field": "final_answer"},
    }

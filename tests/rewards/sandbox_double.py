"""A test double for the Sandbox: commands run with subprocess in a temporary directory.

The real backends (local, docker, k8s) are tested with their own tests; verifiers only need
something that runs ``sh -c`` in a workspace and reads and writes its files.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from forge.sandboxes.base import ExecResult, SandboxSpec


class DirSandbox:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.workspace = str(root)

    def _path(self, path: str) -> Path:
        return self.root / path

    def create(self, spec: SandboxSpec) -> None:
        self.root.mkdir(parents=True, exist_ok=True)

    def exec(
        self, cmd: list[str], timeout_s: float, env: dict[str, str] | None = None
    ) -> ExecResult:
        start = time.monotonic()
        try:
            p = subprocess.run(
                cmd,
                cwd=self.root,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env={**os.environ, **env} if env else None,
            )
        except subprocess.TimeoutExpired:
            return ExecResult(-1, "", "", timed_out=True, duration_s=time.monotonic() - start)
        return ExecResult(p.returncode, p.stdout, p.stderr, duration_s=time.monotonic() - start)

    def put_file(self, path: str, content: bytes | str, mode: int = 0o644) -> None:
        target = self._path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode() if isinstance(content, str) else content)
        target.chmod(mode)

    def get_file(self, path: str) -> bytes | None:
        target = self._path(path)
        return target.read_bytes() if target.is_file() else None

    def destroy(self) -> None:
        pass

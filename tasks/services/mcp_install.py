"""MCP servers published as ``npx PACKAGE@VERSION`` or ``uvx PACKAGE==VERSION`` commands, made
runnable in a sandbox with no network: each is installed once, on the host, into a folder of
its own under ``~/.cache/openforge/mcp`` (npm's ``--prefix``, or a virtual environment), and its
command becomes that folder's program, the folder mounted read-only where the server runs
(:class:`tasks.services.mcp_app.McpService`'s ``mounts``).

Installing needs the package registries (npm, PyPI) once; a server that cannot be installed is
an error naming it and the installer's last words.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

# Python servers were written for the MCP SDK before its 2.0 (which renamed and removed what they
# use); an unpinned install today takes 2.x and they fail at start
PYTHON_CONSTRAINTS = ("mcp<2",)
CACHE = Path(os.environ.get("FORGE_MCP_CACHE", Path.home() / ".cache" / "openforge" / "mcp"))
TIMEOUT_S = 600


class InstallError(RuntimeError):
    """A server's package could not be installed."""


def _run(argv: list[str], what: str) -> None:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
    if r.returncode != 0:
        raise InstallError(f"{what}: {(r.stderr or r.stdout).strip()[-600:]}")


def _folder(kind: str, spec: str) -> Path:
    return CACHE / kind / re.sub(r"[^A-Za-z0-9._=@+-]+", "_", spec)


def npm_command(package: str, args: list[str]) -> tuple[list[str], str]:
    """``(argv, folder)`` running npm ``package`` (``name@version``) from its own folder."""
    folder = _folder("npm", package)
    name = package.rsplit("@", 1)[0] if package.count("@") > (package[0] == "@") else package
    manifest = folder / "node_modules" / name / "package.json"
    if not manifest.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        _run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(folder), package],
             f"npm install {package}")  # fmt: skip
    meta = json.loads(manifest.read_text())
    bins = meta.get("bin") or {}
    if isinstance(bins, str):
        entry = bins
    elif bins:
        entry = bins.get(name.rsplit("/", 1)[-1]) or next(iter(bins.values()))
    else:
        raise InstallError(f"{package}: its package.json names no program (bin)")
    return ["node", str((manifest.parent / entry).resolve()), *args], str(folder)


def python_command(requirement: str, program: str, args: list[str]) -> tuple[list[str], str]:
    """``(argv, folder)`` running ``program`` of PyPI ``requirement`` from a venv of its own."""
    folder = _folder("py", requirement)
    binary = folder / "bin" / program
    if not binary.is_file():
        _run([sys.executable, "-m", "venv", str(folder)], f"venv for {requirement}")
        _run([str(folder / "bin" / "python"), "-m", "pip", "install", "-q", requirement,
              *PYTHON_CONSTRAINTS], f"pip install {requirement}")  # fmt: skip
    if not binary.is_file():
        raise InstallError(f"{requirement}: installed, but it has no program {program!r}")
    return [str(binary), *args], str(folder)


def runnable(command: str, args: list[str]) -> tuple[list[str], list[str]]:
    """``(argv, folders to mount)`` of a server's command: ``npx``/``uvx`` ones installed (see
    the module), any other as it is."""
    rest = [a for a in args if a not in ("-y", "--yes")]
    if command == "npx" and rest:
        argv, folder = npm_command(rest[0], rest[1:])
        return argv, [folder]
    if command == "uvx" and rest:
        if rest[0] == "--from" and len(rest) >= 3:
            requirement, program, tail = rest[1], rest[2], rest[3:]
        else:
            requirement, tail = rest[0], rest[1:]
            program = re.split(r"[=<>\[ ]", requirement, maxsplit=1)[0]
        argv, folder = python_command(requirement, program, tail)
        return argv, [folder]
    return [command, *args], []

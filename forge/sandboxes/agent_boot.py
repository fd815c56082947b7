"""What a container backend puts in its containers to run the sandbox agent
(:mod:`forge.sandboxes.agent`), and the layout it runs in.

A backend puts :func:`agent_tar` (the files of :func:`agent_tree`) at :data:`AGENT_DIR` in the
container and starts :func:`agent_command` as its entrypoint, then talks to it with
:class:`forge.sandboxes.agent_client.AgentClient`. The workspace, the home and the images'
unprivileged user (:data:`HARNESS_UID`) are the same in every image.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

AGENT_DIR = "/opt/forge/agent"  # where backends put the agent tree inside the container
WORKSPACE = "/workspace"
HOME = "/home/agent"
HARNESS_UID = HARNESS_GID = 1000  # the images' unprivileged user ("agent"): harnesses run as it
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_MODULES = ("base", "process", "archive", "bridge", "agent_user", "agent")
_BOOT = (
    "import sys; sys.path.insert(0, {dir!r}); from forge.sandboxes.agent import main; "
    "sys.exit(main(sys.argv[1:]))"
)


def agent_tree() -> dict[str, bytes]:
    """The agent's minimal package tree: relative path -> content (empty ``__init__`` files:
    nothing of the packages but the agent's own modules goes into the container)."""
    here = Path(__file__).resolve().parent
    tree = {"forge/__init__.py": b"", "forge/sandboxes/__init__.py": b""}
    for name in _MODULES:
        tree[f"forge/sandboxes/{name}.py"] = (here / f"{name}.py").read_bytes()
    return tree


def agent_tar(prefix: str = "") -> bytes:
    """:func:`agent_tree` as an uncompressed tar (names under ``prefix``, files 0644, dirs
    0755), for ``put_archive`` into the container's ``AGENT_DIR``."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs: set[str] = set()
        for rel, data in agent_tree().items():
            name = f"{prefix.strip('/')}/{rel}" if prefix.strip("/") else rel
            parts = name.split("/")
            for i in range(1, len(parts)):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def agent_command(
    *,
    unix: str | None = None,
    listen: str | None = None,
    token_file: str | None = None,
    workspace: str = WORKSPACE,
    home: str = HOME,
    proxies: dict[str, str] | None = None,
    python: str = "python3",
    agent_dir: str = AGENT_DIR,
    extra: list[str] | None = None,
    user: tuple[int, int] | None = None,
) -> list[str]:
    """The argv that starts the agent from ``agent_dir`` in isolated mode (``-I``: no
    environment variable, user site or working directory affects it). Exactly one of ``unix``
    (socket path) and ``listen`` (``HOST:PORT``); without ``token_file`` the agent reads
    ``FORGE_AGENT_TOKEN``; ``proxies`` maps ``HOST:PORT`` to a Unix socket to relay it to;
    ``user`` (uid, gid): who execs run as (see the agent's ``--user``)."""
    if (unix is None) == (listen is None):
        raise ValueError("give exactly one of unix= and listen=")
    argv = [python, "-I", "-c", _BOOT.format(dir=agent_dir)]
    argv += ["--unix", unix] if unix is not None else ["--listen", str(listen)]
    if token_file is not None:
        argv += ["--token-file", token_file]
    argv += ["--workspace", workspace, "--home", home]
    for addr, sock in (proxies or {}).items():
        argv += ["--proxy", f"{addr}={sock}"]
    if user is not None:
        argv += ["--user", f"{user[0]}:{user[1]}"]
    return argv + list(extra or [])

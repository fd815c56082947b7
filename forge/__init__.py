"""OpenForge core.

Importing ``forge`` before ``ray`` makes a local Ray cluster bind to loopback only and run
without auth tokens (Ray reads these at import time); set them yourself to choose otherwise.

OpenForge needs Python 3.11 or newer (``asyncio.TimeoutError`` is the builtin ``TimeoutError``
and ``datetime.UTC`` exists from 3.11 on): importing it on an older Python stops at once with a
message naming the version found and what to do, instead of a driver that dies on its first
idle second.
"""

from __future__ import annotations

import os
import sys

MIN_PYTHON = (3, 11)


def python_problem(
    version: tuple[int, ...] | None = None, executable: str | None = None
) -> str | None:
    """Why this Python cannot run OpenForge (None: it can). ``version`` defaults to the running
    interpreter's ``sys.version_info``, ``executable`` to ``sys.executable``."""
    version = tuple(sys.version_info if version is None else version)
    if version[:2] >= MIN_PYTHON:
        return None
    need = ".".join(map(str, MIN_PYTHON))
    found = ".".join(str(v) for v in version[:3])
    return (
        f"OpenForge needs Python {need} or newer; this is Python {found} "
        f"({executable or sys.executable}). Install Python {need} (on Ubuntu 22.04: "
        f"sudo apt-get install python{need} python{need}-venv), then remove .venv and run "
        f"PYTHON=python{need} bash scripts/setup.sh"
    )


_problem = python_problem()
if _problem is not None:
    raise RuntimeError(_problem)

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

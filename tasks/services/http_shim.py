"""Runs a task's own HTTP service, a Python program, so that it listens on loopback only,
whatever host it asks uvicorn for (ClawEval's mock services ask for every interface)::

    python http_shim.py PROGRAM.py [ARGS ...]
"""

from __future__ import annotations

import os
import runpy
import sys
from typing import Any


def _loopback_only() -> None:
    try:
        import uvicorn
    except ImportError:  # a program that serves some other way keeps its own host
        return
    run = uvicorn.run

    def on_loopback(app: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs["host"] = "127.0.0.1"
        return run(app, *args, **kwargs)

    uvicorn.run = on_loopback


if __name__ == "__main__":
    _loopback_only()
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))  # as `python PROGRAM` has it
    runpy.run_path(sys.argv[0], run_name="__main__")

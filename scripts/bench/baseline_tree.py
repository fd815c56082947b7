"""A bench's baseline: the import packages of an older revision, beside today's, in one run.

:func:`extract_tree` writes the packages of git revision REV to a temporary directory;
:class:`TreeActor` (wrapped with ``ray.remote``) builds an object of a class from that tree in
its own worker process (the tree first on that process's ``sys.path``, before anything of the
project is imported there), so a bench alternates it with today's on the same cluster in the
same run. Give today's object the same wrapper (``tree=None``): both then pay the same.
"""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import ray.cloudpickle

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("actors", "forge", "serve", "tasks", "rewards")  # pyproject's import packages


def extract_tree(rev: str) -> Path:
    """The import packages of ``rev`` in a new temporary directory."""
    tmp = Path(tempfile.mkdtemp(prefix=f"forge-baseline-{rev[:12]}-"))
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, *PACKAGES], check=True, capture_output=True
    ).stdout
    tar_path = tmp / "tree.tar"
    tar_path.write_bytes(archive)
    with tarfile.open(tar_path) as tar:
        tar.extractall(tmp, filter="data")
    tar_path.unlink()
    return tmp


class TreeActor:
    """``target`` (``module:Class``) built from ``tree`` (None: the installed project), its
    methods called through :meth:`call`. This module travels by value to the worker (the
    worker cannot import it), so the class it builds is the only project code it loads."""

    def __init__(self, tree: str | None, target: str, *args: Any, **kwargs: Any) -> None:
        if tree is not None:
            loaded = [m for m in sys.modules if m.split(".")[0] in PACKAGES]
            if loaded:
                raise RuntimeError(f"{loaded[:3]} were imported before the tree {tree}")
            sys.path.insert(0, tree)
        module, cls = target.split(":")
        self.obj = getattr(importlib.import_module(module), cls)(*args, **kwargs)
        self.file = sys.modules[module].__file__

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        out = getattr(self.obj, method)(*args, **kwargs)
        return await out if inspect.isawaitable(out) else out

    def where(self) -> str | None:
        """The file the target's module was loaded from (which tree this process runs)."""
        return self.file


ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

"""Memory of GUI sandboxes for scripts/bench/gui.py: every ``SAMPLE_S`` the process trees of
each sandbox (the outer ``bwrap`` processes under a HarnessPod's actor process and everything
below them) or of each by-hand subprocess are summed from ``/proc/PID/smaps_rollup``: PSS, USS
and RSS, with the peak per tree and the peak PSS of all together."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any

import psutil

MIB = 2**20
SAMPLE_S = 0.5  # how often memory is sampled
KEYS = ("Rss", "Pss", "Private_Clean", "Private_Dirty")


def tree_memory(root: psutil.Process, unread: set[str], below: bool = True) -> list[int]:
    """[RSS, PSS, USS] in bytes of ``root`` and (``below``) all its descendants, from
    smaps_rollup (USS: private pages, what ending the tree frees). A process whose smaps_rollup
    cannot be read counts its RSS for all three, and its name goes into ``unread``."""
    out = [0, 0, 0]
    try:
        members = [root, *root.children(recursive=True)] if below else [root]
    except psutil.Error:
        return out
    for proc in members:
        try:
            with open(f"/proc/{proc.pid}/smaps_rollup") as f:
                kb = {k: int(v.split()[0]) for k, v in (ln.split(":", 1) for ln in f) if k in KEYS}
            got = [kb["Rss"], kb["Pss"], kb["Private_Clean"] + kb["Private_Dirty"]]
            out = [o + g * 1024 for o, g in zip(out, got, strict=True)]
        except (OSError, KeyError, ValueError):
            try:
                r, name = proc.memory_info().rss, proc.name()
            except psutil.Error:
                continue  # gone meanwhile
            out = [o + r for o in out]
            if r:  # not a process that was exiting (an empty smaps_rollup)
                unread.add(name)
    return out


def sandbox_roots(actor_pid: int) -> list[psutil.Process]:
    """The outer ``bwrap`` processes under a HarnessPod's actor process: one per sandbox exec
    (bwrap forks once inside its namespaces; the inner one is part of the outer one's tree)."""
    try:
        below = psutil.Process(actor_pid).children(recursive=True)
    except psutil.Error:
        return []
    out = []
    for proc in below:
        with suppress(psutil.Error):
            if proc.name() == "bwrap" and proc.parent().name() != "bwrap":
                out.append(proc)
    return out


class MemoryWatch:
    """Samples ``groups()`` (group name -> root processes) every ``every_s``; keeps each
    group's peak (its roots' trees summed) and the peak of all groups together."""

    def __init__(
        self, groups: Callable[[], dict[Any, list[psutil.Process]]], every_s: float | None = None
    ):
        self.groups = groups
        self.every_s = every_s or SAMPLE_S
        self.peak: dict[Any, list[int]] = {}  # group -> [RSS, PSS, USS], each its own peak
        self.all_pss = 0
        self.unread: set[str] = set()  # processes whose PSS was taken as their RSS
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> None:
        total = 0
        for name, roots in self.groups().items():
            now = [0, 0, 0]
            for root in roots:
                now = [a + b for a, b in zip(now, tree_memory(root, self.unread), strict=True)]
            old = self.peak.get(name, [0, 0, 0])
            self.peak[name] = [max(a, b) for a, b in zip(old, now, strict=True)]
            total += now[1]
        self.all_pss = max(self.all_pss, total)

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.sample()

    def __enter__(self) -> MemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

"""Run one command in its own process group with a timeout and capped output capture."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable

from forge.sandboxes.base import ExecResult

DEFAULT_OUTPUT_CAP = 1 << 20  # bytes kept per stream (the last ones)


class _Tail:
    """Keeps the last ``cap`` bytes read from a pipe."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.buf = bytearray()
        self.dropped = 0

    def drain(self, fd: int) -> None:
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            self.buf += chunk
            if len(self.buf) > self.cap:
                extra = len(self.buf) - self.cap
                del self.buf[:extra]
                self.dropped += extra

    def text(self) -> str:
        out = self.buf.decode("utf-8", errors="replace")
        return f"[... {self.dropped} bytes dropped ...]\n{out}" if self.dropped else out


def kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _exited(pid: int) -> bool:
    """Whether ``pid`` has exited, without reaping it (so its group id cannot be reused yet)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def _wait_unreaped(pid: int, timeout_s: float) -> bool:
    """Wait until ``pid`` exits (unreaped) or ``timeout_s`` passes; True if it exited. Wakes on
    the exit itself through a pidfd; polls with backoff where pidfds are not available."""
    end = time.monotonic() + timeout_s
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    try:
        pause = 0.001
        while not _exited(pid):
            left = end - time.monotonic()
            if left <= 0:
                return False
            if fd is not None:
                select.select([fd], [], [], min(left, 1.0))  # readable once the process exits
            else:
                time.sleep(min(pause, left))
                pause = min(pause * 2, 0.05)
        return True
    finally:
        if fd is not None:
            os.close(fd)


def run_in_group(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: str,
    timeout_s: float,
    output_cap: int = DEFAULT_OUTPUT_CAP,
    grace_s: float = 2.0,
    on_start: Callable[[subprocess.Popen[bytes]], None] | None = None,
    on_end: Callable[[subprocess.Popen[bytes]], None] | None = None,
) -> ExecResult:
    """Run ``argv`` as the leader of a new session; stdin is closed.

    On timeout the whole process group gets SIGTERM, then SIGKILL after ``grace_s``; the result
    has ``exit_code=-1``, ``timed_out=True`` and the output read so far. When the leader exits on
    its own, whatever it left running in its group is killed too, so no exec outlives its call.
    """
    start = time.monotonic()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    if on_start is not None:
        on_start(proc)
    tails = (_Tail(output_cap), _Tail(output_cap))
    readers = [
        threading.Thread(target=t.drain, args=(p.fileno(),), daemon=True)
        for t, p in zip(tails, (proc.stdout, proc.stderr), strict=False)
    ]
    for r in readers:
        r.start()
    timed_out = False
    try:
        if not _wait_unreaped(proc.pid, max(timeout_s, 0.0)):
            timed_out = True
            kill_group(proc.pid, signal.SIGTERM)
            _wait_unreaped(proc.pid, grace_s)
        kill_group(proc.pid, signal.SIGKILL)  # the leader is not reaped yet: the pgid is ours
        rc = proc.wait()
    finally:
        if on_end is not None:
            on_end(proc)
    for r in readers:
        r.join(timeout=grace_s + 3.0)
    if not any(r.is_alive() for r in readers):
        proc.stdout.close()
        proc.stderr.close()
    return ExecResult(
        exit_code=-1 if timed_out else rc,
        stdout=tails[0].text(),
        stderr=tails[1].text(),
        timed_out=timed_out,
        duration_s=time.monotonic() - start,
    )

"""Run one command in its own process group with a timeout and capped output capture; track
such commands (:class:`Sessions`) to reap the orphans they leave and kill all of them at once."""

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
_PR_SET_CHILD_SUBREAPER = 36


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
    user: tuple[int, int] | None = None,
    pass_fds: tuple[int, ...] = (),
) -> ExecResult:
    """Run ``argv`` as the leader of a new session; stdin is closed. ``user`` (uid, gid): the
    child drops to that user (setgroups to none, setgid, setuid) before it runs ``argv``.
    ``pass_fds``: descriptors the child keeps (bwrap's ``--info-fd`` and ``--block-fd``).

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
        pass_fds=pass_fds,
        **(dict(user=user[0], group=user[1], extra_groups=[]) if user is not None else {}),
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


def _proc_table() -> list[tuple[int, int, int, str]]:
    """(pid, ppid, session id, state) of every visible process."""
    rows = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                raw = f.read().decode(errors="replace")
        except OSError:
            continue
        fields = raw[raw.rfind(")") + 2 :].split()  # after "pid (comm) "
        rows.append((int(name), int(fields[1]), int(fields[3]), fields[0]))
    return rows


def _prefer_for_oom(pid: int) -> None:
    """Make the kernel's OOM killer pick ``pid`` (and what it starts) before the agent itself,
    when the sandbox's memory (its tmpfs disks too) runs out: the policy's commands die, the
    agent that reports it lives. Raising a score needs no privilege; best effort."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/oom_score_adj", "w") as f:
        f.write("500")


def become_subreaper() -> bool:
    """Make orphaned descendants reparent to this process (Linux prctl): kill_all finds them."""
    if os.getpid() == 1:
        return True
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (ImportError, OSError, AttributeError):
        return False


class Waker:
    """A wake-up flag on a pipe: :meth:`set` takes no lock, so a signal handler may call it (a
    ``threading.Event`` there deadlocks when a second SIGCHLD lands inside the first ``set``:
    seen as a hung browser episode, Chromium's processes exiting in a burst), and
    ``signal.set_wakeup_fd(waker.fd)`` lets the interpreter set it with no handler code."""

    def __init__(self) -> None:
        self._r, self.fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def set(self) -> None:
        with contextlib.suppress(BlockingIOError):  # full: already set
            os.write(self.fd, b"\0")

    def wait(self, timeout_s: float) -> bool:
        return bool(select.select([self._r], [], [], timeout_s)[0])

    def clear(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._r, 4096):
                pass


class Sessions:
    """Commands run with :func:`run_in_group`, tracked so that orphans they leave (reparented
    to this process as a subreaper) are reaped and :meth:`kill_all` can end every one of them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.leaders: set[int] = set()  # running exec leaders (reaped by their own thread)
        self.sessions: set[int] = set()  # session ids of every exec not yet known to be empty
        self.spawning = 0  # execs between fork and registration: the reaper must wait
        self.wake = Waker()

    def run(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        timeout_s: float,
        cap: int,
        user: tuple[int, int] | None = None,
    ) -> ExecResult:
        registered = False

        def started(proc: subprocess.Popen[bytes]) -> None:
            nonlocal registered
            _prefer_for_oom(proc.pid)
            with self.lock:
                self.leaders.add(proc.pid)
                self.sessions.add(proc.pid)
                self.spawning -= 1
                registered = True

        def ended(proc: subprocess.Popen[bytes]) -> None:
            with self.lock:
                self.leaders.discard(proc.pid)
            self.wake.set()

        with self.lock:
            self.spawning += 1
        try:
            return run_in_group(
                argv, env=env, cwd=cwd, timeout_s=timeout_s, output_cap=cap,
                on_start=started, on_end=ended, user=user,
            )  # fmt: skip
        finally:
            if not registered:
                with self.lock:
                    self.spawning -= 1

    def reap(self) -> None:
        """Reap exited children that are not exec leaders (orphans reparented to us), without
        scanning /proc: a leader's own thread reaps it and then wakes the reaper again."""
        with self.lock:
            while not self.spawning:  # a child between fork and registration is no orphan
                try:
                    info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                except ChildProcessError:
                    break
                if info is None or info.si_pid in self.leaders:
                    break
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(info.si_pid, os.WNOHANG)
            if len(self.sessions) > 256:  # forget sessions with no process left
                self.sessions &= {row[2] for row in _proc_table() if row[3] != "Z"} | self.leaders

    def reaper(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.wake.wait(1.0)
            self.wake.clear()
            self.reap()

    def kill_all(self) -> int:
        """SIGKILL every exec's session and every descendant of the agent; how many died."""
        me, killed = os.getpid(), set()
        for _ in range(20):
            table = [row for row in _proc_table() if row[3] != "Z" and row[0] != me]
            with self.lock:
                sessions = self.sessions | self.leaders
            children: dict[int, list[int]] = {}
            for pid, ppid, _sid, _state in table:
                children.setdefault(ppid, []).append(pid)
            targets = {pid for pid, _ppid, sid, _state in table if sid in sessions}
            todo = list(children.get(me, []))
            while todo:
                pid = todo.pop()
                if pid not in targets:
                    targets.add(pid)
                    todo.extend(children.get(pid, []))
            if not targets:
                break
            for sid in sessions & {row[2] for row in table}:
                kill_group(sid, signal.SIGKILL)
            for pid in targets:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            killed |= targets
            time.sleep(0.005)
        self.wake.set()
        return len(killed)

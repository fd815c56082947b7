"""Start a task's services (and its X display) inside the sandbox, run the harness, stop them.

Standard library only: the sandbox runs this file with its own ``python3``, mounted read-only
at :data:`PROGRAM` (see :func:`forge.sandboxes.services.wrap`)::

    python3 -I services_launch.py --spec JSON -- HARNESS COMMAND...

``JSON`` holds ``services`` (each ``{command, ready, ready_timeout_s}``, as
``tasks.schema.Service``), ``gui`` (``{screen: [w, h], display: bool}`` or null), ``paths``
(sandbox path -> the path commands see it at, for backends without the fixed layout) and
``harness_env`` (names of variables meant for the harness alone: its key, its PYTHONPATH; the
display and the services do not get them). In order:

1. with ``gui.display``: ``Xvfb`` on a display it picks itself (``-displayfd``), sized
   ``WxHx24``, then ``openbox`` on it; ``DISPLAY`` is exported to everything after;
2. each service: ``sh -c COMMAND`` in the working directory (the workspace), in its own process
   group, its output to a log outside the workspace; then its ``ready`` is awaited (an http URL
   answering 2xx, ``file:PATH`` existing, or ``window:NAME`` visible on the display) for at
   most ``ready_timeout_s``;
3. the harness command, as a child with the same environment plus ``DISPLAY``;
4. when the harness exits (or this program gets SIGTERM/SIGINT/SIGHUP): every service's process
   group, then openbox and Xvfb, are terminated (SIGKILL after a grace period); the exit status
   is the harness's.

When the display or a service cannot be brought up (it exits, or is not ready in time) nothing
else starts: a line beginning with :data:`MARKER` says what on stderr, with the tail of that
service's log, and the status is :data:`SERVICE_FAILED`. That is an infrastructure failure of the
attempt (``failure="service_failed"``), never a wrong answer. A service that exits while the
harness runs is only reported (the agent may have caused it).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any

PROGRAM = "/opt/forge/services/services_launch.py"  # where the sandbox sees this file
SERVICE_FAILED = 117  # exit status when the display or a service failed to come up
MARKER = "forge-services: FAILED"
GRACE_S = 1.0  # SIGTERM -> SIGKILL; within the sandbox's own grace before it kills us
LOG_TAIL = 2000
_PR_SET_PDEATHSIG = 1
try:
    _LIBC: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:
    _LIBC = None


class Failed(Exception):
    """The display or a service did not come up."""


def die_with_parent() -> None:
    """In the child before exec: SIGKILL when this launcher dies (even by SIGKILL), so nothing
    outlives it where no pid namespace does that (an unisolated sandbox)."""
    if _LIBC is not None:
        with contextlib.suppress(AttributeError):
            _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _say(msg: str) -> None:
    print(f"forge-services: {msg}", file=sys.stderr, flush=True)


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - LOG_TAIL))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


class Launcher:
    """What was started, so :meth:`stop` can end all of it."""

    def __init__(self, spec: dict[str, Any], logdir: str) -> None:
        self.spec = spec
        self.logdir = logdir
        self.env = dict(os.environ)  # the harness's; DISPLAY is added
        private = set(spec.get("harness_env") or ())
        self.service_env = {k: v for k, v in self.env.items() if k not in private}
        self.groups: list[tuple[str, subprocess.Popen[bytes]]] = []  # (name, leader)

    def _spawn(self, name: str, argv: list[str], log: str, **kw: Any) -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.service_env,
                start_new_session=True,
                preexec_fn=die_with_parent,
                **kw,
            )
        self.groups.append((name, proc))
        return proc

    # -- the display ------------------------------------------------------------------------

    def start_display(self, width: int, height: int, timeout_s: float = 20.0) -> str:
        read_fd, write_fd = os.pipe()
        log = os.path.join(self.logdir, "xvfb.log")
        argv = [
            "Xvfb",
            "-displayfd",
            str(write_fd),
            "-screen",
            "0",
            f"{width}x{height}x24",
            "-nolisten",
            "tcp",
            "-noreset",
        ]
        try:
            xvfb = self._spawn("Xvfb", argv, log, pass_fds=(write_fd,))
        except OSError as e:
            raise Failed(f"cannot start Xvfb: {e}") from e
        finally:
            os.close(write_fd)
        number = b""
        end = time.monotonic() + timeout_s
        with os.fdopen(read_fd, "rb", buffering=0) as pipe:
            while not number.endswith(b"\n"):
                left = end - time.monotonic()
                if left <= 0 or xvfb.poll() is not None:
                    raise Failed(f"Xvfb did not come up within {timeout_s:.0f}s: {_tail(log)}")
                if select.select([pipe], [], [], min(left, 0.5))[0]:
                    chunk = pipe.read(16)
                    if not chunk:
                        raise Failed(f"Xvfb exited before it chose a display: {_tail(log)}")
                    number += chunk
        display = f":{int(number)}"
        self.env["DISPLAY"] = self.service_env["DISPLAY"] = display
        wm_log = os.path.join(self.logdir, "wm.log")
        try:
            self._spawn("openbox", ["openbox"], wm_log)
        except OSError as e:
            raise Failed(f"cannot start the window manager openbox: {e}") from e
        if not wait_for_wm(self.env, timeout_s=20.0):
            raise Failed(f"openbox did not show a window within 20s: {_tail(wm_log)}")
        return display

    # -- services ---------------------------------------------------------------------------

    def start_service(self, index: int, service: dict[str, Any]) -> None:
        command = localise(service["command"], self.spec.get("paths") or {})
        log = os.path.join(self.logdir, f"service-{index}.log")
        name = f"service {index} ({command[:60]})"
        try:
            proc = self._spawn(name, ["sh", "-c", command], log)
        except OSError as e:
            raise Failed(f"{name}: cannot start: {e}") from e
        ready = service.get("ready")
        if not ready:
            return
        timeout_s = float(service.get("ready_timeout_s") or 30.0)
        end = time.monotonic() + timeout_s
        pause = 0.02
        while not is_ready(ready, self.service_env):
            code = proc.poll()
            if code is not None:
                raise Failed(f"{name} exited with status {code} before {ready}: {_tail(log)}")
            if time.monotonic() >= end:
                raise Failed(f"{name} not ready ({ready}) after {timeout_s:g}s: {_tail(log)}")
            time.sleep(pause)
            pause = min(pause * 1.5, 0.25)

    # -- the end ----------------------------------------------------------------------------

    def report_exits(self) -> None:
        for name, proc in self.groups:
            code = proc.poll()
            if code is not None:
                _say(f"{name} had exited (status {code}) when the harness ended")

    def stop(self) -> None:
        """Services in reverse order, then the window manager and the display."""
        alive = []
        for _, proc in reversed(self.groups):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
            alive.append(proc)
        end = time.monotonic() + GRACE_S
        for proc in alive:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, end - time.monotonic()))
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # the rest of its group, if any
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1.0)
        self.groups.clear()


def wait_for_wm(env: dict[str, str], timeout_s: float = 20.0) -> bool:
    """Until the window manager shows windows; False if it never does. openbox sets
    _NET_SUPPORTING_WM_CHECK before it is ready (it then loads its theme and fonts), and a
    window mapped in between is lost for good: so a probe window is mapped, anew each second,
    until one is visible. True at once where xprop or xmessage is missing (best effort)."""
    deadline = time.monotonic() + timeout_s

    def run(argv: list[str]) -> bytes:
        return subprocess.run(argv, env=env, capture_output=True, timeout=5).stdout

    try:
        while b"window id" not in run(["xprop", "-root", "_NET_SUPPORTING_WM_CHECK"]):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        while time.monotonic() < deadline:
            probe = subprocess.Popen(
                ["xmessage", "-name", "forge-wm-probe", "-geometry", "+0+0", "probe"],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            try:
                end = min(time.monotonic() + 1.0, deadline)
                while time.monotonic() < end:
                    search = ["xdotool", "search", "--onlyvisible", "--classname"]
                    if run([*search, "forge-wm-probe"]).strip():
                        return True
                    time.sleep(0.05)
            finally:
                probe.kill()
                probe.wait()
    except (OSError, subprocess.TimeoutExpired):
        return True
    return False


def localise(text: str, paths: dict[str, str]) -> str:
    """``text`` with each sandbox path of ``paths`` replaced by the path commands see it at
    (longest first); unchanged when ``paths`` is empty (an isolated sandbox)."""
    for sandbox_path in sorted(paths, key=len, reverse=True):
        text = text.replace(sandbox_path, paths[sandbox_path])
    return text


def is_ready(ready: str, env: dict[str, str] | None = None) -> bool:
    """Whether ``ready`` holds now: ``file:PATH`` exists, ``window:NAME`` is a window on the
    display that is mapped and visible (xdotool matches NAME against titles and WM_CLASS,
    an application that has drawn nothing yet would lose the keys an agent types), or the
    URL answers 2xx. ``env``: the services' environment (its ``DISPLAY``)."""
    if ready.startswith("file:"):
        return os.path.exists(ready[len("file:") :])
    if ready.startswith("window:"):
        name = ready[len("window:") :]
        argv = ["xdotool", "search", "--onlyvisible", "--name", "--class", "--classname", name]
        try:
            found = subprocess.run(argv, capture_output=True, timeout=5.0, env=env)
        except (OSError, subprocess.TimeoutExpired):
            return False
        return found.returncode == 0 and bool(found.stdout.strip())
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(ready, timeout=2.0) as resp:
            return 200 <= resp.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--spec", required=True, help="JSON: services, gui, paths")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the harness command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no harness command after --")
    spec = json.loads(args.spec)
    stopping: list[int] = []
    harness: subprocess.Popen[bytes] | None = None
    phase = ["starting"]  # starting -> running -> stopping

    def on_signal(signum: int, frame: Any) -> None:
        stopping.append(signum)
        if phase[0] == "running" and harness is not None and harness.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                harness.send_signal(signum)
        elif phase[0] == "starting":
            raise KeyboardInterrupt  # abandon the start-up; ``finally`` stops what runs

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    launcher = Launcher(spec, tempfile.mkdtemp(prefix="forge-services-"))
    try:
        gui = spec.get("gui") or {}
        if gui.get("display"):
            width, height = gui.get("screen") or (640, 480)
            _say(f"display {launcher.start_display(int(width), int(height))} ({width}x{height})")
        for i, service in enumerate(spec.get("services") or []):
            launcher.start_service(i, service)
        if stopping:
            return 128 + stopping[0]
        harness = subprocess.Popen(command, env=launcher.env)
        phase[0] = "running"
        code = harness.wait()
        launcher.report_exits()
        return code if code >= 0 else 128 - code
    except Failed as e:
        print(f"{MARKER}: {e}", file=sys.stderr, flush=True)
        return SERVICE_FAILED
    except KeyboardInterrupt:
        return 128 + (stopping[0] if stopping else signal.SIGINT)
    finally:
        phase[0] = "stopping"  # a signal now must not interrupt the clean-up
        if harness is not None and harness.poll() is None:  # signalled as it started
            harness.kill()
            harness.wait()
        launcher.stop()
        shutil.rmtree(launcher.logdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

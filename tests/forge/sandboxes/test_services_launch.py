"""The services launcher: a task's services and X display come up before the harness, a broken
one is an infrastructure failure, and nothing outlives the harness. Real processes: python's
http.server, Xvfb and openbox, and a bubblewrap sandbox for the end-to-end case."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forge.harnesses.base import AttemptContext
from forge.sandboxes import services
from forge.sandboxes.base import SandboxSpec
from forge.sandboxes.bwrap import bwrap_works
from forge.sandboxes.local import LocalSandbox
from forge.sandboxes.services_launch import MARKER, SERVICE_FAILED
from tasks.schema import Task

LAUNCHER = services.LAUNCHER_HOST
HAS_X = all(shutil.which(p) for p in ("Xvfb", "openbox", "xdpyinfo"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(
    tmp_path: Path, spec: dict[str, object], *command: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run the launcher directly (no sandbox) in ``tmp_path``."""
    return subprocess.run(
        [sys.executable, "-I", LAUNCHER, "--spec", json.dumps(spec), "--", *command],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "State:\tZ" not in status.read_text()


def gone_soon(pid: int, within_s: float = 3.0) -> bool:
    end = time.monotonic() + within_s
    while alive(pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def http_service(port: int, **kw: object) -> dict[str, object]:
    cmd = f"echo $$ > server.pid; exec python3 -m http.server {port} --bind 127.0.0.1"
    return {"command": cmd, "ready": f"http://127.0.0.1:{port}/", **kw}


def test_service_ready_before_harness_and_killed_after(tmp_path: Path) -> None:
    port = free_port()
    (tmp_path / "hello.txt").write_text("hi from the workspace")
    fetch = f"import urllib.request as u; print(u.urlopen('http://127.0.0.1:{port}/hello.txt').read().decode())"
    done = launch(tmp_path, {"services": [http_service(port)]}, "python3", "-c", fetch)
    assert done.returncode == 0, done.stderr
    assert "hi from the workspace" in done.stdout  # served from the workspace, ready at once
    pid = int((tmp_path / "server.pid").read_text())
    assert gone_soon(pid), "the service outlived the harness"


def test_harness_status_passes_through(tmp_path: Path) -> None:
    port = free_port()
    done = launch(tmp_path, {"services": [http_service(port)]}, "sh", "-c", "exit 7")
    assert done.returncode == 7
    assert MARKER not in done.stderr


def test_file_ready_and_service_without_ready(tmp_path: Path) -> None:
    spec = {
        "services": [
            {"command": "sleep 0.3; touch up.flag; exec sleep 60", "ready": "file:up.flag"},
            {"command": "echo $$ > bg.pid; exec sleep 60"},
        ]
    }
    # the second service is not waited for: the harness waits for its pid file itself
    check = "test -e up.flag && echo seen; while [ ! -s bg.pid ]; do sleep 0.02; done"
    done = launch(tmp_path, spec, "sh", "-c", check)
    assert done.returncode == 0 and "seen" in done.stdout, done.stderr
    assert gone_soon(int((tmp_path / "bg.pid").read_text()))


def test_services_do_not_get_the_harness_variables(tmp_path: Path) -> None:
    spec = {
        "services": [{"command": 'echo "${API_KEY:-unset} $LANG" > svc.env', "ready": None}],
        "harness_env": ["API_KEY"],
    }
    argv = [sys.executable, "-I", LAUNCHER, "--spec", json.dumps(spec), "--"]
    wait = 'while [ ! -s svc.env ]; do sleep 0.02; done; echo "harness has $API_KEY"'
    env = {**os.environ, "API_KEY": "sk-attempt", "LANG": "C.UTF-8"}
    done = subprocess.run(
        [*argv, "sh", "-c", wait], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert "harness has sk-attempt" in done.stdout
    assert (tmp_path / "svc.env").read_text().split() == ["unset", "C.UTF-8"]


def test_service_that_dies_is_an_infrastructure_failure(tmp_path: Path) -> None:
    port = free_port()
    spec = {
        "services": [
            {"command": "echo 'no such app' >&2; exit 3", "ready": f"http://127.0.0.1:{port}/"}
        ]
    }
    done = launch(tmp_path, spec, "touch", "harness-ran")
    assert done.returncode == SERVICE_FAILED
    assert MARKER in done.stderr and "status 3" in done.stderr
    assert "no such app" in done.stderr  # the service's own output says why
    assert not (tmp_path / "harness-ran").exists()


def test_service_never_ready_times_out_and_is_killed(tmp_path: Path) -> None:
    spec = {
        "services": [
            {
                "command": "echo $$ > s.pid; exec sleep 60",
                "ready": "file:never",
                "ready_timeout_s": 0.5,
            }
        ]
    }
    start = time.monotonic()
    done = launch(tmp_path, spec, "touch", "harness-ran")
    assert done.returncode == SERVICE_FAILED
    assert "not ready (file:never) after 0.5s" in done.stderr
    assert time.monotonic() - start < 10
    assert not (tmp_path / "harness-ran").exists()
    assert gone_soon(int((tmp_path / "s.pid").read_text()))


def test_sigterm_stops_harness_and_services(tmp_path: Path) -> None:
    port = free_port()
    spec = {"services": [http_service(port)]}
    argv = [sys.executable, "-I", LAUNCHER, "--spec", json.dumps(spec), "--", "sleep", "60"]
    proc = subprocess.Popen(argv, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    pid_file = tmp_path / "server.pid"
    end = time.monotonic() + 20
    while not pid_file.exists() and time.monotonic() < end:
        time.sleep(0.05)
    time.sleep(0.5)  # the harness has started
    proc.terminate()
    assert proc.wait(timeout=10) == 128 + 15
    assert gone_soon(int(pid_file.read_text()))


def test_sigterm_while_waiting_for_a_service(tmp_path: Path) -> None:
    spec = {"services": [{"command": "echo $$ > s.pid; exec sleep 60", "ready": "file:never"}]}
    argv = [sys.executable, "-I", LAUNCHER, "--spec", json.dumps(spec), "--", "touch", "ran"]
    proc = subprocess.Popen(argv, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    pid_file = tmp_path / "s.pid"
    end = time.monotonic() + 20
    while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < end:
        time.sleep(0.05)
    proc.terminate()
    assert proc.wait(timeout=10) == 128 + 15
    assert gone_soon(int(pid_file.read_text()))
    assert not (tmp_path / "ran").exists()


@pytest.mark.skipif(not HAS_X, reason="needs Xvfb, openbox and xdpyinfo")
def test_display_comes_up_for_services_and_harness_and_goes(tmp_path: Path) -> None:
    spec = {
        "gui": {"display": True, "screen": [640, 480]},
        "services": [{"command": "echo $DISPLAY > service.display", "ready": None}],
    }
    check = (
        "echo DISPLAY=$DISPLAY; xdpyinfo | grep dimensions; xprop -root _NET_SUPPORTING_WM_CHECK"
    )
    done = launch(tmp_path, spec, "sh", "-c", check)
    assert done.returncode == 0, done.stderr
    assert "640x480 pixels" in done.stdout
    assert "window id" in done.stdout  # openbox manages the screen
    display = done.stdout.split("DISPLAY=", 1)[1].split()[0]
    assert display.startswith(":")
    assert (tmp_path / "service.display").read_text().strip() == display
    number = display[1:]
    end = time.monotonic() + 5
    while Path(f"/tmp/.X{number}-lock").exists() and time.monotonic() < end:
        time.sleep(0.05)
    assert not Path(f"/tmp/.X{number}-lock").exists(), "Xvfb outlived the harness"
    probe = subprocess.run(
        ["xdpyinfo"], env={**os.environ, "DISPLAY": display}, capture_output=True
    )
    assert probe.returncode != 0


@pytest.mark.skipif(not HAS_X or not shutil.which("xmessage"), reason="needs Xvfb and xmessage")
def test_window_ready_waits_for_a_visible_window(tmp_path: Path) -> None:
    """``window:NAME``: the harness starts only once the application's window is on the
    screen (keys typed earlier would be lost); a window that never shows is service_failed."""
    late = "sleep 1; exec xmessage -name late-probe -geometry +0+0 hello"
    spec = {
        "gui": {"display": True, "screen": [640, 480]},
        "services": [{"command": late, "ready": "window:late-probe"}],
    }
    seen = launch(tmp_path, spec, "xdotool", "search", "--onlyvisible", "--classname", "late-probe")
    assert seen.returncode == 0, seen.stderr
    assert seen.stdout.strip()  # the window was there when the harness looked
    spec["services"] = [{"command": "sleep 30", "ready": "window:never", "ready_timeout_s": 1}]
    never = launch(tmp_path, spec, "true")
    assert never.returncode == SERVICE_FAILED
    assert "not ready (window:never)" in never.stderr


# -- through a real sandbox and the episode's wiring ------------------------------------------


def _task(port: int, **kw: object) -> Task:
    return Task.model_validate(
        {
            "id": "svc",
            "instruction": "x",
            "verifier": {"type": "file_exists", "path": "x"},
            "services": [
                {
                    "command": f"python3 /opt/forge/webapps/server.py --help >/dev/null && "
                    f"exec python3 -m http.server {port} --bind 127.0.0.1",
                    "ready": f"http://127.0.0.1:{port}/",
                }
            ],
            **kw,
        }
    )


def _ctx(box: LocalSandbox) -> AttemptContext:
    return AttemptContext(
        "http://b/v1", "http://b", "k", "m", "x", box.workspace, paths=box.path_map()
    )


def test_wiring_without_services_changes_nothing() -> None:
    task = Task.model_validate(
        {"id": "t", "instruction": "x", "verifier": {"type": "file_exists", "path": "x"}}
    )
    assert services.mounts(task) == {} and services.gui_extra(task) == {}
    ctx = AttemptContext("http://b/v1", "http://b", "k", "m", "x", "/workspace")
    assert services.wrap(task, ctx, ["run", "it"]) == ["run", "it"]


def test_harness_variables_named_to_the_launcher_but_not_path() -> None:
    task = _task(1)
    ctx = AttemptContext("http://b/v1", "http://b", "k", "m", "x", "/workspace")
    argv = services.wrap(task, ctx, ["agent"], {"OPENAI_API_KEY": "k", "PATH": "/x:/usr/bin"})
    spec = json.loads(argv[argv.index("--spec") + 1])
    assert spec["harness_env"] == ["OPENAI_API_KEY"]
    assert argv[-2:] == ["--", "agent"]


def test_gui_extra_names_screen_and_start_url() -> None:
    task = _task(1, gui={"screen": [800, 600], "start_url": "http://127.0.0.1:1/"})
    assert services.gui_extra(task) == {"screen": "800x600", "start_url": "http://127.0.0.1:1/"}


@pytest.mark.parametrize("isolation", ["required", "none"])
def test_in_a_local_sandbox(tmp_path: Path, isolation: str) -> None:
    if isolation == "required" and not bwrap_works():
        pytest.skip("bubblewrap cannot build sandboxes here")
    port = free_port()
    task = _task(port)
    box = LocalSandbox(root=tmp_path / "root", isolation=isolation)  # type: ignore[arg-type]
    box.create(SandboxSpec(ro_mounts=services.mounts(task)))
    try:
        box.put_file("page.txt", "served inside")
        fetch = f"import urllib.request as u; print(u.urlopen('http://127.0.0.1:{port}/page.txt').read().decode())"
        result = box.exec(services.wrap(task, _ctx(box), ["python3", "-c", fetch]), 60)
        assert result.exit_code == 0, result.stderr
        assert "served inside" in result.stdout
        bad = task.model_copy(
            update={"services": [task.services[0].model_copy(update={"command": "exit 4"})]}
        )
        result = box.exec(services.wrap(bad, _ctx(box), ["true"]), 60)
        assert services.service_failed(result), result.stderr
    finally:
        box.destroy()


@pytest.mark.skipif(not HAS_X or not bwrap_works(), reason="needs Xvfb and bubblewrap")
def test_display_in_a_bubblewrap_sandbox(tmp_path: Path) -> None:
    task = Task.model_validate(
        {
            "id": "d",
            "instruction": "x",
            "verifier": {"type": "file_exists", "path": "x"},
            "gui": {"display": True, "screen": [800, 600]},
        }
    )
    box = LocalSandbox(root=tmp_path / "root")
    box.create(SandboxSpec(ro_mounts=services.mounts(task)))
    try:
        cmd = ["sh", "-c", "echo D=$DISPLAY; xdpyinfo | grep dimensions"]
        result = box.exec(services.wrap(task, _ctx(box), cmd), 60)
        assert result.exit_code == 0, result.stderr
        assert "D=:" in result.stdout and "800x600 pixels" in result.stdout
    finally:
        box.destroy()


@pytest.mark.docker
def test_in_a_docker_sandbox(docker_daemon, docker_images) -> None:
    """The container has no network but loopback: the app is reachable there, privately."""
    from forge.config import SandboxConfig
    from forge.sandboxes.registry import sandbox_for

    config = SandboxConfig(backend="docker", docker_host=docker_daemon.host, memory_mb=256)
    task = _task(8765)
    box = sandbox_for(config, None)
    box.create(SandboxSpec(labels={"run": "svc"}, ro_mounts=services.mounts(task)))
    try:
        box.put_file("page.txt", "served in a container")
        fetch = "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8765/page.txt').read().decode())"
        ctx = AttemptContext("a", "b", "k", "m", "x", box.workspace, paths=box.path_map())
        result = box.exec(services.wrap(task, ctx, ["python3", "-c", fetch]), 60)
        assert result.exit_code == 0, result.stderr
        assert "served in a container" in result.stdout
    finally:
        box.destroy()

"""cluster.yaml (the `ray up` config) against Ray's own cluster-config validation: the defaults
`ray up` merges in, the JSON schema it validates with (ray/autoscaler/ray-schema.json) and its
cross-field checks; then what that schema cannot know (where the harness_pod resource lives,
GPUs, bounds, the setup). No cloud account is touched."""

from __future__ import annotations

import contextlib
import copy
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from packaging.specifiers import SpecifierSet
from ray.autoscaler._private.util import prepare_config, validate_config

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "cluster.yaml"
POD_RESOURCE = "harness_pod"


def load() -> dict[str, Any]:
    return yaml.safe_load(CLUSTER.read_text())


def ray_validate(config: dict[str, Any]) -> dict[str, Any]:
    """What `ray up` does before it asks the cloud for anything: merge the provider's defaults
    and the setup commands, fill per-type bounds, validate. Returns the prepared config."""
    prepared = prepare_config(copy.deepcopy(config))
    validate_config(prepared)
    return prepared


def problems(config: dict[str, Any]) -> list[str]:
    """What Ray's schema accepts but would make an OpenForge cluster wrong."""
    out: list[str] = []
    types: dict[str, dict[str, Any]] = config["available_node_types"]
    head = config["head_node_type"]
    workers = {k: v for k, v in types.items() if k != head}
    pod_types = [k for k, v in types.items() if v["resources"].get(POD_RESOURCE, 0) > 0]
    gpu_types = [k for k, v in types.items() if v["resources"].get("GPU", 0) > 0]
    if len(pod_types) != 1 or pod_types[0] == head:
        out.append(f"{POD_RESOURCE} must be on exactly one worker type, found on {pod_types}")
    if not gpu_types or head in gpu_types:
        out.append(f"GPUs must be on worker types only, found on {gpu_types}")
    if set(pod_types) & set(gpu_types):
        out.append(f"HarnessPods would take GPU nodes: {sorted(set(pod_types) & set(gpu_types))}")
    for name, t in workers.items():
        lo, hi = t.get("min_workers", 0), t.get("max_workers", 0)
        if not 0 <= lo <= hi or hi < 1:
            out.append(f"{name}: bounds min {lo}, max {hi}")
    if sum(t.get("max_workers", 0) for t in workers.values()) > config["max_workers"]:
        out.append("max_workers is below the sum of the worker types' max_workers")
    mounts = config.get("file_mounts", {})
    remote = next((r for r, local in mounts.items() if (ROOT / local).resolve() == ROOT), None)
    if remote is None:
        out.append("file_mounts does not copy the repository root (run `ray up` from it)")
    setup = " ; ".join(config.get("setup_commands", []))
    if remote is None or f"cd {remote}" not in setup or "bash scripts/setup.sh" not in setup:
        out.append("setup_commands do not run scripts/setup.sh in the copied repository")
    return out


def test_ray_accepts_cluster_yaml() -> None:
    prepared = ray_validate(load())
    assert prepared["provider"]["type"] == "aws"
    assert prepared["head_node_type"] in prepared["available_node_types"]
    # setup_commands reach head and workers alike (Ray merges them into both lists)
    for key in ("head_setup_commands", "worker_setup_commands"):
        assert any("scripts/setup.sh" in c for c in prepared[key]), key


def test_openforge_shape() -> None:
    config = load()
    assert problems(config) == []
    types = config["available_node_types"]
    assert types["cpu"]["resources"][POD_RESOURCE] == 8
    assert types["gpu"]["resources"]["GPU"] >= 1
    assert POD_RESOURCE not in types["head"]["resources"]
    assert "GPU" not in types["cpu"]["resources"]


def test_setup_is_the_laptops_and_commands_run_in_the_venv() -> None:
    config = load()
    setup = config["setup_commands"]
    i_setup = next(i for i, c in enumerate(setup) if "bash scripts/setup.sh" in c)
    i_venv = next(i for i, c in enumerate(setup) if ".venv/bin/activate" in c)
    assert i_venv > i_setup  # ray start and the autoscaler then run the venv's Ray
    assert "FORGE_SKIP_DOCKER=1" in setup[i_setup]
    assert (ROOT / "scripts" / "setup.sh").is_file()
    # the laptop's .venv and runs/ are not shipped: rsync honours .gitignore, which lists them
    assert ".gitignore" in config["rsync_filter"]
    ignored = (ROOT / ".gitignore").read_text().split()
    assert ".venv/" in ignored and "runs/" in ignored
    # the head's autoscaler (in .venv) needs boto3 to launch EC2 workers
    assert any("boto3" in c for c in config["head_setup_commands"])
    starts = config["head_start_ray_commands"] + config["worker_start_ray_commands"]
    assert all("--metrics-export-port=8080" in c for c in starts if "ray start" in c)
    assert "--dashboard-host=127.0.0.1" in " ".join(config["head_start_ray_commands"])


def _requires_python() -> SpecifierSet:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return SpecifierSet(project["requires-python"])


def test_setup_installs_the_python_the_project_requires(tmp_path: Path) -> None:
    """The AMI's python3 is 3.10, which pyproject.toml refuses: the setup installs a Python the
    project accepts, makes .venv and .venv-vllm with it, and replaces one an older Python made.
    The setup command itself runs here, with a stub setup.sh that records what it was given."""
    setup = load()["setup_commands"]
    apt = next(c for c in setup if "apt-get" in c and " install " in c)
    packages = apt.split(" install ", 1)[1].split()
    pythons = [p.removeprefix("python") for p in packages if p.startswith("python3.")]
    pythons = [v for v in pythons if v.replace(".", "").isdigit()]
    assert pythons, f"no python3.X package installed: {apt}"
    (version,) = pythons
    assert version in _requires_python() and "3.10" not in _requires_python()
    assert f"python{version}-venv" in packages  # python3.X -m venv needs ensurepip

    command = next(c for c in setup if "bash scripts/setup.sh" in c)
    assert f"PYTHON=python{version} " in command
    repo = tmp_path / "openforge"
    (repo / "scripts").mkdir(parents=True)
    (repo / "scripts" / "setup.sh").write_text('echo "$PYTHON" > ran-with\n')
    old = repo / ".venv" / "bin" / "python"  # what a 3.10 venv answers the check with
    old.parent.mkdir(parents=True)
    old.write_text(
        f"#!/bin/sh\nexec {sys.executable} -c "
        '"import sys; sys.version_info = (3, 10, 12, \'final\', 0); exec(sys.argv[1])" "$2"\n'
    )
    old.chmod(0o755)
    current = repo / ".venv-vllm" / "bin" / "python"
    current.parent.mkdir(parents=True)
    current.symlink_to(sys.executable)
    env = {"HOME": str(tmp_path), "PATH": os.environ["PATH"]}
    done = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (repo / "ran-with").read_text().strip() == f"python{version}"
    assert not (repo / ".venv").exists()  # made by 3.10: setup.sh makes it again
    assert current.is_symlink()  # made by this Python: kept


COMMAND_LISTS = (
    "initialization_commands",
    "setup_commands",
    "head_setup_commands",
    "worker_setup_commands",
    "head_start_ray_commands",
    "worker_start_ray_commands",
)


def test_every_command_is_valid_bash() -> None:
    config = load()
    commands = [c for key in COMMAND_LISTS for c in config.get(key, [])]
    assert len(commands) >= 8
    for command in commands:
        done = subprocess.run(["bash", "-n", "-c", command], capture_output=True, text=True)
        assert done.returncode == 0, f"{command!r}: {done.stderr}"
    done = subprocess.run(["bash", "-n", "-c", "cd ~/x && { true"], capture_output=True)
    assert done.returncode != 0  # bash -n does refuse a broken command


def test_the_gpu_example_run_fits() -> None:
    """examples/gpu-cluster.yaml's Policy replicas and a Trainer GPU fit the GPU group at max."""
    run = yaml.safe_load((ROOT / "examples" / "gpu-cluster.yaml").read_text())
    types = load()["available_node_types"]
    gpus = types["gpu"]["resources"]["GPU"] * types["gpu"]["max_workers"]
    assert run["policy"]["replicas"] * run["policy"]["num_gpus"] + 1 <= gpus
    pods = types["cpu"]["resources"][POD_RESOURCE] * types["cpu"]["max_workers"]
    assert run["rollout"]["max_pods"] <= pods


def _set(path: str, value: Any) -> Any:
    def edit(c: dict[str, Any]) -> None:
        *keys, last = path.split(".")
        for k in keys:
            c = c[k]
        if value is _DELETE:
            del c[last]
        else:
            c[last] = value

    return edit


_DELETE = object()
RAY_REJECTS = {
    "typo in a node type key": _set("available_node_types.cpu.min_worker", 1),
    "fractional custom resource": _set("available_node_types.cpu.resources.harness_pod", 0.5),
    "negative GPU count": _set("available_node_types.gpu.resources.GPU", -1),
    "node type without resources": _set("available_node_types.gpu.resources", _DELETE),
    "head type not defined": _set("head_node_type", "ray.head.default"),
    "min workers above the global max": _set("max_workers", 1),
    "typo in a top-level key": _set("setup_command", ["bash scripts/setup.sh"]),
    "custom resource as text": _set("available_node_types.cpu.resources.harness_pod", "8"),
}


@pytest.mark.parametrize("edit", RAY_REJECTS.values(), ids=RAY_REJECTS.keys())
def test_ray_rejects_broken_copies(edit: Any) -> None:
    broken = load()
    edit(broken)
    with pytest.raises((jsonschema.ValidationError, ValueError)):
        ray_validate(broken)


SHAPE_BREAKS = {
    "harness_pod on the gpu group too": _set("available_node_types.gpu.resources.harness_pod", 4),
    "harness_pod on the head": _set("available_node_types.head.resources", {"harness_pod": 8}),
    "no GPU on the gpu group": _set("available_node_types.gpu.resources", {"CPU": 48}),
    "min above max": _set("available_node_types.cpu.min_workers", 17),
    "setup.sh not run": _set("setup_commands", ["cd ~/openforge && pip install -e ."]),
    "repository not copied": _set("file_mounts", {"~/openforge": "scripts"}),
}


@pytest.mark.parametrize("edit", SHAPE_BREAKS.values(), ids=SHAPE_BREAKS.keys())
def test_shape_checks_bite(edit: Any) -> None:
    broken = load()
    edit(broken)
    ray_validate(broken)  # Ray's schema cannot tell: only the shape checks can
    assert problems(broken)


def test_ray_token_authentication_is_on_every_node() -> None:
    """Every `ray start` (head and workers) runs with RAY_AUTH_MODE=token (a worker started
    without it would not authenticate, and a head without it would accept anyone), the token
    file `ray get-auth-token --generate` writes is copied to where each node's Ray reads it,
    and a node's shell has the mode too (`ray status`, `ray job ...`)."""
    config = load()
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        starts = [c for c in config[key] if "ray start" in c]
        assert starts, key
        for command in starts:
            before = command.split("ray start", 1)[0]
            assert "export RAY_AUTH_MODE=token;" in before, command
    assert config["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"
    setup = " ; ".join(config["setup_commands"])
    assert "echo 'export RAY_AUTH_MODE=token' >> ~/.bashrc" in setup
    cloud = (ROOT / "docs" / "cloud.md").read_text()
    assert "ray get-auth-token --generate" in cloud and "RAY_AUTH_MODE=token" in cloud


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` is still running (a zombie is not)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if fields[0] != "Z" and int(fields[2]) == pgid:
                return True
    return False


@pytest.mark.slow
def test_a_head_started_as_cluster_yaml_starts_it_refuses_callers_without_the_token(
    tmp_path: Path,
) -> None:
    """A real Ray head (this Ray version), started with the environment cluster.yaml's head
    command sets and a token file where file_mounts puts it, on ports of its own: the dashboard's
    job API answers 401 to a caller without the token (a sandbox, say) and 200 with it."""
    import secrets
    import shlex
    import signal
    import time
    import urllib.error
    import urllib.request

    (start,) = [c for c in load()["head_start_ray_commands"] if "ray start" in c]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    for word in shlex.split(start.split("ray start", 1)[0].replace(";", " ")):
        if "=" in word and word != "export":
            key, value = word.split("=", 1)
            env[key] = value
    assert env["RAY_AUTH_MODE"] == "token"
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    token = secrets.token_hex(32)
    (home / ".ray" / "auth_token").write_text(token)
    env["HOME"] = str(home)
    gcs, dash = _free_port(), _free_port()
    ray_bin = Path(sys.executable).parent / "ray"
    temp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths must fit
    argv = [str(ray_bin), "start", "--head", "--block", f"--port={gcs}",
            "--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1",
            f"--dashboard-port={dash}", f"--temp-dir={temp}", "--num-cpus=0",
            "--include-dashboard=true", "--disable-usage-stats"]  # fmt: skip
    log = tmp_path / "head.log"
    with log.open("wb") as out:
        head = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip

    def status(bearer: str | None) -> int:
        req = urllib.request.Request(f"http://127.0.0.1:{dash}/api/jobs/")
        if bearer is not None:
            req.add_header("Authorization", f"Bearer {bearer}")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return 0

    try:
        deadline = time.monotonic() + 240
        while status(None) == 0 and time.monotonic() < deadline and head.poll() is None:
            time.sleep(0.25)
        assert status(None) == 401, log.read_text()[-3000:]  # no token: refused
        assert status("not-the-token") in (401, 403)
        assert status(token) == 200
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGTERM)
        # Its services (GCS, raylet, dashboard) leave within a second; `ray start` itself
        # then waits ~30 s on a straggler of its own before it exits. After 2 s what remains
        # of the group (its own temp dir and ports, removed below) is killed.
        gone = time.monotonic() + 2
        while time.monotonic() < gone and _group_alive(head.pid):
            time.sleep(0.1)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            head.wait(30)
        shutil.rmtree(temp, ignore_errors=True)

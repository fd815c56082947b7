"""Harbor-format tasks in: ``tasks: harbor:PATH``, a task folder or a folder of them.

A Harbor task is a folder::

    instruction.md          what the agent is asked (leading canary lines are dropped)
    task.toml               timeouts, resources, environment variables (harbor's TaskConfig)
    environment/Dockerfile  its image, with the files it copies
    tests/test.sh           writes /logs/verifier/reward.txt or reward.json
    solution/solve.sh       the reference solution (the oracle)

Each becomes a :class:`tasks.schema.Task` whose ``environment`` is its image (built by the
docker backend, :mod:`forge.images.task`; the agent works in the Dockerfile's ``WORKDIR``),
whose verifier is ``harbor_tests`` (:mod:`rewards.harbor_tests`: the tests reach the
environment only after the agent has finished, in its own container as Harbor runs them, or
sealed in a fresh one: ``verifier.environment_mode``, or the run's ``harbor_verify``) and
whose solution is one shell step that unpacks ``solution/`` at ``/solution`` and runs
``solve.sh`` from the workdir, as Harbor's oracle does. ``task.toml`` is read with the
``harbor`` package's own ``TaskConfig``.
"""

from __future__ import annotations

import base64
import gzip
import io
import re
import shlex
import tarfile
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tasks.dockerfile import DockerfileError, final_workdir
from tasks.errors import TaskError, build_task, validation_problems
from tasks.harbor_compose import ComposeError, read_compose
from tasks.schema import Task

PREFIX = "harbor:"
CONFIG = "task.toml"
RUNS_AGENT_CODE = "tests_run_agent_code"  # task.toml [metadata]: the tests run the agent's code
RUNS_AGENT_CODE_TAG = "tests-run-agent-code"
# task.toml fields OpenForge does not run yet: a task that sets one is left out, naming it
UNSUPPORTED = {
    "verifier.environment": "a verifier image of its own is not supported",
}
HEADERS = (
    "an MCP server's headers take credentials from the host's environment, which never enters "
    "a sandbox: not supported"
)
_CANARY = re.compile(r"^(<!--.*canary.*-->|#.*canary.*)$", re.IGNORECASE)


def is_harbor(name: str) -> bool:
    return name.startswith(PREFIX)


def task_dirs(root: Path) -> list[Path]:
    """``root`` itself when it is a task (has task.toml), else its task subfolders, sorted."""
    if (root / CONFIG).is_file():
        return [root]
    if not root.is_dir():
        raise TaskError([(str(root), "", "no such folder")])
    found = sorted(p for p in root.iterdir() if (p / CONFIG).is_file())
    if not found:
        raise TaskError([(str(root), "", f"no Harbor tasks (folders with {CONFIG}) here")])
    return found


def strip_canary(text: str) -> str:
    """``text`` without its leading canary comment lines and the blank lines after them."""
    lines = text.split("\n")
    i = 0
    while i < len(lines) and _CANARY.match(lines[i].strip()):
        i += 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    return "\n".join(lines[i:])


def task_id(folder: Path) -> str:
    """The folder's name as a task id: lower case, other characters as '-'."""
    return re.sub(r"[^a-z0-9._-]+", "-", folder.name.lower()).strip("-._") or "task"


def _task_config(path: Path) -> Any:
    try:
        from harbor.models.task.config import TaskConfig
    except ImportError as e:
        raise TaskError(
            [
                (
                    str(path),
                    "",
                    f"reading Harbor tasks needs the harbor package ({e}): "
                    "pip install --no-deps harbor toml (scripts/setup.sh does)",
                )
            ]
        ) from None
    try:
        return TaskConfig.model_validate_toml(path.read_text(encoding="utf-8"))
    except ValidationError as e:
        raise TaskError([(str(path), f, m) for f, m in validation_problems(e, "")]) from None
    except Exception as e:  # TOML syntax
        raise TaskError([(str(path), "", f"cannot read: {e}")]) from None


def _plain(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """A member without its owner and time: the step is the same text on every load."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    return info


def solution_step(folder: Path, env: dict[str, str]) -> str:
    """One shell command that unpacks ``solution/`` at /solution and runs ``solve.sh`` from the
    working directory (what Harbor's oracle agent does)."""
    buf = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w") as tar,
    ):
        for p in sorted(folder.rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts:
                tar.add(p, arcname=str(p.relative_to(folder)), filter=_plain)
    data = base64.b64encode(buf.getvalue()).decode()
    prefix = "".join(f"{k}={shlex.quote(v)} " for k, v in env.items())
    return (
        f"mkdir -p /solution && echo {data} | base64 -d | tar -xzf - -C /solution "
        f"&& {prefix}bash /solution/solve.sh"
    )


def load_task(folder: Path) -> Task:
    """One Harbor task folder as a Task; TaskError naming the file and field at fault."""
    folder = folder.resolve()
    config = _task_config(folder / CONFIG)
    problems: list[tuple[str, str, str]] = []
    need = {
        "instruction.md": folder / "instruction.md",
        "tests/test.sh": folder / "tests" / "test.sh",
    }
    if config.steps:  # its instructions and tests are per step: nothing else applies
        raise TaskError([(str(folder / CONFIG), "steps", "multi-step tasks are not supported")])
    env_cfg = config.environment
    dockerfile = folder / "environment" / "Dockerfile"
    compose_env: dict[str, str] = {}
    services: list[dict[str, Any]] = []
    for path in sorted((folder / "environment").glob("docker-compose.y*ml"))[:1]:
        try:
            compose_env, services = read_compose(path)
        except ComposeError as e:
            where = f"environment/{path.name}"
            problems.extend(
                (str(folder), f"{where}: {f}" if f else where, m) for f, m in e.problems
            )
    if env_cfg.gpus:
        problems.append((str(folder / CONFIG), "environment.gpus", "GPUs are not supported"))
    for field, value in UNSUPPORTED.items():
        if _get(config, field):
            problems.append((str(folder / CONFIG), field, value))
    problems.extend((str(folder / CONFIG), f, m) for f, m in _refused_values(config))
    if not env_cfg.docker_image:
        need["environment/Dockerfile"] = dockerfile
    for rel, path in need.items():
        if not path.is_file():
            problems.append((str(folder), rel, "missing"))
    if problems:
        raise TaskError(problems)
    workdir = env_cfg.workdir
    if not workdir and dockerfile.is_file():
        try:
            workdir = final_workdir(dockerfile.read_text(encoding="utf-8"))
        except DockerfileError as e:
            raise TaskError([(str(dockerfile), "WORKDIR", str(e))]) from None
    environment: dict[str, Any] = {
        "context": str(folder / "environment"),
        "workdir": workdir or "/app",
        "env": {**dict(env_cfg.env), **compose_env},
        "services": services,
        "build_timeout_s": env_cfg.build_timeout_sec,
        "cpus": env_cfg.cpus,
        "memory_mb": env_cfg.memory_mb,
        "storage_mb": env_cfg.storage_mb,
        "image": env_cfg.docker_image,
        "agent_user": _user(config.agent.user),
        "healthcheck": _healthcheck(env_cfg.healthcheck),
        "skills_dir": env_cfg.skills_dir,
        "mcp_servers": [s.model_dump(exclude={"headers"}) for s in env_cfg.mcp_servers],
    }
    problems.extend(
        (str(folder / CONFIG), f"environment.mcp_servers[{i}].headers", HEADERS)
        for i, server in enumerate(env_cfg.mcp_servers)
        if server.headers
    )
    if problems:
        raise TaskError(problems)
    runs_agent_code = config.metadata.get(RUNS_AGENT_CODE, True)
    if not isinstance(runs_agent_code, bool):
        problems.append(
            (str(folder / CONFIG), f"metadata.{RUNS_AGENT_CODE}", "must be true or false")
        )
        raise TaskError(problems)
    mode = config.verifier.environment_mode
    verifier = {
        "type": "harbor_tests",
        "in_place": mode is None or mode.value == "shared",  # separate: a fresh container
        "tests": str(folder / "tests"),
        "timeout_s": config.verifier.timeout_sec,
        "env": dict(config.verifier.env),
        "user": _user(config.verifier.user),
        "agent_user": _user(config.agent.user),
        "runs_agent_code": runs_agent_code,
    }
    solve = folder / "solution" / "solve.sh"
    solution = [solution_step(solve.parent, dict(config.solution.env))] if solve.is_file() else []
    limits = {"timeout_s": config.agent.timeout_sec} if config.agent.timeout_sec else {}
    tags = config.metadata.get("tags", [])
    data = {
        "allow_internet": _asks_for_internet(env_cfg),
        "id": task_id(folder),
        "instruction": strip_canary((folder / "instruction.md").read_text(encoding="utf-8")),
        "verifier": verifier,
        "solution": solution,
        "limits": limits,
        "environment": environment,
        "tags": [
            "harbor",
            *([RUNS_AGENT_CODE_TAG] if runs_agent_code else []),
            *(str(t) for t in tags if isinstance(tags, list)),
        ],
    }
    return build_task(data, str(folder))


def _refused_values(config: Any) -> list[tuple[str, str]]:
    """The task.toml values OpenForge cannot honour, each with why (the field named)."""
    env, out = config.environment, []
    if env.os.value != "linux":
        out.append(("environment.os", f"{env.os.value}: OpenForge's sandboxes run Linux only"))
    if env.gpu_types or env.tpu:
        out.append(("environment.gpu_types" if env.gpu_types else "environment.tpu",
                    "accelerators are not supported"))  # fmt: skip
    for phase, cfg in (
        ("environment", env),
        ("agent", config.agent),
        ("verifier", config.verifier),
    ):
        if cfg.allowed_hosts:
            out.append((f"{phase}.allowed_hosts", "a task's own host allowlist is not supported "
                        "(give the run's sandbox.network an allowlist)"))  # fmt: skip
        mode = cfg.network_mode.value if cfg.network_mode is not None else None
        if phase != "environment" and mode not in (None, "no-network"):
            why = f"{mode} for one phase is not supported (allow_internet opens both phases)"
            out.append((f"{phase}.network_mode", why))
    if config.verifier.collect:
        out.append(("verifier.collect", "commands in compose services before the tests are "
                    "not supported"))  # fmt: skip
    if config.artifacts:
        out.append(("artifacts", "collecting artifacts is not supported (the episode keeps the "
                    "tests' output and what changed outside the workdir)"))  # fmt: skip
    return out


def _asks_for_internet(env_cfg: Any) -> bool:
    """task.toml's ``allow_internet = true``, or a ``network_mode = "public"`` it sets itself
    (Harbor's default when unset is public, which OpenForge does not give unasked)."""
    if env_cfg.allow_internet is not None:
        return bool(env_cfg.allow_internet)
    return "network_mode" in env_cfg.model_fields_set and env_cfg.network_mode.value == "public"


def _get(config: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        config = getattr(config, part, None)
    return config


def _healthcheck(check: Any) -> dict[str, Any] | None:
    """task.toml's ``[environment.healthcheck]`` as :class:`tasks.environment.Healthcheck` data."""
    if check is None:
        return None
    return {
        "command": check.command,
        "interval_s": check.interval_sec,
        "timeout_s": check.timeout_sec,
        "start_period_s": check.start_period_sec,
        "retries": check.retries,
    }


def _user(value: str | int | None) -> str | None:
    """task.toml's ``agent.user``/``verifier.user`` (a name or a UID) as the sandbox takes it."""
    return None if value is None else str(value)


def set_verify_mode(task: dict[str, Any], mode: str) -> None:
    """Make ``task``'s Harbor tests run ``in_place`` or ``sealed`` (the run's choice over the
    task's own); a task with no Harbor tests is left as it is."""
    specs = task.get("verifier")
    for spec in specs if isinstance(specs, list) else [specs]:
        if isinstance(spec, dict) and spec.get("type") == "harbor_tests":
            spec["in_place"] = mode == "in_place"


def open_to_shims(task: dict[str, Any]) -> bool:
    """Whether ``task``'s Harbor tests run in place after an agent that ran as root: whatever it
    planted outside its workdir (a ``python3`` shim) runs in the tests (docs/harbor.md)."""
    specs = task.get("verifier")
    env = task.get("environment") or {}
    root = str(env.get("agent_user") or "root") in ("root", "0", "0:0")
    return root and any(
        isinstance(spec, dict) and spec.get("type") == "harbor_tests" and spec.get("in_place")
        for spec in (specs if isinstance(specs, list) else [specs])
    )


def in_process(task: dict[str, Any] | Task) -> bool:
    """Whether ``task``'s tests run code the agent wrote (a Harbor task that did not declare
    ``tests_run_agent_code = false``): a reward that code wrote cannot be told apart."""
    data = task.model_dump() if isinstance(task, Task) else task
    specs = data.get("verifier")
    return any(
        isinstance(spec, dict)
        and spec.get("type") == "harbor_tests"
        and spec.get("runs_agent_code", True)
        for spec in (specs if isinstance(specs, list) else [specs])
    )


def refuse_for_training(tasks: list[dict[str, Any]]) -> None:
    """TaskError naming every task whose tests run the agent's code (see :func:`in_process`):
    the verifier cannot keep that code from writing the reward (docs/harbor.md), so training
    never rewards it; evaluation may still run them."""
    bad = [t for t in tasks if in_process(t)]
    if bad:
        raise TaskError(
            [
                (
                    str(t.get("id")),
                    f"metadata.{RUNS_AGENT_CODE}",
                    "its tests run the agent's code, which could forge the reward: refused for "
                    f"training (declare {RUNS_AGENT_CODE} = false in task.toml only when the "
                    "tests never run what the agent wrote; see docs/harbor.md)",
                )
                for t in bad
            ]
        )


def load(name: str, skipped: list[tuple[str, str, str]] | None = None) -> list[Task]:
    """The tasks of ``harbor:PATH``; every folder's problems are reported together: raised as
    one TaskError, or, given ``skipped``, added to it while the folders that load are returned
    (a set of someone else's tasks plays without its bad folders; none loading still raises)."""
    root = Path(name.removeprefix(PREFIX)).expanduser()
    tasks: list[Task] = []
    problems: list[tuple[str, str, str]] = []
    owner: dict[str, Path] = {}
    for folder in task_dirs(root):
        try:
            task = load_task(folder)
        except TaskError as e:
            problems.extend(e.problems)
            continue
        if task.id in owner:
            problems.append(
                (str(folder), "id", f"duplicate id {task.id!r} (also {owner[task.id]})")
            )
            continue
        owner[task.id] = folder
        tasks.append(task)
    if problems and (skipped is None or not tasks):
        raise TaskError(problems)
    if skipped is not None:
        skipped.extend(problems)
    return tasks

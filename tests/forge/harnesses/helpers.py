"""Shared by the harness tests: an attempt context, a task's isolated sandbox with its harness
run in it, and one real episode per scripted mode."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from forge.harnesses.base import AttemptContext, Harness
from forge.sandboxes import services
from forge.sandboxes.base import ExecResult, SandboxSpec
from forge.sandboxes.local import LocalSandbox
from forge.types import Episode
from tasks.schema import Task

PREFIX = "/episodes/e1/attempts/0/v1"


def attempt_ctx(**kw: Any) -> AttemptContext:
    """The context of attempt 0 of episode ``e`` behind the bridge's address; ``kw`` overrides."""
    fields: dict[str, Any] = {
        "base_url": "http://127.0.0.1:8931/episodes/e/attempts/0/v1",
        "anthropic_base_url": "http://127.0.0.1:8931/episodes/e/attempts/0",
        "api_key": "key-1",
        "model": "tiny",
        "instruction": "Write hi to a.txt",
        "workspace": "/workspace",
    }
    return AttemptContext(**{**fields, **kw})


@contextmanager
def task_sandbox(
    tmp_path: Path, harness: Harness, task: Task, proxy_socket: str
) -> Iterator[LocalSandbox]:
    """An isolated bubblewrap sandbox for ``task`` (its files put, its services' and the
    harness's mounts, the proxy at ``proxy_socket``), destroyed after."""
    sb = LocalSandbox(root=tmp_path / "sb", isolation="required")
    try:
        sb.create(
            SandboxSpec(
                labels={"run": "t"},
                ro_mounts={**harness.ro_mounts(), **services.mounts(task)},
                proxy_socket=proxy_socket,
            )
        )
        for path, content in task.files.items():
            sb.put_file(path, content)
        yield sb
    finally:
        sb.destroy()


def run_task(
    sb: LocalSandbox, harness: Harness, task: Task, timeout_s: float, **kw: Any
) -> tuple[AttemptContext, ExecResult]:
    """``harness`` on ``task`` in ``sb`` under the task's services, as a HarnessPod runs it
    (attempt 0 of episode e1 at the sandbox's proxy address); ``kw`` overrides the context."""
    ctx = attempt_ctx(
        base_url=f"http://{sb.proxy_host_port()}{PREFIX}",
        workspace=sb.workspace,
        paths=sb.path_map(),
        extra=services.gui_extra(task),
        instruction=task.instruction,
        **kw,
    )
    command = services.wrap(task, ctx, harness.command(ctx))
    return ctx, sb.exec(command, timeout_s, env=harness.env(ctx))


def oracle_and_noop(ray: Any, harness: str, task_id: str, **run: Any) -> dict[str, Episode]:
    """One real episode of smoke task ``task_id`` in ``harness`` under the scripted oracle and
    under noop, each through its own Policy and HarnessPod; asserts both ended ok with every
    turn's tokens recorded."""
    from actors.harness_pod import HarnessPod
    from forge.config import PolicyConfig
    from serve.policy import deploy_policy
    from tasks.loader import load_suite

    task = next(t for t in load_suite("smoke") if t.id == task_id)
    episodes = {}
    for mode in ("oracle", "noop"):
        config = PolicyConfig(engine={"name": "scripted", "mode": mode}, num_cpus=0.25)
        handle = deploy_policy(config, f"{harness}-{mode}")
        pod = (
            ray.remote(HarnessPod).options(num_cpus=0.25).remote(handle, pod_id=f"{harness}-{mode}")
        )
        ray.get(pod.start.remote())
        ep = ray.get(pod.run_episode.remote(task.model_dump(), harness, **run))
        ray.get(pod.stop.remote())
        assert ep.status == "ok", (mode, ep.failure, ep.harness_log[-2000:])
        assert ep.turns and all(t.prompt_ids and t.completion_ids for t in ep.turns)
        episodes[mode] = ep
    return episodes

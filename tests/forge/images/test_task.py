"""Task images planned from a Harbor task's Dockerfile (forge.images.task): FROM resolved
through the alias map, bases no one can give refused naming them, the tag following every
input. Building them is tested with a real daemon in sandboxes/test_docker_harbor.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from forge.config import SandboxConfig
from forge.images import tags as images
from forge.images.task import TaskImageError, plan, prepare

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "harbor"
ALIASES = SandboxConfig().image_aliases


def _env(folder: Path, **extra) -> dict:
    return {"context": str(folder / "environment"), "workdir": "/app", **extra}


def test_public_bases_resolve_to_the_local_base_and_our_layer_is_on_top(tmp_path: Path):
    tag, dockerfile, note = plan(_env(EXAMPLES / "even-numbers"), ALIASES)
    assert note == ""
    assert tag.startswith("openforge/task-even-numbers:")
    base = images.base_tag()
    assert dockerfile.count(f"FROM {base}") == 2  # both stages; ARG PY substituted first
    assert "COPY --from=data /out/numbers.txt /app/numbers.txt" in dockerfile
    tail = dockerfile.split("COPY --from=data /out/numbers.txt /app/numbers.txt\n", 1)[1]
    assert tail.splitlines() == [
        "COPY .openforge/layout/ /",
        f"COPY .openforge/agent/ {images.AGENT_DIR}/",
        "USER root",
        "WORKDIR /app",
        'LABEL openforge.image="task"',
    ]  # the image's ENTRYPOINT stays: the sandbox starts it beside its agent, as Harbor does


def test_the_tag_changes_with_a_context_file_and_not_otherwise(tmp_path: Path):
    task = tmp_path / "csv"
    shutil.copytree(EXAMPLES / "csv-total", task)
    first = plan(_env(task), ALIASES)[0]
    assert plan(_env(task), ALIASES)[0] == first
    (task / "environment" / "sales.csv").write_text("region,amount\nnorth,1\n")
    assert plan(_env(task), ALIASES)[0] != first
    assert plan(_env(task, workdir="/w"), ALIASES)[0] not in (first, plan(_env(task), ALIASES)[0])


def test_an_unmapped_base_is_refused_naming_it_and_the_dockerfile(tmp_path: Path):
    env = tmp_path / "gpu" / "environment"
    env.mkdir(parents=True)
    (env / "Dockerfile").write_text("FROM nvidia/cuda:12.4.0-base\nWORKDIR /app\n")
    with pytest.raises(TaskImageError) as err:
        plan(_env(tmp_path / "gpu"), ALIASES)
    text = str(err.value)
    assert str(env / "Dockerfile") in text and "image nvidia/cuda:12.4.0-base" in text
    assert "sandbox.image_aliases" in text
    _, dockerfile, _ = plan(_env(tmp_path / "gpu"), {"nvidia/*": "local/cuda:1"})
    assert "FROM local/cuda:1" in dockerfile  # mapped by the user


def test_copy_from_an_image_goes_through_the_aliases_too(tmp_path: Path):
    """``COPY --from=<registry image>`` (uv's binaries, say) resolves like a FROM; a stage's
    name or index stays as it is; an unmapped one is refused naming it, not a DNS error."""
    env = tmp_path / "uv" / "environment"
    env.mkdir(parents=True)
    (env / "Dockerfile").write_text(
        "FROM python:3.13-slim AS build\nRUN true\nFROM python:3.13-slim\n"
        "COPY --from=ghcr.io/astral-sh/uv:0.8 /uv /bin/uv\nCOPY --from=build /a /a\n"
        "COPY --chown=1000 --from=0 /b /b\n"
    )
    aliases = {**ALIASES, "ghcr.io/astral-sh/uv:*": "local/uv:1"}
    _, dockerfile, _ = plan(_env(tmp_path / "uv"), aliases)
    assert "COPY --from=local/uv:1 /uv /bin/uv" in dockerfile
    assert "COPY --from=build /a /a" in dockerfile and "--from=0 /b /b" in dockerfile
    with pytest.raises(TaskImageError, match=r"image ghcr\.io/astral-sh/uv:0\.8"):
        plan(_env(tmp_path / "uv"), ALIASES)


def test_a_prebuilt_image_stands_for_the_dockerfile(tmp_path: Path):
    env = {"context": str(tmp_path), "workdir": "/w", "image": "python:3"}
    _, dockerfile, note = plan(env, ALIASES)
    assert dockerfile.startswith(f"FROM {images.base_tag()}\n") and note == ""


def test_a_prebuilt_image_not_here_falls_back_to_the_dockerfile_saying_so(tmp_path: Path):
    """Terminal-Bench 2 names a prebuilt ``docker_image`` and ships its Dockerfile too: with
    the image not in the daemon (no registry here), the Dockerfile is built, and the note says
    so; with no Dockerfile the refusal names ``docker_image``, not the Dockerfile's FROM."""
    task = tmp_path / "tb2-task"
    (task / "environment").mkdir(parents=True)
    env = _env(task, image="registry.example/tb2/task:20251031")
    with pytest.raises(TaskImageError) as err:
        plan(env, ALIASES)
    text = str(err.value)
    assert f"{task}: docker_image: image registry.example/tb2/task:20251031" in text
    assert "no Dockerfile to build" in text
    (task / "environment" / "Dockerfile").write_text("FROM python:3.13-slim-bookworm\n")
    _, dockerfile, note = plan(env, ALIASES)
    assert dockerfile.startswith(f"FROM {images.base_tag()}\n")  # the Dockerfile's, aliased
    assert note == (
        "docker_image registry.example/tb2/task:20251031 is not here: building "
        f"{task / 'environment' / 'Dockerfile'} instead"
    )
    mapped = plan(env, {**ALIASES, "registry.example/*": "local/tb2:1"})
    assert mapped[1].startswith("FROM local/tb2:1\n") and mapped[2] == ""


def test_tasks_with_their_own_image_need_the_docker_backend():
    tasks = [{"id": "a", "environment": {"context": "/x", "workdir": "/app"}}, {"id": "b"}]
    with pytest.raises(TaskImageError, match=r"1 task\(s\) bring their own image \(a\).*local"):
        prepare(tasks, SandboxConfig(backend="local"))
    assert prepare([{"id": "b"}], SandboxConfig(backend="local")) == []

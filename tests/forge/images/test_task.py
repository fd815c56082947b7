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
    tag, dockerfile = plan(_env(EXAMPLES / "even-numbers"), ALIASES)
    assert tag.startswith("openforge/task-even-numbers:")
    base = images.base_tag()
    assert dockerfile.count(f"FROM {base}") == 2  # both stages; ARG PY substituted first
    assert "COPY --from=data /out/numbers.txt /app/numbers.txt" in dockerfile
    tail = dockerfile.split("COPY --from=data /out/numbers.txt /app/numbers.txt\n", 1)[1]
    assert tail.splitlines()[:6] == [
        "COPY .openforge/layout/ /",
        f"COPY .openforge/agent/ {images.AGENT_DIR}/",
        "USER root",
        "WORKDIR /app",
        "ENTRYPOINT []",
        "CMD []",
    ]


def test_the_tag_changes_with_a_context_file_and_not_otherwise(tmp_path: Path):
    task = tmp_path / "csv"
    shutil.copytree(EXAMPLES / "csv-total", task)
    first, _ = plan(_env(task), ALIASES)
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
    assert str(env / "Dockerfile") in text and "FROM nvidia/cuda:12.4.0-base" in text
    assert "sandbox.image_aliases" in text
    _, dockerfile = plan(_env(tmp_path / "gpu"), {"nvidia/*": "local/cuda:1"})
    assert "FROM local/cuda:1" in dockerfile  # mapped by the user


def test_a_prebuilt_image_stands_for_the_dockerfile(tmp_path: Path):
    _, dockerfile = plan({"context": str(tmp_path), "workdir": "/w", "image": "python:3"}, ALIASES)
    assert dockerfile.startswith(f"FROM {images.base_tag()}\n")


def test_tasks_with_their_own_image_need_the_docker_backend():
    tasks = [{"id": "a", "environment": {"context": "/x", "workdir": "/app"}}, {"id": "b"}]
    with pytest.raises(TaskImageError, match=r"1 task\(s\) bring their own image \(a\).*local"):
        prepare(tasks, SandboxConfig(backend="local"))
    assert prepare([{"id": "b"}], SandboxConfig(backend="local")) == 0

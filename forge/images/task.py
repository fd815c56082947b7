"""Images of tasks that bring their own Dockerfile (Harbor tasks: ``tasks.environment``).

No image registry is reachable from where OpenForge is built, so nothing is pulled: a ``FROM``
image resolves through an alias map (``sandbox.image_aliases``: a glob pattern -> a local tag,
``base`` meaning the Debian base image ``forge image build`` makes) or to an image the daemon
already holds; anything else is refused with a message naming it. The task's Dockerfile is
built from its own folder with its ``FROM`` lines rewritten, then the sandbox's needs are laid
on top (the agent at ``/opt/forge/agent``, the fixed layout, ``USER root``, the workdir made);
the image's ``ENTRYPOINT`` is kept for the sandbox to start beside its agent, as Harbor runs it
(:mod:`forge.sandboxes.docker`). The tag is ``openforge/task-<folder>:<digest>``, the digest
covering the rewritten Dockerfile, every file of the context and what is laid on top, so an
edited task gets a new image. The harness's files are bind-mounted read-only (as for the base
image).

Builds are serialised per tag by a file lock, so HarnessPods on one host that start the same
task at once build it once.
"""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import hashlib
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from forge.images import builder
from forge.images import tags as images
from serve.models import cache_dir
from tasks.dockerfile import DockerfileError, rewrite_from

EXTRA = ".openforge"  # our files in the build context
_lock = threading.Lock()


class TaskImageError(ValueError):
    """A task image that cannot be made here (a base no alias or local image provides, a
    Dockerfile that cannot be read, a failed build); the message names the task's file."""


def resolver(client: Any, aliases: dict[str, str], where: str) -> Any:
    """``resolve(image)`` for :func:`tasks.dockerfile.rewrite_from`: the alias's local tag
    (``base``: the base image's), else the image itself when the daemon holds it."""

    def resolve(image: str) -> str:
        for pattern, target in aliases.items():
            if fnmatch.fnmatchcase(image, pattern):
                return images.base_tag() if target == "base" else target
        if client is not None and builder.has_image(client, image):
            return image
        known = ", ".join(f"{p} -> {t}" for p, t in aliases.items()) or "none"
        raise TaskImageError(
            f"{where}: image {image}: the Docker daemon does not have it and no alias maps it "
            f"(sandbox.image_aliases: {known}); build or load {image} into the Docker daemon, "
            "or map it to a local image"
        )

    return resolve


def _tail(env: dict[str, Any]) -> str:
    """What is laid on top of the task's own Dockerfile."""
    return (
        images.agent_layer(EXTRA)[0] + "USER root\n"
        f"WORKDIR {env['workdir']}\n"
        'LABEL openforge.image="task"\n'
    )


def _context_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def _prebuilt(
    env: dict[str, Any], aliases: dict[str, str], client: Any, dockerfile: Path
) -> tuple[str | None, str]:
    """The task's prebuilt image (Harbor's ``docker_image``) resolved, or None when it cannot
    be had here and its Dockerfile can be built instead; and a note saying which."""
    image = env.get("image")
    if not image:
        return None, ""
    try:
        where = f"{dockerfile.parent.parent}: docker_image"
        return resolver(client, aliases, where)(image), ""
    except TaskImageError as e:
        if not dockerfile.is_file():
            raise TaskImageError(f"{e} (and the task has no {dockerfile.name} to build)") from None
        return None, f"docker_image {image} is not here: building {dockerfile} instead"


def plan(env: dict[str, Any], aliases: dict[str, str], client: Any = None) -> tuple[str, str, str]:
    """``(tag, dockerfile, note)`` of the task image of ``env`` (a ``tasks.environment.Environment``
    as data): its prebuilt image (``image``) when the daemon has it or an alias maps it, else
    its Dockerfile built (``note`` says so); TaskImageError when the Dockerfile cannot be read
    or an image it names cannot be had."""
    folder = Path(env["context"])
    path = folder / env.get("dockerfile", "Dockerfile")
    image, note = _prebuilt(env, aliases, client, path)
    try:
        text = f"FROM {image}\n" if image else path.read_text(encoding="utf-8")
    except OSError as e:
        raise TaskImageError(f"{path}: cannot read: {e}") from None
    try:
        rewritten = text if image else rewrite_from(text, resolver(client, aliases, str(path)))[0]
    except DockerfileError as e:
        raise TaskImageError(f"{path}: {e}") from None
    dockerfile = rewritten + _tail(env)
    h = hashlib.sha256(dockerfile.encode())
    for f in _context_files(folder):
        h.update(f"\0{f.relative_to(folder)}\0".encode())
        h.update(f.read_bytes())
    tree = images._agent_tree()
    for rel in sorted(tree):
        h.update(f"\0{rel}\0".encode() + tree[rel])
    name = re.sub(r"[^a-z0-9._-]+", "-", folder.parent.name.lower()).strip("-._") or "task"
    return f"{images.REPO}/task-{name[:60]}:{h.hexdigest()[:12]}", dockerfile, note


@contextlib.contextmanager
def _build_lock(tag: str) -> Iterator[None]:
    locks = cache_dir() / "images" / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with _lock, open(locks / (tag.replace("/", "_").replace(":", "_") + ".lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def build_network(sandbox: Any) -> str:
    """The network a task image's ``RUN`` steps get (``sandbox.network.build``): the daemon's
    host's when ``open`` (a Dockerfile that installs packages), else none."""
    return "host" if sandbox.network.build.mode == "open" else "none"


def ensure(
    client: Any,
    env: dict[str, Any],
    aliases: dict[str, str],
    progress: images.Progress = lambda _: None,
    network: str = "none",
) -> str:
    """The task image of ``env`` in the daemon, built when missing (the base image too, when
    an alias needs it), its ``RUN`` steps on ``network``, and its services' images
    (:func:`service_images`); returns its tag."""
    tag, dockerfile, note = plan(env, aliases, client)
    layer = images.agent_layer(EXTRA)[1]
    _build(client, tag, Path(env["context"]), dockerfile, layer, progress, env, network, note)
    service_images(client, env, aliases, progress, network)
    return tag


def _build(
    client: Any,
    tag: str,
    folder: Path,
    dockerfile: str,
    extra: dict[str, str | bytes],
    progress: images.Progress,
    env: dict[str, Any],
    network: str,
    note: str = "",
) -> None:
    """Build ``tag`` from ``folder`` with ``dockerfile`` and ``extra`` files, unless the daemon
    has it (once per tag on this host: a file lock)."""
    if builder.has_image(client, tag):
        return
    with _build_lock(tag):
        if builder.has_image(client, tag):
            return
        if note:
            progress(note)
        if images.base_tag() in dockerfile:
            builder.build_base(client, progress)
        context: dict[str, str | bytes] = {
            str(p.relative_to(folder)): str(p) for p in _context_files(folder)
        }
        context["Dockerfile"] = dockerfile.encode()  # what is built, whatever its name was
        context.update(extra)
        t0 = time.monotonic()
        try:
            builder.build_context(
                client, tag, context, progress, None, env.get("build_timeout_s"), network
            )
        except Exception as e:
            raise TaskImageError(f"{folder}: {e}") from e
        progress(f"{tag}: built in {time.monotonic() - t0:.1f}s")


def service_images(
    client: Any,
    env: dict[str, Any],
    aliases: dict[str, str],
    progress: images.Progress = lambda _: None,
    network: str = "none",
) -> dict[str, str]:
    """Service name -> image of each of ``env``'s compose services: an ``image`` resolved as a
    ``FROM`` is (an alias, or one the daemon holds), or its build context built as its author
    wrote it (``FROM`` resolved; nothing of OpenForge's laid on top), when missing."""
    out: dict[str, str] = {}
    task = Path(env["context"]).parent.name
    for svc in env.get("services") or []:
        where = f"{env['context']}: services.{svc['name']}"
        if svc.get("image"):
            out[svc["name"]] = resolver(client, aliases, where)(svc["image"])
            continue
        folder = Path(svc["context"])
        path = folder / svc.get("dockerfile", "Dockerfile")
        try:
            text = path.read_text(encoding="utf-8")
            dockerfile = rewrite_from(text, resolver(client, aliases, str(path)))[0]
        except (OSError, DockerfileError) as e:
            raise TaskImageError(f"{path}: {e}") from None
        h = hashlib.sha256(dockerfile.encode())
        for f in _context_files(folder):
            h.update(f"\0{f.relative_to(folder)}\0".encode() + f.read_bytes())
        name = re.sub(r"[^a-z0-9._-]+", "-", f"{task}-{svc['name']}".lower()).strip("-._")
        tag = f"{images.REPO}/task-{name[:60]}:{h.hexdigest()[:12]}"
        _build(client, tag, folder, dockerfile, {}, progress, env, network)
        out[svc["name"]] = tag
    return out


def image_env(client: Any, tag: str) -> dict[str, str]:
    """The environment the image's Dockerfile set (``ENV``), as a mapping."""
    pairs = client.images.get(tag).attrs.get("Config", {}).get("Env") or []
    return dict(p.split("=", 1) for p in pairs if "=" in p)


def prepare(
    tasks: list[dict[str, Any]], sandbox: Any, progress: images.Progress = print
) -> list[tuple[str, str, str]]:
    """Before a run: refuse tasks with their own image on a backend that cannot build it, and
    build their images now. A task whose image cannot be had (a base no alias provides, a
    failed build) is returned as ``(task id, "image", why)``, the build's last lines in
    ``why``, for the caller to skip: one bad task never stops the rest."""
    own = [t for t in tasks if t.get("environment")]
    if not own:
        return []
    if sandbox.backend != "docker":
        names = ", ".join(t["id"] for t in own[:3]) + (", ..." if len(own) > 3 else "")
        raise TaskImageError(
            f"tasks: {len(own)} task(s) bring their own image ({names}): they run only with "
            f"sandbox.backend=docker (this run has {sandbox.backend})"
        )
    from forge.sandboxes.docker_api import client_for

    client = client_for(sandbox.docker_host)
    t0 = time.monotonic()
    failed: list[tuple[str, str, str]] = []
    for i, task in enumerate(own, 1):
        try:
            ensure(
                client, task["environment"], sandbox.image_aliases, progress, build_network(sandbox)
            )
        except TaskImageError as e:
            failed.append((task["id"], "image", str(e)))
        if i % 10 == 0 or i == len(own):
            progress(
                f"task images: {i - len(failed)}/{len(own)} ready ({time.monotonic() - t0:.0f}s)"
            )
    return failed

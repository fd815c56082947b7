"""Sandbox images, built here from Debian packages: no image registry is needed or used.

``openforge/rootfs:<suite>-<digest>``
    a Debian root filesystem made by ``debootstrap --variant=minbase`` with :data:`PACKAGES`,
    trimmed of docs and apt caches, imported from a tar (kept in ``<cache>/images/``, so a new
    daemon imports it in seconds instead of bootstrapping again).
``openforge/base:<suite>-<digest>``
    the rootfs plus the sandbox agent at ``/opt/forge/agent`` and the fixed layout
    (``/workspace``, ``/home/agent``, ``/run/forge``). The verifier's sandboxes use it.
``openforge/<harness>:<version>-<base digest>``
    the base plus the harness's files copied to the same sandbox paths its ``ro_mounts()`` names,
    so adapters work unchanged. ``openforge/<harness>:<version>`` names the newest build too.

Digests cover everything that goes into an image (packages, agent code, harness version), so a
change makes a new tag instead of a stale image being used. ``dockerfile(name)`` gives the
Dockerfile-equivalent steps, to rebuild the images elsewhere and push them to a registry.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from serve.models import cache_dir

SUITE = "bookworm"
PACKAGES = (  # what harnesses, tasks' solutions and verifiers use, beyond minbase
    "python3",  # 3.11: verifiers need >= 3.11 and `python3 -I`
    "procps",
    "psmisc",
    "ca-certificates",
    "file",
    "zip",
    "unzip",
    "xz-utils",
    "bzip2",
    "jq",
    "curl",
    "git",
    "patch",
    "less",
    "bc",
)
TRIM = ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man")
TRIM += ("usr/share/info", "usr/share/locale")
REPO = "openforge"
AGENT_DIR = "/opt/forge/agent"
LAYOUT = ("workspace", "home/agent", "run/forge", "opt/forge/harnesses")
ENV = {"LANG": "C.UTF-8", "TZ": "UTC", "HOME": "/home/agent"}
Progress = Callable[[str], None]


def _digest(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def _agent_tree() -> dict[str, bytes]:
    """The agent's files, read once per process: the tag and the image agree."""
    from forge.sandboxes.agent_client import agent_tree

    return agent_tree()


def rootfs_tag() -> str:
    return f"{REPO}/rootfs:{SUITE}-{_digest(SUITE, *PACKAGES, *TRIM)[:12]}"


def _base_dockerfile(rootfs: str) -> str:
    env = " ".join(f"{k}={v}" for k, v in ENV.items())
    return (
        f"FROM {rootfs}\n"
        "COPY layout/ /\n"
        f"COPY agent/ {AGENT_DIR}/\n"
        f"ENV {env}\n"
        "WORKDIR /workspace\n"
        f'LABEL openforge.image="base" openforge.rootfs="{rootfs}"\n'
    )


def base_tag() -> str:
    tree = _agent_tree()
    files = [f"{k}\0".encode() + tree[k] for k in sorted(tree)]
    version = _digest(_base_dockerfile(rootfs_tag()), *files)[:12]
    return f"{REPO}/base:{SUITE}-{version}"


def _harness_sources(name: str) -> dict[str, str]:
    """Host path -> sandbox path of what harness ``name`` mounts read-only today."""
    from forge.harnesses import get_harness

    return get_harness(name).ro_mounts()


def harness_version(name: str) -> str:
    """The pinned version of an installable harness; a digest of the files of a built-in one."""
    from forge.harnesses.install import PACKAGES as INSTALLABLE

    if name in INSTALLABLE:
        return INSTALLABLE[name].version
    parts: list[bytes | str] = []
    for host, target in sorted(_harness_sources(name).items()):
        p = Path(host)
        files = sorted(p.rglob("*")) if p.is_dir() else [p]
        for f in files:
            if f.is_file():
                parts += [target, str(f.relative_to(p) if p.is_dir() else ""), f.read_bytes()]
    return _digest(*parts)[:12]


def harness_tag(name: str, base: str | None = None) -> str:
    base = base or base_tag()
    return f"{REPO}/{name}:{harness_version(name)}-{base.rsplit('-', 1)[1]}"


def image_for(harness: str | None) -> str:
    """The image a sandbox of ``harness`` uses (None: a verifier's sandbox: the base)."""
    return base_tag() if harness is None else harness_tag(harness)


def dockerfile(name: str, base: str = "") -> str:
    """The Dockerfile-equivalent steps that build image ``name`` ("base" or a harness; ``base``:
    the base tag to build on, default the current one)."""
    if name == "base":
        trim = " ".join(f"ROOT/{t}/*" for t in TRIM)
        return (
            f"# 1. the root filesystem ({rootfs_tag()}), as root on a Debian host:\n"
            f"#   debootstrap --variant=minbase --include={','.join(PACKAGES)} {SUITE} ROOT\n"
            f"#   rm -rf {trim}\n"
            f"#   tar -C ROOT --numeric-owner -cf rootfs.tar . && "
            f"docker import rootfs.tar {rootfs_tag()}\n"
            f"# 2. the base: context layout/ = empty dirs {', '.join(LAYOUT)}; agent/ = "
            "forge.sandboxes.agent_client.agent_tree()\n" + _base_dockerfile(rootfs_tag())
        )
    steps = [f"FROM {base or base_tag()}"]
    for i, (host, target) in enumerate(sorted(_harness_sources(name).items())):
        slash = "/" if Path(host).is_dir() else ""
        steps.append(f"# {i}{slash} = {host}")
        steps.append(f"COPY {i}{slash} {target}{slash}")
    steps.append(f'LABEL openforge.image="{name}" openforge.version="{harness_version(name)}"')
    return "\n".join(steps) + "\n"


# -- building --------------------------------------------------------------------------------


def rootfs_tar(progress: Progress = print, force: bool = False) -> Path:
    """The trimmed Debian root filesystem as a tar in the cache, bootstrapped when missing."""
    out = cache_dir() / "images" / f"{rootfs_tag().split(':', 1)[1]}.tar"
    if out.exists() and not force:
        return out
    exe = shutil.which("debootstrap") or "/usr/sbin/debootstrap"
    if not os.access(exe, os.X_OK):
        raise RuntimeError(
            "building the base image needs debootstrap (apt-get install debootstrap)"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="forge-rootfs-", dir=out.parent) as tmp:
        root = Path(tmp) / "root"
        argv = [exe, "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(root)]
        progress(f"base: {' '.join(argv[1:3])} ... {SUITE} (about a minute)")
        _run_with_phases(argv, progress, t0)
        for t in TRIM:
            for p in (root / t).glob("*"):
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        part = out.with_suffix(".tar.partial")
        subprocess.run(
            ["tar", "-C", str(root), "--numeric-owner", "-cf", str(part), "."], check=True
        )
        part.rename(out)
    progress(
        f"base: root filesystem {out.stat().st_size >> 20} MiB in {time.monotonic() - t0:.0f}s"
    )
    return out


def _run_with_phases(argv: list[str], progress: Progress, t0: float) -> None:
    """Run ``argv``, reporting each new phase of its ``I: <Phase> ...`` lines."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    seen, tail = set(), []
    for line in proc.stdout:
        tail = [*tail[-20:], line.rstrip()]
        word = line[3:].split(" ", 1)[0] if line.startswith("I: ") else ""
        if word and word not in seen:
            seen.add(word)
            progress(f"base:   [{time.monotonic() - t0:4.0f}s] {line[3:].strip()}")
    if proc.wait() != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}):\n" + "\n".join(tail))


def has_image(client: Any, tag: str) -> bool:
    import docker.errors

    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def _build(
    client: Any, tag: str, context: dict[str, str | bytes], progress: Progress, alias: str | None
) -> None:
    """Build ``tag`` from ``context`` (name in the context -> host path to add, or the bytes of
    a file; "Dockerfile" among them), sent to the daemon as a tar; never pulls."""
    with tempfile.TemporaryFile(dir=cache_dir()) as f:
        with tarfile.open(fileobj=f, mode="w") as tar:
            for name, src in sorted(context.items()):
                if isinstance(src, bytes):
                    info = tarfile.TarInfo(name)
                    info.size, info.mtime = len(src), 0
                    tar.addfile(info, io.BytesIO(src))
                elif name.endswith("/"):  # an empty directory
                    info = tarfile.TarInfo(name.rstrip("/"))
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
                else:
                    tar.add(src, arcname=name)
        f.seek(0)
        stream = client.api.build(
            fileobj=f,
            custom_context=True,
            tag=tag,
            rm=True,
            forcerm=True,
            pull=False,
            network_mode="none",
            decode=True,
        )
        for chunk in stream:
            if "error" in chunk:
                raise RuntimeError(f"building {tag}: {chunk['error']}")
            line = str(chunk.get("stream", "")).strip()
            if line.startswith("Step "):
                progress(f"{tag}: {line}")
    if alias:
        client.images.get(tag).tag(*alias.rsplit(":", 1))


def build_base(client: Any, progress: Progress = print, force: bool = False) -> str:
    """Build (when missing) the rootfs and base images; returns the base tag."""
    tag, rootfs = base_tag(), rootfs_tag()
    if has_image(client, tag) and not force:
        progress(f"base: {tag} present")
        return tag
    if force or not has_image(client, rootfs):
        tar = rootfs_tar(progress, force=force)
        t0 = time.monotonic()
        repo, version = rootfs.split(":", 1)
        client.api.import_image_from_file(str(tar), repository=repo, tag=version)
        progress(f"base: imported {rootfs} in {time.monotonic() - t0:.1f}s")
    context: dict[str, str | bytes] = {"Dockerfile": _base_dockerfile(rootfs).encode()}
    context.update({f"layout/{d}/": "" for d in LAYOUT})
    context.update({f"agent/{rel}": data for rel, data in _agent_tree().items()})
    _build(client, tag, context, progress, alias=f"{REPO}/base:latest")
    return tag


def build_harness(
    client: Any, name: str, progress: Progress = print, force: bool = False, base: str = ""
) -> str:
    """Build (when missing) the image of harness ``name`` on the base (``base``: its tag, when
    the caller has built it); returns its tag."""
    base = base or build_base(client, progress)
    tag = harness_tag(name, base)
    if has_image(client, tag) and not force:
        progress(f"{name}: {tag} present")
        return tag
    sources = _harness_sources(name)  # raises HarnessNotInstalled with the command to run
    t0 = time.monotonic()
    context: dict[str, str | bytes] = {"Dockerfile": dockerfile(name, base).encode()}
    context.update({str(i): host for i, host in enumerate(sorted(sources))})
    _build(client, tag, context, progress, alias=f"{REPO}/{name}:{harness_version(name)}")
    progress(f"{name}: built {tag} in {time.monotonic() - t0:.0f}s")
    return tag


def build(
    client: Any, names: list[str], progress: Progress = print, force: bool = False
) -> list[str]:
    """Build ``names`` ("base" or harness names); returns their tags."""
    tags = [build_base(client, progress, force=force)]
    for name in names:
        if name != "base":
            tags.append(build_harness(client, name, progress, force=force, base=tags[0]))
    return tags


def image_rows(client: Any, names: list[str]) -> list[tuple[str, str, str]]:
    """(name, tag, state) for the base and each harness of ``names``."""
    rows = []
    for name in ["base", *[n for n in names if n != "base"]]:
        try:
            tag = base_tag() if name == "base" else harness_tag(name)
        except Exception as e:  # a harness that cannot say its files (not installed)
            rows.append((name, "-", f"{e}"))
            continue
        state = "missing: forge image build " + name
        if has_image(client, tag):
            size = client.images.get(tag).attrs.get("Size", 0)
            state = f"present ({size / 2**20:.0f} MiB)"
        rows.append((name, tag, state))
    return rows

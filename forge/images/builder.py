"""Building the sandbox images (:mod:`forge.images.tags` says what each holds and is called):
the Debian root filesystem by ``debootstrap`` (the gui one by ``apt-get`` in a chroot), then
the base and harness images on a Docker daemon; and whether a daemon has an image."""

from __future__ import annotations

import collections
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from forge.images.tags import (
    _GUI_APT,
    GUI_HARNESSES,
    GUI_PACKAGES,
    PACKAGES,
    REPO,
    SUITE,
    TRIM,
    Progress,
    _base_dockerfile,
    _harness_sources,
    _no_bytecode,
    agent_layer,
    base_tag,
    dockerfile,
    harness_tag,
    harness_version,
    rootfs_tag,
)
from serve.models import cache_dir

BUILD_TAIL_LINES = 12  # a failed build's last output lines, in its error


def rootfs_tar(progress: Progress = print, force: bool = False, gui: bool = False) -> Path:
    """The trimmed Debian root filesystem as a tar in the cache, bootstrapped when missing
    (``gui``: the plain one plus :data:`GUI_PACKAGES`)."""
    out = cache_dir() / "images" / f"{rootfs_tag(gui).split(':', 1)[1]}.tar"
    if out.exists() and not force:
        return out
    if gui:
        return _gui_rootfs_tar(rootfs_tar(progress, force=force), out, progress)
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
        _trim_and_tar(root, out)
    progress(
        f"base: root filesystem {out.stat().st_size >> 20} MiB in {time.monotonic() - t0:.0f}s"
    )
    return out


def _trim_and_tar(root: Path, out: Path) -> None:
    for t in TRIM:
        for p in (root / t).glob("*"):
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    part = out.with_suffix(".tar.partial")
    subprocess.run(["tar", "-C", str(root), "--numeric-owner", "-cf", str(part), "."], check=True)
    part.rename(out)


def _gui_rootfs_tar(plain: Path, out: Path, progress: Progress) -> Path:
    """The plain root filesystem unpacked, :data:`GUI_PACKAGES` installed into it by apt-get in
    a chroot (the mirror debootstrap wrote into its sources; no daemon services are started),
    trimmed and packed as ``out``."""
    if os.geteuid() != 0:
        raise RuntimeError("building the gui image's root filesystem needs root (chroot)")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="forge-rootfs-gui-", dir=out.parent) as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        subprocess.run(["tar", "-C", str(root), "--numeric-owner", "-xpf", str(plain)], check=True)
        resolv = root / "etc" / "resolv.conf"
        resolv.unlink(missing_ok=True)
        shutil.copyfile("/etc/resolv.conf", resolv)
        deny = root / "usr" / "sbin" / "policy-rc.d"  # no service starts during the install
        deny.write_text("#!/bin/sh\nexit 101\n")
        deny.chmod(0o755)
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive"}
        env["LANG"] = "C.UTF-8"
        for step in (["apt-get", "update", "-q"], [*_GUI_APT.split(), "-q", *GUI_PACKAGES]):
            progress(f"gui:   [{time.monotonic() - t0:4.0f}s] chroot {' '.join(step[:2])} ...")
            r = subprocess.run(
                ["chroot", str(root), *step], env=env, capture_output=True, text=True
            )
            if r.returncode != 0:
                tail = "\n".join((r.stdout + r.stderr).splitlines()[-20:])
                raise RuntimeError(f"chroot {' '.join(step)} failed ({r.returncode}):\n{tail}")
        subprocess.run(["chroot", str(root), "apt-get", "clean"], env=env, check=True)
        deny.unlink()
        resolv.write_text("")
        _trim_and_tar(root, out)
    took = time.monotonic() - t0
    progress(f"gui: root filesystem {out.stat().st_size >> 20} MiB in {took:.0f}s")
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


def build_context(
    client: Any,
    tag: str,
    context: dict[str, str | bytes],
    progress: Progress,
    alias: str | None,
    timeout_s: float | None = None,
    network: str = "none",
) -> None:
    """Build ``tag`` from ``context`` (name in the context -> host path to add, or the bytes of
    a file; "Dockerfile" among them), sent to the daemon as a tar; never pulls. ``network``:
    its ``RUN`` steps' (``none``, or ``host``: the daemon's host's network)."""
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
                    tar.add(src, arcname=name, filter=_no_bytecode)
        f.seek(0)
        stream = client.api.build(
            fileobj=f,
            custom_context=True,
            tag=tag,
            rm=True,
            forcerm=True,
            pull=False,
            network_mode=network,
            decode=True,
            timeout=timeout_s,
        )
        last: collections.deque[str] = collections.deque(maxlen=BUILD_TAIL_LINES)
        for chunk in stream:
            if "error" in chunk:
                tail = "".join(f"\n  | {line}" for line in last)
                raise RuntimeError(
                    f"building {tag}: {str(chunk['error']).strip()}"
                    + (f"; the build's last lines:{tail}" if tail else "")
                )
            text = str(chunk.get("stream", ""))
            last.extend(line for line in text.splitlines() if line.strip())
            if text.strip().startswith("Step "):
                progress(f"{tag}: {text.strip()}")
    if alias:
        client.images.get(tag).tag(*alias.rsplit(":", 1))


def build_base(
    client: Any, progress: Progress = print, force: bool = False, gui: bool = False
) -> str:
    """Build (when missing) the rootfs and base images (``gui``: the gui ones); returns the
    base tag."""
    tag, rootfs, what = base_tag(gui), rootfs_tag(gui), "gui" if gui else "base"
    if has_image(client, tag) and not force:
        progress(f"{what}: {tag} present")
        return tag
    if force or not has_image(client, rootfs):
        tar = rootfs_tar(progress, force=force, gui=gui)
        t0 = time.monotonic()
        repo, version = rootfs.split(":", 1)
        client.api.import_image_from_file(str(tar), repository=repo, tag=version)
        progress(f"{what}: imported {rootfs} in {time.monotonic() - t0:.1f}s")
    context: dict[str, str | bytes] = {"Dockerfile": _base_dockerfile(rootfs, gui).encode()}
    context.update(agent_layer()[1])
    build_context(client, tag, context, progress, alias=f"{REPO}/{what}:latest")
    return tag


def build_harness(
    client: Any, name: str, progress: Progress = print, force: bool = False, base: str = ""
) -> str:
    """Build (when missing) the image of harness ``name`` on its base (``base``: that tag, when
    the caller has built it; the gui base for :data:`GUI_HARNESSES`); returns its tag."""
    base = base or build_base(client, progress, gui=name in GUI_HARNESSES)
    tag = harness_tag(name, base)
    if has_image(client, tag) and not force:
        progress(f"{name}: {tag} present")
        return tag
    sources = _harness_sources(name)  # raises HarnessNotInstalled with the command to run
    t0 = time.monotonic()
    context: dict[str, str | bytes] = {"Dockerfile": dockerfile(name, base).encode()}
    context.update({str(i): host for i, host in enumerate(sorted(sources))})
    from forge.harnesses.install import PACKAGES as INSTALLABLE

    pinned = INSTALLABLE.get(name)  # a pinned harness is also tagged by its version alone
    alias = f"{REPO}/{name}:{pinned.version if pinned else harness_version(name)}"
    build_context(client, tag, context, progress, alias=alias)
    progress(f"{name}: built {tag} in {time.monotonic() - t0:.0f}s")
    return tag


def build(
    client: Any, names: list[str], progress: Progress = print, force: bool = False
) -> list[str]:
    """Build ``names`` ("base", "gui" or harness names); returns their tags (the base's first,
    then each other name's in order)."""
    tags = [build_base(client, progress, force=force)]
    gui = ""
    for name in names:
        if name in GUI_HARNESSES or name == "gui":
            gui = gui or build_base(client, progress, force=force, gui=True)
        if name == "gui":
            tags.append(gui)
        elif name != "base":
            base = gui if name in GUI_HARNESSES else tags[0]
            tags.append(build_harness(client, name, progress, force=force, base=base))
    return tags


def image_rows(client: Any, names: list[str]) -> list[tuple[str, str, str]]:
    """(name, tag, state) for the base and each harness of ``names``."""
    rows = []
    for name in ["base", *[n for n in names if n != "base"]]:
        try:
            tag = base_tag(name == "gui") if name in ("base", "gui") else harness_tag(name)
        except Exception as e:  # a harness that cannot say its files (not installed)
            rows.append((name, "-", f"{e}"))
            continue
        state = "missing: forge image build " + name
        if has_image(client, tag):
            size = client.images.get(tag).attrs.get("Size", 0)
            state = f"present ({size / 2**20:.0f} MiB)"
        rows.append((name, tag, state))
    return rows

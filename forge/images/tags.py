"""Sandbox images, built here from Debian packages: no image registry is needed or used.

``openforge/rootfs:<suite>-<digest>``
    a Debian root filesystem made by ``debootstrap --variant=minbase`` with :data:`PACKAGES`,
    trimmed of docs and apt caches, imported from a tar (kept in ``<cache>/images/``, so a new
    daemon imports it in seconds instead of bootstrapping again).
``openforge/base:<suite>-<digest>``
    the rootfs plus the sandbox agent at ``/opt/forge/agent``, the fixed layout
    (``/workspace``, ``/home/agent``, ``/run/forge``) and the unprivileged user ``agent``
    (uid/gid 1000) that harnesses run as. The verifier's sandboxes use it.
``openforge/rootfs:<suite>-gui-<digest>``, ``openforge/gui:<suite>-<digest>``
    the same two with :data:`GUI_PACKAGES` (Chromium, Xvfb, openbox, X applications) installed
    into the plain root filesystem by ``apt-get`` in a chroot; the GUI harnesses
    (:data:`GUI_HARNESSES`) build on ``openforge/gui`` instead of ``openforge/base``.
``openforge/<harness>:<version>-<base digest>``
    the base plus the harness's files copied to the same sandbox paths its ``ro_mounts()`` names,
    so adapters work unchanged. ``openforge/<harness>:<version>`` names the newest build too.

Digests cover everything that goes into an image (packages, agent code, harness version), so a
change makes a new tag instead of a stale image being used. ``dockerfile(name)`` gives the
Dockerfile-equivalent steps, to rebuild the images elsewhere and push them to a registry.
Building them: :mod:`forge.images.builder`.
"""

from __future__ import annotations

import functools
import hashlib
import tarfile
from collections.abc import Callable
from pathlib import Path

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
GUI_PACKAGES = (  # the browser and desktop harnesses and their tasks' X applications
    "chromium",
    "xvfb",
    "openbox",
    "xdotool",
    "x11-apps",  # xedit, xcalc
    "x11-utils",  # xmessage, xprop (the services launcher's window-manager probe)
    "stterm",
    "imagemagick",  # import: the desktop harness's screenshots
    "fonts-dejavu-core",
    "libatomic1",  # Playwright's Node driver links it
)
GUI_HARNESSES = frozenset({"browser", "desktop", "browser-use"})
"""Harnesses whose images build on ``openforge/gui`` (Chromium or an X display inside)."""
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
    from forge.sandboxes.agent_boot import agent_tree

    return agent_tree()


def rootfs_tag(gui: bool = False) -> str:
    """The root filesystem's tag; ``gui``: the one with :data:`GUI_PACKAGES` too."""
    plain = f"{REPO}/rootfs:{SUITE}-{_digest(SUITE, *PACKAGES, *TRIM)[:12]}"
    if not gui:
        return plain
    return f"{REPO}/rootfs:{SUITE}-gui-{_digest(plain, _GUI_APT, *GUI_PACKAGES)[:12]}"


_GUI_APT = "apt-get install -y --no-install-recommends"  # part of the gui rootfs's digest


def agent_layer(folder: str = "") -> tuple[str, dict[str, str | bytes]]:
    """What puts the sandbox agent and the fixed layout into an image: the Dockerfile lines and
    the build-context entries they copy (under ``folder/`` in the context, when given)."""
    at = f"{folder}/" if folder else ""
    lines = f"COPY {at}layout/ /\nCOPY {at}agent/ {AGENT_DIR}/\n"
    context: dict[str, str | bytes] = {f"{at}layout/{d}/": "" for d in LAYOUT}
    context.update({f"{at}agent/{rel}": data for rel, data in _agent_tree().items()})
    return lines, context


def _base_dockerfile(rootfs: str, gui: bool = False) -> str:
    env = " ".join(f"{k}={v}" for k, v in ENV.items())
    return (
        f"FROM {rootfs}\n" + agent_layer()[0] + user_step() + f"ENV {env}\n"
        "WORKDIR /workspace\n"
        f'LABEL openforge.image="{"gui" if gui else "base"}" openforge.rootfs="{rootfs}"\n'
    )


def user_step() -> str:
    """The Dockerfile step that adds the unprivileged user harnesses run as (``agent``, uid and
    gid :data:`~forge.sandboxes.agent_boot.HARNESS_UID`, home /home/agent) and gives it the
    workspace and home; the agent runs as root and drops to it for every harness command."""
    from forge.sandboxes.agent_boot import HARNESS_GID, HARNESS_UID

    return (
        f"RUN groupadd -g {HARNESS_GID} agent && useradd -u {HARNESS_UID} -g {HARNESS_GID} "
        f"-d {ENV['HOME']} -M -s /bin/sh agent && chown {HARNESS_UID}:{HARNESS_GID} "
        f"/workspace {ENV['HOME']} && chmod 0700 /run/forge\n"
    )


def base_tag(gui: bool = False) -> str:
    """``openforge/base:...``, or with ``gui`` ``openforge/gui:...`` (the GUI harnesses' base)."""
    tree = _agent_tree()
    files = [f"{k}\0".encode() + tree[k] for k in sorted(tree)]
    version = _digest(_base_dockerfile(rootfs_tag(gui), gui), *files)[:12]
    return f"{REPO}/{'gui' if gui else 'base'}:{SUITE}-{version}"


def base_for(harness: str | None) -> str:
    """The base image harness ``harness`` builds on (the gui one for :data:`GUI_HARNESSES`)."""
    return base_tag(gui=harness in GUI_HARNESSES)


def _harness_sources(name: str) -> dict[str, str]:
    """Host path -> sandbox path of what harness ``name`` mounts read-only today, and what
    tasks mount beside it, baked in so Kubernetes pods, which cannot mount host paths, have them
    too: the services' client and commands, the in-sandbox services launcher and the web
    applications, and for the GUI harnesses Chromium's policy and the ``miniwob`` package's
    HTML when it is installed."""
    from forge.harnesses.app_tools import SERVICES_HOST
    from forge.harnesses.gui_actions import CHROMIUM_POLICY, chromium_policy
    from forge.harnesses.registry import get_harness
    from forge.sandboxes import services as launch
    from tasks.services import MOUNT

    sources = {**get_harness(name).ro_mounts(), SERVICES_HOST: MOUNT}
    sources[launch.LAUNCHER_HOST] = launch.PROGRAM
    sources[launch.WEBAPPS_HOST] = launch.WEBAPPS
    if name in GUI_HARNESSES:
        sources[chromium_policy(name != "browser" and name != "browser-use")] = CHROMIUM_POLICY
        try:
            sources[launch.miniwob_html()] = launch.MINIWOB
        except FileNotFoundError:  # MiniWoB++ tasks then stop with the install command
            pass
    return sources


def harness_version(name: str) -> str:
    """The pinned version of an installable harness; a digest of the files of a built-in one;
    both for a built-in one that mounts an installed package too (``browser``: its modules and
    Playwright)."""
    from forge.harnesses.install import PACKAGES as INSTALLABLE

    pinned = INSTALLABLE.get(name)
    if pinned is not None and not pinned.installed():
        return pinned.version
    sources = _harness_sources(name)
    if pinned is not None:
        sources = {h: t for h, t in sources.items() if Path(h) != pinned.folder}
        return f"{pinned.version}-{_files_digest(sources)}" if sources else pinned.version
    return _files_digest(sources)


def _no_bytecode(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """Leave Python's bytecode caches out of a build context (they vary, the sources do not)."""
    return None if "__pycache__" in Path(info.name).parts else info


def _files_digest(sources: dict[str, str]) -> str:
    parts: list[bytes | str] = []
    for host, target in sorted(sources.items()):
        p = Path(host)
        files = sorted(p.rglob("*")) if p.is_dir() else [p]
        for f in files:
            if f.is_file() and "__pycache__" not in f.parts:
                parts += [target, str(f.relative_to(p) if p.is_dir() else ""), f.read_bytes()]
    return _digest(*parts)[:12]


def harness_tag(name: str, base: str | None = None) -> str:
    base = base or base_for(name)
    return f"{REPO}/{name}:{harness_version(name)}-{base.rsplit('-', 1)[1]}"


def image_for(harness: str | None) -> str:
    """The image a sandbox of ``harness`` uses (None: a verifier's sandbox: the base)."""
    return base_tag() if harness is None else harness_tag(harness)


def dockerfile(name: str, base: str = "") -> str:
    """The Dockerfile-equivalent steps that build image ``name`` ("base", "gui" or a harness;
    ``base``: the base tag to build on, default the current one)."""
    if name == "gui":
        return (
            f"# 1. the gui root filesystem ({rootfs_tag(True)}), as root, from the plain one:\n"
            f"#   tar -C ROOT -xf {rootfs_tag().split(':', 1)[1]}.tar (step 1 of `base`)\n"
            f"#   chroot ROOT apt-get update && chroot ROOT {_GUI_APT} "
            f"{' '.join(GUI_PACKAGES)}\n"
            "#   then trim, tar and import it as in `base`\n"
            "# 2. the gui base: the same context as `base`\n"
            + _base_dockerfile(rootfs_tag(True), True)
        )
    if name == "base":
        trim = " ".join(f"ROOT/{t}/*" for t in TRIM)
        return (
            f"# 1. the root filesystem ({rootfs_tag()}), as root on a Debian host:\n"
            f"#   debootstrap --variant=minbase --include={','.join(PACKAGES)} {SUITE} ROOT\n"
            f"#   rm -rf {trim}\n"
            f"#   tar -C ROOT --numeric-owner -cf rootfs.tar . && "
            f"docker import rootfs.tar {rootfs_tag()}\n"
            f"# 2. the base: context layout/ = empty dirs {', '.join(LAYOUT)}; agent/ = "
            "forge.sandboxes.agent_boot.agent_tree()\n" + _base_dockerfile(rootfs_tag())
        )
    steps = [f"FROM {base or base_for(name)}"]
    for i, (host, target) in enumerate(sorted(_harness_sources(name).items())):
        slash = "/" if Path(host).is_dir() else ""
        steps.append(f"# {i}{slash} = {host}")
        steps.append(f"COPY {i}{slash} {target}{slash}")
    steps.append(f'LABEL openforge.image="{name}" openforge.version="{harness_version(name)}"')
    return "\n".join(steps) + "\n"

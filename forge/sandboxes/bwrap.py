"""bubblewrap command lines for local sandboxes, and a once-per-process probe that it works.

A sandbox sees the system directories read-only but not the host's ``/etc``: only what programs
need from it (:data:`ETC_ALLOW`: the dynamic linker's cache, time zone, CA certificates, MIME and
release files, ...) is bound, file by file, and the identity files (``passwd``, ``group``,
``hosts``, ``hostname``, ``nsswitch.conf``) are synthesised (:func:`etc_files`), so the host's
users, ``/etc/shadow``, SSH host keys, ``/etc/ssl/private`` and anything else under ``/etc``
stay out of sight.
"""

from __future__ import annotations

import functools
import glob
import grp
import logging
import os
import pwd
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

WORKSPACE = "/workspace"
HOME = "/home/agent"
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOSTNAME = "sandbox"
# What a sandbox sees of the host's /etc (relative paths, globs allowed); nothing else.
ETC_ALLOW = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",  # python3, java, editors ... are often symlinks through here
    "localtime",
    "timezone",
    "mtab",
    "host.conf",
    "gai.conf",
    "services",
    "protocols",
    "networks",
    "rpc",
    "mime.types",
    "magic",
    "magic.mime",
    "os-release",
    "lsb-release",
    "*_version",  # debian_version
    "*-release",  # redhat-release, alpine-release, ...
    "shells",
    "inputrc",
    "bash.bashrc",
    "terminfo",
    "fonts",
    "X11",  # app-defaults: X Toolkit programs (xedit, xcalc) cannot lay out their widgets without
    "ssl/certs",
    "ssl/openssl.cnf",
    "pki/tls/certs",
    "pki/tls/openssl.cnf",
    "pki/ca-trust/extracted",
    "crypto-policies/back-ends",
    "python3",
    "python3.*",  # Debian's sitecustomize for the system Python
)
# Caches a sandbox reads (when the host has them): fontconfig's, without which every program that
# draws text (a window manager, Chromium, xterm) first scans all fonts for about a second.
SHARED_CACHES = ("/var/cache/fontconfig",)
SYNTHESISED = ("passwd", "group", "hosts", "hostname", "nsswitch.conf")
INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`; Fedora/RHEL: "
    "`dnf install bubblewrap`), or set sandbox.isolation=none to run harnesses unisolated "
    "(they then share this host's network and can read what this user can)"
)

ETC_RESCAN_S = 60.0

_probe_lock = threading.Lock()
_etc_lock = threading.Lock()  # not _probe_lock: the probe builds /etc arguments while holding it
_probe_result: str | None = None  # "" once bwrap works here, else why not
_etc_cache: tuple[float, list[str]] | None = None  # (when, bwrap arguments for /etc)


class IsolationUnavailable(RuntimeError):
    """The run asks for isolated sandboxes (``sandbox.isolation=required``) and this host
    cannot provide them."""


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


@functools.cache  # the interpreter and the system dirs stay put for the process's life
def python_prefix() -> str | None:
    """The real Python installation (not the venv), when it lies outside the system dirs."""
    prefix = os.path.realpath(sys.base_prefix)
    if any(_under(prefix, os.path.realpath(d)) for d in SYSTEM_DIRS if os.path.isdir(d)):
        return None
    return prefix


def sandbox_path_var() -> str:
    """The fixed PATH inside sandboxes: the system dirs, then the real Python's ``bin`` (so
    ``python3`` works where the only interpreter is, say, under ``/root/.pyenv``)."""
    prefix = python_prefix()
    return f"{SYSTEM_PATH}:{prefix}/bin" if prefix else SYSTEM_PATH


@functools.cache
def host_python() -> str:
    """This process's real interpreter when the sandbox sees it at the same path, else
    ``python3`` from the sandbox's PATH."""
    exe = os.path.realpath(sys.executable)
    roots = [os.path.realpath(d) for d in SYSTEM_DIRS if os.path.isdir(d)]
    prefix = python_prefix()
    if prefix:
        roots.append(prefix)
    return exe if any(_under(exe, r) for r in roots) else "python3"


def _name(lookup: Callable[[int], Any], ident: int, default: str) -> str:
    try:
        return lookup(ident)[0]
    except KeyError:
        return default


def etc_files() -> dict[str, str]:
    """The synthesised identity files: the sandbox's own user (this process's uid, which the
    sandbox keeps) with home /home/agent, plus root and nobody; no host user or group else."""
    uid, gid = os.getuid(), os.getgid()
    user = _name(pwd.getpwuid, uid, "agent") if uid else "root"
    group = _name(grp.getgrgid, gid, "agent") if gid else "root"
    passwd = [f"{user}:x:{uid}:{gid}:{user}:{HOME}:/bin/sh"]
    if uid != 0:
        passwd.insert(0, "root:x:0:0:root:/root:/usr/sbin/nologin")
    if uid != 65534:
        passwd.append("nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin")
    groups = [f"{group}:x:{gid}:"]
    if gid != 0:
        groups.insert(0, "root:x:0:")
    if gid != 65534:
        groups.append("nogroup:x:65534:")
    nss = ("passwd", "group", "shadow", "hosts", "networks", "protocols", "services")
    return {
        "passwd": "\n".join(passwd) + "\n",
        "group": "\n".join(groups) + "\n",
        "hosts": f"127.0.0.1\tlocalhost\n127.0.1.1\t{HOSTNAME}\n::1\tlocalhost ip6-localhost\n",
        "hostname": HOSTNAME + "\n",
        "nsswitch.conf": "".join(f"{db}: files\n" for db in nss),
    }


def write_etc(folder: str) -> None:
    """Write :func:`etc_files` into ``folder`` (created), for :func:`bwrap_argv`'s ``etc``."""
    os.makedirs(folder, exist_ok=True)
    for name, text in etc_files().items():
        with open(os.path.join(folder, name), "w") as f:
            f.write(text)


def etc_paths() -> list[str]:
    """The host paths under /etc that a sandbox sees (those of :data:`ETC_ALLOW` that exist)."""
    found: set[str] = set()
    for rel in ETC_ALLOW:
        for host in glob.glob(os.path.join("/etc", rel)):
            if os.path.lexists(host) and os.path.relpath(host, "/etc") not in SYNTHESISED:
                found.add(host)
    return sorted(found)


def _etc_host_args() -> list[str]:
    """bwrap arguments for the allowlisted host /etc; recomputed at most every
    ``ETC_RESCAN_S`` (globbing them costs ~1.5 ms, more than the rest of an exec's set-up)."""
    global _etc_cache
    now = time.monotonic()
    with _etc_lock:
        if _etc_cache is not None and now - _etc_cache[0] < ETC_RESCAN_S:
            return list(_etc_cache[1])
    args = ["--dir", "/etc"]
    made = {"/etc"}
    for host in etc_paths():
        parents: list[str] = []
        parent = os.path.dirname(host)
        while parent not in made:  # bwrap would make them 0700: unreadable to other users
            parents.insert(0, parent)
            parent = os.path.dirname(parent)
        for parent in parents:
            args += ["--dir", parent]
            made.add(parent)
        if os.path.islink(host):
            args += ["--symlink", os.readlink(host), host]
        else:
            args += ["--ro-bind", host, host]
    with _etc_lock:
        _etc_cache = (now, args)
    return list(args)


def _etc_args(etc: str | None) -> list[str]:
    args = _etc_host_args()
    for name in SYNTHESISED if etc else ():
        args += ["--ro-bind", os.path.join(etc, name), f"/etc/{name}"]
    return args


def base_args(etc: str | None = None, etc_tree: str | None = None) -> list[str]:
    """Namespaces, the read-only system, an /etc of only :data:`ETC_ALLOW` (plus the files
    :func:`write_etc` wrote into ``etc``; or all of it in the one folder ``etc_tree``:
    :mod:`forge.sandboxes.etc_tree`), and a private /tmp, /dev and /proc."""
    args = [
        "bwrap",
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--hostname",
        HOSTNAME,
    ]
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    args += ["--ro-bind", etc_tree, "/etc"] if etc_tree else _etc_args(etc)
    args += [a for d in SHARED_CACHES if os.path.isdir(d) for a in ("--ro-bind", d, d)]
    prefix = python_prefix()
    if prefix:
        args += ["--ro-bind", prefix, prefix]
    args += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    return args


def bwrap_argv(
    *,
    workspace: str,
    home: str,
    ro_mounts: dict[str, str],
    binds: dict[str, str] | None = None,
    etc: str | None = None,
    etc_tree: str | None = None,
) -> list[str]:
    """The bwrap prefix of one exec: system read-only, ``workspace`` at /workspace and ``home``
    at /home/agent read-write, ``ro_mounts`` (host -> sandbox) read-only, ``binds`` (host ->
    sandbox, e.g. the proxy socket) read-write, the synthesised /etc files from the folder
    ``etc`` (see :func:`write_etc`) or all of /etc from ``etc_tree``, the root itself
    read-only, working directory /workspace.

    The environment is not set here: bwrap passes its own, and callers run it with exactly the
    sandbox's environment (the same as ``--clearenv`` plus ``--setenv`` for each variable, but
    keeping the attempt's key out of the host's process list).
    """
    args = base_args(etc, etc_tree)
    args += ["--bind", workspace, WORKSPACE, "--bind", home, HOME]
    for host, target in ro_mounts.items():
        args += ["--ro-bind", host, target]
    for host, target in (binds or {}).items():
        args += ["--bind", host, target]
    args += ["--remount-ro", "/", "--chdir", WORKSPACE, "--"]
    return args


def bwrap_problem() -> str | None:
    """Why bubblewrap cannot build our sandbox here (None when it can); probed once per
    process."""
    global _probe_result
    with _probe_lock:
        if _probe_result is None:
            _probe_result = _probe()
        return _probe_result or None


def bwrap_works() -> bool:
    """Whether bubblewrap is installed and can build our sandbox here; probed once per process."""
    return bwrap_problem() is None


def require_bwrap() -> None:
    """Raise :class:`IsolationUnavailable`, saying why and how to fix it, unless bwrap works."""
    problem = bwrap_problem()
    if problem is not None:
        raise IsolationUnavailable(
            f"sandbox.isolation=required, but sandboxes cannot be isolated here: {problem}. "
            f"To fix it, {INSTALL_HINT}."
        )


def _probe() -> str:
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed or not on PATH"
    argv = [*base_args(), "--chdir", "/", "--", "true"]
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=20,
            env={"PATH": SYSTEM_PATH},
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bwrap failed to start a test sandbox ({e})"
    if done.returncode != 0:
        err = done.stderr.decode(errors="replace").strip() or f"exit status {done.returncode}"
        return (
            f"bwrap is installed but cannot create a sandbox ({err}); it needs unprivileged "
            "user namespaces (e.g. sysctl kernel.unprivileged_userns_clone=1, or a container "
            "allowed to create namespaces)"
        )
    return ""

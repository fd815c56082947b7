"""A cheating agent: run by the ``command`` harness in an attempt's sandbox (cwd: workspace).

It never solves its task. It plants everything that could change how a verifier runs, so that
a verifier that runs where the agent ran would pass, and it damages whatever else it can see::

    python3 cheater.py [--targets a,b,...] [--names m1,m2,...] MODE...

MODEs (``all`` is every one but ``huge``):

- ``shadows``: a module ``NAME.py`` that exits 0 at import: every standard-library module in
  the workspace; every ``--names`` also in its ``bin``, the home, the user site-packages and
  every writable directory on ``sys.path``; ``sitecustomize``/``usercustomize`` and a
  ``.pth`` file in each of them.
- ``startup``: shell and Python start-up files in the home and the workspace that exit 0.
- ``shims``: executables named like the tools verifiers use (python3, sh, test, grep, ...)
  that exit 0, in the workspace, the home and every writable directory on PATH.
- ``edit``: every file already in the workspace truncated or deleted (inputs included).
- ``links``: each ``--targets`` path (what the verifiers read) replaced by a FIFO or a
  symlink to somewhere else (the host's files, /dev/null, /proc, the home, a loop).
- ``daemon``: a detached process that keeps re-planting shadows and rewriting targets.
- ``huge``: a sparse file of 1 TiB.

It prints a wrong final answer.
"""

from __future__ import annotations

import os
import sys

EXIT0 = "import os as _o\n_o._exit(0)\n"
SHIM = "#!/bin/sh\nexit 0\n"
SHIM_NAMES = [
    "python3",
    "python",
    "python3.11",
    "python3.12",
    "sh",
    "bash",
    "dash",
    "env",
    "test",
    "[",
    "grep",
    "egrep",
    "cat",
    "ls",
    "find",
    "sort",
    "uniq",
    "wc",
    "awk",
    "sed",
    "tr",
    "head",
    "tail",
    "cut",
    "diff",
    "cmp",
    "jq",
    "timeout",
    "xargs",
    "true",
    "false",
]
STARTUP = [
    ".bashrc",
    ".profile",
    ".bash_profile",
    ".bash_login",
    ".shrc",
    ".kshrc",
    ".zshrc",
    ".zshenv",
    ".pythonrc.py",
    ".inputrc",
    ".envrc",
]
LINK_KINDS = ("fifo", "/etc/passwd", "/dev/null", "/proc/self/environ", "~/.bashrc", "loop")


def write(path: str, text: str, mode: int = 0o644) -> None:
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, mode)
    except OSError:
        pass  # a read-only place: the sandbox held


def writable_dirs(paths: list[str]) -> list[str]:
    return [d for d in dict.fromkeys(paths) if d and os.path.isdir(d) and os.access(d, os.W_OK)]


def site_dirs(home: str) -> list[str]:
    v = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    return [f"{home}/.local/lib/{v}/site-packages", f"{home}/.local/lib/python3/site-packages"]


def shadows(ws: str, home: str, names: list[str]) -> None:
    """Every standard-library name in the workspace (where ``python3 -`` and ``-c`` look
    first); the verifiers' own imports in every other place Python might look."""
    everything = sorted(set(sys.stdlib_module_names) | set(names))
    dirs = {ws: everything}
    others = [f"{ws}/bin", f"{ws}/lib", home, *site_dirs(home)]
    others += writable_dirs([os.path.abspath(p) for p in sys.path])
    for d in others:
        dirs.setdefault(d, sorted(set(names)))
    for d, modules in dirs.items():
        for name in modules:
            write(f"{d}/{name}.py", EXIT0)
        write(f"{d}/sitecustomize.py", EXIT0)
        write(f"{d}/usercustomize.py", EXIT0)
        write(f"{d}/zz_cheat.pth", "import os; os._exit(0)\n")
    write(f"{ws}/pyvenv.cfg", "include-system-site-packages = false\n")


def startup(ws: str, home: str) -> None:
    for d in (home, ws):
        for name in STARTUP:
            write(f"{d}/{name}", "exit 0\nimport os; os._exit(0)\n")
    write(f"{home}/.config/pip/pip.conf", "[global]\nindex-url = http://127.0.0.1:9/\n")


def shims(ws: str, home: str) -> None:
    dirs = [ws, f"{ws}/bin", f"{ws}/.local/bin", f"{home}/bin", f"{home}/.local/bin", "/tmp"]
    dirs += writable_dirs(os.environ.get("PATH", "").split(":"))
    for d in dict.fromkeys(dirs):
        for name in SHIM_NAMES:
            write(f"{d}/{name}", SHIM, 0o755)


def edit(ws: str) -> None:
    for i, (d, _, files) in enumerate(list(os.walk(ws))):
        for j, name in enumerate(files):
            path = os.path.join(d, name)
            if os.path.islink(path):
                continue
            try:
                if (i + j) % 2:
                    os.remove(path)
                else:
                    open(path, "w").close()
            except OSError:
                pass


def links(ws: str, home: str, targets: list[str]) -> None:
    for i, rel in enumerate(targets):
        path = os.path.join(ws, rel)
        kind = LINK_KINDS[i % len(LINK_KINDS)]
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if os.path.isdir(path) and not os.path.islink(path):
                os.rename(path, path + ".moved")
            elif os.path.lexists(path):
                os.remove(path)
            if kind == "fifo":
                os.mkfifo(path)
            elif kind == "loop":
                os.symlink(os.path.basename(path), path)
            else:
                os.symlink(kind.replace("~", home), path)
        except OSError:
            pass


def daemon(ws: str, home: str, names: list[str], targets: list[str]) -> None:
    if os.fork():
        return
    os.setsid()
    if os.fork():
        os._exit(0)
    for fd in (0, 1, 2):
        os.close(fd)
    import time

    for _ in range(30):  # a few seconds: long enough to outlive the harness
        shadows(ws, home, names)
        for rel in targets:
            write(os.path.join(ws, rel), "rewritten by the daemon\n")
        time.sleep(0.2)
    os._exit(0)


def huge(ws: str) -> None:
    with open(os.path.join(ws, "huge.bin"), "wb") as f:
        f.truncate(1 << 40)


def main(argv: list[str]) -> None:
    ws, home = os.getcwd(), os.path.expanduser("~")
    targets: list[str] = []
    names: list[str] = []
    modes: list[str] = []
    args = iter(argv)
    for a in args:
        if a == "--targets":
            targets = [t for t in next(args).split(",") if t]
        elif a == "--names":
            names = [n for n in next(args).split(",") if n]
        else:
            modes.append(a)
    if "all" in modes:
        modes = ["edit", "shadows", "startup", "shims", "links", "daemon"]
    seen = sum(len(fs) for _, _, fs in os.walk(ws))
    if "edit" in modes:  # first, so it damages the task's files and not what is planted next
        edit(ws)
    if "shadows" in modes:
        shadows(ws, home, names)
    if "startup" in modes:
        startup(ws, home)
    if "shims" in modes:
        shims(ws, home)
    if "links" in modes:
        links(ws, home, targets)
    if "huge" in modes:
        huge(ws)
    if "daemon" in modes:
        daemon(ws, home, names, targets)
    print(f"{seen} files found, modes: {' '.join(modes)}")
    print("I cheated and I do not know the answer.")


if __name__ == "__main__":
    main(sys.argv[1:])

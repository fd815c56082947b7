"""What a file check costs an attempt: reading the workspace's copy against a fresh sandbox.

Per backend (local bubblewrap; docker in a private dockerd, when one can be started here), an
agent's sandbox is made and given a workspace (``--files`` small files and the answer), then
verified with a ``file_equals`` and a ``json_field`` check, the two ways alternated in one run:

- *copy*: :func:`rewards.runner.run_verifier` as it is: the workspace copied out, the agent's
  sandbox destroyed, the checks reading the copy (:mod:`forge.sandboxes.archive_view`);
- *fresh*: the same copy and destroy, then the copy extracted into a fresh sandbox of the
  backend, the checks reading it there, and that sandbox destroyed (what every file check did
  before; :func:`rewards.runner._fresh`, still what a command verifier gets).

Both must score 1.0. The table gives the median wall time of the whole verification per way and
their ratio.

    .venv/bin/python scripts/bench/verify_copy.py [--reps 20] [--files 50] [--backends local,docker]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from forge.config import SandboxConfig
from forge.sandboxes.base import Sandbox, SandboxSpec
from forge.sandboxes.registry import sandbox_for
from rewards.registry import build_verifier, leaves
from rewards.runner import _fresh, _verify, run_verifier, verifier_files
from tasks.schema import Task

TASK = Task(
    id="bench-verify",
    instruction="write the answer",
    verifier=[
        {"type": "file_equals", "path": "out/answer.txt", "content": "42"},
        {"type": "json_field", "path": "out/result.json", "field": "ok", "equals": True},
    ],
)


def agent(make: Callable[[], Sandbox], files: int, rep: int) -> Sandbox:
    """A sandbox as an attempt leaves it: ``files`` small files and the answers."""
    box = make()
    box.create(SandboxSpec(labels={"run": "bench-verify", "attempt": str(rep)}, deadline_s=600))
    for i in range(files):
        box.put_file(f"src/f{i}.py", f"x = {i}\n" * 20)
    box.put_file("out/answer.txt", "42\n")
    box.put_file("out/result.json", json.dumps({"ok": True}))
    return box


def through_fresh(box: Sandbox, make: Callable[[], Sandbox]) -> float:
    """What a file check did before: the copy extracted into a fresh sandbox and read there."""
    data = box.get_archive(box.workspace)
    box.destroy()
    verifiers = leaves(build_verifier(TASK.verifier))
    spec = SandboxSpec(labels={"run": "bench-verify", "role": "verifier"}, deadline_s=60)
    fresh = _fresh(make, spec, data, verifier_files(TASK, verifiers), {})
    try:
        return min(_verify(v, fresh, None).reward for v in verifiers)
    finally:
        fresh.destroy()


def measure(make: Callable[[], Sandbox], reps: int, files: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"copy": [], "fresh": []}
    for rep in range(reps + 1):  # the first round warms up and is not counted
        for way in ("copy", "fresh") if rep % 2 else ("fresh", "copy"):
            box = agent(make, files, rep)
            t0 = time.perf_counter()
            if way == "copy":
                reward = run_verifier(TASK, box, None, make).reward
            else:
                reward = through_fresh(box, make)
            took = time.perf_counter() - t0
            if reward != 1.0:
                raise RuntimeError(f"{way}: reward {reward}, expected 1.0")
            if rep:
                times[way].append(took)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--files", type=int, default=50)
    parser.add_argument("--backends", default="local,docker")
    args = parser.parse_args()
    wanted = [b for b in args.backends.split(",") if b]
    results: dict[str, dict[str, list[float]]] = {}
    skipped: dict[str, str] = {}
    with (
        tempfile.TemporaryDirectory(prefix="forge-bench-verify-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        if "local" in wanted:
            # no disk quota: a file check's fresh sandbox never had one (it runs nothing)
            config = SandboxConfig(backend="local", root=f"{tmp}/local", disk_mb=None)
            print("local ...", flush=True)
            results["local"] = measure(lambda: sandbox_for(config, None), args.reps, args.files)
        if "docker" in wanted:
            print("starting a private dockerd ...", flush=True)
            try:
                from sandboxes import private_daemon

                daemon: Any = stack.enter_context(private_daemon())
            except Exception as e:  # no dockerd, not root, no base image: say so, go on
                skipped["docker"] = f"no private dockerd: {type(e).__name__}: {e}"
            else:
                config = SandboxConfig(backend="docker", docker_host=daemon.host, root=tmp)
                print("docker ...", flush=True)
                results["docker"] = measure(
                    lambda: sandbox_for(config, None), args.reps, args.files
                )
    print(f"\nverification of a file check, median of {args.reps} (ms)")
    print(f"{'backend':10s} {'copy':>9s} {'fresh':>9s}  fresh/copy")
    for backend, times in results.items():
        copy, fresh = (statistics.median(times[w]) * 1000 for w in ("copy", "fresh"))
        print(f"{backend:10s} {copy:9.1f} {fresh:9.1f}  {fresh / copy:9.1f}x")
    for backend, why in skipped.items():
        print(f"{backend:10s} skipped: {why}")
    print(
        f"command: .venv/bin/python scripts/bench/verify_copy.py {' '.join(sys.argv[1:])}".rstrip()
    )


if __name__ == "__main__":
    main()

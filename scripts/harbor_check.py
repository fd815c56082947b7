"""Check a set of Harbor tasks the way a user bringing them would: does each load, does its image
build (and how long), does its oracle score 1 and its no-op 0, and when not, whose fault it is.

    .venv/bin/python scripts/harbor_check.py PATH [--harness react] [--out DIR] [KEY=VALUE ...]

PATH is a Harbor task folder or a folder of them (e.g. your own fetch of Terminal-Bench 2: never
commit its data here). KEY=VALUE are run-config overrides (``sandbox.docker_host=...``,
``sandbox.image_aliases={...}``, ``task_limits={timeout_s: 600}``); ``--stand-in`` builds a local
image with the test runners Harbor tasks fetch (uv, and the pinned pytest and CTRF plugin as
wheels uv resolves offline) and maps ``ubuntu:*`` and ``debian:*`` to it, for a host with no
internet but a package index. It prints a table, one row
per task, and writes ``DIR/harbor_check.md`` and ``.json``; the episodes of both plays are kept
under ``DIR/oracle`` and ``DIR/noop`` (``forge view`` reads them).

The cause of each miss is one of:

- ``task``: the folder is malformed, its tests pass without the work (no-op > 0), or its build
  fails on its own;
- ``environment``: what this host cannot give it: a base image no alias maps, a network its
  build or its tests need (OpenForge gives the agent and the tests none, as in the sandboxes);
- ``OpenForge``: a field or format OpenForge does not run yet (named), or an attempt that
  failed in the infrastructure (its reason);
- ``oracle``: the reference solution ran and the tests said no (the detail says what they
  printed): the task's, or OpenForge's; read the episode.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from forge.config import load_config  # noqa: E402
from forge.images.task import TaskImageError, build_network, ensure  # noqa: E402
from forge.sandboxes.docker_api import client_for  # noqa: E402
from tasks.harbor import UNSUPPORTED, task_dirs, task_id  # noqa: E402
from tasks.loader import load_suite  # noqa: E402

# what this host lacks: a network, an image, a command its aliased base does not hold (127)
NETWORK = ("Could not resolve", "Temporary failure", "Network is unreachable",
           "Name or service not known", "no alias maps", "does not have it",
           "Failed to connect", "curl: (6)", "curl: (7)", "getaddrinfo",
           "returned a non-zero code: 127", "CERTIFICATE_VERIFY_FAILED")  # fmt: skip
# fields OpenForge refuses because it cannot honour them yet, not because the task is wrong
OPENFORGE_FIELDS = (*UNSUPPORTED, "steps", "environment.gpus", "environment/docker-compose",
                    "environment.os", "environment.gpu_types", "environment.tpu",
                    "environment.allowed_hosts", "agent.allowed_hosts", "agent.network_mode",
                    "verifier.allowed_hosts", "verifier.network_mode", "verifier.collect",
                    "artifacts")  # fmt: skip


def _cause_of_problem(field: str) -> str:
    return "OpenForge" if any(field.startswith(f) for f in OPENFORGE_FIELDS) else "task"


def _cause_of_text(text: str) -> str:
    return "environment" if any(n in text for n in NETWORK) else ""


def load(path: Path) -> tuple[dict[str, dict[str, Any]], list[Any]]:
    """A row per task folder with its load status; and the tasks that loaded."""
    rows: dict[str, dict[str, Any]] = {
        task_id(d): {"task": task_id(d), "folder": str(d)} for d in task_dirs(path)
    }
    skipped: list[tuple[str, str, str]] = []
    tasks = load_suite(f"harbor:{path}", skipped)
    for where, field, why in skipped:
        folder = Path(where) if Path(where).is_dir() else Path(where).parent
        row = rows[task_id(folder)]
        row.setdefault("load", f"{field}: {why}")
        row.setdefault("cause", _cause_of_problem(field))
    for t in tasks:
        rows[t.id]["load"] = "ok"
    return rows, tasks


def build(rows: dict[str, dict[str, Any]], tasks: list[Any], config: Any) -> list[str]:
    """Build each task's image, timing it; returns the ids that built."""
    client = client_for(config.sandbox.docker_host)
    built = []
    for i, t in enumerate(tasks, 1):
        row, t0 = rows[t.id], time.monotonic()
        try:
            env, aliases = t.environment.model_dump(), config.sandbox.image_aliases
            ensure(client, env, aliases, lambda _: None, build_network(config.sandbox))
            row["build"] = f"{time.monotonic() - t0:.0f}s"
            built.append(t.id)
        except TaskImageError as e:
            text = str(e)
            row["build"] = "failed"
            row["detail"] = text.splitlines()[0].split(": ", 1)[-1][-200:]  # the build's error
            row["cause"] = _cause_of_text(text) or "task"
        print(f"[harbor_check] build {i}/{len(tasks)} {t.id}: {row['build']}", flush=True)
    return built


def play(mode: str, path: Path, ids: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """``forge eval`` of ``ids`` with the scripted engine in ``mode``; episodes by task id."""
    out = Path(args.out) / mode
    cmd = [
        sys.executable, "-m", "forge.cli", "eval", str(ROOT / "examples" / "oracle.yaml"),
        "--harness", args.harness, "--tasks", f"harbor:{path}", "--out", str(out),
        "sandbox.backend=docker", f"policy.engine.mode={mode}", f"task_ids=[{','.join(ids)}]",
        f"rollout.attempt_timeout_s={args.attempt_timeout_s}", *args.overrides,
    ]  # fmt: skip
    t0 = time.monotonic()
    r = subprocess.run(cmd, cwd=ROOT, text=True)
    print(
        f"[harbor_check] {mode}: forge eval exited {r.returncode} in {time.monotonic() - t0:.0f}s"
    )
    found: dict[str, Any] = {}
    folder = out / args.harness
    for name in ("episodes.jsonl", "episodes/failures.jsonl"):
        f = folder / name
        for line in f.read_text().splitlines() if f.exists() else []:
            ep = json.loads(line)
            found.setdefault(ep.get("task_id") or ep.get("task", ""), ep)
    return found


def judge(row: dict[str, Any], oracle: dict[str, Any] | None, noop: dict[str, Any] | None) -> None:
    for mode, ep in (("oracle", oracle), ("noop", noop)):
        if ep is None:
            row[mode] = "-"
            continue
        if ep.get("status") != "ok":
            row[mode] = f"failed ({ep.get('failure')})"
            row.setdefault("cause", "OpenForge")
            row.setdefault("detail", str(ep.get("failure_detail") or ep.get("failure"))[-160:])
            continue
        row[mode] = f"{ep['reward']:g} ({ep.get('duration_s', 0):.0f}s)"
    if oracle and oracle.get("status") == "ok" and oracle["reward"] < 1:
        out = (oracle.get("verifier_outputs") or {}).get("test-stdout.txt", "")
        row.setdefault("cause", _cause_of_text(out) or "oracle")
        row.setdefault("detail", (out.strip().splitlines() or [oracle["verifier_detail"]])[-1])
    if noop and noop.get("status") == "ok" and noop["reward"] > 0:
        row.setdefault("cause", "task")
        row.setdefault("detail", "its tests pass without the work")


COLUMNS = ("task", "load", "build", "oracle", "noop", "cause", "detail")


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        cells = [str(r.get(c, "")).replace("|", "\\|").replace("\n", " ") for c in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# The local stand-in for the test runners Harbor tasks fetch while their tests run (uv, then
# `uvx --with pytest==... pytest`): the base image with python3-pip, uv, and a folder of wheels
# (the pinned pytest and CTRF plugin the common test.sh asks for, downloaded here by the host's
# pip) that uv resolves from offline (--stand-in). ubuntu:* and debian:* map to it.
RUNNERS = """FROM {base}
COPY wheels/ /opt/forge-wheels/
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip python3-venv \\
    && rm -rf /var/lib/apt/lists/* \\
    && pip install --no-index --break-system-packages /opt/forge-wheels/uv-*.whl
ENV UV_OFFLINE=1 UV_FIND_LINKS=/opt/forge-wheels UV_PYTHON_DOWNLOADS=never
"""
RUNNER_WHEELS = ["uv", "pytest==8.4.1", "pytest-json-ctrf==0.3.5"]


def stand_in(config: Any) -> list[str]:
    """Build the runners image (when missing) and return the overrides that use it: the
    aliases, and open agent and verify phases (through the egress proxy) for what the tasks'
    solutions and tests fetch beyond the runners."""
    import tempfile

    from forge.images import builder
    from forge.images import tags as images

    client = client_for(config.sandbox.docker_host)
    base = builder.build_base(client, lambda m: print(f"[harbor_check] {m}", flush=True))
    tag = f"{images.REPO}/harbor-runners:1"
    if not builder.has_image(client, tag):
        print(f"[harbor_check] building {tag}", flush=True)
        with tempfile.TemporaryDirectory() as d:
            pip = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:"]
            subprocess.run([*pip, "-d", d, *RUNNER_WHEELS], check=True)
            context: dict[str, str | bytes] = {
                f"wheels/{p.name}": str(p) for p in Path(d).iterdir()
            }
            context["Dockerfile"] = RUNNERS.format(base=base).encode()
            builder.build_context(client, tag, context, print, None, 900, "host")
    aliases = {**config.sandbox.image_aliases, "ubuntu:*": tag, "debian:*": tag}
    return [
        f"sandbox.image_aliases={json.dumps(aliases)}",
        "sandbox.network.agent={mode: open, ports: []}",
        "sandbox.network.verify={mode: open, ports: []}",
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("path", type=Path, help="a Harbor task folder or a folder of them")
    p.add_argument("--harness", default="react", help="the harness the oracle plays through")
    p.add_argument("--out", default="runs/harbor_check", help="where the report and episodes go")
    p.add_argument("--attempt-timeout-s", type=float, default=1800.0)
    p.add_argument(
        "--stand-in",
        action="store_true",
        help="map ubuntu:* and debian:* to a local image with the test runners (uv) installed, "
        "and give the agent and verify phases the open network (public addresses only)",
    )
    p.add_argument("overrides", nargs="*", help="run-config overrides, KEY=VALUE")
    args = p.parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    config = load_config(None, ["sandbox.backend=docker", *args.overrides])
    if args.stand_in:
        args.overrides = [*stand_in(config), *args.overrides]
        config = load_config(None, ["sandbox.backend=docker", *args.overrides])
    rows, tasks = load(args.path)
    built = build(rows, tasks, config)
    oracle = play("oracle", args.path, built, args) if built else {}
    noop = play("noop", args.path, built, args) if built else {}
    for tid in built:
        judge(rows[tid], oracle.get(tid), noop.get(tid))
    ordered = sorted(rows.values(), key=lambda r: r["task"])
    md = table(ordered)
    n = len(ordered)
    good = sum(r.get("oracle", "").startswith("1 ") and r.get("noop", "").startswith("0 ")
               for r in ordered)  # fmt: skip
    md += (
        f"\n\n{n} tasks: {sum(r.get('load') == 'ok' for r in ordered)} load, {len(built)} "
        f"build here, {good} with oracle 1 and no-op 0.\n"
    )
    (Path(args.out) / "harbor_check.md").write_text(md)
    (Path(args.out) / "harbor_check.json").write_text(json.dumps(ordered, indent=2))
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The ``forge`` command: ``forge run``, ``forge serve``, ``forge tasks``, ``forge eval``,
``forge collect``, ``forge sft``, ``forge student``, ``forge analyze``, ``forge harness``,
``forge image``."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from forge.config import ConfigError, EngineConfig, PolicyConfig, RunConfig, load_config

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
MAIN_JOB = EXAMPLES / "claw.yaml"  # `forge run` with no config
QUICKSTART = EXAMPLES / "quickstart.yaml"  # the sevens: a smoke test, and other commands' default
T = TypeVar("T")


def _serve(args: argparse.Namespace) -> int:
    from forge.cluster import init_ray
    from forge.train.student import model_path
    from serve.policy import deploy_policy
    from serve.server import make_app, run_server

    model = _making_student("serve", lambda: model_path(args.model))  # tiny-claw: made first
    if model is None:
        return 2
    config = PolicyConfig(  # served by the name it was asked for
        engine=EngineConfig(name=args.engine, model=model, mode=args.mode),
        replicas=args.replicas,
        num_cpus=args.num_cpus,
    )
    script = None
    if args.task:
        from tasks.loader import TaskError, load_suite

        suite, _, task_id = args.task.rpartition("/")
        try:
            found = [t for t in load_suite(suite or "smoke") if t.id == task_id]
        except TaskError as e:
            print(f"forge serve: --task: {e}", file=sys.stderr)
            return 2
        if not found:
            print(f"forge serve: --task: no task {task_id!r} in {suite!r}", file=sys.stderr)
            return 2
        script = found[0].reference_script()
    init_ray()
    handle = deploy_policy(config)
    from serve.protocol.images import ImageOptions

    images = ImageOptions(max_bytes=args.max_image_bytes, local_dir=args.image_dir)
    app = make_app(handle, args.model, args.api_key, script, images=images)
    print(f"serving {args.model} ({args.engine}) on http://{args.host}:{args.port}/v1", flush=True)
    run_server(app, args.host, args.port)
    return 0


def _student(config: RunConfig, command: str) -> RunConfig | None:
    """``config`` with ``tiny-claw`` made and named by its path (None after an error, said)."""
    from forge.train.student import resolve

    return _making_student(command, lambda: resolve(config))


def _making_student(command: str, make: Callable[[], T]) -> T | None:
    """``make()``, or None after saying why making ``tiny-claw`` failed."""
    from forge.harnesses.install import HarnessNotInstalled
    from forge.sandboxes.bwrap import IsolationUnavailable

    try:
        return make()
    except (ValueError, RuntimeError, HarnessNotInstalled, IsolationUnavailable) as e:
        print(f"forge {command}: making the student: {e}", file=sys.stderr)
        return None


def _config_and_overrides(args: argparse.Namespace) -> tuple[str | None, list[str]]:
    """The config file (the first positional that is a file or holds no '=') and the
    key=value overrides, in whatever order they were given."""
    items = [x for x in (args.config, *args.overrides) if x is not None]
    path = next((x for x in items if "=" not in x or os.path.exists(x)), None)
    if path is not None:
        items.remove(path)
    return path, items


def _run(args: argparse.Namespace) -> int:
    from forge.driver import main as run_main

    path, overrides = _config_and_overrides(args)
    if args.resume:
        if path is not None:
            print("forge run: give either a config or --resume RUN_DIR", file=sys.stderr)
            return 2
        path = os.path.join(args.resume, "config.yaml")
        if not os.path.exists(path):
            print(f"forge run: --resume: no config.yaml in {args.resume}", file=sys.stderr)
            return 2
    elif path is None and MAIN_JOB.exists():
        path = str(MAIN_JOB)
    try:
        config = load_config(path, overrides)
    except ConfigError as e:
        print(f"forge run: {e}", file=sys.stderr)
        return 2
    if args.resume:
        # The run directory is where it was found, whatever the config says.
        resume_dir = os.path.normpath(args.resume)
        config = config.model_copy(
            update={
                "runs_dir": os.path.dirname(resume_dir) or ".",
                "name": os.path.basename(resume_dir),
            }
        )
    resolved = _student(config, "run")
    if resolved is None:
        return 2
    return run_main(resolved, resume=bool(args.resume))


def _tasks(args: argparse.Namespace) -> int:
    from tasks.loader import TaskError, load_suite

    try:
        tasks = load_suite(args.suite)
    except TaskError as e:
        print(f"forge tasks: {e}", file=sys.stderr)
        return 2
    for t in tasks:
        print(f"{t.id:28s} {t.instruction[:70]}")
    print(f"{len(tasks)} tasks valid")
    return 0


def _eval(args: argparse.Namespace) -> int:
    from forge.evaluate import main as eval_main

    path, overrides = _config_and_overrides(args)
    if path is None:
        print("forge eval: give a config, e.g. examples/oracle.yaml", file=sys.stderr)
        return 2
    if args.tasks:
        overrides.append(f"tasks={args.tasks}")
    try:
        config = load_config(path, overrides)
    except ConfigError as e:
        print(f"forge eval: {e}", file=sys.stderr)
        return 2
    resolved = _student(config, "eval")
    if resolved is None:
        return 2
    config = resolved
    # the config's own harness unless --harness or --harness-config say which to compare
    named = args.harness or ("" if args.harness_config else config.harness)
    harnesses = [h.strip() for h in named.split(",") if h.strip()]
    out = Path(args.out or os.path.join(config.runs_dir, f"eval-{config.name}"))
    return eval_main(config, harnesses, args.k, out, args.harness_config or [])


def _collect(args: argparse.Namespace) -> int:
    from forge.collect import main as collect_main

    path, overrides = _config_and_overrides(args)
    try:
        config = load_config(path or QUICKSTART, overrides)
    except ConfigError as e:
        print(f"forge collect: {e}", file=sys.stderr)
        return 2
    resolved = _student(config, "collect")
    if resolved is None:
        return 2
    return collect_main(
        resolved,
        args.teacher,
        args.tasks or config.tasks,
        args.k,
        Path(args.out),
        min_reward=args.min_reward,
        temperature=args.temperature,
        model=args.teacher_model,
    )


def _sft(args: argparse.Namespace) -> int:
    from forge.train.sft import train
    from forge.train.student import model_path

    model = _making_student("sft", lambda: model_path(args.model))  # `tiny-claw` too
    if model is None:
        return 2
    try:
        train(
            Path(args.dir),
            model,
            Path(args.out),
            steps=args.steps,
            batch=args.batch,
            lr=args.lr,
            seed=args.seed,
            device=args.device,
        )
    except ValueError as e:
        print(f"forge sft: {e}", file=sys.stderr)
        return 2
    return 0


def _student_cmd(args: argparse.Namespace) -> int:
    from forge.train.student import NAME

    resolved = _student(load_config(str(MAIN_JOB), [f"policy.engine.model={NAME}"]), "student")
    if resolved is None:
        return 2
    print(resolved.policy.engine.model)
    return 0


def _plot(args: argparse.Namespace) -> int:
    from forge.observe.plot import plot

    metrics = [m for m in (args.metrics or "").split(",") if m] or None
    try:
        paths = plot(Path(args.run_dir), Path(args.out) if args.out else None, metrics)
    except (FileNotFoundError, ValueError) as e:
        print(f"forge plot: {e}", file=sys.stderr)
        return 2
    print(f"[forge] {len(paths)} charts in {paths[-1].parent}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from forge.observe.export_atif import export

    try:
        written = list(export(Path(args.run_dir), Path(args.out) if args.out else None))
    except (FileNotFoundError, ValidationError) as e:
        print(f"forge export: {e}", file=sys.stderr)
        return 2
    n, checked = len(written), all(ok for _, ok in written)
    how = "validated with harbor's Trajectory model" if checked else "not validated: no harbor"
    where = Path(args.out) if args.out else Path(args.run_dir) / "atif"
    print(f"[forge] {n} episodes as ATIF in {where} ({how})")
    return 0


def _view(args: argparse.Namespace) -> int:
    from forge.observe.view.app import serve

    try:
        serve(Path(args.run_dir), host=args.host, port=args.port)
    except FileNotFoundError as e:
        print(f"forge view: {e}", file=sys.stderr)
        return 2
    return 0


def _analyze(args: argparse.Namespace) -> int:
    import json

    from forge.observe.analyze import analyze, table

    try:
        report = analyze(Path(args.run_dir))
    except FileNotFoundError as e:
        print(f"forge analyze: {e}", file=sys.stderr)
        return 2
    (Path(args.run_dir) / "analysis.json").write_text(json.dumps(report, indent=2))
    print(table(report))
    return 0


def _harness(args: argparse.Namespace) -> int:
    from forge.harnesses.install import PACKAGES, folder_size, install
    from forge.harnesses.registry import HARNESSES

    if args.action == "list":
        for name in sorted(HARNESSES):
            pkg = PACKAGES.get(name)
            if pkg is None:  # nothing to install: built in, or given in its options
                source = getattr(HARNESSES[name], "source", "built in")
                print(f"{name:16s} {'-':12s} {source}")
                continue
            state = (
                f"installed ({folder_size(pkg.folder) / 2**20:.0f} MiB, {pkg.folder})"
                if pkg.installed()
                else f"not installed: forge harness install {name}"
            )
            print(f"{name:16s} {pkg.version:12s} {state}")
        return 0
    code = 0
    for name in args.names or sorted(PACKAGES):
        try:
            print(f"{name}: {install(name, force=args.force)}", flush=True)
        except (ValueError, RuntimeError) as e:
            print(f"forge harness install: {e}", file=sys.stderr)
            code = 2
    return code


def _kube_rbac(args: argparse.Namespace) -> int:
    import yaml

    from forge.sandboxes.kube_manifests import cluster_manifests

    docs = cluster_manifests(args.namespace, run_account_namespace=args.run_namespace)
    print(yaml.safe_dump_all(docs, sort_keys=False), end="")
    return 0


def _image(args: argparse.Namespace) -> int:
    import contextlib

    from forge.harnesses.install import PACKAGES
    from forge.images import tags as images
    from forge.sandboxes import dockerd
    from forge.sandboxes.docker_api import DockerUnavailable, client_for, resolve_host

    if args.action == "dockerfile":
        for name in args.names or ["base"]:
            print(f"# --- {name}\n{images.dockerfile(name)}")
        return 0
    if args.action == "daemon":
        what = (args.names or ["status"])[0]
        running = dockerd.running(args.root)
        if what == "start":
            d = dockerd.start_daemon(args.root, reuse=True)
            print(f"dockerd (pid {d.pid}) answers at {d.host}", flush=True)
        elif what == "stop" and running is not None:
            dockerd.stop_daemon(running)
            print(f"stopped dockerd (pid {running.pid})")
        else:
            print(f"dockerd (pid {running.pid}) at {running.host}" if running else "not running")
        return 0
    started = None
    if resolve_host(args.docker_host) is None and not dockerd.answers(Path("/var/run/docker.sock")):
        try:  # no daemon: a private one for the build (its images persist in its data root)
            started = dockerd.start_daemon(args.root, reuse=True)
        except dockerd.DaemonError as e:
            print(f"forge image: {e}", file=sys.stderr)
            return 2
        args.docker_host = started.host
    names = args.names or ["base", "react", *sorted(n for n in PACKAGES if PACKAGES[n].installed())]
    try:
        client = client_for(args.docker_host)
        print(f"Docker daemon: {client.forge_host}", flush=True)
        if args.action == "list":
            for name, tag, state in images.image_rows(client, names):
                print(f"{name:16s} {tag:48s} {state}")
            return 0
        images.build(client, names, lambda m: print(m, flush=True), force=args.force)
        return 0
    except (DockerUnavailable, RuntimeError, ValueError) as e:
        print(f"forge image: {e}", file=sys.stderr)
        return 2
    finally:
        if started is not None and started.started:
            with contextlib.suppress(Exception):
                dockerd.stop_daemon(started)
            print("stopped the private dockerd; `forge image daemon start` runs it for runs")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="forge", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a job from a config (default: examples/claw.yaml)")
    run.add_argument("config", nargs="?", help="YAML config file")
    run.add_argument("overrides", nargs="*", help="key=value overrides, e.g. policy.replicas=2")
    run.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last checkpoint")
    run.set_defaults(func=_run, intermixed=True)

    srv = sub.add_parser("serve", help="serve a model over HTTP on 127.0.0.1")
    srv.add_argument(
        "--model", default="tiny", help="tiny, tiny-vl, smollm2-135m or a checkpoint dir"
    )
    srv.add_argument("--engine", default="torch", choices=["torch", "scripted"])
    srv.add_argument("--mode", default="oracle", choices=["oracle", "noop"], help="scripted only")
    srv.add_argument("--host", default="127.0.0.1")
    srv.add_argument("--port", type=int, default=8000)
    srv.add_argument("--replicas", type=int, default=1)
    srv.add_argument("--num-cpus", type=float, default=1.0)
    srv.add_argument("--api-key", default=None, help="require this key on every call")
    srv.add_argument(
        "--task", default=None, help="scripted engine: play SUITE/TASK_ID's reference solution"
    )
    srv.add_argument(
        "--image-dir", default=None, help="allow file:// image URLs under this directory"
    )
    srv.add_argument(
        "--max-image-bytes", type=int, default=10 << 20, help="largest image a request may carry"
    )
    srv.set_defaults(func=_serve)

    tasks = sub.add_parser("tasks", help="validate and list a task suite")
    tasks.add_argument("suite", help="suite name (e.g. smoke) or path")
    tasks.set_defaults(func=_tasks)

    ev = sub.add_parser("eval", help="pass@1, pass@k, pass^k per harness on a task suite")
    ev.add_argument(
        "config", nargs="?", help="YAML config (policy, limits), e.g. examples/oracle.yaml"
    )
    ev.add_argument("overrides", nargs="*", help="key=value overrides")
    ev.add_argument("--harness", help="comma-separated built-in harnesses (default: the config's)")
    ev.add_argument(
        "--harness-config",
        action="append",
        metavar="FILE",
        help="agents to compare, defined in FILE: a harness definition (harness + "
        "harness_options), a command agent's options with its name, or agents: {NAME: ...}; "
        "repeatable",
    )
    ev.add_argument("--tasks", help="task suite (default: the config's)")
    ev.add_argument("-k", type=int, default=1, help="attempts per task and harness")
    ev.add_argument("--out", help="output folder (default: runs/eval-<name>)")
    ev.set_defaults(func=_eval, intermixed=True)

    col = sub.add_parser("collect", help="teacher episodes through the harness and proxy")
    col.add_argument("config", nargs="?", help="YAML config: harness, limits, the student model")
    col.add_argument("overrides", nargs="*", help="key=value overrides")
    col.add_argument(
        "--teacher",
        required=True,
        help="'oracle' (the scripted reference solutions), 'self' (the config's own policy: "
        "its passing attempts, for reward-filtered self-training) or an OpenAI-compatible base "
        "URL (ending in /v1; the key from $OPENAI_API_KEY)",
    )
    col.add_argument("--teacher-model", help="the model name sent to a teacher URL")
    col.add_argument("--tasks", help="task suite (default: the config's)")
    col.add_argument("-k", type=int, default=1, help="attempts per task")
    col.add_argument("--out", required=True, help="output folder")
    col.add_argument("--min-reward", type=float, default=1.0, help="keep episodes at least this")
    col.add_argument("--temperature", type=float, default=1.0, help="the teacher's sampling")
    col.set_defaults(func=_collect, intermixed=True)

    sft = sub.add_parser("sft", help="fine-tune a model on `forge collect`'s episodes")
    sft.add_argument("dir", help="a `forge collect` output folder")
    sft.add_argument(
        "--model", default="tiny", help="tiny, smollm2-135m, tiny-claw or a checkpoint dir"
    )
    sft.add_argument("--out", required=True, help="the checkpoint folder to write")
    sft.add_argument("--steps", type=int, default=200, help="optimizer steps")
    sft.add_argument("--batch", type=int, default=8, help="episodes per step")
    sft.add_argument(
        "--lr", type=float, default=1e-3, help="peak learning rate (AdamW; warm-up, cosine decay)"
    )
    sft.add_argument("--seed", type=int, default=0, help="the model's seed and the sampling's")
    sft.add_argument("--device", default="cpu", help="torch device")
    sft.set_defaults(func=_sft)

    stu = sub.add_parser("student", help="make tiny-claw, the main job's model, if missing")
    stu.set_defaults(func=_student_cmd)

    ana = sub.add_parser("analyze", help="tool-use behaviour per policy version of a run")
    ana.add_argument("run_dir", help="a run directory (runs/<name>)")
    ana.set_defaults(func=_analyze)

    exp = sub.add_parser("export", help="a run's episodes in another format (ATIF)")
    exp.add_argument("run_dir", help="a run directory (runs/<name>) or a forge eval agent folder")
    exp.add_argument("--format", choices=["atif"], default="atif", help="ATIF (Harbor's)")
    exp.add_argument("--out", help="output folder (default: RUN_DIR/atif)")
    exp.set_defaults(func=_export)

    plt = sub.add_parser("plot", help="PNG charts of a run's step metrics")
    plt.add_argument("run_dir", help="a run directory (runs/<name>)")
    plt.add_argument("--out", help="output folder (default: RUN_DIR/plots)")
    plt.add_argument("--metrics", help="comma-separated metric names (default: the usual ones)")
    plt.set_defaults(func=_plot)

    view = sub.add_parser("view", help="a local web view of a run (live while it runs)")
    view.add_argument("run_dir", help="a run directory (runs/<name>) or a forge eval agent folder")
    view.add_argument("--port", type=int, default=8300, help="port (default 8300)")
    view.add_argument("--host", default="127.0.0.1", help="address to listen on (default loopback)")
    view.set_defaults(func=_view)

    har = sub.add_parser("harness", help="list or install the real harnesses")
    har.add_argument("action", choices=["list", "install"])
    har.add_argument("names", nargs="*", help="harnesses to install (default: all)")
    har.add_argument("--force", action="store_true", help="reinstall")
    har.set_defaults(func=_harness)

    img = sub.add_parser("image", help="build and list sandbox images (sandbox.backend=docker)")
    img.add_argument("action", choices=["build", "list", "dockerfile", "daemon"])
    img.add_argument(
        "names",
        nargs="*",
        help="build/list/dockerfile: base and harness names (default: base, react and the "
        "installed harnesses); daemon: start, stop or status of the private dockerd",
    )
    img.add_argument("--docker-host", help="the daemon (default: sandbox.docker_host's rules)")
    img.add_argument("--root", help="the private dockerd's folder (~/.cache/openforge/dockerd)")
    img.add_argument("--force", action="store_true", help="rebuild (and re-bootstrap the base)")
    img.set_defaults(func=_image)

    rbac = sub.add_parser(
        "kube-rbac",
        help="print the ServiceAccounts, Role and RoleBinding sandbox.backend=kubernetes needs "
        "(kubectl apply -f -)",
    )
    rbac.add_argument("--namespace", default="openforge", help="the sandbox pods' namespace")
    rbac.add_argument(
        "--run-namespace", default=None, help="where the Ray pods (the run) live, if elsewhere"
    )
    rbac.set_defaults(func=_kube_rbac)
    parser.set_defaults(commands=sub.choices)
    return parser


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line. ``run`` and ``eval`` take their key=value overrides before, between
    or after their flags (``forge eval CFG --harness react task_ids=[a]``)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if not getattr(args, "intermixed", False):
        if extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        return args
    # The command's own arguments, positionals and flags in any order; the top-level flags
    # (-v) all come before the command's name.
    rest = argv[argv.index(args.command) + 1 :]
    own = args.commands[args.command].parse_intermixed_args(rest)
    return argparse.Namespace(**{**vars(args), **vars(own)})


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())

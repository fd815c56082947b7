"""What each subcommand of the ``forge`` command (:mod:`forge.cli`, its arguments) does."""

from __future__ import annotations

import argparse
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

    skipped: list[tuple[str, str, str]] = []  # a third-party set's folders that cannot load
    try:
        tasks = load_suite(args.suite, skipped)
    except TaskError as e:
        print(f"forge tasks: {e}", file=sys.stderr)
        return 2
    for t in tasks:
        print(f"{t.id:28s} {' '.join(t.instruction.split())[:70]}")  # one line each
    for where, field, why in skipped:
        print(f"forge tasks: left out {where}: {field}: {why}", file=sys.stderr)
    left_out = f"; {len(skipped)} problem(s) left folders out" if skipped else ""
    print(f"{len(tasks)} tasks valid{left_out}")
    return 1 if skipped else 0


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
    named = args.harness or ("" if args.harness_config else ",".join(config.eval_harness_list))
    harnesses = [h.strip() for h in named.split(",") if h.strip()]
    out = Path(args.out or os.path.join(config.runs_dir, f"eval-{config.name}"))
    if args.model:  # several checkpoints: the checkpoint x harness matrix
        from forge.eval_matrix import main as matrix_main
        from forge.train.student import resolve

        models = []
        for model in (m.strip() for m in args.model.split(",") if m.strip()):
            data = config.model_dump()
            data["policy"]["engine"]["model"] = model
            one = _making_student("eval", lambda d=data: resolve(RunConfig.model_validate(d)))
            if one is None:
                return 2
            models.append(one.policy.engine.model)
        return matrix_main(config, models, harnesses, args.k, out, args.harness_config or [])
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
        report = analyze(Path(args.run_dir), args.by)
    except (FileNotFoundError, ValueError) as e:
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

    from forge.sandboxes.kube_cluster import cluster_manifests

    docs = cluster_manifests(args.namespace, run_account_namespace=args.run_namespace)
    print(yaml.safe_dump_all(docs, sort_keys=False), end="")
    return 0


def _image(args: argparse.Namespace) -> int:
    import contextlib

    from forge.harnesses.install import PACKAGES
    from forge.images import builder
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
            for name, tag, state in builder.image_rows(client, names):
                print(f"{name:16s} {tag:48s} {state}")
            return 0
        builder.build(client, names, lambda m: print(m, flush=True), force=args.force)
        return 0
    except (DockerUnavailable, RuntimeError, ValueError) as e:
        print(f"forge image: {e}", file=sys.stderr)
        return 2
    finally:
        if started is not None and started.started:
            with contextlib.suppress(Exception):
                dockerd.stop_daemon(started)
            print("stopped the private dockerd; `forge image daemon start` runs it for runs")

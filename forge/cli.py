"""The ``forge`` command: ``forge run``, ``forge serve``, ``forge tasks``, ``forge eval``,
``forge collect``, ``forge sft``, ``forge student``, ``forge analyze``, ``forge harness``,
``forge image``."""

from __future__ import annotations

import argparse
import logging
import sys

from forge.commands import (
    _analyze,
    _collect,
    _eval,
    _export,
    _harness,
    _image,
    _kube_rbac,
    _plot,
    _run,
    _serve,
    _sft,
    _student_cmd,
    _tasks,
    _view,
)
from forge.observe.console import calm


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="forge", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a job from a config (default: examples/claw.yaml)")
    run.add_argument("config", nargs="?", help="YAML config file")
    run.add_argument("overrides", nargs="*", help="key=value overrides, e.g. policy.replicas=2")
    run.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last checkpoint")
    run.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS,  # else it would hide `forge -v run`
        help="Ray's, Serve's and libraries' log lines on the console (else: RUN_DIR/forge.log)",
    )
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
    ev.add_argument(
        "--model",
        help="comma-separated models or checkpoint dirs: writes the checkpoint x harness "
        "matrix (matrix.md, matrix.json, matrix.png)",
    )
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
    ana.add_argument(
        "--by",
        default="version",
        help="split by: version (default), or a provenance key (harness, prompt_hash, ...)",
    )
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
    if args.command == "run" and not args.verbose:
        calm()  # OpenForge's lines on the console, the rest in the run's forge.log
    else:
        logging.basicConfig(
            level=logging.DEBUG if args.verbose else logging.INFO,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())

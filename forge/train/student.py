"""``tiny-claw``, the main job's student: the built-in ``tiny`` model warm-started by SFT on the
oracle's episodes of ``claw-gen/train/read_word``, played through the react harness exactly as
the main job (``examples/claw.yaml``) plays them.

No model hub is reachable and a random 5M-parameter model never makes a tool call, so the
first command that names ``tiny-claw`` makes it (~3 minutes on 2 cores): the base model with
the compact template, ``forge collect --teacher oracle`` on the training split, then ``forge
sft``. It is kept in ``$FORGE_CACHE`` (default ``~/.cache/openforge``) under a name that
changes with the recipe, so a changed recipe never reuses a stale checkpoint; a build that dies
leaves nothing under that name. ``examples/recipe/run.sh`` runs the same stages one by one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

from forge.config import RunConfig, load_config

NAME = "tiny-claw"
CONFIG = Path(__file__).resolve().parents[2] / "examples" / "claw.yaml"
RECIPE = {
    "tasks": "claw-gen/train/read_word",  # the main job's training split
    "seed": 0,
    "sft_steps": 400,
    "sft_batch": 8,
    "sft_lr": 1e-3,  # peak; warm-up then cosine decay (forge.train.sft.lr_at)
}


def write_base(out: Path, seed: int = 0) -> None:
    """The student before SFT: ``tiny`` from ``seed`` with the compact chat template."""
    from serve.chat_template import COMPACT_TEMPLATE
    from serve.models import build_tiny

    model, tok = build_tiny(seed)
    tok.chat_template = COMPACT_TEMPLATE
    model.save_pretrained(out)
    tok.save_pretrained(out)


def checkpoint_dir() -> Path:
    """Where ``tiny-claw`` is kept: the cache, under a digest of the recipe and the template."""
    from serve.chat_template import COMPACT_TEMPLATE

    key = json.dumps({**RECIPE, "template": COMPACT_TEMPLATE}, sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    cache = Path(os.environ.get("FORGE_CACHE") or Path.home() / ".cache" / "openforge")
    return cache.expanduser() / f"{NAME}-{digest}"


def build(
    out: Path,
    like: RunConfig | None = None,
    steps: int | None = None,
    task_ids: list[str] | None = None,
) -> Path:
    """Make ``tiny-claw`` at ``out``: base -> oracle episodes -> SFT. The sandbox settings come
    from ``like`` (the run that asked for it); everything else from ``examples/claw.yaml``.
    ``steps`` and ``task_ids`` (of the training split) make a smaller one, for tests."""
    import ray

    from forge.collect import collect
    from forge.train.sft import train

    t0 = time.perf_counter()
    work = out.with_name(f".{out.name}.{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        write_base(work / "student", RECIPE["seed"])
        overrides = [f"policy.engine.model={work / 'student'}"]
        if task_ids:
            overrides.append(f"task_ids={json.dumps(task_ids)}")
        config = load_config(str(CONFIG), overrides)
        if like is not None:
            config = config.model_copy(update={"sandbox": like.sandbox, "proxy": like.proxy})
        ours = not ray.is_initialized()
        summary = collect(config, "oracle", RECIPE["tasks"], 1, work / "teacher")
        if summary["kept"] == 0:
            raise RuntimeError(f"{NAME}: the oracle passed no task ({summary})")
        _release_ray(ours)
        train(
            work / "teacher",
            str(work / "student"),
            work / "model",
            steps=steps or RECIPE["sft_steps"],
            batch=RECIPE["sft_batch"],
            lr=RECIPE["sft_lr"],
            seed=RECIPE["seed"],
        )
        shutil.copy(work / "teacher" / "collect.json", work / "model" / "collect.json")
        try:
            os.replace(work / "model", out)
        except OSError:  # another process made it meanwhile
            if not (out / "config.json").exists():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"[forge] {NAME}: made in {time.perf_counter() - t0:.0f}s -> {out}", flush=True)
    return out


def _release_ray(ours: bool) -> None:
    """Take down what the collection started: the local cluster (the run that follows starts
    one with the CPUs it needs), or on a cluster it joined, its Policy app."""
    import ray
    from ray import serve

    if ours:
        ray.shutdown()
    else:
        serve.delete("forge-eval-policy")


def model_path(name: str, like: RunConfig | None = None) -> str:
    """``name``, or for ``tiny-claw`` its checkpoint's path (made first if missing)."""
    if name != NAME:
        return name
    path = checkpoint_dir()
    if not (path / "config.json").exists():
        print(
            f"[forge] {NAME}: first use, making it (~3 minutes on 2 cores; kept in {path}): "
            f"the tiny model, SFT on the oracle's episodes of {RECIPE['tasks']}",
            flush=True,
        )
        build(path, like=like)
    return str(path)


def resolve(config: RunConfig) -> RunConfig:
    """``config`` with ``tiny-claw`` replaced by its checkpoint's path."""
    if config.policy.engine.model != NAME:
        return config
    data = config.model_dump()
    data["policy"]["engine"]["model"] = model_path(NAME, like=config)
    return RunConfig.model_validate(data)

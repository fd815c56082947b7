"""The driver behind ``forge run``: build the actors, then collect -> train -> publish -> evaluate.

    policy   = Policy (Ray Serve), taking weights from a WeightStore
    buffer   = ReplayBuffer (groups as object refs; every episode on disk at once)
    trainer  = Trainer (GRPO on the recorded tokens)
    scheduler= Scheduler (tasks -> groups -> HarnessPods -> episodes)
    for step: groups = collect(); train(groups); publish(weights); maybe evaluate; log

Synchronous mode collects each step's groups with the current weights (on-policy); asynchronous
mode keeps collection running ``max_staleness`` steps ahead while the trainer works.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import ray
import yaml
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from forge.cluster import init_ray
from forge.config import ConfigError, RunConfig
from forge.config.placement import unplaceable
from forge.episode_images import write_images
from forge.harnesses.install import HarnessNotInstalled
from forge.harnesses.registry import require
from forge.images.task import TaskImageError
from forge.observe import metrics
from forge.observe.console import attach_run_log, quiet_libraries, run_log_path
from forge.observe.loggers import LoggerMissing, MetricsLog
from forge.observe.loggers import require as require_loggers
from forge.observe.progress import Progress, eval_rates
from forge.sandboxes.bwrap import IsolationUnavailable
from forge.sandboxes.registry import check_isolation, reap_sandboxes
from forge.served_judge import ServedJudge
from forge.task_set import Problem, load_tasks, playable
from tasks.harbor import open_to_shims, refuse_for_training
from tasks.loader import TaskError

log = logging.getLogger(__name__)
STATE_FILE = "trainer_state.json"
RUN_STATE_FILE = "run_state.json"  # the driver's part of a checkpoint: the task cursor
KINDS = ("policy", "trainer", "harness_pod", "scheduler", "replay_buffer")  # placement's


class CollectionStalled(RuntimeError):
    """No attempt settled for ``rollout.stall_timeout_s``; the message says what is waited for."""


def placement_warnings(
    config: RunConfig, placed: dict[str, dict[str, Any]], nodes: list[dict[str, Any]]
) -> list[str]:
    """What may keep an actor from running where it must: a kind no live node fits (the
    autoscaler may yet add one), or, on a cluster of several nodes, a CUDA device with no GPU
    asked for (Ray may then place the actor on a node without one)."""
    lines = unplaceable(placed, nodes)
    if sum(1 for n in nodes if n.get("Alive")) > 1:
        engine = config.policy.engine
        cuda = {
            "trainer": config.trainer.device.startswith("cuda"),
            "policy": engine.name == "vllm" or engine.device.startswith("cuda"),
        }
        lines += [
            f"placement.{kind}: it runs on CUDA but asks for no GPU; on a cluster of several "
            f"nodes it may land on one without a GPU (set placement.{kind}.num_gpus)"
            for kind, on_cuda in cuda.items()
            if on_cuda and not placed[kind]["num_gpus"]
        ]
    return lines


def latest_checkpoint(run_dir: Path) -> Path | None:
    ckpts = [p for p in (run_dir / "checkpoints").glob("step_*") if (p / STATE_FILE).exists()]
    return max(ckpts, key=lambda p: int(p.name.split("_")[1]), default=None)


class Run:
    """The actors of one run and the four verbs of its loop."""

    def __init__(self, config: RunConfig, resume: bool = False) -> None:
        self.config = config
        self.dir = config.run_dir
        self.dir.mkdir(parents=True, exist_ok=True)
        attach_run_log(self.dir)  # a calm console: the libraries' lines go to RUN_DIR/forge.log
        (self.dir / "config.yaml").write_text(yaml.safe_dump(config.model_dump(), sort_keys=False))
        for harness in config.eval_harness_list:  # a missing harness stops the run now
            require(harness, config.options_for(harness))
        check_isolation(config.sandbox, config.proxy)  # so does an unusable sandbox backend
        skipped: list[Problem] = []  # tasks that cannot play: said, recorded, left out
        self.tasks = load_tasks(config.tasks, config.task_ids, skipped)
        refuse_for_training(self.tasks)  # tests that run the agent's code: eval only
        # the evaluation's own suite whole; else the training tasks (task_ids apply)
        eval_ids = [] if config.eval_tasks else config.task_ids
        self.eval_tasks = load_tasks(config.eval_tasks or config.tasks, eval_ids, skipped)
        say = lambda m: print(f"[forge] {m}", flush=True)  # noqa: E731
        self.tasks, self.eval_tasks = playable(
            [self.tasks, self.eval_tasks], config, skipped, self.dir, say, config.eval_harness_list
        )
        shims = [t["id"] for t in self.tasks if open_to_shims(t)]
        if shims:
            say(
                f"warning: {len(shims)} Harbor task(s) ({', '.join(shims[:3])}) are verified in "
                "the agent's own container after an agent that runs as root: a shim it plants "
                "outside its workdir would run in the tests. Each episode lists what it changed "
                "(verifier_outputs.system_changes); harbor_verify=sealed rules it out where the "
                "tests allow (docs/harbor.md)"
            )
        r = config.rollout
        placed = {kind: config.actor_options(kind) for kind in KINDS}
        mode = init_ray(num_cpus=max(os.cpu_count() or 1, config.cpus_needed()))
        quiet_libraries()  # Ray's loggers and the workers' output, to the run's log
        for line in placement_warnings(config, placed, ray.nodes()):
            print(f"[forge] warning: {line}", file=sys.stderr, flush=True)
        reaped = reap_sandboxes(config.sandbox, config.name)
        self.reconciler: Any = None  # kubernetes: reaps orphaned pods while the run lasts
        if config.sandbox.backend == "kubernetes":
            from forge.sandboxes.kubernetes import reconciler

            self.reconciler = reconciler(config.sandbox, config.name).start()
        print(
            f"[forge] Ray: {mode} cluster; run {config.name} in {self.dir}"
            + (f"; reaped {reaped} orphaned sandbox(es)" if reaped else ""),
            flush=True,
        )
        from actors.replay_buffer import ReplayBuffer
        from actors.scheduler import Scheduler
        from actors.trainer import Trainer
        from serve.policy import deploy_policy
        from serve.weight_sync import WeightStore, make_weight_sync

        store_name = f"forge-weights-{config.name}-{uuid.uuid4().hex[:6]}"
        # The store holds the newest weights for replicas that start later: it lives and dies
        # with the driver, on the driver's node.
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        store = (
            ray.remote(WeightStore)
            .options(name=store_name, num_cpus=0, scheduling_strategy=here)
            .remote()
        )
        # The buffer and the trainer start (a process each, the trainer loading its model) while
        # the Policy deploys: neither needs it.
        self.buffer = (
            ray.remote(ReplayBuffer)
            .options(**placed["replay_buffer"])
            .remote(str(self.dir), r.buffer_capacity, r.max_staleness)
        )
        trainer_cls, trainer_options = Trainer, placed["trainer"]
        if config.trainer.backend == "verl":  # the ranks hold the devices, not the coordinator
            from actors.verl_trainer import VerlTrainer

            trainer_cls = VerlTrainer
            trainer_options = {**trainer_options, "num_cpus": 0.1, "num_gpus": 0}
        self.trainer = (
            ray.remote(trainer_cls)
            .options(**trainer_options)
            .remote(
                config.trainer.model_dump(),
                model=config.policy.engine.model,
                seed=config.policy.engine.seed,
            )
        )
        policy_config = config.policy.model_copy(update={"weight_store": store_name})
        t0 = time.perf_counter()
        quiet_libraries()  # Serve's loggers, set up when it was imported
        self.policy = deploy_policy(
            policy_config, app_name="forge-policy", placement=config.placement.policy
        )
        print(
            f"[forge] Policy ready: {config.policy.replicas} replica(s) of "
            f"{config.policy.engine.name}:{config.policy.engine.model} "
            f"({time.perf_counter() - t0:.1f}s)",
            flush=True,
        )
        self.judge = ServedJudge.start(config)  # the run's own judge, if it serves one
        self.sync = make_weight_sync(
            config.weight_sync, store, config.policy, config.trainer.device
        )
        self.step, self.version, self.requested, self.lost = 0, 0, 0, 0
        self.saved_step = -1
        ckpt = latest_checkpoint(self.dir) if resume else None
        resumed: dict[str, Any] = {}  # the task cursor and the harness draw, from a checkpoint
        if ckpt is not None:
            ray.get(self.trainer.load_checkpoint.remote(str(ckpt)))
            self.step = int(ckpt.name.split("_")[1])  # run steps (the trainer skips some)
            state_file = ckpt / RUN_STATE_FILE
            if state_file.exists():
                saved = json.loads(state_file.read_text())
                resumed = {"cursor": int(saved["cursor"]), "draw_state": saved.get("harness_draw")}
        self.scheduler = (
            ray.remote(Scheduler)
            .options(**placed["scheduler"])
            .remote(self.judge.config.model_dump(), self.policy, self.buffer, self.tasks, **resumed)
        )
        if ckpt is not None:
            self.publish()
            print(
                f"[forge] resumed from {ckpt} (step {self.step}, version {self.version}, "
                f"{resumed.get('cursor', 0)} tasks drawn)"
            )
        ray.get(self.scheduler.start.remote())
        if r.mode == "async":
            self.request(r.groups_per_step * (r.max_staleness + 1))

    def request(self, groups: int) -> None:
        self.requested += groups
        self.scheduler.request.remote(groups)

    def collect(self, progress: Progress) -> list[Any]:
        """This step's groups, as ``[ObjectRef]`` boxes (never fetched to the driver)."""
        k = self.config.rollout.groups_per_step
        if self.config.rollout.mode == "sync":
            self.request(k)
            pending = self.scheduler.wait_settled.remote(self.requested)
            self._wait(pending, progress)
            settled = ray.get(pending)
            available = settled["groups_buffered"] - self.sampled_total()
            return ray.get(self.buffer.sample.remote(available, self.version, 60.0))
        boxes_ref = self.buffer.sample.remote(k, self.version, 3600.0)
        self._wait(boxes_ref, progress)
        boxes = ray.get(boxes_ref)
        stats = ray.get(self.buffer.stats.remote())
        lost = stats["groups_dropped"] + stats["groups_evicted_stale"] - self.lost
        self.lost += lost
        self.request(len(boxes) + lost)  # keep max_staleness steps of groups in flight
        return boxes

    def _wait(self, ref: Any, progress: Progress) -> None:
        """Wait for ``ref``, showing progress; raise :class:`CollectionStalled` with what the
        scheduler waits for when no attempt has settled for ``stall_timeout_s``."""
        limit = self.config.rollout.stall_timeout_s
        while not ray.wait([ref], timeout=0.5)[0]:
            stats = ray.get(self.scheduler.stats.remote(), timeout=60)
            progress.collecting(stats)
            if stats["idle_s"] > limit:
                report = ray.get(self.scheduler.stall_report.remote(), timeout=60)
                raise CollectionStalled(f"collection stalled at step {self.step + 1}:\n{report}")

    def sampled_total(self) -> int:
        return ray.get(self.buffer.stats.remote())["groups_sampled"]

    def train(self, boxes: list[Any]) -> dict[str, Any]:
        stats = ray.get(self.trainer.train_on.remote(boxes))
        metrics.observe("step_time", stats["step_time_s"] * 1000, run=self.config.name)
        return stats

    def publish(self) -> dict[str, float]:
        """Push the trainer's weights to every Policy replica, if the trainer took a step (it
        skips one when every group's rewards were equal)."""
        version = ray.get(self.trainer.get_version.remote())
        if version == self.version:
            return {"weight_sync_s": 0.0}
        timing = self.sync.publish(self.trainer, version)
        self.version = version
        ray.get(self.scheduler.set_version.remote(version))
        return timing

    def evaluate(self) -> dict[str, Any]:
        """The held-out tasks ``eval_k`` times through every harness of the run and each of
        ``eval_harnesses``; ``eval_pass_rate`` is over the run's own harnesses, and with
        several, ``eval_by_harness`` has each one's."""
        config = self.config
        attempts = self.eval_tasks * config.eval_k
        temperature = config.eval_temperature
        calls = {
            h: self.scheduler.evaluate.remote(attempts, temperature, h)
            for h in config.eval_harness_list
        }
        each = {h: ray.get(ref) for h, ref in calls.items()}
        episodes = [ep for eps in each.values() for ep in eps]
        out = self.dir / "eval" / f"step_{self.step}.jsonl"
        out.parent.mkdir(exist_ok=True)
        write_images(out.parent, episodes)  # eval/images/<sha256>.<ext>
        with open(out, "w") as f:
            for ep in episodes:
                f.write(json.dumps(ep.to_dict()) + "\n")
        rates = {h: eval_rates(eps, len(attempts)) for h, eps in each.items()}
        own = [rates[h] for h in config.harnesses]
        stats: dict[str, Any] = {
            "eval_pass_rate": sum(r["pass_rate"] for r in own) / len(own),
            "eval_reward_mean": sum(r["reward_mean"] for r in own) / len(own),
        }
        if len(rates) > 1:
            stats["eval_by_harness"] = rates
        return stats

    def checkpoint(self) -> str:
        """Save ``checkpoints/step_N`` and keep only the latest ``keep_checkpoints``."""
        root = self.dir / "checkpoints"
        if self.saved_step == self.step:  # the final save right after a periodic one
            return str(root / f"step_{self.step}")
        path = ray.get(self.trainer.save_checkpoint.remote(str(root / f"step_{self.step}")))
        cursor = ray.get(self.scheduler.stats.remote())["cursor"]
        draw = ray.get(self.scheduler.draw_state.remote())
        state = {"cursor": cursor, "step": self.step, "harness_draw": draw}
        (Path(path) / RUN_STATE_FILE).write_text(json.dumps(state))
        self.saved_step = self.step
        ckpts = sorted(root.glob("step_*"), key=lambda p: int(p.name.split("_")[1]))
        for old in ckpts[: -self.config.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)
        return path

    def one_step(self, progress: Progress) -> dict[str, Any]:
        """collect -> train -> publish weights -> maybe evaluate and checkpoint; the step's
        record for metrics.jsonl."""
        t0 = time.perf_counter()
        groups = self.collect(progress)
        collect_s = time.perf_counter() - t0
        stats = self.train(groups)
        stats.update(self.publish())
        self.step += 1
        config = self.config
        if config.eval_every and self.step % config.eval_every == 0:
            t_eval = time.perf_counter()
            stats.update(self.evaluate())
            stats["eval_s"] = time.perf_counter() - t_eval
        if config.checkpoint_every and self.step % config.checkpoint_every == 0:
            self.checkpoint()
        return progress.step(
            self.step,
            self.version,
            stats,
            collect_s,
            ray.get(self.scheduler.stats.remote()),
            ray.get(self.buffer.stats.remote()),
        )

    def shutdown(self) -> dict[str, Any]:
        try:
            stats = ray.get(self.scheduler.stop.remote())
            ray.get(self.buffer.close.remote())
        finally:
            if self.reconciler is not None:
                self.reconciler.stop()
            self.judge.stop()
        reap_sandboxes(self.config.sandbox, self.config.name)  # of pods that died
        return stats


def main(config: RunConfig, resume: bool = False) -> int:
    try:
        require_loggers(config.logging)
        run = Run(config, resume=resume)
    except (ConfigError, TaskError, TaskImageError, HarnessNotInstalled, IsolationUnavailable,
            LoggerMissing) as e:  # fmt: skip
        print(f"forge run: {e}", file=sys.stderr)
        return 2
    progress = Progress(config, start_step=run.step)
    steps = MetricsLog(run.dir, config.logging, config.name, config.model_dump())
    code = 0
    try:
        if config.eval_every and run.step == 0:  # where the curve starts
            steps.write(progress.evaluated(0, run.evaluate()))
        while run.step < config.steps:
            steps.write(run.one_step(progress))
    except KeyboardInterrupt:
        code = 130
        print("\n[forge] interrupted: stopping attempts, destroying sandboxes ...", flush=True)
    except CollectionStalled as e:
        code = 3
        print(f"\n[forge] {e}", file=sys.stderr, flush=True)
    except BaseException:
        code = 1
        raise  # after the clean-up below, which never hides this error
    finally:
        final = finish(run, code)
        steps.close()
        if final is not None:
            progress.summary(run.step, final)
        if (log := run_log_path()) is not None:
            print(f"[forge] logs: {log} (Ray, Serve, the workers; `forge run -v` shows them)")
    return code


def finish(run: Run, code: int) -> dict[str, Any] | None:
    """The last checkpoint, then shutdown, each whatever the other did; an error here is
    reported, and raised only when the run itself had ended well."""
    errors: list[BaseException] = []
    final = None
    if run.step > 0:
        try:
            print(f"[forge] checkpoint: {run.checkpoint()}", flush=True)
        except Exception as e:
            errors.append(e)
            print(f"[forge] final checkpoint failed: {type(e).__name__}: {e}", file=sys.stderr)
    try:
        final = run.shutdown()
    except Exception as e:
        errors.append(e)
        print(f"[forge] shutdown failed: {type(e).__name__}: {e}", file=sys.stderr)
    if errors and code == 0:
        raise errors[0]
    return final

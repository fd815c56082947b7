"""The process behind tests/forge/test_placement.py: a local multi-node Ray cluster (Ray's
``cluster_utils.Cluster``: one raylet per node on this machine), a short run on it with a
``placement`` that puts every actor kind on its own kind of node, and a CPU worker node lost
while attempts run on it. It writes what it saw as JSON; the test asserts.

Its own process so its cluster never meets the test session's (a process joins one cluster),
and its own ``RAY_TMPDIR`` so no other ``forge`` command on the machine joins it.

    python -m tests.forge.placement_cluster OUT_DIR

Nodes, all on 127.0.0.1, labelled ``openforge/node`` like cluster.yaml's node types:

    head   CPU 2                              driver, Scheduler, ReplayBuffer, Serve controller
    gpu    CPU 2, GPU 2                       Policy replica, Trainer
    cpu-a  CPU 1, harness_pod 4               HarnessPods (this one is lost mid-run)
    cpu-b  CPU 1, harness_pod 4               HarnessPods

The GPUs are declared, not real: Ray schedules against the count a node declares and sets
CUDA_VISIBLE_DEVICES in the actors it gives one; the Policy's engine (scripted) and the
Trainer (torch, ``device: cpu``) never touch CUDA, so the placement is what is tested, on any
machine.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import forge  # noqa: F401  (before ray: a loopback-only cluster without auth tokens)

LABEL = "openforge/node"
LOST = "cpu-a"
STEPS = 1  # the node is lost in it; the pool is read after it, before the run ends
GROUP_SIZE = 2
PLACEMENT = {
    "policy": {"num_gpus": 1, "label_selector": {LABEL: "gpu"}},
    "trainer": {"num_gpus": 1, "label_selector": {LABEL: "gpu"}},
    "harness_pod": {"resources": {"harness_pod": 1}, "strategy": "spread"},
    "scheduler": {"label_selector": {LABEL: "head"}},
    "replay_buffer": {"label_selector": {LABEL: "head"}},
}
# Each attempt sleeps a few seconds in its sandbox (the oracle plays the solution through the
# react harness's shell tool), so the lost node takes running attempts with it.
TASK = """id: slow_write
instruction: "Wait a moment, then write done to out.txt."
verifier: {type: file_exists, path: out.txt}
solution: ["sleep 4 && echo done > out.txt"]
limits: {max_turns: 4, timeout_s: 90}
"""


def start_cluster(cluster: Any) -> dict[str, Any]:
    """Add the four nodes to ``cluster`` (an empty ``Cluster``); ``{name: node}``."""
    common = {"node_ip_address": "127.0.0.1", "object_store_memory": 100 << 20}
    head = {
        **common,
        "num_cpus": 2,
        "labels": {LABEL: "head"},
        "include_dashboard": False,
        # A lost node is noticed within ~5 s (Ray's default: ~15 s).
        "_system_config": {"health_check_period_ms": 1000, "health_check_failure_threshold": 5},
    }
    workers = {
        "gpu": {**common, "num_cpus": 2, "num_gpus": 2, "labels": {LABEL: "gpu"}},
        **{
            name: {
                **common,
                "num_cpus": 1,
                "resources": {"harness_pod": 4},
                "labels": {LABEL: "cpu"},
            }
            for name in ("cpu-a", "cpu-b")
        },
    }
    nodes = {"head": cluster.add_node(**head)}
    for name, args in workers.items():
        nodes[name] = cluster.add_node(**args)
    return nodes


def node_of(actor: Any) -> str:
    import ray

    return ray.get(actor.__ray_call__.remote(lambda _: ray.get_runtime_context().get_node_id()))


def policy_replicas() -> list[Any]:
    import ray

    return [
        ray.get_actor(a["name"], namespace="serve")
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == "serve" and "forge-policy#Policy" in a["name"]
    ]


def pods_by_node(run: Any) -> dict[str, str]:
    """``{pod name: node id}`` of the pool's live HarnessPods."""
    import ray

    pods = ray.get(run.scheduler.pod_actors.remote())
    return {ray.get(p.ready.remote()): node_of(p) for p in pods}


def main(out: Path) -> None:
    import ray
    from ray.cluster_utils import Cluster

    from forge.config import load_config
    from forge.driver import Run
    from tests.chaos import runner
    from tests.chaos.ledger import audit_run
    from tests.chaos.procs import Observer, harness_procs, poll

    report: dict[str, Any] = {"error": None}
    t0 = time.monotonic()
    cluster = Cluster()
    try:
        try:
            nodes = start_cluster(cluster)
        except Exception as e:  # Ray waits a fixed 30 s for a raylet (a loaded machine)
            report["start_failed"] = f"{type(e).__name__}: {e}"
            raise
        ray.init(address=cluster.address, _node_ip_address="127.0.0.1", log_to_driver=False)
        ids = {name: node.node_id for name, node in nodes.items()}
        report["nodes"] = ids
        report["driver_node"] = ray.get_runtime_context().get_node_id()
        report["cluster_start_s"] = round(time.monotonic() - t0, 1)
        suite = out / "suite"
        suite.mkdir(parents=True, exist_ok=True)
        (suite / "slow_write.yaml").write_text(TASK)
        root = out / "sb"
        overrides = [
            f"runs_dir={out}",
            "name=placed",
            f"tasks={suite}",
            f"steps={STEPS}",
            f"rollout.group_size={GROUP_SIZE}",
            "rollout.groups_per_step=2",
            "rollout.min_pods=4",
            "rollout.max_pods=4",
            "rollout.max_retries=2",
            "rollout.pod_start_timeout_s=60",
            "policy.num_cpus=0.5",
            f"sandbox.root={root}",
            *(f"placement.{kind}={json.dumps(p)}" for kind, p in PLACEMENT.items()),
        ]
        config = load_config(Path(__file__).parents[2] / "examples" / "oracle.yaml", overrides)
        run = Run(config)
        report["run_ready_s"] = round(time.monotonic() - t0, 1)
        report["placed"] = {
            "scheduler": [node_of(run.scheduler)],
            "replay_buffer": [node_of(run.buffer)],
            "trainer": [node_of(run.trainer)],
            "weight_store": [node_of(run.sync.store)],
            "policy": [node_of(r) for r in policy_replicas()],
        }
        report["pods_at_start"] = pods_by_node(run)
        lost_pods = {p for p, n in report["pods_at_start"].items() if n == ids[LOST]}
        hit: dict[str, Any] = {}

        def lose_node() -> None:
            def running_there() -> list[dict[str, Any]]:
                return [lb for _, lb in harness_procs(root) if lb.get("pod") in lost_pods]

            found = poll(running_there, 240, every=0.05)
            if not found:
                raise AssertionError(f"no attempt ran on {LOST}'s pods {sorted(lost_pods)}")
            hit["running"] = sorted(
                {(lb["episode"], int(lb["attempt"]), lb["pod"]) for lb in found}
            )
            hit["at_s"] = round(time.monotonic() - t0, 1)
            cluster.remove_node(nodes[LOST], allow_graceful=False)

        injector = runner.InjectorThread(lose_node)
        after: dict[str, Any] = {}

        def before_step(step: int) -> None:
            if step == 1:
                injector.start()

        def after_step(step: int) -> None:
            if step == 1:  # the lost node's pods were replaced, on the nodes that are left
                after.update(pods_by_node(run))

        with Observer(root) as observer:
            final = runner.drive(run, STEPS, before_step, after_step=after_step)
            injector.result()
            poll(lambda: not observer.leaked(), 20, every=0.2)
        report["run_done_s"] = round(time.monotonic() - t0, 1)
        report["hit"] = hit
        report["lost_pods"] = sorted(lost_pods)
        # every attempt that got a sandbox, and the pod that ran it (seen from outside)
        report["sandboxes"] = [[e, n, lb.get("pod")] for (e, n), lb in observer.attempts.items()]
        report["pods_after_loss"] = after
        report["final"] = final
        audit = audit_run(
            "node-lost",
            config.run_dir,
            observer,
            GROUP_SIZE,
            dispatched=final["attempts_dispatched"],
            steps=STEPS,
        )
        report["audit"] = {
            "lost": audit.lost,
            "duplicated": audit.duplicated,
            "leaked": audit.leaked,
            "problems": audit.problems,
            "explain": audit.explain(),
            "records": [r.__dict__ for r in audit.records],
        }
    except BaseException:
        report["error"] = traceback.format_exc()
    finally:
        (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
        try:
            ray.shutdown()
        finally:
            cluster.shutdown()


if __name__ == "__main__":
    main(Path(sys.argv[1]))

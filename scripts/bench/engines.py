"""Tokens/s of the vllm and torch engines on the same model, and their weight-update times.

Both engines serve the same model (``tiny`` by default, same seed, float32) as Policy
deployments on one local Ray cluster; for each batch size, B concurrent requests of the same
prompt sample ``--tokens`` tokens each (temperature 1, different seeds), alternating engines,
median of ``--reps``. Then a Trainer actor holding other weights of the same model publishes them
to each engine three times by each WeightSync strategy (the object store; a collective
broadcast: gloo on CPUs, ``--collective-backend nccl`` with a GPU for each of the trainer and
both Policies), timed from publish to every
replica serving the new version, against the bytes moved. The vllm engine needs the vLLM
environment (scripts/setup_vllm.sh).

    .venv/bin/python scripts/bench/engines.py [--model tiny] [--batches 1,8,32] [--tokens 64]
"""

from __future__ import annotations

import argparse
import statistics
import time

import forge  # noqa: F401  (before ray: a loopback-only local cluster)

# isort: split
import ray

from actors.trainer import Trainer
from forge.cluster import init_ray
from forge.config import PolicyConfig
from forge.types import ChatRequest, Message, SamplingParams
from serve.policy import deploy_policy
from serve.weight_sync import CollectiveWeightSync, ObjectStoreWeightSync, WeightStore

PROMPT = "Write a short story about a lighthouse keeper and a storm."


def tokens_per_s(policy, batch: int, tokens: int, rep: int) -> float:
    chats = [
        ChatRequest(
            messages=[Message(role="user", content=PROMPT)],
            sampling=SamplingParams(temperature=1.0, max_tokens=tokens, seed=rep * 1000 + i),
        )
        for i in range(batch)
    ]
    t0 = time.perf_counter()
    outs = [r.result() for r in [policy.generate.remote(c) for c in chats]]
    return sum(len(o.completion_ids) for o in outs) / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--num-cpus", type=float, default=1.0)
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (both engines share it)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--collective-backend", default="gloo", help="gloo, or nccl")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    init_ray()
    common = {"model": args.model, "seed": 0, "dtype": args.dtype, "device": args.device}
    # NCCL needs each rank on a GPU of its own (three: trainer, torch and vllm Policies)
    gpus = (1.0 if args.collective_backend == "nccl" else 0.3) if args.device == "cuda" else 0.0
    stores = {
        name: ray.remote(WeightStore).options(name=f"bench-ws-{name}", num_cpus=0).remote()
        for name in ("torch", "vllm")
    }
    policies = {
        "torch": deploy_policy(
            PolicyConfig(
                engine={"name": "torch", **common},
                max_batch_size=max(batches),
                num_cpus=args.num_cpus,
                num_gpus=gpus,
                weight_store="bench-ws-torch",
            ),
            "bench-torch",
        ),
        "vllm": deploy_policy(
            PolicyConfig(
                engine={"name": "vllm", **common, "max_model_len": 2048, "kv_cache_gib": 1.0},
                num_cpus=args.num_cpus,
                num_gpus=gpus,
                weight_store="bench-ws-vllm",
            ),
            "bench-vllm",
        ),
    }
    for p in policies.values():  # warm up (vLLM's first call compiles kernels)
        tokens_per_s(p, 2, 8, rep=99)
    print(f"model {args.model}, {args.tokens} tokens per request, median of {args.reps}")
    print(f"{'batch':>5s} {'torch tok/s':>12s} {'vllm tok/s':>12s} {'vllm/torch':>10s}")
    for b in batches:
        runs: dict[str, list[float]] = {name: [] for name in policies}
        for rep in range(args.reps):
            for name, p in policies.items():
                runs[name].append(tokens_per_s(p, b, args.tokens, rep))
        t, v = statistics.median(runs["torch"]), statistics.median(runs["vllm"])
        print(f"{b:5d} {t:12.1f} {v:12.1f} {v / t:10.2f}", flush=True)
    trainer = (
        ray.remote(Trainer)
        .options(num_cpus=0, num_gpus=gpus)
        .remote({"device": args.device}, model=args.model, seed=1)
    )
    weights = ray.get(trainer.get_weights.remote())
    mib = sum(x.numel() * x.element_size() for x in weights.values()) / 2**20
    del weights
    print(f"weight update, publish to serving: {mib:.1f} MiB of trainer weights, median of 3")
    print(f"{'engine':>6s} {'object store ms':>16s} {'collective ms':>14s} {'ratio':>6s}")
    for name, store in stores.items():
        syncs = {
            "object_store": ObjectStoreWeightSync(store, replicas=1),
            "collective": CollectiveWeightSync(store, 1, args.collective_backend),
        }
        took: dict[str, list[float]] = {k: [] for k in syncs}
        version = 0
        for _ in range(3):
            for strategy, sync in syncs.items():
                version += 1
                took[strategy].append(sync.publish(trainer, version)["weight_sync_s"])
        o, c = statistics.median(took["object_store"]), statistics.median(took["collective"])
        print(f"{name:>6s} {o * 1000:16.1f} {c * 1000:14.1f} {o / c:6.2f}", flush=True)


if __name__ == "__main__":
    main()

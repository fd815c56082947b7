"""Trainer.train_step tokens/s versus a plain torch training loop on the same batch.

Both start from the same weights (``load_model(model, seed)``) and train on the same batch: G
groups of n episodes, each one segment of ~P prompt tokens and ~S sampled tokens, rewards 0/1,
old logprobs from the initial model (so ratios start near 1). The plain loop is what a
hand-written GRPO step costs: one right-padded batch, full forward, float32 log_softmax and
gather, the same clipped per-episode loss, backward, grad clipping, AdamW. Steps alternate in
ABBA order (trainer, plain, plain, trainer, ...) so drift hits both alike; medians and bests
over the repetitions. CPU timings on a shared machine drift by 10-20% between identical steps:
use several repetitions.

    .venv/bin/python scripts/bench/trainer_throughput.py [--reps 5] [--groups 4] [--n 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from actors.trainer import Trainer
from forge.config import TrainerConfig
from forge.grpo import group_advantages
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
    ap.add_argument("--json", action="store_true", help="print one JSON line at the end")
    args = ap.parse_args()

    cfg = TrainerConfig(micro_batch_tokens=args.micro_batch_tokens, device=args.device)
    trainer = Trainer(cfg, model=args.model, seed=0)
    groups = make_groups(args, trainer.model, len(trainer.tokenizer))
    plain = PlainLoop(cfg, args.model, 0, groups)
    tokens = plain.tokens
    sampled = sum(sum(e.segments[0].loss_mask) for g in groups for e in g)
    print(
        f"batch: {len(groups)} groups x {args.n} episodes, {tokens} tokens ({sampled} sampled),"
        f" model {args.model}, torch threads {torch.get_num_threads()}"
    )

    trainer.train_step(groups)  # warm-up both
    plain.step()
    t_tr, t_pl = [], []
    for rep in range(args.reps):
        if rep % 2:  # ABBA order: neither side always runs right after the other
            t_pl.append(plain.step())
        m = trainer.train_step(groups)
        t_tr.append(m["step_time_s"])
        if not rep % 2:
            t_pl.append(plain.step())
        print(
            f"rep {rep}: trainer {tokens / t_tr[-1]:8.0f} tok/s ({t_tr[-1]:.3f} s, "
            f"{int(m['micro_batches'])} micro-batches)  plain {tokens / t_pl[-1]:8.0f} tok/s "
            f"({t_pl[-1]:.3f} s)"
        )
    tr = tokens / statistics.median(t_tr)
    pl = tokens / statistics.median(t_pl)
    best_tr, best_pl = tokens / min(t_tr), tokens / min(t_pl)
    print(f"median: trainer {tr:.0f} tok/s, plain loop {pl:.0f} tok/s, ratio {tr / pl:.2f}")
    print(
        f"best:   trainer {best_tr:.0f} tok/s, plain loop {best_pl:.0f} tok/s, "
        f"ratio {best_tr / best_pl:.2f}"
    )
    if args.json:
        out = {
            "trainer_tok_s": tr,
            "plain_tok_s": pl,
            "ratio": tr / pl,
            "best_ratio": best_tr / best_pl,
        }
        print(json.dumps(out))


if __name__ == "__main__":
    main()

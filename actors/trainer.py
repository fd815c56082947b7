"""Trainer: GRPO on recorded episodes with a torch model (CPU or one GPU).

A plain class; the driver wraps it with ``ray.remote``. One :meth:`Trainer.train_step` takes
groups (the n ok attempts of one task each), turns rewards into group-relative advantages,
applies each episode's advantage to every sampled token of all its segments, and minimises the
clipped surrogate averaged per episode (:mod:`forge.train.grpo`), accumulating gradients over
micro-batches (:mod:`forge.train.batching`) before one optimizer step.

The old logprobs are the engine's sampling logprobs recorded in the segments (token in, token
out), or with ``rollout_correction: tis`` the trainer's own, computed before the update, with
each token's loss weighted by the truncated ratio ``min(pi_trainer / pi_engine, tis_cap)``
(:func:`forge.train.grpo.truncated_is_weights`). Log-probabilities are those of the tempered
distribution each segment was sampled from (:mod:`forge.train.logprobs`). The model stays in
eval mode (no dropout) so that, before the first update, recomputed logprobs equal the recorded
ones up to kernel rounding (``logprob_abs_diff_*`` and ``logprob_kl`` report the gap).

A vision-language model (``tiny-vl``, a Qwen2-VL checkpoint) trains on the same rows with the
episodes' screenshots: each micro-batch's images go through the model's image processor again
(from the exact bytes the Policy saw), each row's image tokens are checked against the images'
grids (a mismatch is refused, never trained on), and the logprobs are computed with the pixels
at their tokens (:func:`forge.train.logprobs.token_logprobs`). Checkpoints then carry the image
processor, so they load back as a Policy engine's model.

A step whose loss or gradient norm is not finite is skipped: no optimizer step, the weights and
optimizer state stay as they were, the version does not change (so nothing is published), and
``nonfinite_skipped`` counts it, with a warning in the log. The step is atomic: with several
updates in it (``ppo_mini_batches`` or ``ppo_epochs`` above 1) a non-finite one undoes those made
before it, from a CPU copy of the weights and optimizer state taken when the step began.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from actors.replay_buffer import unbox
from actors.trainer_state import restore, snapshot, write_checkpoint
from forge.config import TrainerConfig
from forge.rng import rng_state, set_rng_state
from forge.train.batching import MicroBatch, build_rows, micro_batches
from forge.train.groups import SUMMED, grpo_batch, step_metrics
from forge.train.grpo import kl_penalty, policy_loss, truncated_is_weights
from forge.train.logprobs import GapStats, micro_batch_vision, token_logprobs
from forge.types import Episode
from serve.collective import Broadcaster, metas_of
from serve.models import flushes_denormals, load_model, load_model_and_processor
from serve.vision import (
    VisionInputs,
    vision_token_ids,
)

log = logging.getLogger(__name__)


class Trainer:
    def __init__(
        self,
        config: TrainerConfig | dict[str, Any] | None = None,
        model: str = "tiny",
        seed: int = 0,
    ) -> None:
        self.config = (
            config
            if isinstance(config, TrainerConfig)
            else TrainerConfig.model_validate(config or {})
        )
        cfg = self.config
        self.model_name, self.seed = model, seed
        self.device = torch.device(cfg.device)
        self.model, self.tokenizer, self.image_processor = load_model_and_processor(model, seed)
        self.model.to(self.device)
        # a vision-language model: rows carry their images, the vision tokens are never sampled
        self.banned = vision_token_ids(self.tokenizer) if self.image_processor else []
        self.ref_model = None
        if cfg.kl_coef > 0:
            self.ref_model, _ = load_model(model, seed=seed)
            self.ref_model.to(self.device).requires_grad_(False)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=cfg.lr,
            betas=tuple(cfg.betas),
            weight_decay=cfg.weight_decay,
        )
        self.version = 0
        self._broadcaster = Broadcaster()  # a collective WeightSync's rank 0
        self.step = 0
        self.nonfinite_skipped = 0  # steps skipped for a non-finite loss or gradient norm

    # ---- training -------------------------------------------------------------------------

    @flushes_denormals
    def train_step(self, groups: list[list[Episode]]) -> dict[str, float]:
        """One update from ``groups`` (each: the ok attempts of one task); returns metrics.

        Groups whose advantages are all 0 are skipped (``skipped_groups``); with nothing left to
        train on, no step is taken and ``version`` stays (``updated`` = 0). Metrics: ``loss``,
        ``pg_loss``, ``kl`` (with a ref model), ``reward_mean/std``, ``advantage_*``,
        ``pass_rate``, ``staleness_max``, ``episodes``, ``groups``, ``tokens_sampled``,
        ``tokens_total``, ``micro_batches``, ``clip_frac``, ``clip_frac_dual``, ``approx_kl``,
        ``ppo_kl``, ``ratio_mean/max``, ``entropy`` (of the tempered distributions),
        ``grad_norm`` (before clipping), ``step_time_s``, ``tokens_per_s``, ``version``,
        ``step``, ``updated``; the
        engine-vs-trainer gap before the update (:class:`forge.train.logprobs.GapStats`):
        ``logprob_abs_diff_max/mean``, ``logprob_kl`` (k3), ``logprob_kl_k1``; with
        ``rollout_correction: tis``, ``tis_weight_mean`` and ``tis_capped_frac``;
        ``nonfinite_skipped`` (1 when this step was skipped for a non-finite loss or gradient
        norm) and ``nonfinite_skipped_total``.
        """
        t0 = time.perf_counter()
        cfg = self.config
        episodes, advantages, stats = grpo_batch(groups, self.version, cfg)
        # each mini-batch one update; episodes dealt out in turn, so every group is spread over all
        k = min(cfg.ppo_mini_batches, len(episodes))
        minis = [
            micro_batches(
                build_rows(episodes[j::k], advantages[j::k], self.image_processor is not None),
                cfg.micro_batch_tokens,
                self.tokenizer.pad_token_id,
            )
            for j in range(k)
        ]
        batches = [mb for mini in minis for mb in mini]
        visions = {id(mb): self._vision(mb) for mb in batches}  # pixels once, for every epoch
        totals: dict[str, Tensor] = {}
        grad_norms: list[Tensor] = []
        gap = GapStats(self.device)
        ratio_max = torch.zeros((), device=self.device)
        trainer_old: dict[int, Tensor] = {}  # per micro-batch, before the update (tis only)
        steps = skipped = 0
        updates = [(e, mini) for e in range(cfg.ppo_epochs if batches else 0) for mini in minis]
        # several updates: a later non-finite one must undo the earlier ones (an atomic step)
        saved = snapshot(self.model, self.optimizer) if len(updates) > 1 else None
        for epoch, mini in updates:
            self._ramp_lr()
            self.optimizer.zero_grad(set_to_none=True)
            epoch_loss = torch.zeros((), device=self.device)
            for mb_cpu in mini:
                mb = mb_cpu.to(self.device)
                loss, m, new = self._micro_step(
                    mb, trainer_old.get(id(mb_cpu)), visions[id(mb_cpu)]
                )
                loss.backward()
                epoch_loss = epoch_loss + loss.detach()
                ratio_max = torch.maximum(ratio_max, m.pop("ratio_max"))
                for k, v in m.items():
                    w = 1.0 if k in SUMMED or k == "tokens" else m["tokens"]
                    totals[k] = totals.get(k, 0.0) + v * w
                if epoch == 0 and steps == 0:  # weights not moved yet: the engine's gap
                    gap.add(new, mb.old_logprobs, mb.mask)
                if epoch == 0 and cfg.rollout_correction == "tis":
                    trainer_old[id(mb_cpu)] = new.detach()
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
            grad_norms.append(norm)
            if not bool(torch.isfinite(epoch_loss) & torch.isfinite(norm)):
                skipped = 1
                self.nonfinite_skipped += 1
                if saved is not None and steps:
                    restore(self.model, self.optimizer, saved)
                log.warning(
                    "trainer step %d (epoch %d, update %d of %d): non-finite loss %s or gradient "
                    "norm %s; step skipped, %d earlier update(s) of it undone, weights and "
                    "optimizer state as before the step (%d skipped so far)",
                    self.step + 1,
                    epoch,
                    steps + 1,
                    len(updates),
                    float(epoch_loss),
                    float(norm),
                    steps,
                    self.nonfinite_skipped,
                )
                steps = 0
                break
            self.optimizer.step()
            steps += 1
        self.optimizer.zero_grad(set_to_none=True)
        if steps:
            self.step += 1
            self.version += 1
        totals["ratio_max"] = ratio_max
        out = step_metrics(totals, grad_norms, gap, batches, stats, self.version, self.step)
        out["updated"] = 1.0 if steps else 0.0
        out["lr"] = float(self.optimizer.param_groups[0]["lr"])
        out["nonfinite_skipped"] = float(skipped)
        out["nonfinite_skipped_total"] = float(self.nonfinite_skipped)
        out["step_time_s"] = time.perf_counter() - t0
        out["tokens_per_s"] = out["tokens_total"] / max(out["step_time_s"], 1e-9)
        return out

    def _ramp_lr(self) -> None:
        """Set the learning rate of the next update: ``lr``, or during ``warmup_updates`` its
        share ``(n + 1) / warmup_updates`` (``n``: updates so far, from AdamW's own count, so a
        resumed run carries on where it stopped)."""
        cfg = self.config
        done = max((int(s["step"]) for s in self.optimizer.state.values()), default=0)
        lr = cfg.lr * min(1.0, (done + 1) / cfg.warmup_updates) if cfg.warmup_updates else cfg.lr
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def train_on(self, boxes: list[list[Any]]) -> dict[str, float]:
        """:meth:`train_step` on groups in the object store, as the ReplayBuffer hands them out
        (boxes: :func:`actors.replay_buffer.unbox`)."""
        return self.train_step(unbox(boxes))

    @flushes_denormals
    def sft_step(self, episodes: list[Episode]) -> dict[str, float]:
        """One supervised update: the mean per-episode negative log-likelihood of the sampled
        (teacher) tokens of ``episodes``, with the same rows, micro-batches, clipping and
        non-finite guard as :meth:`train_step`. Metrics: ``loss``, ``grad_norm``, ``tokens``,
        ``episodes``, ``updated``, ``step_time_s``."""
        t0 = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        loss, tokens = self._nll(episodes, grad=True)
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)
        updated = bool(torch.isfinite(loss) & torch.isfinite(norm)) and tokens > 0
        if updated:
            self.optimizer.step()
            self.step += 1
            self.version += 1
        else:
            self.nonfinite_skipped += int(tokens > 0)
        self.optimizer.zero_grad(set_to_none=True)
        return {
            "loss": float(loss),
            "grad_norm": float(norm),
            "tokens": float(tokens),
            "episodes": float(len(episodes)),
            "updated": float(updated),
            "step_time_s": time.perf_counter() - t0,
        }

    @flushes_denormals
    @torch.no_grad()
    def sft_loss(self, episodes: list[Episode]) -> float:
        """The mean per-episode negative log-likelihood of ``episodes``' sampled tokens (a
        held-out loss), no update."""
        return float(self._nll(episodes, grad=False)[0])

    def _nll(self, episodes: list[Episode], grad: bool) -> tuple[Tensor, int]:
        rows = build_rows(episodes, [0.0] * len(episodes), self.image_processor is not None)
        total, tokens = torch.zeros((), device=self.device), 0
        for mb_cpu in micro_batches(
            rows, self.config.micro_batch_tokens, self.tokenizer.pad_token_id
        ):
            vision = self._vision(mb_cpu)
            mb = mb_cpu.to(self.device)
            new, _ = token_logprobs(self.model, mb, False, vision, self.banned)
            loss = -(new * mb.weights).sum()  # weights: 1 / (E * T_e) on each episode's tokens
            if grad:
                loss.backward()
            total, tokens = total + loss.detach(), tokens + mb.sampled
        return total, tokens

    def _vision(self, mb: MicroBatch) -> VisionInputs | None:
        """The micro-batch's pixels (:func:`forge.train.logprobs.micro_batch_vision`)."""
        return micro_batch_vision(self.image_processor, self.tokenizer, mb)

    def _micro_step(
        self, mb: MicroBatch, trainer_old: Tensor | None, vision: VisionInputs | None = None
    ) -> tuple[Tensor, dict[str, Tensor], Tensor]:
        """Loss and metrics of one micro-batch, and its logprobs under the current weights.

        With ``rollout_correction: tis`` the surrogate's old policy is the trainer's own
        logprobs before the update: ``trainer_old`` from the first epoch, or in the first epoch
        the detached logprobs of this very forward (the weights have not moved yet); each
        token's loss is weighted by ``min(exp(trainer_old - engine), tis_cap)``.
        """
        cfg = self.config
        new, entropy = token_logprobs(self.model, mb, True, vision, self.banned)
        kl = None
        if self.ref_model is not None:
            with torch.no_grad():
                ref, _ = token_logprobs(self.ref_model, mb, False, vision, self.banned)
            kl = kl_penalty(new, ref, cfg.kl_kind)
        old, is_weights, tis = mb.old_logprobs, None, {}
        if cfg.rollout_correction == "tis":
            old = new.detach() if trainer_old is None else trainer_old
            is_weights, tis = truncated_is_weights(old, mb.old_logprobs, mb.mask, cfg.tis_cap)
            tis.pop("tokens")
        loss, m = policy_loss(
            new,
            old,
            mb.advantages,
            mb.mask,
            mb.episode_index,
            cfg.clip_eps_low,
            cfg.clip_eps_high,
            kl=kl,
            kl_coef=cfg.kl_coef,
            clip_ratio_c=cfg.clip_ratio_c,
            weights=mb.weights,
            is_weights=is_weights,
        )
        m.update(tis)
        m["loss"] = loss.detach()
        if entropy is not None:
            m["entropy"] = entropy
        return loss, m, new

    @torch.no_grad()
    def episode_logprobs(self, episodes: list[Episode]) -> list[float]:
        """Sum of the current policy's logprobs of each episode's sampled tokens."""
        rows = build_rows(episodes, [0.0] * len(episodes), self.image_processor is not None)
        sums = [0.0] * len(episodes)
        pad = self.tokenizer.pad_token_id
        for mb in micro_batches(rows, self.config.micro_batch_tokens, pad):
            vision = self._vision(mb)
            mb = mb.to(self.device)
            lp, _ = token_logprobs(self.model, mb, False, vision, self.banned)
            for r, ep in enumerate(mb.episode_index.tolist()):
                sums[ep] += float(lp[r].sum())
        return sums

    # ---- weights and checkpoints ----------------------------------------------------------

    def get_weights(self) -> dict[str, Tensor]:
        """Detached CPU copies of the weights (never views of the live parameters)."""
        return {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}

    def collective_endpoint(self) -> dict[str, Any]:
        """Where a new broadcast group meets (this node, a free port), its id, what it carries."""
        import ray

        address = ray.util.get_node_ip_address()
        metas = metas_of(self.model.state_dict())
        return {
            **self._broadcaster.open(address),
            "tensors": [(m.name, m.shape, m.dtype) for m in metas],
        }

    def broadcast_weights(self, message: dict[str, Any]) -> int:
        """Send the weights as rank 0 of the group ``message`` names; returns the bytes sent."""
        return self._broadcaster.send(message, self.model.state_dict())

    def get_version(self) -> int:
        return self.version

    def save_checkpoint(self, path: str | os.PathLike[str]) -> str:
        """Write a Hugging Face checkpoint plus optimizer, trainer and RNG state, atomically."""

        def fill(tmp: Path) -> None:
            self.model.save_pretrained(tmp)
            self.tokenizer.save_pretrained(tmp)
            if self.image_processor is not None:  # a VLM checkpoint loads with its processor
                self.image_processor.save_pretrained(tmp)
            torch.save(self.optimizer.state_dict(), tmp / "optimizer.pt")
            torch.save(rng_state(), tmp / "rng_state.pt")

        state = {
            "step": self.step,
            "version": self.version,
            "model": self.model_name,
            "seed": self.seed,
            "nonfinite_skipped": self.nonfinite_skipped,
            "config": self.config.model_dump(mode="json"),
        }
        return write_checkpoint(path, fill, state)

    def load_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """Restore model weights, optimizer state, step, version and the RNG states (torch CPU
        and CUDA, Python's ``random``, NumPy's) from ``path``."""
        path = Path(path)
        loaded, _ = load_model(str(path))
        self.model.load_state_dict(loaded.state_dict())
        opt = torch.load(path / "optimizer.pt", map_location="cpu", weights_only=True)
        self.optimizer.load_state_dict(opt)
        state = json.loads((path / "trainer_state.json").read_text())
        self.step, self.version = int(state["step"]), int(state["version"])
        self.nonfinite_skipped = int(state.get("nonfinite_skipped", 0))
        if (path / "rng_state.pt").exists():  # checkpoints written before it lack one
            set_rng_state(torch.load(path / "rng_state.pt", weights_only=True))

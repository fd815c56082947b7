"""VerlTrainer: the ``trainer.backend: verl`` Trainer, veRL's FSDP actor over several ranks.

A plain class with the torch Trainer's interface (``train_on``/``train_step``, ``get_weights``,
``collective_endpoint``/``broadcast_weights``, ``get_version``, checkpoints); the driver wraps
it with ``ray.remote`` like the torch one. It starts ``trainer.verl.ranks``
:class:`actors.verl_rank.VerlRank` actors (one GPU each when ``trainer.device`` is a GPU, else
gloo on CPUs), turns each batch of groups into the same rows as the torch backend
(:func:`forge.train.groups.grpo_batch`, :func:`forge.train.batching.build_rows`), in veRL's layout
(:mod:`forge.train.verl.batch`), and has every rank train on its shard in one call.

The model must be a Hugging Face folder for veRL: a built-in name (``tiny``) is written once to
the cache (``<cache>/verl-models/<name>-<seed>``, the same weights the Policy starts from).
Checkpoints hold the Hugging Face weights (what ``forge serve`` and the Policy load), the
sharded model and optimizer under ``verl/`` (``torch.distributed.checkpoint``: resumable with
another number of ranks) and ``trainer_state.json``. Not in this backend: a reference model
(``kl_coef`` > 0), vision-language models, ``forge sft``.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

import ray
import torch

from actors.replay_buffer import unbox
from actors.trainer_state import write_checkpoint
from actors.verl_rank import VerlRank, model_dir
from forge.config import TrainerConfig
from forge.train.batching import build_rows
from forge.train.groups import grpo_batch
from forge.train.logprobs import GapStats
from forge.train.verl.batch import shard
from forge.types import Episode
from serve.models import load_model, load_tokenizer

_METRICS = {"actor/pg_clipfrac": "clip_frac", "actor/ppo_kl": "ppo_kl"}


class VerlTrainer:
    def __init__(
        self,
        config: TrainerConfig | dict[str, Any] | None = None,
        model: str = "tiny",
        seed: int = 0,
    ) -> None:
        cfg = (
            config
            if isinstance(config, TrainerConfig)
            else TrainerConfig.model_validate(config or {})
        )
        if cfg.kl_coef > 0:
            raise ValueError("trainer.kl_coef: the verl backend has no reference model; use 0")
        self.config, self.model_name, self.seed = cfg, model, seed
        self.path = model_dir(model, seed)
        self.tokenizer = load_tokenizer(str(self.path))
        v = cfg.verl
        gpu = cfg.device.startswith("cuda")
        options = {"num_cpus": v.cpus_per_rank, "num_gpus": 1 if gpu else 0}
        self.ranks = [
            ray.remote(VerlRank)
            .options(**options)
            .remote(r, v.ranks, str(self.path), cfg.model_dump())
            for r in range(v.ranks)
        ]
        address, port = ray.get(self.ranks[0].endpoint.remote())
        ray.get([r.setup.remote(address, port) for r in self.ranks])
        self.version = 0
        self.step = 0
        self.nonfinite_skipped = 0

    # ---- training -------------------------------------------------------------------------

    def train_on(self, boxes: list[list[Any]]) -> dict[str, float]:
        return self.train_step(unbox(boxes))

    def train_step(self, groups: list[list[Episode]]) -> dict[str, float]:
        """One update on all ranks; the torch Trainer's metrics where veRL gives them."""
        t0 = time.perf_counter()
        cfg, v = self.config, self.config.verl
        episodes, advantages, stats = grpo_batch(groups, self.version, cfg)
        rows = build_rows(episodes, advantages)
        out: dict[str, float] = dict(stats)
        updated = skipped = 0
        if rows:
            pad = self.tokenizer.pad_token_id
            weighted = v.loss_agg_mode == "episode-mean"
            batches, _ = shard(rows, v.ranks, v.micro_batch_size, pad, weighted)
            results = ray.get(
                [r.train.remote(b, len(rows)) for r, b in zip(self.ranks, batches, strict=True)]
            )
            gap = GapStats(torch.device("cpu"))
            for res in results:
                if res["before"] is not None:
                    gap.add(res["before"], res["engine"], res["mask"].bool())
            losses = [sum(r["loss"][e] for r in results) / v.ranks for e in range(cfg.ppo_epochs)]
            norms = results[0]["grad_norm"]
            finite = [
                math.isfinite(x) and math.isfinite(n) for x, n in zip(losses, norms, strict=True)
            ]
            skipped = int(not all(finite))
            updated = int(finite[0])
            out["loss"] = out["pg_loss"] = losses[0]
            out["grad_norm"] = sum(norms) / len(norms)
            for key, name in _METRICS.items():
                vals = [r["metrics"][key] for r in results if key in r["metrics"]]
                out[name] = sum(vals) / len(vals) if vals else 0.0
            if gap.tokens:  # measured (trainer.verl.logprob_gap)
                out.update(gap.metrics())
            out["tokens_sampled"] = float(sum(r.sampled for r in rows))
            out["tokens_total"] = float(sum(r.length for r in rows))
            out["micro_batches"] = float(len(batches[0]["input_ids"]) // v.micro_batch_size)
        if skipped:
            self.nonfinite_skipped += 1
        if updated:
            self.step += 1
            self.version += 1
        for k in ("loss", "pg_loss", "clip_frac", "approx_kl", "ratio_mean", "entropy"):
            out.setdefault(k, 0.0)
        out["updated"] = float(updated)
        out["nonfinite_skipped"] = float(skipped)
        out["nonfinite_skipped_total"] = float(self.nonfinite_skipped)
        out["version"], out["step"] = float(self.version), float(self.step)
        out["step_time_s"] = time.perf_counter() - t0
        out["tokens_per_s"] = out.get("tokens_total", 0.0) / max(out["step_time_s"], 1e-9)
        return out

    # ---- weights and checkpoints ----------------------------------------------------------

    def get_weights(self) -> dict[str, torch.Tensor]:
        """The full weights, gathered one tensor at a time onto rank 0, as CPU tensors."""
        return ray.get([r.gather.remote() for r in self.ranks])[0]

    def collective_endpoint(self) -> dict[str, Any]:
        """Where a new broadcast group meets: rank 0's node, which sends the weights."""
        address, _ = ray.get(self.ranks[0].endpoint.remote())
        endpoint = ray.get(self.ranks[0].open_broadcast.remote(address))
        return {**endpoint, "tensors": ray.get(self.ranks[0].metas.remote())}

    def broadcast_weights(self, message: dict[str, Any]) -> int:
        """Rank 0 streams the weights, each gathered from the shards as it goes; returns the
        bytes sent."""
        return ray.get([r.broadcast.remote(message) for r in self.ranks])[0]

    def get_version(self) -> int:
        return self.version

    def save_checkpoint(self, path: str | os.PathLike[str]) -> str:
        """Hugging Face weights, the sharded state under ``verl/`` and the trainer's state,
        written to a temporary folder and moved into place."""

        def fill(tmp: Path) -> None:
            ray.get([r.save.remote(str(tmp / "verl")) for r in self.ranks])
            model, _ = load_model(str(self.path))
            model.load_state_dict(self.get_weights())
            model.save_pretrained(tmp)
            self.tokenizer.save_pretrained(tmp)

        state = {
            "step": self.step,
            "version": self.version,
            "model": self.model_name,
            "seed": self.seed,
            "backend": "verl",
            "ranks": self.config.verl.ranks,
            "nonfinite_skipped": self.nonfinite_skipped,
            "config": self.config.model_dump(mode="json"),
        }
        return write_checkpoint(path, fill, state)

    def load_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """Restore the shards and optimizer (a torch-backend checkpoint: its weights, with a
        fresh optimizer), the step and the version."""
        path = Path(path)
        if (path / "verl").is_dir():
            ray.get([r.load.remote(str(path / "verl")) for r in self.ranks])
        else:
            ray.get([r.load_full.remote(str(path)) for r in self.ranks])
        state = json.loads((path / "trainer_state.json").read_text())
        self.step, self.version = int(state["step"]), int(state["version"])
        self.nonfinite_skipped = int(state.get("nonfinite_skipped", 0))

    def close(self) -> None:
        ray.get([r.close.remote() for r in self.ranks])
        for r in self.ranks:
            ray.kill(r)

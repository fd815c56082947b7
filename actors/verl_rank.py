"""VerlRank: one rank of the veRL backend, veRL's FSDP engine (``FSDPEngineWithLMHead``) with its
PPO loss, in a process group of :class:`actors.verl_trainer.VerlTrainer`'s ranks.

A plain class; VerlTrainer wraps it with ``ray.remote``, one actor per rank, and calls every
method on all ranks at once (FSDP's collectives need each rank in the same call). Each rank
trains on its own shard of the batch (:mod:`forge.train.verl.batch`); gradients are reduced by FSDP.
Weights leave the shards one tensor at a time (each gathered in turn): rank 0 keeps a copy
(:meth:`gather`) or streams it into the collective broadcast (:meth:`broadcast`), so no rank
holds the full model at once for a broadcast. Checkpoints: the sharded model and optimizer
through ``torch.distributed.checkpoint`` (any number of ranks can load them back), and rank 0
writes the Hugging Face weights the Policy loads.
"""

from __future__ import annotations

import os
import shutil
import socket
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from forge.config import TrainerConfig


class VerlRank:
    def __init__(self, rank: int, world: int, model_path: str, config: dict[str, Any]) -> None:
        self.rank, self.world, self.model_path = rank, world, model_path
        self.config = TrainerConfig.model_validate(config)
        self.engine: Any = None
        from serve.collective import Broadcaster

        self._broadcaster = Broadcaster()  # rank 0's side of the collective weight sync

    def endpoint(self) -> tuple[str, int]:
        """This node's address and a free port on it (rank 0's: where the group meets)."""
        import ray

        address = ray.util.get_node_ip_address()
        with socket.socket() as s:
            s.bind((address, 0))
            return address, int(s.getsockname()[1])

    def setup(self, address: str, port: int, timeout_s: float = 300.0) -> str:
        """Join the process group at ``address:port`` and build the sharded model and its
        optimizer; returns the device."""
        gpu = torch.cuda.is_available()
        os.environ.update(
            RANK=str(self.rank),
            WORLD_SIZE=str(self.world),
            LOCAL_RANK="0",  # one device per rank actor: Ray shows it as device 0
            MASTER_ADDR=address,
            MASTER_PORT=str(port),
            USE_HUB_KERNELS="NO",  # transformers' kernel hub cannot place a model built on "meta"
        )
        model_dir(self.model_path, 0)  # a built-in name's folder, on this node too
        if not gpu:
            from forge.train.verl.platform import use_cpu

            use_cpu()
            torch.set_num_threads(max(1, int(self.config.verl.cpus_per_rank)))
        backend = "nccl" if gpu else "gloo"
        dist.init_process_group(
            backend, rank=self.rank, world_size=self.world, timeout=timedelta(seconds=timeout_s)
        )
        from verl.trainer.config import CheckpointConfig
        from verl.workers.config import (
            FSDPActorConfig,
            FSDPEngineConfig,
            FSDPOptimizerConfig,
            HFModelConfig,
        )
        from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead
        from verl.workers.utils.losses import ppo_loss

        t, v = self.config, self.config.verl
        dtype = "bf16" if v.param_dtype == "bfloat16" else "fp32"
        model = HFModelConfig(
            path=self.model_path,
            load_tokenizer=False,
            use_remove_padding=v.sequence_packing,
            enable_gradient_checkpointing=v.gradient_checkpointing,
            override_config={"attn_implementation": "sdpa"},
        )
        engine = FSDPEngineConfig(
            strategy=v.strategy,
            use_torch_compile=False,
            mixed_precision={"param_dtype": dtype, "reduce_dtype": "fp32", "buffer_dtype": "fp32"},
            param_offload=v.param_offload,
            optimizer_offload=v.optimizer_offload,
            fsdp_size=v.fsdp_size,
            reshard_after_forward=v.reshard_after_forward,
            use_dynamic_bsz=v.use_dynamic_bsz,
            micro_batch_size_per_gpu=v.micro_batch_size,
            max_token_len_per_gpu=v.max_token_len,
        )
        optim = FSDPOptimizerConfig(
            lr=t.lr,
            betas=tuple(t.betas),
            weight_decay=t.weight_decay,
            clip_grad=t.max_grad_norm,
            total_training_steps=1 << 30,  # a constant rate: no schedule to run out of
        )
        actor = FSDPActorConfig(
            strategy=v.strategy,
            rollout_n=1,
            ppo_micro_batch_size_per_gpu=v.micro_batch_size,
            use_dynamic_bsz=v.use_dynamic_bsz,
            ppo_max_token_len_per_gpu=v.max_token_len,
            clip_ratio_low=t.clip_eps_low,
            clip_ratio_high=t.clip_eps_high,
            clip_ratio_c=t.clip_ratio_c if t.clip_ratio_c is not None else 1e9,
            loss_agg_mode="token-sum" if v.loss_agg_mode == "episode-mean" else v.loss_agg_mode,
            entropy_coeff=0.0,
            use_kl_loss=False,
            policy_loss={"loss_mode": v.loss_mode},
            fsdp_config=engine,
            optim=optim,
            use_remove_padding=v.sequence_packing,
            use_torch_compile=False,
        )
        self.engine = FSDPEngineWithLMHead(
            model_config=model,
            engine_config=engine,
            optimizer_config=optim,
            checkpoint_config=CheckpointConfig(),
        )
        self.engine.initialize()
        self.loss_fn = partial(ppo_loss, config=actor)
        return "cuda" if gpu else "cpu"

    # ---- training --------------------------------------------------------------------------

    def _tensordict(self, batch: dict[str, Tensor], global_rows: int) -> Any:
        from verl.utils import tensordict_utils as tu
        from verl.workers.utils.padding import left_right_2_no_padding

        v = self.config.verl
        tensors = dict(batch)
        temps = tensors.pop("temperature")
        uniform = bool((temps == temps[0]).all())
        if not uniform:
            tensors["temperature"] = temps
        meta = {
            "use_remove_padding": v.sequence_packing,
            "use_dynamic_bsz": v.use_dynamic_bsz,
            "micro_batch_size_per_gpu": v.micro_batch_size,
            "max_token_len_per_gpu": v.max_token_len,
            "global_batch_size": global_rows,
            "calculate_entropy": False,
        }
        if uniform:
            meta["temperature"] = float(temps[0])
        return left_right_2_no_padding(tu.get_tensordict(tensors, non_tensor_dict=meta))

    def logprobs(self, batch: dict[str, Tensor], global_rows: int) -> Tensor:
        """Log-probabilities of this rank's response tokens under the current weights
        ``[rows, R]`` (0 off the response)."""
        from verl.workers.utils.padding import no_padding_2_padding

        td = self._tensordict(batch, global_rows)
        with self.engine.eval_mode():
            out = self.engine.infer_batch(td, loss_function=None)
        lp = no_padding_2_padding(out["model_output"]["log_probs"], td).float()
        return lp * batch["response_mask"]

    def train(self, batch: dict[str, Tensor], global_rows: int) -> dict[str, Any]:
        """The optimizer steps of one train_step on this rank's shard (``ppo_epochs`` of them);
        with ``rollout_correction: tis`` the old policy is the trainer's own log-probabilities
        before the update, each token weighted by ``min(pi_trainer / pi_engine, tis_cap)``."""
        t = self.config
        batch = dict(batch)
        engine_lp = batch["old_log_probs"]
        before = None
        if t.verl.logprob_gap or t.rollout_correction == "tis":
            before = self.logprobs(batch, global_rows)
        if before is not None and t.rollout_correction == "tis":
            batch["old_log_probs"] = before
            ratio = torch.exp(before - engine_lp).clamp(max=t.tis_cap)
            batch["rollout_is_weights"] = ratio * batch["response_mask"]
        losses, norms, metrics = [], [], {}
        for _ in range(t.ppo_epochs):
            td = self._tensordict(batch, global_rows)
            with self.engine.train_mode():
                out = self.engine.train_batch(td, loss_function=self.loss_fn)
                self.engine.lr_scheduler_step()
            losses.append(float(sum(float(x) for x in out["loss"])))
            norm = out["metrics"].get("grad_norm")
            norms.append(float(norm[0] if isinstance(norm, list) else norm))
            metrics = {k: _scalar(x) for k, x in out["metrics"].items() if k != "grad_norm"}
        return {
            "loss": losses,
            "grad_norm": norms,
            "metrics": metrics,
            "before": before,
            "engine": engine_lp,
            "mask": batch["response_mask"],
        }

    # ---- weights and checkpoints -----------------------------------------------------------

    def _full_tensors(self) -> Any:
        """(name, full tensor) per entry of the model's state dict, each gathered in turn on
        every rank (call on all ranks, in the same order)."""
        for name, t in self.engine.module.state_dict().items():
            full = t.full_tensor() if hasattr(t, "full_tensor") else t
            yield name, full.detach()

    def metas(self) -> list[tuple[str, tuple[int, ...], str]]:
        """Names, full shapes and dtypes of the weights, in the order they are sent."""
        out = []
        for name, t in self.engine.module.state_dict().items():
            out.append((name, tuple(t.shape), str(t.dtype)))
        return out

    def gather(self) -> dict[str, Tensor] | None:
        """The full weights as CPU tensors on rank 0 (None on the others)."""
        keep = self.rank == 0
        out = {}
        for name, full in self._full_tensors():
            if keep:
                out[name] = full.to("cpu", copy=True)
        return out if keep else None

    def broadcast(self, message: dict[str, Any]) -> int:
        """Rank 0 sends the weights to the Policy's workers as they are gathered, one bucket at
        a time; the other ranks take part in the gathers only. Returns the bytes sent."""
        if self.rank != 0:
            for _ in self._full_tensors():
                pass
            return 0
        return self._broadcaster.send_stream(message, self._full_tensors())

    def open_broadcast(self, address: str) -> dict[str, Any]:
        """Rank 0: listen for the next broadcast group (see ``Broadcaster.open``)."""
        return self._broadcaster.open(address)

    def save(self, path: str) -> None:
        """The sharded model and optimizer under ``path`` (torch.distributed.checkpoint)."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model, optim = get_state_dict(self.engine.module, self.engine.optimizer)
        dcp.save({"model": model, "optim": optim}, checkpoint_id=path)
        dist.barrier()

    def load(self, path: str) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        model, optim = get_state_dict(self.engine.module, self.engine.optimizer)
        state = {"model": model, "optim": optim}
        dcp.load(state, checkpoint_id=path)
        set_state_dict(
            self.engine.module,
            self.engine.optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optim"],
        )
        dist.barrier()

    def load_full(self, weights_dir: str) -> None:
        """Hugging Face weights (a torch-backend checkpoint) into the shards; the optimizer
        starts afresh."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
        )

        from serve.models import load_model

        full = load_model(weights_dir)[0].state_dict()
        options = StateDictOptions(full_state_dict=True)
        set_model_state_dict(self.engine.module, full, options=options)
        dist.barrier()

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def _scalar(x: Any) -> float:
    """A veRL metric (a ``Metric``, a list, a tensor or a number) as one number."""
    if hasattr(x, "aggregate"):
        return float(x.aggregate())
    if isinstance(x, list):
        return float(sum(_scalar(v) for v in x) / max(len(x), 1))
    return float(x.float().mean()) if isinstance(x, Tensor) else float(x)


def model_dir(name: str, seed: int = 0) -> Path:
    """A Hugging Face folder of model ``name`` for veRL (which loads by path): a checkpoint
    path as it is, a built-in model written once to ``<cache>/verl-models/<name>-<seed>``."""
    from serve.models import BUILTIN_MODELS, cache_dir, load_model

    if name not in BUILTIN_MODELS:
        return Path(name).expanduser()
    target = cache_dir() / "verl-models" / f"{name}-{seed}"
    if (target / "config.json").exists():
        return target
    model, tok = load_model(name, seed)
    model.config.architectures = [type(model).__name__]
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    try:
        tmp.rename(target)
    except OSError:  # another process wrote it first: the same weights
        shutil.rmtree(tmp, ignore_errors=True)
    return target

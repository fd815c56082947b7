"""``trainer.verl``: the knobs of the veRL backend (``trainer.backend: verl``) that matter here,
by name (nothing copied wholesale from veRL's YAML). The optimizer, clipping, epochs and rollout
correction come from ``trainer`` itself, shared with the torch backend."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from forge.config.sandbox import Strict


class VerlConfig(Strict):
    """veRL's FSDP actor: ranks, sharding and offload, micro-batching, memory savers, loss."""

    ranks: int = Field(
        2, ge=1, description="FSDP ranks (data-parallel workers), one Ray actor each: one per GPU."
    )
    cpus_per_rank: float = Field(1.0, gt=0, description="Ray CPUs each rank reserves.")
    strategy: Literal["fsdp2", "fsdp"] = Field(
        "fsdp2",
        description="fsdp2: per-parameter sharding (fully_shard); fsdp: FSDP1 (GPUs only: veRL "
        "builds it with sync_module_states, which torch refuses for CPU parameters).",
    )
    fsdp_size: int = Field(
        -1, description="Ranks one parameter is sharded over (-1: all; smaller: hybrid sharding)."
    )
    reshard_after_forward: bool = Field(
        True, description="Free gathered parameters after each forward (ZeRO-3); False: ZeRO-2."
    )
    param_offload: bool = Field(False, description="Keep parameters on the CPU between uses.")
    optimizer_offload: bool = Field(False, description="Keep optimizer state on the CPU.")
    param_dtype: Literal["float32", "bfloat16"] = Field(
        "float32",
        description="Compute dtype of the sharded model (bfloat16: mixed precision with float32 "
        "gradients reduced; float32 matches the torch backend's numbers).",
    )
    micro_batch_size: int = Field(
        4, ge=1, description="Rows per forward/backward on each rank (use_dynamic_bsz: off)."
    )
    use_dynamic_bsz: bool = Field(
        False,
        description="Pack micro-batches by token count (max_token_len) instead of row count.",
    )
    max_token_len: int = Field(
        16384, ge=1, description="use_dynamic_bsz: most tokens per micro-batch on each rank."
    )
    gradient_checkpointing: bool = Field(
        False, description="Recompute activations in the backward pass (less memory, slower)."
    )
    sequence_packing: bool = Field(
        False,
        description="Remove padding: rows packed into one sequence per micro-batch (veRL's "
        "use_remove_padding; position ids restart per row).",
    )
    logprob_gap: bool = Field(
        True,
        description="Recompute the batch's log-probabilities before the update to report the "
        "engine-vs-trainer gap (logprob_abs_diff_*, logprob_kl): one more forward pass per "
        "step (rollout_correction: tis needs it anyway).",
    )
    loss_mode: Literal["vanilla", "gspo", "cispo", "gpg", "clip_cov", "kl_cov", "geo_mean"] = Field(
        "vanilla",
        description="veRL's policy loss (vanilla: the clipped PPO/GRPO surrogate with dual clip, "
        "the torch backend's).",
    )
    loss_agg_mode: Literal[
        "episode-mean", "token-mean", "seq-mean-token-mean", "seq-mean-token-sum"
    ] = Field(
        "episode-mean",
        description="How token losses are averaged. episode-mean: per episode over all its "
        "segments, then over episodes (the torch backend's; veRL's token-sum with the weights "
        "folded into the advantages); the others are veRL's, over rows (segments).",
    )

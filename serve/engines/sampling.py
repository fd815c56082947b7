"""Sampling one token from a row of logits, seeded per request: shared by the torch engine's
text path (:mod:`serve.engines.torch_engine`) and its vision-language path
(:mod:`serve.engines.torch_vlm`)."""

from __future__ import annotations

from typing import Any

import torch


def _generator(seed: int | None) -> torch.Generator | None:
    if seed is None:
        return None
    g = torch.Generator()
    g.manual_seed(seed % 2**64)  # any integer seed, never an overflow that fails the batch
    return g


def _sample(logits: torch.Tensor, temperature: float, top_p: float, gen: Any) -> int:
    if temperature <= 0:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits.cpu() / temperature, dim=-1)
    if not bool(torch.isfinite(probs).all()):  # a temperature so small it overflows: greedy
        return int(torch.argmax(logits))
    if top_p < 1.0:
        sorted_p, order = torch.sort(probs, descending=True)
        keep = sorted_p.cumsum(-1) - sorted_p < top_p
        keep[0] = True
        probs = torch.zeros_like(probs).scatter_(0, order[keep], sorted_p[keep])
        probs = probs / probs.sum()
    return int(torch.multinomial(probs, 1, generator=gen))

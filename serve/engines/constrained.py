"""Structured output for the torch engine: a reply constrained to a JSON schema.

A harness that asks for ``response_format`` (browser-use's ``json_schema``, say) gets a reply
that parses and validates, whatever the policy's weights: at each step the tokens that cannot
continue a document of the schema are masked out of the distribution sampled from, with
xgrammar's grammar matcher (the engine vLLM uses for the same job). JSON is compact (no
whitespace between tokens, as vLLM writes it with ``disable_any_whitespace``), so a small model
cannot spend its budget on blanks.

The logprob recorded for each sampled token stays the model's own (the unmasked log-softmax over
the temperature): the distribution the Trainer recomputes. Masking changes which tokens can be
sampled, not the probabilities the policy assigns, so the turn trains as any other.
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


class SchemaError(ValueError):
    """A JSON schema the grammar compiler refuses (answered as a 400 on ``response_format``)."""


@functools.lru_cache(maxsize=8)
def _compiler(tokenizer: Any, vocab_size: int) -> Any:
    import xgrammar as xgr

    info = xgr.TokenizerInfo.from_huggingface(
        tokenizer, vocab_size=vocab_size, stop_token_ids=[tokenizer.eos_token_id]
    )
    return xgr.GrammarCompiler(info, cache_enabled=True)


# xgrammar 0.2.8 writes a string with a length bound (``maxLength``) as any character but a
# quote, a backslash or a line break: control characters too, which no JSON parser takes in a
# string. The rule is narrowed to what its unbounded strings allow.
_LOOSE_CHAR = r"[^\"\\\r\n]"
_JSON_CHAR = r"[^\0-\x1f\"\\\r\n]"


def json_grammar(schema: dict[str, Any]) -> str:
    """The grammar (EBNF) of compact JSON documents of ``schema``; raises if the schema
    cannot be followed. Needs no vocabulary, so the wire protocols check schemas with it."""
    import xgrammar as xgr

    grammar = xgr.Grammar.from_json_schema(
        json.dumps(schema), any_whitespace=False, separators=(",", ":")
    )
    return str(grammar).replace(_LOOSE_CHAR, _JSON_CHAR)


class Constraint:
    """One reply's grammar state: :meth:`mask` the next logits, :meth:`accept` the sampled
    token; :attr:`finished` once the document is complete and its stop token was sampled."""

    def __init__(self, tokenizer: Any, vocab_size: int, schema: dict[str, Any]) -> None:
        import xgrammar as xgr

        try:
            grammar = _compiler(tokenizer, vocab_size).compile_grammar(json_grammar(schema))
        except Exception as e:  # xgrammar raises RuntimeError/ValueError with its reason
            raise SchemaError(f"the JSON schema cannot be compiled: {e}") from e
        self._xgr = xgr
        self._matcher = xgr.GrammarMatcher(grammar)
        self._bitmask = xgr.allocate_token_bitmask(1, vocab_size)
        self.vocab_size = vocab_size

    def mask(self, logits: torch.Tensor) -> torch.Tensor:
        """``logits`` (one row, the model's vocabulary) with every token the grammar forbids
        at this point set to -inf (a copy; the caller's tensor is left as it was)."""
        self._matcher.fill_next_token_bitmask(self._bitmask)
        masked = logits.detach().clone().float().cpu().view(1, -1)
        self._xgr.apply_token_bitmask_inplace(masked, self._bitmask, vocab_size=self.vocab_size)
        return masked.view(-1).to(logits.device)

    def accept(self, token: int) -> None:
        if not self._matcher.accept_token(token):  # cannot happen after mask(): a bug if it does
            raise RuntimeError(f"token {token} does not continue the schema's document")

    @property
    def finished(self) -> bool:
        return bool(self._matcher.is_terminated())

"""The ``remote`` engine: a teacher behind an OpenAI-compatible endpoint (``forge collect``).

Each request's conversation and tools go to ``{base_url}/chat/completions`` as the harness sent
them (text only); the teacher's reply (content and tool calls) comes back as the text the
student's chat template gives an assistant turn, tokenized with the student's tokenizer, so the
recorded episode has the shape of the student's own (its logprobs are 0: the teacher's are not
the student's, and these episodes are for ``forge sft``, never for RL). The key is read from the
environment variable ``api_key_env`` (never from a config file).
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.error
import urllib.request
from typing import Any

from forge.types import ChatRequest, ToolCall
from serve.chat_template import new_call_id, render_assistant
from serve.engines.base import EngineOutput, EngineRequest
from serve.models import load_tokenizer
from serve.protocol.chat import wire_call


def openai_body(chat: ChatRequest, model: str) -> dict[str, Any]:
    """The chat-completions body of ``chat`` (its text; tool calls and results by id)."""
    messages: list[dict[str, Any]] = []
    for m in chat.messages:
        out: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.tool_calls:
            out["tool_calls"] = [wire_call(c) for c in m.tool_calls]
        if m.role == "tool":
            out["tool_call_id"] = m.tool_call_id or ""
        messages.append(out)
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "temperature": chat.sampling.temperature,
    }
    if chat.sampling.max_tokens:
        body["max_tokens"] = chat.sampling.max_tokens
    if chat.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in chat.tools
        ]
    return body


class RemoteEngine:
    def __init__(
        self,
        model: str = "tiny",
        base_url: str = "",
        served_model: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 600.0,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"engine.base_url: expected an http(s) URL, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.served_model = served_model or "default"
        self.key = os.environ.get(api_key_env, "")
        self.timeout_s = timeout_s
        self.max_context: int | None = None  # the teacher's own context decides
        self.tokenizer = load_tokenizer(model)

    async def generate(self, requests: list[EngineRequest]) -> list[EngineOutput]:
        return list(await asyncio.gather(*(asyncio.to_thread(self._one, r) for r in requests)))

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            self.base_url + "/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.key}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as e:
            detail = e.read()[:500].decode(errors="replace")
            raise RuntimeError(f"teacher {self.base_url}: HTTP {e.code}: {detail}") from None

    def _one(self, request: EngineRequest) -> EngineOutput:
        if request.chat is None:
            raise ValueError("the remote engine needs the chat request")
        choice = self._post(openai_body(request.chat, self.served_model))["choices"][0]
        message = choice.get("message") or {}
        calls = [
            ToolCall(
                c.get("id") or new_call_id(), c["function"]["name"], c["function"]["arguments"]
            )
            for c in message.get("tool_calls") or []
        ]
        text = render_assistant(message.get("content") or "", calls)
        ids = self.tokenizer(text, add_special_tokens=False).input_ids
        if choice.get("finish_reason") == "length":
            return EngineOutput(ids, [0.0] * len(ids), "length")
        ids.append(self.tokenizer.eos_token_id)
        return EngineOutput(ids, [0.0] * len(ids), "stop")

    def load_weights(self, state_dict: dict[str, Any]) -> None:
        """The teacher's weights are its server's; nothing to load."""

    def state_dict(self) -> dict[str, Any]:
        return {}

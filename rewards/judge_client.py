"""The judge's model calls (:mod:`rewards.judge`): an OpenAI-compatible ``/chat/completions`` or
an Anthropic ``/v1/messages`` endpoint, its key read from an environment variable of the process
that verifies (the HarnessPod), never from or into a sandbox. Each reply is cached on disk by
the hash of everything that decides it, so a re-score costs nothing.

A judge that cannot be reached (connection refused, a timeout, a 5xx after the retries, a
missing key) raises :class:`JudgeUnavailable`: the attempt fails as an infrastructure failure
and is retried, never scored 0.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import httpx

CACHE_ENV = "FORGE_JUDGE_CACHE"  # the cache's folder (default: ~/.cache/openforge/judge)
RETRIES = 3


class JudgeUnavailable(RuntimeError):
    """The judge could not be asked: an infrastructure failure, retried."""


def cache_dir() -> Path:
    default = Path.home() / ".cache" / "openforge" / "judge"
    return Path(os.environ.get(CACHE_ENV) or default)


def request_key(call: dict[str, Any]) -> str:
    """The hash of a call: the endpoint kind, model, prompt, sampling and sample index."""
    return hashlib.sha256(json.dumps(call, sort_keys=True).encode()).hexdigest()


def _post(url: str, headers: dict[str, str], body: dict[str, Any], timeout_s: float) -> Any:
    last = ""
    for attempt in range(RETRIES):
        try:
            r = httpx.post(url, headers=headers, json=body, timeout=timeout_s)
        except httpx.HTTPError as e:
            last = f"{type(e).__name__}: {e}"
        else:
            if r.status_code < 500 and r.status_code != 429:
                if r.status_code >= 400:
                    raise JudgeUnavailable(f"judge at {url}: HTTP {r.status_code}: {r.text[:300]}")
                return r.json()
            last = f"HTTP {r.status_code}: {r.text[:300]}"
        time.sleep(0.5 * 2**attempt)
    raise JudgeUnavailable(f"judge at {url} unreachable after {RETRIES} tries: {last}")


def _content(api: str, prompt: str, images: list[Any]) -> Any:
    """The user message's content: the prompt alone, or the prompt then each image."""
    if not images:
        return prompt
    parts: list[dict[str, Any]] = [{"type": "text", "text": prompt}]
    for image in images:
        data = base64.b64encode(image.data).decode()
        if api == "anthropic":
            source = {"type": "base64", "media_type": image.mime, "data": data}
            parts.append({"type": "image", "source": source})
        else:
            url = f"data:{image.mime};base64,{data}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


def ask(
    api: str,
    base_url: str,
    model: str,
    key_env: str,
    prompt: str,
    sample: int,
    temperature: float,
    max_tokens: int,
    timeout_s: float,
    images: list[Any] | None = None,
) -> tuple[str, bool]:
    """``(reply text, cached)`` of one judge sample; ``images`` (``mime``, ``sha256``, ``data``:
    :class:`forge.types.ImagePart`) go after the prompt, for a vision model."""
    call = {"api": api, "model": model, "prompt": prompt, "temperature": temperature,
            "max_tokens": max_tokens, "sample": sample}  # fmt: skip
    if images:
        call["images"] = [i.sha256 for i in images]
    path = cache_dir() / f"{request_key(call)}.json"
    if path.is_file():
        return json.loads(path.read_text())["reply"], True
    key = os.environ.get(key_env, "") if key_env else ""  # "": an endpoint that needs none
    if key_env and not key:
        raise JudgeUnavailable(f"judge: ${key_env} is not set in the verifying process")
    messages = [{"role": "user", "content": _content(api, prompt, images or [])}]
    if api == "anthropic":
        url = base_url.rstrip("/") + "/v1/messages"
        headers = {"x-api-key": key, "anthropic-version": "2023-06-01"}
        body = {"model": model, "messages": messages, "max_tokens": max_tokens,
                "temperature": temperature}  # fmt: skip
        data = _post(url, headers, body, timeout_s)
        reply = "".join(b.get("text", "") for b in data.get("content") or [] if isinstance(b, dict))
    else:
        url = base_url.rstrip("/") + "/chat/completions"
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        body = {"model": model, "messages": messages, "max_tokens": max_tokens,
                "temperature": temperature, "seed": sample}  # fmt: skip
        data = _post(url, headers, body, timeout_s)
        try:
            reply = data["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError):
            raise JudgeUnavailable(f"judge at {url}: no choices in {str(data)[:300]}") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"call": call, "reply": reply}))
    tmp.replace(path)
    return reply, False

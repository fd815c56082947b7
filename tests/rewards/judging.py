"""A scripted judge for the judge tests (a test double for the model only): an OpenAI-style
endpoint on loopback answering with ``reply(prompt)``, the judge's variables pointing at it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from rewards.judge_client import CACHE_ENV
from tests.forge.httpstub import StubServer


@contextmanager
def scripted_judge(
    reply: Callable[[str], str], monkeypatch: pytest.MonkeyPatch, cache: Path, key: str = "k"
) -> Iterator[StubServer]:
    """Serve ``reply`` (the prompt -> the judge's text) as ``$FORGE_JUDGE_BASE_URL``, with
    ``$FORGE_JUDGE_MODEL``, ``$FORGE_JUDGE_API_KEY`` (``key``) and a cache in ``cache``."""

    def answer(method: str, path: str, headers: dict[str, str], body: Any):
        text = reply(body["messages"][0]["content"])
        return 200, {"choices": [{"message": {"role": "assistant", "content": text}}]}, {}

    server = StubServer(answer)
    monkeypatch.setenv("FORGE_JUDGE_BASE_URL", f"http://{server.address}/v1")
    monkeypatch.setenv("FORGE_JUDGE_MODEL", "judge-tiny")
    monkeypatch.setenv("FORGE_JUDGE_API_KEY", key)
    monkeypatch.setenv(CACHE_ENV, str(cache))
    try:
        yield server
    finally:
        server.close()

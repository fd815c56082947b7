"""A scripted judge for the judge tests (a test double for the model only): an OpenAI-style
endpoint on loopback answering with ``reply(prompt)``, the judge's variables pointing at it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from forge.harnesses.install import PACKAGES
from rewards.judge_client import CACHE_ENV
from tasks.loader import load_suite
from tasks.schema import Task
from tests.forge.httpstub import StubServer

# a benchmark's references and no-ops: react in CI, OpenClaw (the benchmarks' own harness) too
# under -m full (~60 s more)
REACT_AND_OPENCLAW = [
    "react",
    pytest.param(
        "openclaw",
        marks=[
            pytest.mark.full,
            pytest.mark.skipif(not PACKAGES["openclaw"].installed(), reason="no openclaw"),
        ],
    ),
]


def with_solutions(suite: str, solutions: dict[str, tuple[list[Any], str]]) -> dict[str, Task]:
    """The suite's tasks by id, each with the reference ``(steps, answer)`` written for it."""
    out = {}
    for task in load_suite(suite, []):
        steps, answer = solutions[task.id]
        out[task.id] = Task.model_validate(
            {**task.model_dump(), "solution": steps, "answer": answer}
        )
    return out


@contextmanager
def scripted_judge(
    reply: Callable[[str], str], monkeypatch: pytest.MonkeyPatch, cache: Path, key: str = "k"
) -> Iterator[StubServer]:
    """Serve ``reply`` (the prompt -> the judge's text) as ``$FORGE_JUDGE_BASE_URL``, with
    ``$FORGE_JUDGE_MODEL``, ``$FORGE_JUDGE_API_KEY`` (``key``) and a cache in ``cache``."""

    def answer(method: str, path: str, headers: dict[str, str], body: Any):
        content = body["messages"][0]["content"]  # the prompt, or it and images after it
        text = reply(content if isinstance(content, str) else content[0]["text"])
        if path.endswith("/v1/messages"):  # Anthropic's wire
            return 200, {"content": [{"type": "text", "text": text}]}, {}
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

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forge.harnesses.base import AttemptContext
from forge.harnesses.react import PROGRAM, ReactHarness
from forge.harnesses.registry import HARNESSES, get_harness
from forge.sandboxes.base import ExecResult, SandboxSpec
from forge.sandboxes.bwrap import bwrap_works
from forge.sandboxes.local import LocalSandbox
from tests.forge.httpstub import StubServer

needs_bwrap = pytest.mark.skipif(
    not bwrap_works(), reason="bubblewrap missing or cannot create namespaces here"
)
# (isolation, how the proxy is served)
SETUPS = [pytest.param("required", "unix", marks=needs_bwrap), ("none", "tcp"), ("none", "unix")]
PREFIX = "/episodes/e1/attempts/0/v1"


def tool_call(i: int, name: str, arguments: str) -> dict[str, Any]:
    return {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def reply(content: str | None = None, calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return {"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": message}]}


class Script:
    """A chat-completions test double that plays scripted replies in order."""

    def __init__(self, replies: list[tuple[int, Any, dict[str, str]]]) -> None:
        self.replies = list(replies)

    def __call__(self, method: str, path: str, headers: dict[str, str], body: Any):
        if method != "POST" or path != f"{PREFIX}/chat/completions":
            return 404, {"error": f"no route {method} {path}"}, {}
        if not self.replies:
            return 500, {"error": "script exhausted"}, {}
        return self.replies.pop(0)


def ok(r: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
    return 200, r, {}


@pytest.fixture
def episode(tmp_path: Path) -> Iterator:
    """Runs one react episode in a fresh LocalSandbox against a scripted stub."""
    made: list[tuple[LocalSandbox, StubServer]] = []

    def run(isolation: str, serve: str, replies: list, max_turns: int = 20, **opts: Any):
        stub = StubServer(Script(replies), str(tmp_path / "p.sock") if serve == "unix" else None)
        harness = get_harness("react", **opts)
        proxy = {"proxy_socket" if serve == "unix" else "proxy_tcp": stub.address}
        sb = LocalSandbox(root=tmp_path / "sb", isolation=isolation)  # type: ignore[arg-type]
        sb.create(SandboxSpec(labels={"run": "t"}, ro_mounts=harness.ro_mounts(), **proxy))
        made.append((sb, stub))
        ctx = AttemptContext(
            base_url=f"http://{sb.proxy_host_port()}{PREFIX}",
            anthropic_base_url=f"http://{sb.proxy_host_port()}{PREFIX[:-3]}",
            api_key="key-123",
            model="policy-model",
            instruction="Write hello into out.txt, then finish.",
            workspace=sb.workspace,
            max_turns=max_turns,
            paths=sb.path_map(),
        )
        for path, content in harness.files(ctx).items():
            sb.put_file(path, content)
        result = sb.exec(harness.command(ctx), 60, env=harness.env(ctx))
        return sb, stub, harness, result

    yield run
    for sb, stub in made:
        sb.destroy()
        stub.close()


@pytest.mark.parametrize(("isolation", "serve"), SETUPS)
def test_shell_then_finish(episode, isolation: str, serve: str) -> None:
    call = tool_call(1, "shell", json.dumps({"command": "echo hello > out.txt && echo ok"}))
    replies = [
        ok(reply(None, [call])),
        ok(reply(None, [tool_call(2, "finish", '{"answer": "42"}')])),
    ]
    sb, stub, harness, result = episode(isolation, serve, replies, temperature=0.7)
    assert result.exit_code == 0, result.stderr
    assert harness.final_answer(result) == "42"
    assert ReactHarness.summary(result) == {"final_answer": "42", "turns": 2, "stop": "finish"}
    assert sb.get_file("out.txt") == b"hello\n"
    assert len(stub.requests) == 2
    _, _, headers, first = stub.requests[0]
    assert headers["authorization"] == "Bearer key-123"
    assert first["model"] == "policy-model" and first["temperature"] == 0.7
    assert [t["function"]["name"] for t in first["tools"]] == [
        "shell",
        "read_file",
        "write_file",
        "finish",
    ]
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert first["messages"][1]["content"] == "Write hello into out.txt, then finish."
    second = stub.requests[1][3]["messages"]
    assert second[:2] == first["messages"]
    assert second[2] == {"role": "assistant", "content": None, "tool_calls": [call]}
    assert second[3]["role"] == "tool" and second[3]["tool_call_id"] == "call_1"
    assert second[3]["content"].startswith("exit code: 0\nstdout:\nok\n")


def test_system_prompt_is_fixed_across_attempts(episode) -> None:
    prompts = []
    for _ in range(2):
        _, stub, _, _ = episode("none", "tcp", [ok(reply("done"))])
        prompts.append(stub.requests[0][3]["messages"])
    assert prompts[0] == prompts[1]


@pytest.mark.parametrize(("isolation", "serve"), SETUPS[:2])
def test_plain_text_answer(episode, isolation: str, serve: str) -> None:
    _, _, harness, result = episode(isolation, serve, [ok(reply("The answer is 7."))])
    assert result.exit_code == 0, result.stderr
    assert harness.final_answer(result) == "The answer is 7."
    assert ReactHarness.summary(result) == {
        "final_answer": "The answer is 7.",
        "turns": 1,
        "stop": "answer",
    }


def test_malformed_arguments_become_observations(episode) -> None:
    bad = [
        tool_call(1, "shell", "{not json"),
        tool_call(2, "write_file", '{"path": "a.txt"}'),
        tool_call(3, "browse", "{}"),
        tool_call(4, "read_file", '["a"]'),
        tool_call(5, "read_file", '{"path": "nope.txt"}'),
    ]
    write = tool_call(6, "write_file", '{"path": "d/a.txt", "content": "hi"}')
    replies = [ok(reply("thinking", bad)), ok(reply(None, [write])), ok(reply("all done"))]
    sb, stub, _, result = episode("none", "tcp", replies)
    assert result.exit_code == 0, result.stderr
    assert ReactHarness.summary(result) == {
        "final_answer": "all done",
        "turns": 3,
        "stop": "answer",
    }
    observations = [m for m in stub.requests[1][3]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in observations] == [f"call_{i}" for i in range(1, 6)]
    texts = [m["content"] for m in observations]
    assert "not valid JSON" in texts[0]
    assert "content" in texts[1] and texts[1].startswith("error:")
    assert "unknown tool 'browse'" in texts[2]
    assert "JSON object" in texts[3]
    assert texts[4].startswith("error:") and "nope.txt" in texts[4]
    assert sb.get_file("d/a.txt") == b"hi"


def test_retries_503_then_succeeds(episode) -> None:
    replies = [(503, {"error": "swapping weights"}, {"Retry-After": "0"}), ok(reply("fine"))]
    _, stub, harness, result = episode("none", "tcp", replies)
    assert result.exit_code == 0 and harness.final_answer(result) == "fine"
    assert len(stub.requests) == 2


def test_http_error_exits_3(episode) -> None:
    _, _, harness, result = episode("none", "tcp", [(500, {"error": "boom"}, {})])
    assert result.exit_code == 3
    assert "HTTP 500" in result.stderr and "boom" in result.stderr
    assert ReactHarness.summary(result) == {"final_answer": None, "turns": 0, "stop": "error"}
    assert harness.final_answer(result) is None


def test_turn_limit(episode) -> None:
    replies = [
        ok(reply(f"step {i}", [tool_call(i, "shell", '{"command": "true"}')])) for i in range(5)
    ]
    _, stub, _, result = episode("none", "tcp", replies, max_turns=3)
    assert ReactHarness.summary(result) == {
        "final_answer": "step 2",
        "turns": 3,
        "stop": "max_turns",
    }
    assert len(stub.requests) == 3


def test_harness_registry_and_command() -> None:
    assert HARNESSES["react"] is ReactHarness
    with pytest.raises(
        ValueError,
        match="known: agent-s, browser, browser-use, codex, command, cua, desktop, "
        "mini-swe-agent, nanobot, openclaw, pi, react, zeroclaw",
    ):
        get_harness("nope")
    h = get_harness("react")
    assert (h.name, h.protocol) == ("react", "chat")
    host_program = next(iter(h.ro_mounts()))
    assert Path(host_program).is_file() and h.ro_mounts()[host_program] == PROGRAM
    ctx = AttemptContext("http://b/v1", "http://b", "k", "m", "do it", "/workspace")
    assert h.command(ctx) == ["python3", PROGRAM, "do it"]
    ctx.paths = {PROGRAM: host_program, "/workspace": "/tmp/ws"}
    assert h.command(ctx) == ["python3", host_program, "do it"]
    assert ctx.path("/workspace/a/b") == "/tmp/ws/a/b" and ctx.path("/workspacex") == "/workspacex"
    noisy = ExecResult(0, 'log line\n{"final_answer": "x", "turns": 1, "stop": "answer"}\n', "")
    assert h.final_answer(noisy) == "x"
    assert h.final_answer(ExecResult(1, "crash\n", "")) is None

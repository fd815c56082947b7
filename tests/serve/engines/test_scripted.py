"""The scripted engine (the oracle model double): steps through shell/write tools, then finish."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from forge.types import ChatRequest, Message, SamplingParams, Tool, ToolCall
from serve.chat_template import parse_tool_calls
from serve.engines.base import EngineRequest
from serve.engines.scripted import NOOP_ANSWER, ScriptedEngine, heredoc, next_action


def tool(name: str, *params: str, kind: str = "function") -> Tool:
    props = {p: {"type": "string"} for p in params}
    return Tool(name=name, parameters={"type": "object", "properties": props}, kind=kind)


SCRIPT = {
    "steps": ["mkdir -p out", {"path": "out/hello.txt", "content": "hi there\n"}, "ls out"],
    "answer": "hello.txt written",
}


@pytest.fixture(scope="module")
def engine() -> ScriptedEngine:
    return ScriptedEngine(model="tiny")


def play(
    tools: list[Tool],
    script: dict[str, Any] | None = SCRIPT,
    mode: str = "oracle",
    max_turns: int = 10,
) -> tuple[list[list[ToolCall]], str]:
    """Run the oracle like a harness would: feed each call a result until it answers."""
    messages = [Message("user", "Write the file.")]
    turns: list[list[ToolCall]] = []
    for _ in range(max_turns):
        text = next_action(ChatRequest(messages=messages, tools=tools, script=script), mode)
        content, calls = parse_tool_calls(text)
        if not calls:
            return turns, text
        turns.append(calls)
        messages.append(Message("assistant", content, tool_calls=calls))
        messages += [Message("tool", "ok", tool_call_id=c.id) for c in calls]
    pytest.fail("the oracle never answered")


@pytest.mark.parametrize(
    ("name", "param"),
    [("shell", "command"), ("bash", "command"), ("exec_command", "cmd"), ("exec", "command")],
)
def test_plays_steps_through_a_shell_tool(name: str, param: str, tmp_path: Path) -> None:
    tools = [tool("read_file", "path"), tool(name, param, "workdir")]
    turns, answer = play(tools)
    assert answer == SCRIPT["answer"]
    assert all(len(t) == 1 for t in turns)
    calls = [t[0] for t in turns]
    assert [c.name for c in calls] == [name] * 3
    args = [json.loads(c.arguments) for c in calls]
    assert all(set(a) == {param} for a in args)
    assert args[0][param] == "mkdir -p out"
    assert args[2][param] == "ls out"
    # The file step becomes a heredoc that really writes the file.
    for a in args:
        subprocess.run(["sh", "-c", a[param]], cwd=tmp_path, check=True, capture_output=True)
    assert (tmp_path / "out" / "hello.txt").read_text() == "hi there\n"


def test_heredoc_writes_exact_content_with_tricky_text(tmp_path: Path) -> None:
    content = "line 1\n$HOME `date` 'quoted' \"dq\" \\n\nFORGE_EOF\nno final newline"
    cmd = heredoc("deep/dir/f.txt", content)
    subprocess.run(["sh", "-c", cmd], cwd=tmp_path, check=True, capture_output=True)
    assert (tmp_path / "deep/dir/f.txt").read_text() == content + "\n"
    cmd = heredoc("top.txt", "x\n")
    subprocess.run(["sh", "-c", cmd], cwd=tmp_path, check=True, capture_output=True)
    assert (tmp_path / "top.txt").read_text() == "x\n"


@pytest.mark.parametrize(
    ("name", "pkey", "ckey"), [("write_file", "path", "content"), ("Write", "file_path", "text")]
)
def test_file_steps_use_a_write_tool_when_offered(name: str, pkey: str, ckey: str) -> None:
    tools = [tool("shell", "command"), tool(name, pkey, ckey)]
    turns, answer = play(tools)
    assert answer == SCRIPT["answer"]
    calls = [t[0] for t in turns]
    assert [c.name for c in calls] == ["shell", name, "shell"]
    assert json.loads(calls[1].arguments) == {pkey: "out/hello.txt", ckey: "hi there\n"}


def test_finish_tool_carries_the_answer_at_the_end() -> None:
    tools = [tool("shell", "command"), tool("submit", "result")]
    turns, answer = play(tools)
    calls = [t[0] for t in turns]
    assert [c.name for c in calls] == ["shell", "shell", "shell", "submit"]
    assert json.loads(calls[-1].arguments) == {"result": SCRIPT["answer"]}
    # After the finish call it answers in plain text.
    assert answer == SCRIPT["answer"]


def test_without_a_finish_tool_the_answer_is_plain_text() -> None:
    turns, answer = play([tool("bash", "command")])
    assert len(turns) == 3
    assert answer == SCRIPT["answer"]


def test_default_answer_when_the_script_has_none() -> None:
    turns, answer = play([tool("bash", "command")], script={"steps": ["true"]})
    assert len(turns) == 1
    assert answer == "Done."


def test_no_usable_tool_skips_to_the_answer() -> None:
    # A custom (free-text) tool and a tool without a command parameter are not shells.
    tools = [tool("shell", "command", kind="custom"), tool("bash", "timeout")]
    turns, answer = play(tools)
    assert turns == []
    assert answer == SCRIPT["answer"]


@pytest.mark.parametrize(("mode", "script"), [("noop", SCRIPT), ("oracle", None)])
def test_noop_and_no_script_never_call_tools(mode: str, script: dict[str, Any] | None) -> None:
    tools = [tool("shell", "command"), tool("write_file", "path", "content"), tool("finish")]
    turns, answer = play(tools, script=script, mode=mode)
    assert turns == []
    assert answer == NOOP_ANSWER


def test_unknown_mode_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"engine\.mode"):
        ScriptedEngine(mode="psychic")


def generate(engine: ScriptedEngine, chat: ChatRequest, max_tokens: int = 512) -> Any:
    req = EngineRequest([1, 2, 3], SamplingParams(max_tokens=max_tokens), chat)
    [out] = asyncio.run(engine.generate([req]))
    return out


def test_completion_ids_decode_to_the_text_and_end_with_eos(engine: ScriptedEngine) -> None:
    tok = engine.tokenizer
    chat = ChatRequest(
        messages=[Message("user", "go")], tools=[tool("shell", "command")], script=SCRIPT
    )
    out = generate(engine, chat)
    assert out.finish_reason == "stop"
    assert out.completion_ids[-1] == tok.eos_token_id
    assert tok.eos_token_id not in out.completion_ids[:-1]
    assert len(out.logprobs) == len(out.completion_ids)
    text = tok.decode(out.completion_ids, skip_special_tokens=True)
    assert text == next_action(chat)
    _, [call] = parse_tool_calls(text)
    assert json.loads(call.arguments) == {"command": "mkdir -p out"}
    # The tool-call tags are their own tokens, as a real model would emit them.
    assert out.completion_ids[0] == tok.convert_tokens_to_ids("<tool_call>")


def test_plain_answer_completion_and_max_tokens(engine: ScriptedEngine) -> None:
    tok = engine.tokenizer
    chat = ChatRequest(messages=[Message("user", "go")], script=None)
    out = generate(engine, chat)
    assert tok.decode(out.completion_ids, skip_special_tokens=True) == NOOP_ANSWER
    assert out.completion_ids[-1] == tok.eos_token_id
    cut = generate(engine, chat, max_tokens=5)
    assert cut.finish_reason == "length"
    assert cut.completion_ids == out.completion_ids[:5]
    assert len(cut.logprobs) == 5


def test_a_long_solution_step_is_not_cut_at_the_turn_limit(engine: ScriptedEngine) -> None:
    """A solution step is not a sampled turn (issue 32: Harbor's solve.sh, inlined, is one step
    of up to ~96k characters); the answer after it is cut as a model's would be."""
    long_step = "printf '%s' " + "x" * 4000 + " > out.txt"
    script = {"steps": [long_step], "answer": "wrote out.txt " * 20}
    tools = [tool("shell", "command")]
    first = ChatRequest(messages=[Message("user", "go")], tools=tools, script=script)
    out = generate(engine, first, max_tokens=16)
    assert out.finish_reason == "stop" and len(out.completion_ids) > 16
    text = engine.tokenizer.decode(out.completion_ids, skip_special_tokens=True)
    _, [call] = parse_tool_calls(text)
    assert json.loads(call.arguments) == {"command": long_step}
    done = [
        *first.messages,
        Message("assistant", "", tool_calls=[call]),
        Message("tool", "ok", tool_call_id=call.id),
    ]
    answer = generate(engine, ChatRequest(messages=done, tools=tools, script=script), 16)
    assert answer.finish_reason == "length" and len(answer.completion_ids) == 16


def test_engine_needs_the_chat_request(engine: ScriptedEngine) -> None:
    req = EngineRequest([1], SamplingParams(max_tokens=8), None)
    with pytest.raises(ValueError, match="chat request"):
        asyncio.run(engine.generate([req]))


def test_submits_through_the_shell_marker_a_prompt_names(tmp_path: Path) -> None:
    """mini-swe-agent ends a task with a command whose first output line is its marker."""
    marker = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
    messages = [Message("system", f"Finish with `echo {marker}`."), Message("user", "go")]
    script = {"steps": [], "answer": "it's 3"}
    text = next_action(
        ChatRequest(messages=messages, tools=[tool("bash", "command")], script=script)
    )
    _, calls = parse_tool_calls(text)
    command = json.loads(calls[0].arguments)["command"]
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, cwd=tmp_path)
    assert out.stdout.splitlines() == [marker, "it's 3"]
    # Without the marker in the prompt the oracle answers in plain text, as before.
    plain = next_action(
        ChatRequest(messages=messages[1:], tools=[tool("bash", "command")], script=script)
    )
    assert plain == "it's 3"

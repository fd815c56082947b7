"""The oracle follows each tool's contract: the write tool's own parameter names and path
convention, and a refused write redone through the shell (or the other path convention).

A tiny agent loop plays the harness: it offers tools over one of the three wire protocols,
parses each request with the real protocol parser, runs the oracle's calls with a small executor
against a tmp dir presented to the agent as its workspace, and sends the results back in that
protocol's own shape."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from forge.types import ChatRequest, SamplingParams, Tool, ToolCall
from serve.chat_template import parse_tool_calls
from serve.engines.base import EngineRequest
from serve.engines.scripted import ScriptedEngine
from serve.protocol import anthropic, chat, responses

SCRIPT = {
    "steps": ["mkdir -p out", {"path": "out/hello.txt", "content": "hi there\n"}, "ls out"],
    "answer": "hello.txt written",
}
PROTOCOLS = ("chat", "responses", "anthropic")
Handler = Callable[[dict[str, Any]], tuple[str, bool]]


def schema(required: tuple[str, ...] = (), **params: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": params, "required": list(required)}


def string(description: str = "", **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


SHELL = Tool(
    "bash", "Run a shell command in the workspace.", schema(("command",), command=string())
)
FINISH = Tool("finish", "End the task.", schema(("answer",), answer=string()))


class Box:
    """The test's tool executor: ``root`` is the workspace, shown to the agent as ``ws``."""

    def __init__(self, root: Path, ws: str = "/workspace") -> None:
        self.root, self.ws = root, ws

    def host(self, path: str) -> Path | None:
        if not path.startswith("/"):
            return self.root / path
        if path.startswith(self.ws + "/"):
            return self.root / path[len(self.ws) + 1 :]
        return None

    def shell(self, args: dict[str, Any]) -> tuple[str, bool]:
        out = subprocess.run(
            ["sh", "-c", args["command"]], cwd=self.root, capture_output=True, text=True
        )
        return f"exit code: {out.returncode}\n{out.stdout}{out.stderr}", False

    def writer(self, pkey: str, ckey: str, need: str = "any") -> Handler:
        """A write tool; ``need``: "absolute" refuses relative paths, "relative" absolute ones."""

        def run(args: dict[str, Any]) -> tuple[str, bool]:
            path = args.get(pkey)
            if not isinstance(path, str) or not isinstance(args.get(ckey), str):
                return f"Error: {pkey} and {ckey} are required", True
            if need == "absolute" and not path.startswith("/"):
                return (
                    f"<tool_use_error>{pkey} must be absolute, not relative</tool_use_error>",
                    True,
                )
            if need == "relative" and path.startswith("/"):
                return "Error: absolute paths are not allowed", True
            target = self.host(path)
            if target is None:
                return f"Error: {path} is outside the workspace", True
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(args[ckey])
            return f"Successfully wrote {len(args[ckey])} bytes to {path}", False

        return run


class Wire:
    """One conversation in one protocol's wire shape, as a harness would send it."""

    def __init__(self, protocol: str, tools: list[Tool], system: str) -> None:
        self.protocol = protocol
        self.items: list[dict[str, Any]] = [{"role": "user", "content": "Do the task."}]
        if protocol == "chat":
            self.items.insert(0, {"role": "system", "content": system})
            self.tools = [
                {"type": "function", "function": self._fn(t, "parameters")} for t in tools
            ]
        elif protocol == "responses":
            self.tools = [{"type": "function", **self._fn(t, "parameters")} for t in tools]
        else:
            self.tools = [self._fn(t, "input_schema") for t in tools]
        self.system = system

    @staticmethod
    def _fn(tool: Tool, key: str) -> dict[str, Any]:
        return {"name": tool.name, "description": tool.description, key: tool.parameters}

    def request(self) -> ChatRequest:
        if self.protocol == "chat":
            body = {"model": "m", "messages": self.items, "tools": self.tools}
            return chat.parse_request(body)[0]
        if self.protocol == "responses":
            body = {"model": "m", "instructions": self.system, "input": self.items}
            return responses.parse_request({**body, "tools": self.tools})[0]
        body = {"model": "m", "max_tokens": 4096, "system": self.system, "messages": self.items}
        return anthropic.parse_request({**body, "tools": self.tools})[0]

    def add(self, call: ToolCall, result: str, is_error: bool) -> None:
        args = json.loads(call.arguments)
        if self.protocol == "chat":
            fn = {"name": call.name, "arguments": call.arguments}
            self.items.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": call.id, "function": fn}],
                }
            )
            self.items.append({"role": "tool", "tool_call_id": call.id, "content": result})
        elif self.protocol == "responses":
            self.items.append(
                {
                    "type": "function_call",
                    "call_id": call.id,
                    "name": call.name,
                    **{"arguments": call.arguments},
                }
            )
            self.items.append(
                {"type": "function_call_output", "call_id": call.id, "output": result}
            )
        else:
            uid = f"toolu_{call.id}"
            use = {"type": "tool_use", "id": uid, "name": call.name, "input": args}
            done = {"type": "tool_result", "tool_use_id": uid, "content": result}
            self.items.append({"role": "assistant", "content": [use]})
            self.items.append({"role": "user", "content": [{**done, "is_error": is_error}]})


@pytest.fixture(scope="module")
def engine() -> ScriptedEngine:
    return ScriptedEngine(model="tiny")


def ask(engine: ScriptedEngine, request: ChatRequest, script: dict[str, Any]) -> str:
    request.script = script
    req = EngineRequest([1], SamplingParams(max_tokens=4096), request)
    [out] = asyncio.run(engine.generate([req]))
    return engine.tokenizer.decode(out.completion_ids, skip_special_tokens=True)


def play(
    engine: ScriptedEngine,
    tools: list[Tool],
    handlers: dict[str, Handler],
    script: dict[str, Any] = SCRIPT,
    system: str = "You are an agent.",
    protocol: str = "chat",
) -> tuple[list[ToolCall], list[bool], str]:
    """The oracle's calls, whether each was refused, and its final answer."""
    wire = Wire(protocol, tools, system)
    calls: list[ToolCall] = []
    errors: list[bool] = []
    for _ in range(12):
        content, made = parse_tool_calls(ask(engine, wire.request(), script))
        if not made:
            return calls, errors, content
        for call in made:
            result, is_error = handlers[call.name](json.loads(call.arguments))
            calls.append(call)
            errors.append(is_error)
            wire.add(call, result, is_error)
    pytest.fail("the oracle never answered")


def args(call: ToolCall) -> dict[str, Any]:
    return json.loads(call.arguments)


ABSOLUTE_WRITERS = [
    Tool(
        "Write",
        "Writes a file to the local filesystem.",
        schema(
            ("file_path", "content"),
            file_path=string(
                "The absolute path to the file to write (must be absolute, not relative)"
            ),
            content=string("The content to write to the file"),
        ),
    ),
    Tool(
        "create_file",
        "Create a file.",
        schema(("target", "body"), target=string("Where", pattern="^/"), body=string("Bytes")),
    ),
    Tool(
        "str_replace_based_edit_tool",
        "View, create and edit files.",
        schema(
            ("command", "path"),
            command=string("The action", enum=["view", "create", "str_replace", "insert"]),
            path=string("Absolute path to file or directory, e.g. `/repo/file.py` or `/repo`."),
            file_text=string("Required for create: the content of the file."),
            old_str=string(),
            new_str=string(),
        ),
    ),
]


@pytest.mark.parametrize("writer", ABSOLUTE_WRITERS, ids=lambda t: t.name)
@pytest.mark.parametrize(
    ("system", "ws"),
    [
        ("You are an agent.", "/workspace"),
        ("Current working directory: /home/u/proj", "/home/u/proj"),
    ],
    ids=["default", "stated"],
)
@pytest.mark.parametrize("with_shell", [True, False], ids=["shell", "no-shell"])
def test_absolute_path_when_the_contract_asks(
    engine: ScriptedEngine, tmp_path: Path, writer: Tool, system: str, ws: str, with_shell: bool
) -> None:
    box = Box(tmp_path, ws)
    props = writer.parameters["properties"]
    pkey = next(k for k in ("file_path", "target", "path") if k in props)
    ckey = next(k for k in ("content", "body", "file_text") if k in props)
    tools = [SHELL, writer, FINISH] if with_shell else [writer, FINISH]
    handlers = {"bash": box.shell, writer.name: box.writer(pkey, ckey, "absolute")}
    handlers["finish"] = lambda a: ("ok", False)
    calls, errors, answer = play(engine, tools, handlers, system=system)
    assert not any(errors)
    [write] = [c for c in calls if c.name == writer.name]
    assert args(write)[pkey] == f"{ws}/out/hello.txt"
    assert args(write)[ckey] == "hi there\n"
    if writer.name == "str_replace_based_edit_tool":
        assert args(write)["command"] == "create"
    assert (tmp_path / "out/hello.txt").read_text() == "hi there\n"
    assert calls[-1].name == "finish" and args(calls[-1]) == {"answer": SCRIPT["answer"]}
    assert answer == SCRIPT["answer"]


def test_the_write_tool_s_own_parameter_names(engine: ScriptedEngine, tmp_path: Path) -> None:
    box = Box(tmp_path)
    writer = Tool(
        "writeFile",
        "Save text into a file, relative to the project root.",
        schema(("filePath", "text"), encoding=string(), filePath=string(), text=string()),
    )
    tools = [SHELL, writer]
    handlers = {"bash": box.shell, "writeFile": box.writer("filePath", "text", "relative")}
    calls, errors, answer = play(engine, tools, handlers)
    assert [c.name for c in calls] == ["bash", "writeFile", "bash"]
    assert args(calls[1]) == {"filePath": "out/hello.txt", "text": "hi there\n"}
    assert not any(errors) and answer == SCRIPT["answer"]
    assert (tmp_path / "out/hello.txt").read_text() == "hi there\n"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_refused_write_is_redone_through_the_shell(
    engine: ScriptedEngine, tmp_path: Path, protocol: str
) -> None:
    """The write tool's contract does not say it, but its executor wants absolute paths: the
    refusal comes back in the protocol's own tool-result shape and the shell redoes the step."""
    box = Box(tmp_path)
    writer = Tool(
        "write", "Write a file.", schema(("path", "content"), path=string(), content=string())
    )
    tools = [SHELL, writer]
    handlers = {"bash": box.shell, "write": box.writer("path", "content", "absolute")}
    calls, errors, answer = play(engine, tools, handlers, protocol=protocol)
    assert [c.name for c in calls] == ["bash", "write", "bash", "bash"]
    assert errors == [False, True, False, False]
    assert args(calls[1])["path"] == "out/hello.txt"
    heredoc = args(calls[2])["command"]
    assert "cat > out/hello.txt <<'FORGE_EOF'\nhi there\n" in heredoc
    assert args(calls[3]) == {"command": "ls out"}
    assert (tmp_path / "out/hello.txt").read_text() == "hi there\n"
    assert answer == SCRIPT["answer"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_without_a_shell_the_refused_write_tries_the_other_convention(
    engine: ScriptedEngine, tmp_path: Path, protocol: str
) -> None:
    box = Box(tmp_path)
    # The description asks for an absolute path; this executor only takes relative ones.
    writer = Tool(
        "write_file",
        "Write a file. The path must be absolute.",
        schema(("path", "content"), path=string(), content=string()),
    )
    handlers = {"write_file": box.writer("path", "content", "relative")}
    script = {"steps": [{"path": "a/b.txt", "content": "x"}], "answer": "ok"}
    calls, errors, answer = play(engine, [writer], handlers, script=script, protocol=protocol)
    assert [args(c)["path"] for c in calls] == ["/workspace/a/b.txt", "a/b.txt"]
    assert errors == [True, False]
    assert (tmp_path / "a/b.txt").read_text() == "x" and answer == "ok"


def test_a_write_refused_both_ways_moves_on(engine: ScriptedEngine, tmp_path: Path) -> None:
    writer = Tool("write_file", "", schema(("path", "content"), path=string(), content=string()))
    refuse: Handler = lambda a: ("Error: writing is not allowed here", False)  # noqa: E731
    script = {"steps": [{"path": "a.txt", "content": "x"}, {"path": "b.txt", "content": "y"}]}
    calls, _, answer = play(engine, [writer], {"write_file": refuse}, script=script)
    assert [args(c)["path"] for c in calls] == [
        "a.txt",
        "/workspace/a.txt",
        "b.txt",
        "/workspace/b.txt",
    ]
    assert answer == "Done."
    assert list(tmp_path.iterdir()) == []


def test_no_misfire_on_paths_or_shell_output_that_say_error(
    engine: ScriptedEngine, tmp_path: Path
) -> None:
    """A successful write that echoes a path with "error" in it is not a refusal, and a shell
    command printing "Error:" is not redone."""
    box = Box(tmp_path)
    writer = Tool("write", "", schema(("path", "content"), path=string(), content=string()))
    script = {
        "steps": [
            "echo 'Error: invalid input, failed'",
            {"path": "error/invalid.txt", "content": "e"},
        ],
        "answer": "ok",
    }
    handlers = {"bash": box.shell, "write": box.writer("path", "content")}
    calls, _, answer = play(engine, [SHELL, writer], handlers, script=script)
    assert [c.name for c in calls] == ["bash", "write"]
    assert answer == "ok" and (tmp_path / "error/invalid.txt").read_text() == "e"


def test_results_matched_by_position_when_ids_are_rewritten(engine: ScriptedEngine) -> None:
    """A harness that re-ids the calls it records still has its refusals read."""
    writer = Tool("write", "", schema(("path", "content"), path=string(), content=string()))
    script = {"steps": [{"path": "a.txt", "content": "x"}], "answer": "ok"}
    wire = Wire("chat", [SHELL, writer], "")
    call = ToolCall("harness_7", "write", json.dumps({"path": "a.txt", "content": "x"}))
    wire.add(call, "Error: permission denied", True)
    wire.items[-1]["tool_call_id"] = "other"
    _, [redo] = parse_tool_calls(ask(engine, wire.request(), script))
    assert redo.name == "bash" and "cat > a.txt" in args(redo)["command"]


def test_a_write_refused_by_the_error_flag_alone_is_redone(
    engine: ScriptedEngine, tmp_path: Path
) -> None:
    """Anthropic's ``is_error`` on a tool_result whose text reads like success: the flag is
    enough (the protocol layer keeps it on the message), so the shell redoes the step."""
    box = Box(tmp_path)
    writer = Tool(
        "write", "Write a file.", schema(("path", "content"), path=string(), content=string())
    )

    def quietly_refused(arguments: dict[str, Any]) -> tuple[str, bool]:
        return "ok", True  # an executor that sets the flag and says nothing useful

    handlers = {"bash": box.shell, "write": quietly_refused}
    calls, errors, _ = play(engine, [SHELL, writer], handlers, protocol="anthropic")
    assert errors[:2] == [False, True]
    assert [c.name for c in calls][:3] == ["bash", "write", "bash"]
    assert "cat > out/hello.txt" in args(calls[2])["command"]
    assert (tmp_path / "out/hello.txt").read_text() == "hi there\n"

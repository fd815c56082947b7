"""How the oracle reads tool contracts: write tools, path conventions, workspaces, refusals."""

from __future__ import annotations

import json
from typing import Any

import pytest

from forge.types import ChatRequest, Message, Tool, ToolCall
from serve.engines.scripted_tools import (
    find_shell_tool,
    find_write_tool,
    refused,
    wants_absolute,
    workspace_of,
)


def writer(name: str, desc: str = "", required: tuple[str, ...] = (), **params: Any) -> Tool:
    props = {
        k: v if isinstance(v, dict) else {"type": "string", "description": v}
        for k, v in params.items()
    }
    return Tool(name, desc, {"type": "object", "properties": props, "required": list(required)})


# The write tools the real harnesses offer (pi, openclaw, nanobot, react), as they describe them.
HARNESS_WRITERS = [
    writer("write", "Write content to a file.", ("path", "content"),
           path="Path to the file to write (relative or absolute)", content="Content to write"),
    writer("write", "Write/overwrite file; creates parent directories.", (),
           path="File path; relative/absolute.", content="File content."),
    writer("write_file", "Write content to a file.", ("path", "content"),
           path="The file path to write to", content="The content to write"),
    writer("write_file", "Write a text file.", ("path", "content"),
           path="Path of the file.", content="The full new content."),
]  # fmt: skip


@pytest.mark.parametrize("tool", HARNESS_WRITERS, ids=lambda t: t.description[:12])
def test_the_real_harnesses_write_tools_keep_relative_paths(tool: Tool) -> None:
    found = find_write_tool([tool])
    assert found is not None
    assert (found.path_key, found.content_key, found.fixed) == ("path", "content", {})
    assert not found.absolute


@pytest.mark.parametrize(
    ("desc", "path_desc", "want"),
    [
        ("Writes a file.", "The absolute path to the file (must be absolute, not relative)", True),
        ("Write a file. Relative paths are not supported.", "Where to write", True),
        ("", "Full path of the file, e.g. /home/user/a.txt", True),
        ("", "Absolute path to file or directory, e.g. `/repo/file.py`.", True),
        ("", "The path must start with /", True),
        ("", "Path relative to the workspace; absolute paths are rejected.", False),
        ("", "Either absolute or relative.", False),
        ("", "Paths can be absolute; they are resolved against the cwd", False),
        ("", "The path of the file", False),
    ],
)
def test_absolute_convention_from_descriptions(desc: str, path_desc: str, want: bool) -> None:
    tool = writer("write", desc, path=path_desc, content="")
    assert wants_absolute(tool, "path") is want


def test_absolute_convention_from_a_pattern() -> None:
    tool = writer("write", path={"type": "string", "pattern": "^/.+"}, content="")
    assert wants_absolute(tool, "path")
    assert find_write_tool([tool]).absolute  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("tool", "keys"),
    [
        (writer("writeFile", filePath="", text=""), ("filePath", "text")),
        (writer("create_file", target_file="", file_contents=""), ("target_file", "file_contents")),
        (writer("Write", file_path="", new_content=""), ("file_path", "new_content")),
        (writer("save_file", filename="", body=""), ("filename", "body")),
        (writer("write", absolute_path="", contents=""), ("absolute_path", "contents")),
        # By name shape, then by description; required wins over schema order.
        (writer("write_doc", out_file="", doc_text=""), ("out_file", "doc_text")),
        (writer("write", "", ("where", "what"), a="x", where="the file path", what="the content"),
         ("where", "what")),
        (writer("write", "", ("file", "data"), path="", file="", text="", data=""),
         ("file", "data")),
    ],
)  # fmt: skip
def test_path_and_content_parameters_by_the_tools_own_names(
    tool: Tool, keys: tuple[str, str]
) -> None:
    found = find_write_tool([tool])
    assert found is not None
    assert (found.path_key, found.content_key) == keys


def test_an_editor_tool_creates_files_through_its_create_action() -> None:
    editor = writer(
        "str_replace_based_edit_tool",
        "",
        ("command", "path"),
        command={"type": "string", "enum": ["view", "create", "str_replace"]},
        path="Absolute path to file or directory.",
        file_text="",
        old_str="",
        new_str="",
    )
    found = find_write_tool([editor])
    assert found is not None and found.absolute
    call = found.call("/w/a.txt", "x", "c1")
    assert json.loads(call.arguments) == {"command": "create", "path": "/w/a.txt", "file_text": "x"}
    # The editor's enum ``command`` is not a shell; a dedicated write tool beats the editor.
    assert find_shell_tool([editor]) is None
    plain = writer("write_file", path="", content="")
    assert find_write_tool([editor, plain]).tool is plain  # type: ignore[union-attr]


def test_required_extras_are_filled_only_where_the_schema_says_how() -> None:
    tool = writer(
        "write",
        "",
        ("path", "content", "mode", "overwrite"),
        path="",
        content="",
        mode={"type": "string", "enum": ["append", "overwrite"]},
        overwrite={"type": "boolean"},
    )
    found = find_write_tool([tool])
    assert found is not None and found.fixed == {"mode": "overwrite", "overwrite": True}
    unfillable = writer(
        "write", "", ("path", "content", "n"), path="", content="", n={"type": "integer"}
    )
    assert find_write_tool([unfillable]) is None
    # Not a writer: no content parameter, or a name that does not write.
    assert find_write_tool([writer("write_todos", todos=""), writer("read_file", path="")]) is None


@pytest.mark.parametrize(
    ("messages", "script", "want"),
    [
        ([Message("user", "<environment_context><cwd>/srv/ws</cwd>")], {}, "/srv/ws"),
        ([Message("system", "...\nCurrent working directory: /tmp/a/ws")], {}, "/tmp/a/ws"),
        ([Message("system", "Your workspace is at `/data/ws/`.")], {}, "/data/ws"),
        ([Message("system", "Working directory: /w."), Message("user", "cwd=/x")], {}, "/w"),
        ([Message("user", "Put it in /workspace/out and list /workspace/x")], {}, "/workspace"),
        ([Message("system", "Current working directory: /a")], {"workspace": "/given"}, "/given"),
        ([Message("user", "go")], {}, "/workspace"),
    ],
)  # fmt: skip
def test_the_workspace_the_agent_sees(
    messages: list[Message], script: dict[str, Any], want: str
) -> None:
    assert workspace_of(ChatRequest(messages=messages, script=script)) == want


CALL = ToolCall("c", "write", json.dumps({"path": "logs/error_invalid.txt", "content": "e"}))


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("Successfully wrote 6 bytes to logs/error_invalid.txt", False),
        ("wrote 6 characters to /w/logs/error_invalid.txt", False),
        ("File created successfully at: logs/error_invalid.txt", False),
        ('{"ok": true, "path": "logs/error_invalid.txt", "error": null}', False),
        ("", False),
        ("Error: path must be absolute", True),
        ("<tool_use_error>File has not been read yet.</tool_use_error>", True),
        ("Writing outside the workspace is not allowed", True),
        ("Permission denied: logs/error_invalid.txt", True),
        ('{"error": "EACCES"}', True),
        ('{"success": false}', True),
        ("Validation failed for tool write: content is required", True),
    ],
)
def test_refusals_are_read_from_the_write_result(text: str, want: bool) -> None:
    assert refused(CALL, Message("tool", text, tool_call_id="c"), "path") is want


def test_an_explicit_error_flag_is_a_refusal_whatever_the_text() -> None:
    """Where the protocol layer keeps Anthropic's ``is_error`` on the message, it counts."""
    result = Message("tool", "not now", tool_call_id="c")
    assert not refused(CALL, result)
    result.is_error = True  # type: ignore[attr-defined]
    assert refused(CALL, result)
    assert not refused(CALL, None)

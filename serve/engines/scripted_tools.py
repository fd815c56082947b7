"""How the scripted engine (the oracle) reads the harness's tools and their results.

Each tool is read by its own contract, the JSON schema and descriptions the harness sends:

- a **shell** tool: a function tool whose name names a shell and that has a free string command
  parameter (not an enum: ``command`` of an editor tool is an action, not a shell line);
- a **write** tool: named to write or create a file (``write``, ``write_file``, ``Write``,
  ``create_file``, ``writeFile``...), or an editor-style tool whose string parameter is an enum
  holding ``create`` (``str_replace_based_edit_tool``; it is called with that action). Its path
  and content parameters are found by name (``path``, ``file_path``, ``filePath``,
  ``target_file``, ``absolute_path``...; ``content``, ``contents``, ``text``, ``file_text``,
  ``new_content``, ``body``...), then by name shape, then by description; a parameter listed in
  ``required`` is preferred. Other required parameters are filled only where the schema says how
  (an enum, a boolean); a write tool with any other required parameter is not used;
- a **finish** tool, by name.

Path convention: a write tool gets an absolute path under the workspace when its contract asks
for one: a path ``pattern`` anchored at ``/``, or a description (the tool's or the path
parameter's) that says absolute ("The absolute path to the file", "must be absolute", "full
path", "relative paths are not supported") once neutral wording ("relative or absolute",
"relative/absolute", "can be absolute") is set aside, and unless it says paths must be relative.
Otherwise the step's workspace-relative path is sent as it is. The workspace is, in order: the
script's ``workspace`` if the request carries one, the first working directory the system (then
user) messages state (``<cwd>/w</cwd>``, "Current working directory: /w", "Your workspace is
/w"), else :data:`DEFAULT_WORKSPACE`, the fixed workspace of the isolated sandboxes.

Refusals: a write-tool result is judged refused when the tool result message carries an error
flag (``is_error``, where the protocol layer keeps it) or its text reads as a refusal ("Error:
...", ``<tool_use_error>``, "not allowed", "must be absolute", "denied", "invalid", "failed",
``{"error": ...}``...), judged after the call's path is taken out of it (a path may say "error") and
unless it opens with a success word ("Successfully wrote ..."). Shell results are never judged
from their text: a command may well print "error" and still have done its step.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from forge.types import ChatRequest, Message, Tool, ToolCall

SHELL_NAMES = ("shell", "bash", "exec", "command", "terminal", "run", "sh")
SHELL_PARAMS = ("command", "cmd", "script", "commands", "input")
FINISH_NAMES = ("finish", "submit", "final_answer", "done")
DEFAULT_WORKSPACE = "/workspace"

# Names are compared lower-cased without separators: ``filePath`` == ``file_path``.
WRITE_NAMES = ("write", "writefile", "createfile", "filewrite", "writetofile", "savefile")
WRITE_HINTS = ("write", "createfile", "savefile", "putfile", "newfile")
WRITE_ACTIONS = ("create", "write", "overwrite")
PATH_PARAMS = (
    "path",
    "filepath",
    "absolutepath",
    "targetfile",
    "filename",
    "file",
    "fullpath",
    "abspath",
    "targetpath",
    "destinationpath",
    "destpath",
    "outputpath",
    "relativepath",
    "destination",
    "target",
)
CONTENT_PARAMS = (
    "content",
    "contents",
    "text",
    "filetext",
    "newcontent",
    "newcontents",
    "filecontent",
    "filecontents",
    "body",
    "data",
    "code",
    "newtext",
    "source",
)


def norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def props(tool: Tool) -> dict[str, Any]:
    p = tool.parameters.get("properties") if isinstance(tool.parameters, dict) else None
    return p if isinstance(p, dict) else {}


def required(tool: Tool) -> list[str]:
    r = tool.parameters.get("required") if isinstance(tool.parameters, dict) else None
    return [x for x in r if isinstance(x, str)] if isinstance(r, list) else []


def _is_string(spec: Any) -> bool:
    if not isinstance(spec, dict):
        return False
    kind = spec.get("type")
    return kind in ("string", None) or (isinstance(kind, list) and "string" in kind)


def _describes(spec: dict[str, Any]) -> str:
    return " ".join(str(spec.get(k) or "") for k in ("title", "description"))


def find_shell_tool(tools: list[Tool]) -> tuple[Tool, str] | None:
    """A tool that runs a shell command, and the name of its command parameter."""
    for tool in tools:
        if tool.kind != "function" or not any(s in tool.name.lower() for s in SHELL_NAMES):
            continue
        specs = props(tool)
        for name in SHELL_PARAMS:
            spec = specs.get(name)
            if _is_string(spec) and "enum" not in spec:
                return tool, name
    return None


def find_finish_tool(tools: list[Tool]) -> Tool | None:
    return next((t for t in tools if t.kind == "function" and t.name.lower() in FINISH_NAMES), None)


@dataclass(frozen=True)
class Writer:
    """A write tool as its contract describes it."""

    tool: Tool
    path_key: str
    content_key: str
    fixed: dict[str, Any] = field(default_factory=dict)  # e.g. {"command": "create"}
    absolute: bool = False  # the contract asks for an absolute path

    def call(self, path: str, content: str, call_id: str) -> ToolCall:
        args = {**self.fixed, self.path_key: path, self.content_key: content}
        return ToolCall(call_id, self.tool.name, json.dumps(args, ensure_ascii=False))


def _pick(
    tool: Tool,
    names: tuple[str, ...],
    shape: re.Pattern[str],
    words: re.Pattern[str],
    skip: set[str],
) -> str | None:
    """The best string parameter for a role: one matched by name (a known name or its shape)
    before one matched by description only; then a required one first; then a known name before
    a shape; then schema order."""
    need = set(required(tool))
    ranked: list[tuple[bool, bool, int, int, str]] = []
    for i, (key, spec) in enumerate(props(tool).items()):
        if key in skip or not _is_string(spec) or "enum" in spec:
            continue
        n = norm(key)
        if n in names:
            tier = 0
        elif shape.search(n):
            tier = 1
        elif words.search(_describes(spec)):
            tier = 2
        else:
            continue
        ranked.append((tier > 1, key not in need, tier, i, key))
    return min(ranked)[-1] if ranked else None


_PATH_SHAPE = re.compile(r"(path|file|filename)$")
_PATH_WORDS = re.compile(r"\b(path|file ?name)\b", re.IGNORECASE)
_CONTENT_SHAPE = re.compile(r"content|text|body")
_CONTENT_WORDS = re.compile(r"\b(contents?|text)\b", re.IGNORECASE)

_NEUTRAL = re.compile(
    r"(relative|absolute)\s*(/|,|\bor\b|\band\b)\s*(an?\s+)?(relative|absolute)"
    r"|\b(either|both)\s+(an?\s+)?(relative|absolute)"
    r"|\b(can|may)\s+(also\s+)?be\s+(an?\s+)?(relative|absolute)"
    r"|absolute\s+paths?\s+(are|is)\s+(also\s+)?(allowed|accepted|supported|fine|ok)",
    re.IGNORECASE,
)
_RELATIVE_ONLY = re.compile(
    r"must\s+(not\s+be\s+(an?\s+)?absolute|be\s+(a\s+)?relative)"
    r"|absolute\s+paths?\s+(are|is)\s+(not\b|rejected|refused|forbidden|disallowed)"
    r"|\bno\s+absolute\b|\brelative\s+paths?\s+only\b|\bnot\s+(an?\s+)?absolute\b",
    re.IGNORECASE,
)
_ABSOLUTE = re.compile(
    r"\babsolute\b|\bfull\s+path\b|\bnot\s+relative\b"
    r"|relative\s+paths?\s+(are|is)\s+not\b|must\s+(start|begin)\s+with\s+[`'\"]?/",
    re.IGNORECASE,
)


def wants_absolute(tool: Tool, path_key: str) -> bool:
    """Whether a write tool's contract asks for an absolute path (see the module doc)."""
    spec = props(tool).get(path_key) or {}
    pattern = str(spec.get("pattern") or "")
    if pattern.startswith(("^/", "^\\/")):
        return True
    text = _NEUTRAL.sub(" ", f"{tool.description} {_describes(spec)}")
    return not _RELATIVE_ONLY.search(text) and bool(_ABSOLUTE.search(text))


def _fill(tool: Tool, key: str) -> tuple[bool, Any]:
    """A value for a required parameter that is neither path nor content, where the schema says
    how: (False, None) when it does not."""
    spec = props(tool).get(key)
    if not isinstance(spec, dict):
        return False, None
    enum = spec.get("enum")
    if isinstance(enum, list) and enum:
        return True, next((v for v in WRITE_ACTIONS if v in enum), enum[0])
    if spec.get("type") == "boolean":
        return True, any(w in norm(key) for w in ("overwrite", "create", "parent", "force"))
    return False, None


def _writer(tool: Tool) -> tuple[int, Writer] | None:
    """The tool as a writer, with its rank (lower is better), or None."""
    if tool.kind != "function":
        return None
    name = norm(tool.name)
    action = next(
        (
            k
            for k, s in props(tool).items()
            if _is_string(s) and isinstance(s.get("enum"), list) and "create" in s["enum"]
        ),
        None,
    )
    if name in WRITE_NAMES:
        rank = 0
    elif any(h in name for h in WRITE_HINTS):
        rank = 1
    elif action is not None:
        rank = 2
    else:
        return None
    fixed: dict[str, Any] = {action: "create"} if action else {}
    path = _pick(tool, PATH_PARAMS, _PATH_SHAPE, _PATH_WORDS, set(fixed))
    if path is None:
        return None
    content = _pick(tool, CONTENT_PARAMS, _CONTENT_SHAPE, _CONTENT_WORDS, {path, *fixed})
    if content is None:
        return None
    for key in required(tool):
        if key not in (path, content, *fixed):
            ok, value = _fill(tool, key)
            if not ok:
                return None
            fixed[key] = value
    return rank, Writer(tool, path, content, fixed, wants_absolute(tool, path))


def find_write_tool(tools: list[Tool]) -> Writer | None:
    """The best tool for writing a whole file: a dedicated write tool first, an editor's
    ``create`` action last; ties go to the order the harness lists them in."""
    found = [(w[0], i, w[1]) for i, t in enumerate(tools) if (w := _writer(t)) is not None]
    return min(found, key=lambda x: x[:2])[2] if found else None


_CWD = (
    re.compile(r"<cwd>\s*(/[^<\s]*)\s*</cwd>"),
    re.compile(
        r"(?:working|current)\s+directory(?:\s+is)?(?:\s*[:=]\s*|\s+)[`'\"]?(/[^\s`'\"<>]*)",
        re.IGNORECASE,
    ),
    re.compile(r"\bcwd\s*[:=]\s*[`'\"]?(/[^\s`'\"<>]*)", re.IGNORECASE),
    re.compile(
        r"(?<![/\w.-])workspace(?:\s+(?:directory|dir|root|path|folder))?"
        r"(?:\s*[:=]\s*|\s+(?:is\s+)?(?:(?:located\s+)?at\s+|in\s+)?)[`'\"]?(/[^\s`'\"<>]*)",
        re.IGNORECASE,
    ),
)


def workspace_of(chat: ChatRequest) -> str:
    """The workspace as the agent sees it (see the module doc)."""
    given = (chat.script or {}).get("workspace")
    if isinstance(given, str) and given.startswith("/"):
        return given.rstrip("/") or "/"
    for role in ("system", "user"):
        for message in chat.messages:
            if message.role != role:
                continue
            for pattern in _CWD:
                m = pattern.search(message.content)
                if m:
                    path = m.group(1).rstrip(".,;:)]}")
                    return path.rstrip("/") or "/"
    return DEFAULT_WORKSPACE


def absolute(path: str, workspace: str) -> str:
    return path if path.startswith("/") else posixpath.normpath(posixpath.join(workspace, path))


def heredoc(path: str, content: str) -> str:
    marker = "FORGE_EOF"
    while marker in content:
        marker += "_"
    body = content if content.endswith("\n") else content + "\n"
    q = shlex.quote(path)
    parent = f'mkdir -p "$(dirname {q})" && ' if "/" in path else ""
    return f"{parent}cat > {q} <<'{marker}'\n{body}{marker}"


_REFUSAL = re.compile(
    r"^[\s\[(<*!]*(error|failed|failure|exception|refused|denied|invalid|cannot|can't|unable)\b"
    r"|<tool_use_error>|\berror\s*:|\bnot\s+(allowed|permitted|supported)\b"
    r"|must\s+be\s+(an?\s+)?(absolute|relative)|\bis\s+not\s+(an?\s+)?(absolute|relative)\b"
    r"|\brefused\b|\bdenied\b|\binvalid\b|\bfailed\b|no\s+such\s+file"
    r"|outside\s+(of\s+)?the\s+(workspace|working\s+directory|sandbox|project|allowed)"
    r"|traceback\s+\(most\s+recent"
    r'|"(is_?error|isError)"\s*:\s*true|"(success|ok)"\s*:\s*false'
    r'|"error"\s*:(?!\s*(null|false|""|\{\}|\[\]))',
    re.IGNORECASE,
)
_SUCCESS = re.compile(
    r"^\s*(successfully|success\b|ok\b|wrote\b|written\b|created\b|saved\b|updated\b|"
    r"file\s+(created|written|saved|updated)\b)",
    re.IGNORECASE,
)


def flagged(result: Message) -> bool:
    """The result message carries an explicit error flag (Anthropic ``is_error``) where the
    protocol layer keeps one."""
    return getattr(result, "is_error", None) is True


def refused(call: ToolCall, result: Message | None, path_key: str | None = None) -> bool:
    """Whether a write-tool call's result reads as a refusal (see the module doc); the value of
    ``path_key`` in the call is taken out of the text first (a path may well say "error")."""
    if result is None:
        return False
    if flagged(result):
        return True
    text = result.content or ""
    try:
        args = json.loads(call.arguments)
    except ValueError:
        args = {}
    path = args.get(path_key) if isinstance(args, dict) and path_key else None
    if isinstance(path, str) and path:
        text = text.replace(path, " ")
    return not _SUCCESS.search(text) and bool(_REFUSAL.search(text))

"""A plain ReAct agent: the "react" harness program, run inside the sandbox.

Standard library only (it runs on the sandbox's system Python). Configuration from the
environment: OPENAI_BASE_URL (ends in /v1), OPENAI_API_KEY, FORGE_MODEL, FORGE_MAX_TURNS
(default 20), optional FORGE_TEMPERATURE, FORGE_MAX_TOKENS, FORGE_TOOL_TIMEOUT (s, default 120),
FORGE_REQUEST_TIMEOUT (s, default 600), FORGE_TOOLS (comma-separated subset of the tools offered;
empty: none, a plain chat) and FORGE_SYSTEM_PROMPT (replaces the default; empty: no system
message). The instruction is argv[1] or FORGE_INSTRUCTION. When the task has services
(FORGE_SERVICES_URL and FORGE_SERVICES_KEY, ``tasks.services``), each of their operations is one
more tool, ``SERVICE_OP`` (``mail_send``), unless FORGE_SERVICE_TOOLS is 0.

It calls {base}/chat/completions with tools shell, read_file, write_file and finish, runs the
tool calls in the working directory, and stops on finish, on an answer without tool calls, or at
the turn limit. Its last stdout line is JSON: {"final_answer", "turns", "stop"}. Exit status 0,
or 3 when the model endpoint fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

SYSTEM_PROMPT = (
    "You are an autonomous agent working in a Linux sandbox. Your current directory is the "
    "task's workspace. Use the tools to inspect and change files and run commands. Work step "
    "by step; when the task is done, call finish with your final answer."
)
OUTPUT_LIMIT = 8000  # characters of each tool output sent back to the model
READ_LIMIT = 50000
RETRIES_503 = 5

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": desc,
            "parameters": {
                "type": "object",
                "properties": {p: {"type": "string", "description": d} for p, d in params},
                "required": [p for p, _ in params],
            },
        },
    }
    for name, desc, params in [
        (
            "shell",
            "Run a shell command in the workspace; returns exit code, stdout and stderr.",
            [("command", "The command line to run.")],
        ),
        ("read_file", "Read a text file.", [("path", "Path of the file.")]),
        (
            "write_file",
            "Write a text file, creating parent directories; replaces existing content.",
            [("path", "Path of the file."), ("content", "The full new content.")],
        ),
        ("finish", "End the task with your final answer.", [("answer", "The final answer.")]),
    ]
]


class ModelError(Exception):
    pass


def _clip(text: str, limit: int = OUTPUT_LIMIT) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit} characters omitted ...]\n{text[-half:]}"


def run_shell(command: str, timeout_s: float) -> str:
    shell = ["bash", "-c", command] if shutil.which("bash") else ["sh", "-c", command]
    proc = subprocess.Popen(
        shell,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
        status = f"exit code: {proc.returncode}"
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        status = f"timed out after {timeout_s:g}s (killed)"
    return (
        f"{status}\nstdout:\n{_clip(out.decode(errors='replace'))}\n"
        f"stderr:\n{_clip(err.decode(errors='replace'))}"
    )


def run_tool(name: str, raw_args: Any, tool_timeout: float) -> str:
    """One tool call's observation; bad arguments become an error message for the model."""
    try:
        args = tool_arguments(name, raw_args)
    except ValueError as e:
        return f"error: {e}"
    required = {"shell": ["command"], "read_file": ["path"], "write_file": ["path", "content"]}
    if name not in required:
        return f"error: unknown tool {name!r}; tools: shell, read_file, write_file, finish"
    missing = [k for k in required[name] if not isinstance(args.get(k), str)]
    if missing:
        return f"error: {name} needs string argument(s): {', '.join(missing)}"
    try:
        if name == "shell":
            return run_shell(args["command"], tool_timeout)
        if name == "read_file":
            with open(args["path"], encoding="utf-8", errors="replace") as f:
                return _clip(f.read(), READ_LIMIT)
        path = args["path"]
        if os.path.dirname(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(args["content"])
        return f"wrote {len(args['content'])} characters to {path}"
    except OSError as e:
        return f"error: {e}"


def chat(base: str, key: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    """POST one chat completion; retries 503 (honouring Retry-After); ModelError otherwise."""
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for attempt in range(RETRIES_503 + 1):
        req = urllib.request.Request(f"{base}/chat/completions", data, headers, method="POST")
        try:
            with opener.open(req, timeout=timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")[:2000]
            if e.code == 503 and attempt < RETRIES_503:
                try:
                    wait = float(e.headers.get("Retry-After", "1"))
                except ValueError:
                    wait = 1.0
                time.sleep(min(max(wait, 0.0), 30.0))
                continue
            raise ModelError(f"HTTP {e.code} from model endpoint: {detail}") from e
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise ModelError(f"model endpoint failed: {e}") from e
    raise ModelError("model endpoint kept answering 503")


def services(env: dict[str, str], path: str = "", body: Any = None) -> Any:
    """One request to the task's services (``tasks.services``): the catalog (GET) or an
    operation (POST); urllib's HTTPError on a refusal."""
    req = urllib.request.Request(
        env["FORGE_SERVICES_URL"].rstrip("/") + path,
        None if body is None else json.dumps(body).encode(),
        {
            "Content-Type": "application/json",
            "Authorization": f"Bearer {env.get('FORGE_SERVICES_KEY', '')}",
            "X-Forge-Via": "tool",
        },
        method="GET" if body is None else "POST",
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=60) as resp:
        return json.loads(resp.read())


def service_tools(env: dict[str, str]) -> dict[str, tuple[str, str, dict[str, Any]]]:
    """The services' operations as tools: name -> (service, op, tool definition)."""
    if not env.get("FORGE_SERVICES_URL") or env.get("FORGE_SERVICE_TOOLS") == "0":
        return {}
    try:
        catalog = services(env)
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise ModelError(f"the task's services could not be reached: {e}") from e
    out = {}
    for entry in catalog:
        for op in entry["ops"]:
            name = f"{entry['service']}_{op['name']}"
            function = {
                "name": name,
                "description": f"{entry['service']}: {op['description']}",
                "parameters": op["parameters"],
            }
            out[name] = (entry["service"], op["name"], {"type": "function", "function": function})
    return out


def run_service_tool(env: dict[str, str], service: str, op: str, raw_args: Any) -> str:
    try:
        args = tool_arguments(f"{service}_{op}", raw_args)
        return json.dumps(services(env, f"/{service}/{op}", args), ensure_ascii=False)
    except urllib.error.HTTPError as e:
        try:
            detail = json.loads(e.read())["error"]["message"]
        except (ValueError, KeyError, TypeError):
            detail = f"HTTP {e.code}"
        return f"error: {detail}"
    except (urllib.error.URLError, OSError, ValueError) as e:
        return f"error: {e}"


def tool_arguments(name: str, raw: Any) -> dict[str, Any]:
    """A tool call's arguments as a dict (none given: {}); ValueError with the reason, worded
    for the model, when they are not a JSON object."""
    if raw in (None, ""):
        return {}
    try:
        args = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError as e:
        raise ValueError(f"arguments of {name} are not valid JSON: {e}") from e
    if not isinstance(args, dict):
        raise ValueError(f"arguments of {name} must be a JSON object")
    return args


def request_body(env: dict[str, str], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """What every request carries besides the messages: the model, the tools offered (no
    ``tools`` key when there are none), and FORGE_TEMPERATURE and FORGE_MAX_TOKENS when set."""
    body: dict[str, Any] = {"model": env.get("FORGE_MODEL", "policy")}
    if tools:
        body["tools"] = tools
    if env.get("FORGE_TEMPERATURE"):
        body["temperature"] = float(env["FORGE_TEMPERATURE"])
    if env.get("FORGE_MAX_TOKENS"):
        body["max_tokens"] = int(env["FORGE_MAX_TOKENS"])
    return body


def ask(
    base: str, key: str, body: dict[str, Any], messages: list[dict[str, Any]], timeout: float
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One model turn: the reply's message and its tool calls; ModelError when malformed."""
    reply = chat(base, key, {**body, "messages": messages}, timeout)
    try:
        message = reply["choices"][0]["message"]
    except (KeyError, IndexError, TypeError) as e:
        raise ModelError(f"malformed completion: {json.dumps(reply)[:2000]}") from e
    return message, message.get("tool_calls") or []


def as_assistant(message: dict[str, Any]) -> dict[str, Any]:
    """A reply's message as it goes back into the conversation."""
    kept = {k: v for k, v in message.items() if v is not None or k == "content"}
    return {**kept, "role": "assistant"}


def instruction_arg(argv: list[str], program: str) -> str:
    """The instruction: argv[1] or FORGE_INSTRUCTION (the caller exits 2 when it is empty)."""
    instruction = argv[1] if len(argv) > 1 else os.environ.get("FORGE_INSTRUCTION", "")
    if not instruction:
        print(f"{program}: no instruction (argv[1] or FORGE_INSTRUCTION)", file=sys.stderr)
    return instruction


def report(record: dict[str, Any]) -> None:
    """The program's last stdout line: its summary as JSON."""
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def agent(
    instruction: str, env: dict[str, str], progress: dict[str, int]
) -> tuple[str | None, int, str]:
    """The ReAct loop; returns (final answer, turns, stop reason). ``progress["turns"]`` counts
    the model calls answered so far, for the report when the endpoint fails."""
    base = env.get("OPENAI_BASE_URL", "").rstrip("/")
    key = env.get("OPENAI_API_KEY", "")
    max_turns = int(env.get("FORGE_MAX_TURNS", "20"))
    tool_timeout = float(env.get("FORGE_TOOL_TIMEOUT", "120"))
    request_timeout = float(env.get("FORGE_REQUEST_TIMEOUT", "600"))
    tools = TOOLS
    if "FORGE_TOOLS" in env:
        wanted = {t.strip() for t in env["FORGE_TOOLS"].split(",") if t.strip()}
        tools = [t for t in TOOLS if t["function"]["name"] in wanted]
    offered = service_tools(env)
    body = request_body(env, tools + [t for _, _, t in offered.values()])
    system = env.get("FORGE_SYSTEM_PROMPT", SYSTEM_PROMPT)
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": instruction})
    last_text: str | None = None
    for turn in range(1, max_turns + 1):
        message, calls = ask(base, key, body, messages, request_timeout)
        progress["turns"] = turn
        last_text = message.get("content") or last_text
        if not calls:
            return message.get("content") or "", turn, "answer"
        messages.append(as_assistant(message))
        for call in calls:
            fn = call.get("function") or {}
            name, raw = fn.get("name", ""), fn.get("arguments", "")
            if name == "finish":
                try:
                    answer = json.loads(raw) if isinstance(raw, str) else raw
                except ValueError:
                    answer = None
                if isinstance(answer, dict) and isinstance(answer.get("answer"), str):
                    return answer["answer"], turn, "finish"
                result = "error: finish needs a string argument: answer"
            elif name in offered:
                result = run_service_tool(env, offered[name][0], offered[name][1], raw)
            else:
                result = run_tool(name, raw, tool_timeout)
            messages.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": result})
    return last_text, max_turns, "max_turns"


def main(argv: list[str]) -> int:
    instruction = instruction_arg(argv, "react_agent")
    if not instruction:
        return 2
    progress = {"turns": 0}
    try:
        answer, turns, stop = agent(instruction, dict(os.environ), progress)
        code = 0
    except ModelError as e:
        print(f"react_agent: {e}", file=sys.stderr)
        answer, turns, stop, code = None, progress["turns"], "error", 3
    report({"final_answer": answer, "turns": turns, "stop": stop})
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))

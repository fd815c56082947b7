"""CommandHarness: any CLI agent described by config alone (``harness: command``).

The options say what to mount, which files and environment point the agent at the attempt's
proxy, the command line of one episode, and where its final answer is. Strings may hold these
placeholders, replaced per attempt (any other braces are left alone, so JSON stays JSON):

    {base_url}            the attempt's OpenAI-style base URL (ends in /v1)
    {anthropic_base_url}  the same without /v1
    {api_key}             the attempt's key
    {model}               the model name to ask for
    {instruction}         the task's instruction
    {workspace}           the workspace as the agent sees it
    {home}                the sandbox's home directory
    {max_turns}           the task's turn limit
    {timeout_s}           the task's time limit in seconds (an integer when whole)
    {path}                the sandbox's default PATH, e.g. env: {PATH: "/opt/a/bin:{path}"}
    {mcp_servers}         the task's services as MCP servers, a JSON object: name -> {command,
                          args, env} (stdio) and {url, headers} (streamable HTTP), and the
                          task's own MCP servers (name -> {transport, url} or {transport,
                          command, args}); {} if none
    {skills_dir}          the task's own skills folder when it has one (Harbor's skills_dir),
                          else a folder with a SKILL.md for each of the task's services (their
                          command-line tools, which are on PATH)

Example (``examples/command-harness.yaml`` runs the built-in ReAct program this way)::

    harness: command
    harness_options:
      name: my-agent
      mounts: {/opt/my-agent: /opt/my-agent}   # host (relative: to the cwd) -> sandbox, read-only
      files: {"{home}/.my-agent.json": '{"url": "{base_url}", "key": "{api_key}"}'}
      env: {MY_AGENT_MODEL: "{model}"}
      command: [/opt/my-agent/bin/agent, --yes, "{instruction}"]
      answer: {json_field: final_answer}

``answer`` (``forge/harnesses/command_answer.py``): ``{last_line: true}`` (the default),
``{json_field: F}``, ``{json_path: content.-1.text, where: {type: message}}`` (JSON lines or one
JSON document on stdout) or ``{file: answer.txt}`` (a file the agent writes; it may take one of
the other readings too). Mount sources must exist, and ``files`` and ``answer.file`` must lie
under {workspace} or {home}: both are checked when the config is read.

A program that is a link out of its mount (a venv's ``bin/python`` -> ``/home/u/.pyenv/...``)
exists on the host but perhaps not in the sandbox, where running it would fail with a bare "No
such file or directory" for the path that is there. Such a command starts through ``/bin/sh``,
which runs the program if the sandbox has the link's target and otherwise exits 127 naming the
link and its missing target.
"""

from __future__ import annotations

import json
import posixpath
import re
from pathlib import Path, PurePosixPath
from typing import Any

from forge.harnesses.app_tools import SKILLS_DIR, mcp_servers, skills
from forge.harnesses.base import AttemptContext
from forge.harnesses.command_answer import AnswerSpec, sandbox_path_problem
from forge.harnesses.task_tools import servers, skills_dir
from forge.sandboxes.base import ExecResult
from forge.sandboxes.bwrap import HOME
from tasks.mcp import TRANSPORTS

PLACEHOLDER = re.compile(
    r"\{(base_url|anthropic_base_url|api_key|model|instruction|workspace|home|max_turns"
    r"|timeout_s|path|mcp_servers|skills_dir)\}"
)
PROTOCOLS = ("chat", "responses", "anthropic")
NOT_READ = object()  # final_answer was not handed the answer file


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _own_servers(ctx: AttemptContext) -> dict[str, dict[str, Any]]:
    """The task's own MCP servers, by name, without their name."""
    return {s["name"]: {k: v for k, v in s.items() if k != "name" and v} for s in servers(ctx)}


def fill(template: str, ctx: AttemptContext) -> str:
    """``template`` with the attempt's values in place of the placeholders."""
    values = {
        "base_url": ctx.base_url,
        "anthropic_base_url": ctx.anthropic_base_url,
        "api_key": ctx.api_key,
        "model": ctx.model,
        "instruction": ctx.instruction,
        "workspace": ctx.workspace,
        "home": ctx.path(HOME),
        "max_turns": str(ctx.max_turns),
        "timeout_s": _number(ctx.timeout_s),
        "path": ctx.path_var,
        "mcp_servers": json.dumps({**mcp_servers(ctx), **_own_servers(ctx)}),
        "skills_dir": ctx.path(skills_dir(ctx) or SKILLS_DIR),
    }
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


# $1: the link, $2: its target, $0: the program, then its arguments
LINK_GUARD = (
    'link=$1 target=$2; shift 2; [ -e "$0" ] && exec "$0" "$@"; '
    "printf 'command: cannot run %s: %s is a link to %s, which this sandbox does not have "
    "(mount it, or the folder it is in, with harness_options.mounts)\\n' "
    '"$0" "$link" "$target" >&2; exit 127'
)
MAX_LINKS = 40  # as the kernel's ELOOP limit


def _host_path(path: str, mounts: dict[str, str]) -> str | None:
    """The host path of sandbox ``path`` under one of ``mounts`` (host -> sandbox), None if it
    is under none of them."""
    by_depth = sorted(
        ((host, posixpath.normpath(target)) for host, target in mounts.items()),
        key=lambda m: len(m[1]),
        reverse=True,
    )
    for host, target in by_depth:  # the deepest mount that holds it
        if path == target or path.startswith(target.rstrip("/") + "/"):
            rest = path[len(target) :].lstrip("/")
            return str(Path(host) / rest) if rest else host
    return None


def link_out_of_mounts(path: str, mounts: dict[str, str]) -> tuple[str, str] | None:
    """``(link, target)``: the first link met resolving sandbox ``path`` (component by
    component, through ``mounts``: host -> sandbox) whose target lies under none of the mounts,
    so that the sandbox may not have it; None when every link stays in the mounts or ``path``
    is not in one."""
    roots = {posixpath.normpath(m) for m in mounts.values()}
    pending = list(PurePosixPath(posixpath.normpath(path)).parts[1:])
    done, hops = "/", 0
    while pending:
        current = posixpath.join(done, pending.pop(0))
        host = _host_path(current, mounts)
        if host is None:
            if any(root.startswith(current + "/") for root in roots):
                done = current  # a folder the sandbox made to hold a mount
                continue
            return None  # the sandbox's own file system: not ours to judge
        try:  # a mount's own root is what its source resolves to: never a link in the sandbox
            link = None if current in roots else str(Path(host).readlink())
        except OSError:  # not a link (or not there: the sandbox will say so)
            link = None
        if link is None:
            done = current
            continue
        hops += 1
        if hops > MAX_LINKS:
            return None
        target = posixpath.normpath(posixpath.join(done, link))
        if _host_path(target, mounts) is None:
            return current, target
        pending = list(PurePosixPath(target).parts[1:]) + pending
        done = "/"
    return None


def _strings(option: str, value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ValueError(f"{option}: a mapping of strings to strings")
    return dict(value)


class CommandHarness:
    source = "any CLI agent described in harness_options"
    takes_skills = True  # {skills_dir}
    mcp_transports = TRANSPORTS  # {mcp_servers}

    def __init__(
        self,
        command: list[str],
        name: str = "command",
        protocol: str = "chat",
        mounts: dict[str, str] | None = None,
        files: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
        answer: dict[str, Any] | None = None,
    ) -> None:
        """``command``: the episode's argv (placeholders allowed). ``protocol``: the wire
        protocol the agent speaks (chat, responses, anthropic). ``mounts``: host path ->
        sandbox path, read-only. ``files``: sandbox path -> content, written before the episode
        (paths under {home} or the workspace). ``env``: extra environment. ``answer``: where
        the final answer is (see ``forge/harnesses/command_answer.py``)."""
        if (
            not isinstance(command, list)
            or not command
            or not all(isinstance(a, str) for a in command)
        ):
            raise ValueError("command: a non-empty list of strings")
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol: {protocol!r} is not one of {', '.join(PROTOCOLS)}")
        self.name, self.protocol = name, protocol
        self.argv = list(command)
        self.mounts = _strings("mounts", mounts)
        self.templates = _strings("files", files)
        for path in self.templates:
            if problem := sandbox_path_problem(path):
                raise ValueError(f"files: {problem}")
        self.extra_env = _strings("env", env)
        self.answer = AnswerSpec(answer)

    @staticmethod
    def normalize_options(options: dict[str, Any]) -> dict[str, Any]:
        """Relative mount sources made absolute against the cwd of whoever reads the config
        (the driver), not of the pod that runs the attempt; a source that does not exist stops
        the run here, not as a failed sandbox in every episode."""
        mounts = options.get("mounts")
        if not isinstance(mounts, dict):
            return options
        resolved = {}
        for host, target in mounts.items():
            path = Path(str(host)).expanduser().resolve()
            if not path.exists():
                where = "" if Path(str(host)).is_absolute() else f" (relative to {Path.cwd()})"
                raise ValueError(f"mounts: {str(host)!r} does not exist{where}")
            resolved[str(path)] = target
        return {**options, "mounts": resolved}

    def ro_mounts(self) -> dict[str, str]:
        return self.mounts

    def files(self, ctx: AttemptContext) -> dict[str, str]:
        files = {fill(path, ctx): fill(content, ctx) for path, content in self.templates.items()}
        return {**skills(ctx), **files}

    def env(self, ctx: AttemptContext) -> dict[str, str]:
        return {k: fill(v, ctx) for k, v in self.extra_env.items()}

    def command(self, ctx: AttemptContext) -> list[str]:
        argv = [fill(a, ctx) for a in self.argv]
        link = link_out_of_mounts(argv[0], self.mounts) if argv[0].startswith("/") else None
        # Sandbox paths (a mounted program) map to host paths where commands run on the host.
        argv = [ctx.path(a) if a.startswith("/") else a for a in argv]
        if link is None:
            return argv
        return ["/bin/sh", "-c", LINK_GUARD, argv[0], *link, *argv[1:]]

    def answer_file(self, ctx: AttemptContext) -> str | None:
        """The sandbox path of the file the agent writes its answer to (``answer.file``), which
        the episode reads after the command and hands to :meth:`final_answer`; None: stdout."""
        return None if self.answer.file is None else fill(self.answer.file, ctx)

    def final_answer(self, result: ExecResult, answer_file: Any = NOT_READ) -> str | None:
        """The answer from stdout, or from ``answer_file`` (the bytes of :meth:`answer_file`,
        None when the agent wrote none)."""
        if self.answer.file is None:
            return self.answer.read(result.stdout)
        if answer_file is NOT_READ:
            raise RuntimeError("answer.file: the episode did not read the answer file")
        if answer_file is None:
            return None
        return self.answer.read(bytes(answer_file).decode(errors="replace"))

"""A task's own skills folder and MCP servers (a Harbor task's ``skills_dir`` and
``[[environment.mcp_servers]]``) reach each harness in its own way, or the task is left out
naming why; the real pi loads every skill under the folder it is given."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from forge.config import load_config
from forge.harnesses.codex import CODEX_HOME, COPY_SKILLS, CodexHarness
from forge.harnesses.command import CommandHarness
from forge.harnesses.install import NODE_BIN, PACKAGES
from forge.harnesses.nanobot import NanobotHarness
from forge.harnesses.openclaw import OpenClawHarness
from forge.harnesses.pi import PiHarness
from forge.harnesses.react import ReactHarness
from forge.harnesses.registry import HARNESSES
from forge.harnesses.task_tools import mcp_refusal, skills_hint, takes_skills, task_extra
from forge.sandboxes.bwrap import HOME
from forge.task_set import load_tasks, playable
from tasks.errors import TaskError
from tasks.loader import load_suite
from tests.forge.harnesses.helpers import attempt_ctx

pytest.importorskip("harbor.models.task.config", reason="the harbor package reads task.toml")
EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "harbor"
MCP = """
[[environment.mcp_servers]]
name = "docs"
transport = "streamable-http"
url = "http://docs:8000/mcp"

[[environment.mcp_servers]]
name = "calc"
transport = "stdio"
command = "python3"
args = ["/opt/calc.py", "--quiet"]
"""


def _with_mcp(tmp_path: Path, extra: str = MCP) -> Path:
    task = tmp_path / "mcp-task"
    shutil.copytree(EXAMPLES / "skill-greeting", task)
    (task / "task.toml").write_text((task / "task.toml").read_text() + extra)
    return task


def test_a_harbor_tasks_skills_and_mcp_servers_load_and_headers_are_refused(tmp_path):
    (task,) = load_suite(f"harbor:{_with_mcp(tmp_path)}")
    assert task.environment is not None and task.environment.skills_dir == "/skills"
    docs, calc = task.environment.mcp_servers
    assert (docs.transport, docs.url, calc.command, calc.args) == (
        "streamable-http",
        "http://docs:8000/mcp",
        "python3",
        ["/opt/calc.py", "--quiet"],
    )
    api = '[[environment.mcp_servers]]\nname = "api"\ntransport = "streamable-http"\n'
    api += 'url = "http://api:1/mcp"\nheaders = { Authorization = "Bearer ${TOKEN}" }\n'
    bad = _with_mcp(tmp_path / "h", MCP + api)
    with pytest.raises(TaskError, match=r"environment\.mcp_servers\[2\]\.headers: .*host"):
        load_suite(f"harbor:{bad}")
    broken = _with_mcp(tmp_path / "b", '\n[[environment.mcp_servers]]\nname = "x"\n')
    with pytest.raises(TaskError, match=r"mcp_servers\[0\]: .url. is required for transport .sse."):
        load_suite(f"harbor:{broken}")


def test_each_harness_is_given_the_tasks_skills_in_its_own_way(tmp_path):
    (task,) = load_suite(f"harbor:{EXAMPLES / 'skill-greeting'}")
    ctx = attempt_ctx(extra=task_extra(task))
    argv = PiHarness().command(ctx)
    assert argv[argv.index("--skill") + 1] == "/skills"
    assert OpenClawHarness().config(ctx)["skills"] == {"load": {"extraDirs": ["/skills"]}}
    codex = CodexHarness().command(ctx)
    assert codex[:3] == ["/bin/sh", "-c", COPY_SKILLS] and codex[4:6] == [
        f"{CODEX_HOME}/skills",
        "/skills",
    ]
    command = CommandHarness(command=["agent", "--skills", "{skills_dir}"])
    assert command.command(ctx) == ["agent", "--skills", "/skills"]
    react = ReactHarness()
    assert not takes_skills(react) and all(map(takes_skills, [PiHarness(), command]))
    assert "`/skills`" in skills_hint(task) and "SKILL.md" in skills_hint(task)
    # Codex's copy, run for real: each skill lands where Codex looks, then Codex runs
    src, home = tmp_path / "skills", tmp_path / "codex-home" / "skills"
    (src / "a").mkdir(parents=True)
    (src / "a" / "SKILL.md").write_text("---\nname: a\n---\n")
    out = subprocess.run(
        ["/bin/sh", "-c", COPY_SKILLS, "sh", str(home), str(src), "ls", str(home / "a")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["SKILL.md"]


def test_mcp_servers_reach_the_harnesses_that_take_them(tmp_path):
    (task,) = load_suite(f"harbor:{_with_mcp(tmp_path)}")
    ctx = attempt_ctx(extra=task_extra(task))
    toml = CodexHarness().files(ctx)[f"{CODEX_HOME}/config.toml"]
    assert '[mcp_servers.docs]\nurl = "http://docs:8000/mcp"' in toml
    assert '[mcp_servers.calc]\ncommand = "python3"\nargs = ["/opt/calc.py", "--quiet"]' in toml
    config = json.loads(next(iter(NanobotHarness().files(ctx).values())))
    assert config["tools"]["mcpServers"] == {
        "docs": {"type": "streamableHttp", "url": "http://docs:8000/mcp"},
        "calc": {"type": "stdio", "command": "python3", "args": ["/opt/calc.py", "--quiet"]},
    }
    assert "exec" not in config["tools"]  # the services' settings only come with services
    command = CommandHarness(command=["agent", "{mcp_servers}"])
    assert json.loads(command.command(ctx)[1])["docs"] == {
        "transport": "streamable-http",
        "url": "http://docs:8000/mcp",
    }


def test_a_harness_that_cannot_take_the_servers_leaves_the_task_out_naming_them(tmp_path):
    (task,) = load_suite(f"harbor:{_with_mcp(tmp_path)}")
    data = task.model_dump()
    assert mcp_refusal("codex", HARNESSES["codex"], data) is None
    assert mcp_refusal("nanobot", HARNESSES["nanobot"], data) is None
    assert "takes no MCP servers" in mcp_refusal("pi", HARNESSES["pi"], data)
    sse = {**data, "environment": {**data["environment"], "mcp_servers": [
        {"name": "feed", "transport": "sse", "url": "http://feed:9/sse"}
    ]}}  # fmt: skip
    assert "'feed' (sse): it takes stdio, streamable-http" in mcp_refusal(
        "codex", HARNESSES["codex"], sse
    )
    assert mcp_refusal("nanobot", HARNESSES["nanobot"], sse) is None
    toy = load_tasks("toy", ["toy_count"], [])
    skipped: list[tuple[str, str, str]] = []
    config = load_config(None, [])
    [kept] = playable([[*toy, data]], config, skipped, tmp_path / "run", print, ["react", "pi"])
    assert [t["id"] for t in kept] == ["toy_count"]  # its image was never built
    [(where, field, why)] = skipped
    assert (where, field) == ("mcp-task", "environment.mcp_servers")
    assert why.startswith("harness react cannot offer MCP server 'docs' (streamable-http)")


class _Model(BaseHTTPRequestHandler):
    """A scripted model (a test double for the model only): records each request, answers
    every one with the same short reply."""

    seen: list[dict] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append(body)
        chunk = {
            "id": "c1",
            "object": "chat.completion.chunk",
            "model": "tiny",
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": "done"}}],
        }
        end = {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        data = "".join(f"data: {json.dumps(c)}\n\n" for c in (chunk, end)) + "data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data.encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.skipif(not PACKAGES["pi"].installed(), reason="pi is not installed")
def test_real_pi_loads_every_skill_under_the_tasks_folder(tmp_path):
    skills = tmp_path / "skills"
    shutil.copytree(EXAMPLES / "skill-greeting" / "environment" / "skills", skills)
    (skills / "other").mkdir()
    (skills / "other" / "SKILL.md").write_text("---\nname: other\ndescription: Another.\n---\n")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Model)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        harness = PiHarness()
        ctx = attempt_ctx(
            base_url=f"http://127.0.0.1:{server.server_port}/v1",
            workspace=str(tmp_path),
            extra={"task_skills_dir": str(skills)},
            paths={HOME: str(tmp_path / "home")},
        )
        for path, content in harness.files(ctx).items():
            Path(ctx.path(path)).parent.mkdir(parents=True, exist_ok=True)
            Path(ctx.path(path)).write_text(content)
        root = PACKAGES["pi"].require()
        argv = harness.command(ctx)
        argv[:2] = [str(root / NODE_BIN), str(root / PACKAGES["pi"].entry)]
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), **harness.env(ctx)}
        done = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, timeout=120)
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 0, done.stderr[-2000:]
    system = _Model.seen[0]["messages"][0]["content"]  # pi lists each skill it loaded
    assert "<name>team-greeting</name>" in system and "<name>other</name>" in system
    assert f"<location>{skills / 'team-greeting' / 'SKILL.md'}</location>" in system

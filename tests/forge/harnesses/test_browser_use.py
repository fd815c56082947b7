"""browser-use (PyPI, unmodified) as a harness: in a bubblewrap sandbox, on Debian's Chromium,
its OpenAI client on the attempt's endpoint (a scripted chat-completions stub)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from forge.harnesses.base import AttemptContext
from forge.harnesses.install import PACKAGES
from forge.harnesses.registry import get_harness
from forge.sandboxes.base import SandboxSpec
from forge.sandboxes.bwrap import bwrap_works
from forge.sandboxes.local import LocalSandbox
from tests.forge.harnesses.helpers import attempt_ctx
from tests.forge.harnesses.test_react import PREFIX
from tests.forge.httpstub import StubServer

DONE = {
    "thinking": "The page is open.",
    "evaluation_previous_goal": "Start.",
    "memory": "",
    "next_goal": "Finish.",
    "action": [{"done": {"text": "seen it", "success": True}}],
}


def handler(method: str, path: str, headers: dict[str, str], body: Any):
    if method != "POST" or path != f"{PREFIX}/chat/completions":
        return 404, {"error": f"no route {method} {path}"}, {}
    message = {"role": "assistant", "content": json.dumps(DONE)}
    choice = {"index": 0, "finish_reason": "stop", "message": message}
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    reply = {"id": "x", "object": "chat.completion", "created": 0, "model": "m"}
    return 200, {**reply, "choices": [choice], "usage": usage}, {}


def test_env_points_browser_use_at_the_attempt() -> None:
    h = get_harness("browser-use", temperature=0.3)
    ctx = attempt_ctx(extra={"start_url": "http://127.0.0.1:8000/", "screen": "800x600"})
    env = h.env(ctx)
    assert env["OPENAI_BASE_URL"] == ctx.base_url and env["OPENAI_API_KEY"] == "key-1"
    assert env["FORGE_START_URL"] == "http://127.0.0.1:8000/" and env["FORGE_SCREEN"] == "800x600"
    assert env["FORGE_TEMPERATURE"] == "0.3" and env["PYTHONPATH"] == "/opt/forge/browser-use"
    assert env["FORGE_COORDINATE_CLICKING"] == "1"  # the GUI suites' clicks are coordinates
    off = get_harness("browser-use", coordinate_clicking=False).env(ctx)
    assert off["FORGE_COORDINATE_CLICKING"] == "0"


def test_coordinate_clicking_must_be_a_bool() -> None:
    with pytest.raises(ValueError, match="coordinate_clicking"):
        get_harness("browser-use", coordinate_clicking="yes")


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.skipif(not bwrap_works(), reason="bubblewrap cannot create namespaces here")
@pytest.mark.skipif(
    not PACKAGES["browser-use"].installed(), reason="forge harness install browser-use"
)
def test_browser_use_runs_in_the_sandbox_against_the_endpoint(tmp_path: Path) -> None:
    stub = StubServer(handler, str(tmp_path / "p.sock"))
    harness = get_harness("browser-use")
    sb = LocalSandbox(root=tmp_path / "sb", isolation="required")
    try:
        sb.create(
            SandboxSpec(
                labels={"run": "t"}, ro_mounts=harness.ro_mounts(), proxy_socket=stub.address
            )
        )
        sb.put_file("index.html", "<h1>Hello from the sandbox</h1><button>Press</button>")
        ctx = AttemptContext(
            base_url=f"http://{sb.proxy_host_port()}{PREFIX}",
            anthropic_base_url="",
            api_key="key-7",
            model="policy-model",
            instruction="Look at the page, then finish.",
            workspace=sb.workspace,
            max_turns=3,
            paths=sb.path_map(),
            extra={"start_url": "http://127.0.0.1:8124/index.html", "screen": "640x480"},
        )
        serve = "python3 -m http.server 8124 >/dev/null 2>&1 & sleep 0.5; "
        command = ["sh", "-c", serve + "exec " + shlex.join(harness.command(ctx))]
        result = sb.exec(command, 120, env={**harness.env(ctx), "PATH": sb.default_path()})
    finally:
        sb.destroy()
        stub.close()
    assert result.exit_code == 0, result.stderr[-3000:]
    assert harness.final_answer(result) == "seen it"
    assert json.loads(result.stdout.splitlines()[-1]) == {
        "final_answer": "seen it",
        "turns": 1,
        "stop": "done",
    }
    assert len(stub.requests) == 1  # no judge call after done
    _, _, headers, body = stub.requests[0]
    assert headers["authorization"] == "Bearer key-7" and body["model"] == "policy-model"
    assert body["response_format"]["type"] == "json_schema"  # structured output
    parts = [p for m in body["messages"] if isinstance(m["content"], list) for p in m["content"]]
    shot = [p for p in parts if p["type"] == "image_url"]
    assert len(shot) == 1 and shot[0]["image_url"]["url"].startswith("data:image/png;base64,")
    assert "Hello from the sandbox" in json.dumps(body["messages"])

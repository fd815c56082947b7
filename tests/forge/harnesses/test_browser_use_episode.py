"""A real episode through browser-use (PyPI, unmodified): Ray, the Policy (the scripted oracle in
its browser-use mode, and noop), a HarnessPod, a bubblewrap sandbox running the task's own web
service, browser-use driving Debian's Chromium, and the task's file verifier."""

from __future__ import annotations

import json
from typing import Any

import pytest

from forge.harnesses.gui_actions import from_pixels
from forge.harnesses.install import PACKAGES
from forge.sandboxes.bwrap import bwrap_works
from tasks.schema import Task

# One page: a text field and a button. Pressing the button POSTs the field's text, and the
# server (not the page) writes it to sent.txt in the workspace, where the verifier reads it.
SERVER = """\
import http.server, pathlib, sys
PAGE = b'''<!doctype html><body style="margin:0">
<input id="t" style="position:absolute;left:100px;top:100px;width:200px;height:40px">
<button style="position:absolute;left:400px;top:300px;width:120px;height:60px"
 onclick="fetch('/send', {method: 'POST', body: document.getElementById('t').value})"
>Send</button></body>'''
class Handler(http.server.BaseHTTPRequestHandler):
    def reply(self, body):
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        self.reply(PAGE)
    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        if self.path == "/send":
            pathlib.Path("sent.txt").write_bytes(self.rfile.read(n) + b"\\n")
        self.reply(b"ok")
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""
pytestmark = [
    pytest.mark.slow,
    pytest.mark.ray,
    pytest.mark.browser,
    pytest.mark.skipif(not bwrap_works(), reason="bubblewrap cannot create namespaces here"),
    pytest.mark.skipif(
        not PACKAGES["browser-use"].installed(), reason="forge harness install browser-use"
    ),
]
FIELD = from_pixels(200, 120, 640, 480)
BUTTON = from_pixels(460, 330, 640, 480)
TASK = Task.model_validate(
    {
        "id": "send_the_text",
        "instruction": "Write 'hello there' into the field and press Send.",
        "files": {"server.py": SERVER},
        "services": [{"command": "python3 server.py 8792", "ready": "http://127.0.0.1:8792/"}],
        "gui": {"start_url": "http://127.0.0.1:8792/", "screen": [640, 480]},
        "verifier": {"type": "file_equals", "path": "sent.txt", "content": "hello there"},
        "solution": [
            {"action": "click", "x": FIELD[0], "y": FIELD[1]},
            {"action": "type", "text": "hello there"},
            {"action": "click", "x": BUTTON[0], "y": BUTTON[1]},
            {"action": "wait", "seconds": 1},
        ],
        "answer": "sent",
        "limits": {"max_turns": 8, "timeout_s": 180},
    }
)


def run(ray: Any, mode: str, engine: dict[str, Any] | None = None, **task: Any) -> Any:
    from actors.harness_pod import HarnessPod
    from forge.config import PolicyConfig
    from serve.policy import deploy_policy

    engine = engine or {"name": "scripted", "mode": mode}
    config = PolicyConfig(engine=engine, num_cpus=0.25, default_max_tokens=48)
    handle = deploy_policy(config, f"browser-use-{mode}")
    pod = ray.remote(HarnessPod).options(num_cpus=0.25).remote(handle, pod_id=f"bu-{mode}")
    try:
        ray.get(pod.start.remote())
        return ray.get(pod.run_episode.remote({**TASK.model_dump(), **task}, "browser-use"))
    finally:
        ray.get(pod.stop.remote())


def actions(episode: Any) -> list[dict[str, Any]]:
    """Each turn's browser-use action list, as the oracle wrote it."""
    return [json.loads(t.text)["action"] for t in episode.turns]


@pytest.mark.full  # ~40-50 s: -m full; in CI browser-use's runner against an endpoint
# (tests/forge/harnesses/test_browser_use.py) and the built-in browser harness's episodes
def test_oracle_sends_the_text_through_browser_use_and_noop_does_not(ray_cluster) -> None:
    oracle = run(ray_cluster, "oracle")
    assert oracle.status == "ok", (oracle.failure, oracle.harness_log[-3000:])
    assert oracle.reward == 1.0, (oracle.verifier_detail, oracle.harness_log[-3000:])
    assert actions(oracle) == [
        [{"click": {"coordinate_x": 200, "coordinate_y": 120}}],
        [{"send_keys": {"keys": "hello there"}}],
        [{"click": {"coordinate_x": 460, "coordinate_y": 330}}],
        [{"wait": {"seconds": 1}}],
        [{"done": {"text": "sent", "success": True, "files_to_display": []}}],
    ]
    assert oracle.final_answer == "sent"
    # browser-use asked for its JSON and sent a screenshot each turn, recorded by reference
    assert all(t.request["response_format"]["type"] == "json_schema" for t in oracle.turns)
    assert all(len(t.images) == 1 for t in oracle.turns)

    noop = run(ray_cluster, "noop")
    assert noop.status == "ok", (noop.failure, noop.harness_log[-3000:])
    assert noop.reward == 0.0 and len(noop.turns) == 1
    assert actions(noop)[0][0]["done"]["success"] is True


@pytest.mark.full  # ~40 s: -m full; in CI browser-use's oracle and no-op episodes (the test above)
def test_a_sampled_policy_writes_browser_uses_json(ray_cluster) -> None:
    """A real model sampling at temperature 1 (``tiny-vl``, random weights) through browser-use:
    its ``response_format`` reaches the torch engine, whose grammar keeps every reply a prefix
    of a document of browser-use's own schema (random weights never close a string within the
    budget here, so the reply is cut at ``max_tokens``; every token of it is still legal)."""
    from serve.engines.constrained import Constraint
    from serve.models import build_tiny_vl

    engine = {"name": "torch", "model": "tiny-vl", "max_model_len": 32768}
    limits = {**TASK.limits.model_dump(), "max_turns": 1}
    episode = run(ray_cluster, "sampled", engine, limits=limits)
    assert episode.status == "ok", (episode.failure, episode.harness_log[-3000:])
    assert episode.turns, episode.harness_log[-3000:]
    _, tokenizer, _ = build_tiny_vl()
    for turn in episode.turns:
        spec = turn.request["response_format"]
        assert spec["type"] == "json_schema" and len(turn.images) == 1
        grammar = Constraint(tokenizer, len(tokenizer), spec["json_schema"]["schema"])
        for token in turn.completion_ids:
            grammar.accept(token)  # raises on the first token the schema does not allow
        assert turn.text.startswith('{"'), turn.text[:200]

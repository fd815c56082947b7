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


def run(ray: Any, mode: str) -> Any:
    from actors.harness_pod import HarnessPod
    from forge.config import PolicyConfig
    from serve.policy import deploy_policy

    config = PolicyConfig(engine={"name": "scripted", "mode": mode}, num_cpus=0.25)
    handle = deploy_policy(config, f"browser-use-{mode}")
    pod = ray.remote(HarnessPod).options(num_cpus=0.25).remote(handle, pod_id=f"bu-{mode}")
    try:
        ray.get(pod.start.remote())
        return ray.get(pod.run_episode.remote(TASK.model_dump(), "browser-use"))
    finally:
        ray.get(pod.stop.remote())


def actions(episode: Any) -> list[dict[str, Any]]:
    """Each turn's browser-use action list, as the oracle wrote it."""
    return [json.loads(t.text)["action"] for t in episode.turns]


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.browser
@pytest.mark.skipif(not bwrap_works(), reason="bubblewrap cannot create namespaces here")
@pytest.mark.skipif(
    not PACKAGES["browser-use"].installed(), reason="forge harness install browser-use"
)
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

"""A real episode through the browser harness: Ray, the Policy (scripted oracle / noop), a
HarnessPod, a bubblewrap sandbox running the task's own web service and Chromium, and the
task's file verifier."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from forge.harnesses.gui_actions import from_pixels
from forge.harnesses.install import PACKAGES
from forge.sandboxes.bwrap import bwrap_works
from tasks.schema import Task
from tests.forge.httpstub import StubServer

# The task's service: one page with one button; pressing it makes the page POST /press, and the
# server (not the page) writes pressed.txt into the workspace, where the verifier reads it.
SERVER = """\
import http.server, pathlib, sys
PAGE = b'''<!doctype html><body style="margin:0;background:#fff">
<button style="position:absolute;left:270px;top:200px;width:100px;height:80px"
 onclick="fetch('/press', {method: 'POST'}).then(() => document.body.style.background = '#cfc')"
>Press me</button></body>'''
class Handler(http.server.BaseHTTPRequestHandler):
    def reply(self, body):
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        self.reply(PAGE)
    def do_POST(self):
        if self.path == "/press":
            pathlib.Path("pressed.txt").write_text("pressed\\n")
        self.reply(b"ok")
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""
BUTTON = from_pixels(320, 240, 640, 480)
TASK = Task.model_validate(
    {
        "id": "press_the_button",
        "instruction": "Press the button on the page.",
        "files": {"server.py": SERVER},
        "services": [{"command": "python3 server.py 8791", "ready": "http://127.0.0.1:8791/"}],
        "gui": {"start_url": "http://127.0.0.1:8791/", "screen": [640, 480]},
        "verifier": {"type": "file_equals", "path": "pressed.txt", "content": "pressed"},
        "solution": [
            {"action": "click", "x": BUTTON[0], "y": BUTTON[1]},
            {"action": "wait", "seconds": 0.5},
        ],
        "limits": {"max_turns": 6, "timeout_s": 120},
    }
)


def run(ray: Any, mode: str, task: Task = TASK, env: dict[str, str] | None = None) -> Any:
    from actors.harness_pod import HarnessPod
    from forge.config import PolicyConfig
    from serve.policy import deploy_policy

    config = PolicyConfig(engine={"name": "scripted", "mode": mode}, num_cpus=0.25)
    handle = deploy_policy(config, f"browser-{mode}")
    options: dict[str, Any] = {"num_cpus": 0.25}
    if env:  # the pod's own environment (a judge's address and key)
        options["runtime_env"] = {"env_vars": env}
    pod = ray.remote(HarnessPod).options(**options).remote(handle, pod_id=f"browser-{mode}")
    try:
        ray.get(pod.start.remote())
        return ray.get(pod.run_episode.remote(task.model_dump(), "browser"))
    finally:
        ray.get(pod.stop.remote())


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.browser
@pytest.mark.skipif(not bwrap_works(), reason="bubblewrap cannot create namespaces here")
@pytest.mark.skipif(not PACKAGES["browser"].installed(), reason="forge harness install browser")
def test_oracle_presses_the_button_and_noop_does_not(ray_cluster) -> None:
    oracle = run(ray_cluster, "oracle")
    assert oracle.status == "ok", (oracle.failure, oracle.harness_log[-3000:])
    assert oracle.reward == 1.0, oracle.verifier_detail
    assert [t.tool_calls[0]["name"] for t in oracle.turns] == ["click", "wait", "done"]
    assert json.loads(oracle.turns[0].tool_calls[0]["arguments"]) == {
        "x": BUTTON[0],
        "y": BUTTON[1],
    }
    second = oracle.turns[1].request["messages"]
    result = next(m for m in second if m["role"] == "tool")
    assert result["content"].startswith(f"clicked at ({BUTTON[0]}, {BUTTON[1]}) = pixel (320, 240)")
    assert result["content"].endswith("page changed: yes")  # the page turned green
    # each turn saw one screenshot, recorded by reference with its pixels beside the episode
    for turn in oracle.turns:
        assert len(turn.images) == 1 and all(t.prompt_ids for t in oracle.turns)
        assert "base64," not in json.dumps(turn.request)
        png = oracle.images[turn.images[0]].data
        assert png.startswith(b"\x89PNG") and png[16:24] == (640).to_bytes(4) + (480).to_bytes(4)
    assert len({t.images[0] for t in oracle.turns}) == 2  # before and after the press

    noop = run(ray_cluster, "noop")
    assert noop.status == "ok", (noop.failure, noop.harness_log[-3000:])
    assert noop.reward == 0.0 and len(noop.turns) == 1
    assert noop.turns[0].tool_calls == []


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.browser
@pytest.mark.skipif(not bwrap_works(), reason="bubblewrap cannot create namespaces here")
@pytest.mark.skipif(not PACKAGES["browser"].installed(), reason="forge harness install browser")
def test_a_vision_judge_sees_the_screenshots_the_policy_saw(ray_cluster, tmp_path) -> None:
    """A judge that looks at the page: it gets the episode's own screenshots, the last first
    in the request after the prompt (the scripted judge passes when it is shown two)."""
    asked: list[Any] = []

    def answer(method: str, path: str, headers: dict[str, str], body: Any):
        asked.append(body["messages"][0]["content"])
        verdict = "PASS" if len(asked[-1]) == 3 else "FAIL"  # the prompt and two images
        return 200, {"choices": [{"message": {"role": "assistant", "content": verdict}}]}, {}

    server = StubServer(answer)
    env = {"FORGE_JUDGE_BASE_URL": f"http://{server.address}/v1", "FORGE_JUDGE_MODEL": "vlm",
           "FORGE_JUDGE_API_KEY": "k", "FORGE_JUDGE_CACHE": str(tmp_path)}  # fmt: skip
    judged = TASK.model_copy(update={"verifier": {
        "type": "judge", "rubric": "The page turned green.", "sees": ["screenshots"],
        "screenshots": 2}})  # fmt: skip
    try:
        ep = run(ray_cluster, "oracle", Task.model_validate(judged.model_dump()), env)
    finally:
        server.close()
    assert (ep.status, ep.reward) == ("ok", 1.0), (ep.failure, ep.verifier_detail)
    [content] = asked
    shown = [part["image_url"]["url"].split("base64,", 1)[1] for part in content[1:]]
    order = list(dict.fromkeys(sha for t in ep.turns for sha in t.images))[-2:]
    assert shown == [base64.b64encode(ep.images[sha].data).decode() for sha in order]
    assert json.loads(ep.verifier_outputs["judge"])["images"] == order

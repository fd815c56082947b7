"""Episodes of tasks with services (``tasks.services``), end to end: a real HarnessPod (Ray
actor) keeps the services' state beside a bubblewrap sandbox, the react harness reaches them
as native tools or through their command-line tools, the verifier reads the state, and every
call is recorded with how it came. The model is the scripted oracle (or noop)."""

from __future__ import annotations

import json

import httpx
import pytest

from actors.harness_pod import HarnessPod
from forge.config import PolicyConfig
from forge.sandboxes.bwrap import bwrap_works
from serve.policy import deploy_policy
from tasks.loader import load_suite

pytestmark = [
    pytest.mark.ray,
    pytest.mark.skipif(not bwrap_works(), reason="bubblewrap cannot build sandboxes here"),
]
TASKS = {t.id: t for t in load_suite("claw-services")}


@pytest.fixture(scope="module")
def pod(ray_cluster):
    config = PolicyConfig(engine={"name": "scripted"}, num_cpus=0.25)
    handle = deploy_policy(config, "pod-apps")
    actor = ray_cluster.remote(HarnessPod).options(num_cpus=0.25).remote(handle, pod_id="apps")
    ray_cluster.get(actor.start.remote())
    yield ray_cluster, actor
    ray_cluster.get(actor.stop.remote())


def _run(pod, task_id: str, idle: bool = False, **options):
    """One react episode of the task with the oracle (``idle``: with no reference solution,
    so the scripted model calls no tool)."""
    ray, actor = pod
    task = TASKS[task_id].model_dump()
    if idle:
        task.update(solution=[], answer=None)
    return ray.get(actor.run_episode.remote(task, "react", harness_options=options))


def test_native_tools_reach_the_services_and_the_state_is_verified(pod) -> None:
    ep = _run(pod, "multi_lunch_with_lena")
    assert (ep.status, ep.reward) == ("ok", 1.0), (ep.verifier_detail, ep.harness_log)
    offered = [t["function"]["name"] for t in ep.turns[0].request["tools"]]
    assert {"calendar_create", "mail_reply", "shell"} <= set(offered)
    calls = [(c["service"], c["op"], c["via"]) for c in ep.service_calls]
    assert calls == [("calendar", "create", "tool"), ("mail", "reply", "tool")]
    assert [c["turn"] for c in ep.service_calls] == [1, 2]  # after the model's 1st and 2nd turn


@pytest.mark.parametrize(
    "task_id",
    ["mail_send_lena", "cal_move_dentist", "contacts_add_noor", "notes_offsite_menu",
     "kv_dark_theme"],
)  # fmt: skip
def test_each_service_keeps_its_state_per_attempt(pod, task_id: str) -> None:
    """What the scripted episode did is what the verifier reads (1.0), and the next attempt of
    the same task on the same pod starts from the seed: doing nothing there scores 0.0."""
    done = _run(pod, task_id)
    assert (done.status, done.reward) == ("ok", 1.0), (done.verifier_detail, done.harness_log)
    assert [c["writes"] for c in done.service_calls] == [True]
    again = _run(pod, task_id, idle=True)
    assert (again.status, again.reward, again.service_calls) == ("ok", 0.0, [])


def test_without_native_tools_the_oracle_uses_the_command_line(pod) -> None:
    ep = _run(pod, "cal_design_review_clash", service_tools=False)
    assert (ep.status, ep.reward) == ("ok", 1.0), (ep.verifier_detail, ep.harness_log)
    calls = [c for t in ep.turns for c in t.tool_calls if c["name"] == "shell"]
    shell = [json.loads(c["arguments"])["command"] for c in calls]
    assert shell[0].startswith("calendar create --title 'Design review'"), shell
    assert [(c["op"], c["via"]) for c in ep.service_calls] == [("create", "cli"), ("move", "cli")]


def test_files_the_agent_writes_cannot_fake_the_state(pod) -> None:
    """The services' state is not in the sandbox: writing a look-alike state file changes
    nothing the verifier reads."""
    ray, actor = pod
    fake = '{"items": [{"key": "app.theme", "value": "dark"}]}'
    task = {
        **TASKS["kv_dark_theme"].model_dump(),
        "solution": [{"path": ".app/state.json", "content": fake}, "echo dark > kv.json"],
    }
    ep = ray.get(actor.run_episode.remote(task, "react"))
    assert (ep.status, ep.reward, ep.service_calls) == ("ok", 0.0, []), ep.verifier_detail


def test_the_service_api_needs_the_attempts_key(pod) -> None:
    ray, pod_actor = pod
    a = ray.get(pod_actor.open_attempt.remote("e-api", 0, apps={"kv": "default"}))
    b = ray.get(pod_actor.open_attempt.remote("e-api", 1))
    base = a["base_url"].removesuffix("/v1")
    ok = httpx.get(f"{base}/services", headers={"Authorization": f"Bearer {a['api_key']}"})
    assert ok.status_code == 200 and ok.json()[0]["service"] == "kv"
    wrong = httpx.get(f"{base}/services", headers={"Authorization": f"Bearer {b['api_key']}"})
    assert wrong.status_code == 401
    refused = httpx.post(
        f"{base}/services/kv/set",
        json={"key": "app.theme"},
        headers={"Authorization": f"Bearer {a['api_key']}"},
    )
    assert refused.status_code == 400 and "value: required by set" in refused.text
    none = b["base_url"].removesuffix("/v1")
    empty = httpx.get(f"{none}/services", headers={"Authorization": f"Bearer {b['api_key']}"})
    assert empty.status_code == 404
    state = ray.get(pod_actor.close_attempt.remote("e-api", 0))
    assert state.world.calls[-1]["error"] == "value: required by set"
    ray.get(pod_actor.close_attempt.remote("e-api", 1))


MCP_CLIENT = """
import asyncio, json, os, sys
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamablehttp_client

async def use(session, value):
    await session.initialize()
    names = sorted(t.name for t in (await session.list_tools()).tools)
    done = await session.call_tool("set", {"key": "app.theme", "value": value})
    bad = await session.call_tool("set", {"key": "app.theme"})
    return {"tools": names, "result": done.content[0].text, "refused": bad.isError,
            "why": bad.content[0].text}

async def main():
    url, key, client = sys.argv[1:4]
    env = {"FORGE_SERVICES_URL": url + "/services", "FORGE_SERVICES_KEY": key,
           "PATH": os.environ["PATH"]}
    args = ["-I", client, "--mcp", "kv"]
    params = StdioServerParameters(command=sys.executable, args=args, env=env)
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            stdio = await use(s, "dark")
    headers = {"Authorization": "Bearer " + key}
    async with streamablehttp_client(url + "/mcp/kv", headers=headers) as (r, w, _):
        async with ClientSession(r, w) as s:
            http = await use(s, "sepia")
    print(json.dumps({"stdio": stdio, "http": http}))

asyncio.run(main())
"""


def test_mcp_over_stdio_and_http_with_the_official_client(pod) -> None:
    """The MCP SDK (as nanobot installs it) lists and calls a service's tools over stdio
    (``client.py --mcp``) and streamable HTTP (the pod's ``/mcp/SERVICE``)."""
    import subprocess
    import sys

    from forge.harnesses.install import PACKAGES, HarnessNotInstalled
    from tasks.services import CLIENT_HOST

    try:
        folder = PACKAGES["nanobot"].require()
    except HarnessNotInstalled as e:
        pytest.skip(f"the MCP SDK comes with nanobot here: {e}")
    ray, pod_actor = pod
    a = ray.get(pod_actor.open_attempt.remote("e-mcp", 0, apps={"kv": "default"}))
    run = subprocess.run(
        [sys.executable, "-c", MCP_CLIENT, a["base_url"].removesuffix("/v1"), a["api_key"],
         CLIENT_HOST],
        env={"PYTHONPATH": str(folder), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.splitlines()[-1])
    for transport in ("stdio", "http"):
        assert got[transport]["tools"] == ["delete", "get", "list", "set"]
        assert json.loads(got[transport]["result"]) == {"set": "app.theme"}
        assert got[transport]["refused"] and "value: required by set" in got[transport]["why"]
    state = ray.get(pod_actor.close_attempt.remote("e-mcp", 0))
    theme = next(i for i in state.world.state["kv"]["items"] if i["key"] == "app.theme")
    assert theme["value"] == "sepia"  # stdio set dark, then HTTP set sepia
    assert [c["via"] for c in state.world.calls] == ["mcp"] * 4

"""The browser harness program against a scripted chat-completions stub, real Chromium through
Playwright, in a LocalSandbox (under bubblewrap where it works)."""

from __future__ import annotations

import base64
import contextlib
import json
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from forge.harnesses.base import AttemptContext
from forge.harnesses.browser import PLAYWRIGHT, PROGRAM, BrowserHarness
from forge.harnesses.gui_actions import from_pixels, tools
from forge.harnesses.install import PACKAGES, HarnessNotInstalled
from forge.harnesses.registry import HARNESSES, get_harness
from forge.sandboxes.base import ExecResult, SandboxSpec
from forge.sandboxes.bwrap import bwrap_works
from forge.sandboxes.local import LocalSandbox
from tests.forge.harnesses.helpers import attempt_ctx
from tests.forge.harnesses.test_react import PREFIX, Script, ok, reply, tool_call
from tests.forge.httpstub import StubServer

installed = pytest.mark.skipif(
    not PACKAGES["browser"].installed(), reason="run `forge harness install browser`"
)
# A 640x480 page: a text box and a button at known pixels; the button puts the box's text into
# the address (#...) and the heading.
PAGE = """<!doctype html><html><body style="margin:0">
<h1 id="h" style="position:absolute;left:20px;top:0;margin:0;font:20px sans-serif">Start</h1>
<input id="box" style="position:absolute;left:100px;top:100px;width:200px;height:30px">
<button id="go" style="position:absolute;left:100px;top:200px;width:100px;height:40px"
  onclick="location.hash = document.getElementById('box').value;
           document.getElementById('h').textContent = 'Got ' + document.getElementById('box').value"
>Go</button>
<button style="position:absolute;left:400px;top:200px;width:100px;height:40px"
  onclick="alert('careful')">Alert</button>
<select style="position:absolute;left:400px;top:100px;width:150px;height:30px">
  <option>Apple</option><option selected>Banana</option></select></body></html>"""
BOX = from_pixels(200, 115, 640, 480)
GO = from_pixels(150, 220, 640, 480)
EMPTY = from_pixels(600, 450, 640, 480)
ALERT = from_pixels(450, 220, 640, 480)
SELECT = from_pixels(475, 115, 640, 480)


class LiveScript(Script):
    """Scripted replies; a callable one is called when its turn comes (to act mid-episode)."""

    def __call__(self, method: str, path: str, headers: dict[str, str], body: Any):
        out = super().__call__(method, path, headers, body)
        return out() if callable(out) else out


def call(i: int, name: str, **args: Any) -> dict[str, Any]:
    return tool_call(i, name, json.dumps(args))


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def images(message: dict[str, Any]) -> list[bytes]:
    content = message["content"]
    if not isinstance(content, list):
        return []
    urls = [p["image_url"]["url"] for p in content if p["type"] == "image_url"]
    assert all(u.startswith("data:image/png;base64,") for u in urls)
    return [base64.b64decode(u.split(",", 1)[1]) for u in urls]


def texts(message: dict[str, Any]) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    return "\n".join(p["text"] for p in content if p["type"] == "text")


@pytest.fixture
def episode(tmp_path: Path) -> Iterator:
    """One browser episode in a fresh LocalSandbox against a scripted stub; the page is
    PAGE, opened from the workspace."""
    made: list[tuple[LocalSandbox, StubServer]] = []

    def run(isolation: str, replies: list, max_turns: int = 10, **opts: Any):
        stub = StubServer(LiveScript(replies), str(tmp_path / f"p{len(made)}.sock"))
        harness = get_harness("browser", **opts)
        sb = LocalSandbox(root=tmp_path / f"sb{len(made)}", isolation=isolation)  # type: ignore[arg-type]
        sb.create(
            SandboxSpec(
                labels={"run": "t"}, ro_mounts=harness.ro_mounts(), proxy_socket=stub.address
            )
        )
        made.append((sb, stub))
        sb.put_file("page.html", PAGE)
        ctx = AttemptContext(
            base_url=f"http://{sb.proxy_host_port()}{PREFIX}",
            anthropic_base_url="",
            api_key="key-9",
            model="policy-model",
            instruction="Type hello into the box and press Go.",
            workspace=sb.workspace,
            max_turns=max_turns,
            paths=sb.path_map(),
            extra={"start_url": f"file://{sb.workspace}/page.html", "screen": "640x480"},
        )
        result = sb.exec(harness.command(ctx), 90, env=harness.env(ctx))
        return stub, harness, result

    yield run
    for sb, stub in made:
        sb.destroy()
        stub.close()


@pytest.mark.browser
@installed
@pytest.mark.skipif(not bwrap_works(), reason="bubblewrap cannot create namespaces here")
def test_click_type_done_under_bwrap(episode) -> None:
    replies = [
        ok(reply(None, [call(1, "click", x=BOX[0], y=BOX[1]), call(2, "type", text="hello")])),
        ok(reply("now press Go", [call(3, "click", x=GO[0], y=GO[1])])),
        ok(reply(None, [call(4, "done", answer="pressed")])),
    ]
    stub, harness, result = episode("required", replies, temperature=0.5)
    assert result.exit_code == 0, result.stderr[-3000:]
    assert harness.final_answer(result) == "pressed"
    summary = BrowserHarness.summary(result)
    assert summary == {
        "final_answer": "pressed",
        "turns": 3,
        "stop": "done",
        "actions": 3,
        "unchanged": 0,
    }
    bodies = [r[3] for r in stub.requests]
    assert len(bodies) == 3
    assert bodies[0]["temperature"] == 0.5 and bodies[0]["model"] == "policy-model"
    assert bodies[0]["tools"] == tools()
    first = bodies[0]["messages"]
    assert [m["role"] for m in first] == ["system", "user"]
    assert texts(first[1]).startswith("Type hello into the box and press Go.")
    shots = images(first[1])
    assert len(shots) == 1 and png_size(shots[0]) == (640, 480)
    # turn 3 sees every earlier step, but only the latest screenshot
    last = bodies[2]["messages"]
    assert sum(len(images(m)) for m in last if m["role"] == "user") == 1
    assert images(last[-1]) and "[earlier screenshot omitted]" in texts(last[1])
    results = [m for m in last if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == ["call_1", "call_2", "call_3"]
    assert results[0]["content"].startswith(f"clicked at ({BOX[0]}, {BOX[1]}) = pixel (200, 115)")
    assert results[1]["content"].startswith("typed 5 characters; page changed: yes")
    assert "page changed: yes; now at file:///" in results[2]["content"]
    assert results[2]["content"].endswith("page.html#hello")
    # each screenshot differs as the page changes
    seen = [images(b["messages"][-1])[0] for b in bodies]
    assert len(set(seen)) == 3


@pytest.mark.browser
@installed
def test_malformed_calls_and_noop_clicks(episode) -> None:
    bad = [
        tool_call(1, "click", "{not json"),
        call(2, "teleport", x=1),
        call(3, "click", x=5),
        call(4, "click", x="left", y=3),
        call(5, "click", x=EMPTY[0], y=EMPTY[1]),
        call(6, "press", keys="esc"),
        call(7, "click", x=ALERT[0], y=ALERT[1]),
        call(8, "goto", url="http://127.0.0.1:9/nothing"),
        call(10, "goto", url="javascript:document.title='forged'"),
    ]
    bad.insert(7, call(9, "click", x=SELECT[0], y=SELECT[1]))
    replies = [ok(reply(None, bad)), ok(reply("I give up."))]
    stub, _, result = episode("none", replies, observation="screenshot+text")
    assert result.exit_code == 0, result.stderr[-3000:]
    assert BrowserHarness.summary(result) == {
        "final_answer": "I give up.",
        "turns": 2,
        "stop": "answer",
        "actions": 4,
        "unchanged": 2,  # the empty spot and Escape; after the alert the button shows focus
    }
    observed = [m["content"] for m in stub.requests[1][3]["messages"] if m["role"] == "tool"]
    assert "not valid JSON" in observed[0]
    assert "unknown tool 'teleport'" in observed[1]
    assert observed[2] == "error: click needs argument(s): y"
    assert observed[3].startswith("error: click:") and "number" in observed[3]
    assert observed[4].endswith("page changed: no")
    assert observed[5] == "pressed Escape; page changed: no"
    assert observed[6].endswith("; alert dialog said 'careful' (accepted)")
    assert observed[7].endswith(
        "; a dropdown list opened, not drawn in the screenshot: options 'Apple', "
        "'Banana' (selected); choose with press ArrowDown or ArrowUp, then Enter"
    )
    assert observed[8].startswith("error: could not open http://127.0.0.1:9/nothing")
    # javascript: would run the agent's own code in the page (a page that reports its reward
    # could be told it was solved): refused, like data:, file: and chrome: addresses
    assert observed[9] == (
        "error: goto: goto opens http(s) addresses only, not \"javascript:document.title='forged'\""
    )
    page_text = texts(stub.requests[0][3]["messages"][1])
    assert f"button 'Go' at ({GO[0]}, {GO[1]})" in page_text
    assert "input:text '' at" in page_text and "Start" in page_text


@pytest.mark.browser
@installed
def test_no_tools_is_one_question_about_the_start_page(episode) -> None:
    """``tools: []`` (the GUI quickstart's form): one request with the screenshot and no tools
    and no system prompt; its reply is the answer, whatever it says."""
    stub, _, result = episode("none", [ok(reply("7777"))], tools=[], system_prompt="")
    assert result.exit_code == 0, result.stderr[-3000:]
    assert BrowserHarness.summary(result) == {
        "final_answer": "7777",
        "turns": 1,
        "stop": "answer",
        "actions": 0,
        "unchanged": 0,
    }
    (request,) = [r[3] for r in stub.requests]
    assert "tools" not in request
    (message,) = request["messages"]
    assert message["role"] == "user" and len(images(message)) == 1
    with pytest.raises(ValueError, match="tools: unknown"):
        get_harness("browser", tools=["click", "teleport"])


@pytest.mark.browser
@installed
def test_text_observation_sends_no_image(episode) -> None:
    stub, _, result = episode("none", [ok(reply("done"))], observation="text")
    assert result.exit_code == 0, result.stderr[-3000:]
    first = stub.requests[0][3]["messages"][1]
    assert images(first) == [] and f"button 'Go' at ({GO[0]}, {GO[1]})" in texts(first)


@pytest.mark.browser
@installed
def test_chromium_failing_to_start_is_exit_4(episode) -> None:
    stub, harness, result = episode("none", [ok(reply("never asked"))], chromium="/bin/false")
    assert result.exit_code == 4
    assert "Chromium did not start" in result.stderr
    assert harness.final_answer(result) is None and stub.requests == []


def test_harness_options_env_and_mounts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert HARNESSES["browser"] is BrowserHarness
    with pytest.raises(ValueError, match="observation"):
        BrowserHarness(observation="pixels")
    with pytest.raises(ValueError, match="at least 1"):
        BrowserHarness(screenshots_in_context=0)
    h = BrowserHarness(screenshots_in_context=3, observation="screenshot+text", temperature=1.0)
    ctx = attempt_ctx(extra={"start_url": "http://127.0.0.1:8000/", "screen": "800x600"})
    env = h.env(ctx)
    assert env["FORGE_START_URL"] == "http://127.0.0.1:8000/" and env["FORGE_SCREEN"] == "800x600"
    assert env["FORGE_SCREENSHOTS_IN_CONTEXT"] == "3" and env["PYTHONPATH"] == PLAYWRIGHT
    assert env["FORGE_OBSERVATION"] == "screenshot+text" and env["FORGE_TEMPERATURE"] == "1.0"
    assert "FORGE_START_URL" not in h.env(attempt_ctx())
    assert h.command(ctx) == ["python3", PROGRAM, ctx.instruction]
    assert (
        h.final_answer(ExecResult(0, 'noise\n{"final_answer": "x", "stop": "done"}\n', "")) == "x"
    )
    if PACKAGES["browser"].installed():
        mounts = h.ro_mounts()
        assert mounts[str(PACKAGES["browser"].folder)] == PLAYWRIGHT
        assert sorted(v for v in mounts.values() if v != PLAYWRIGHT) == [
            f"/opt/forge/harness/{m}"
            for m in ("browser_agent.py", "browser_page.py", "gui_actions.py", "react_agent.py")
        ]
    monkeypatch.setenv("FORGE_CACHE", str(tmp_path))
    with pytest.raises(HarnessNotInstalled, match="forge harness install browser"):
        h.ro_mounts()


@pytest.mark.browser
@installed
def test_a_crashed_page_is_exit_4_not_an_answer(episode, tmp_path: Path) -> None:
    """The page's renderer dies while the model thinks (the test kills it: the agent cannot
    open chrome://crash, goto takes http(s) only): exit 4, an infrastructure failure."""

    def kill_renderers() -> tuple[int, Any, dict[str, str]]:
        killed = 0
        for proc in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error):
                if "--type=renderer" not in (proc.info["cmdline"] or []):
                    continue
                if any(str(tmp_path) in (p.cwd() or "") for p in proc.parents()):
                    proc.kill()
                    killed += 1
        assert killed, "no renderer of this episode found"
        time.sleep(0.5)
        return ok(reply(None, [call(1, "click", x=BOX[0], y=BOX[1])]))

    replies = [kill_renderers, ok(reply("unreached"))]
    stub, _, result = episode("none", replies)
    assert result.exit_code == 4, result.stderr[-2000:]
    assert "crashed" in result.stderr
    assert BrowserHarness.summary(result) == {
        "final_answer": None,
        "turns": 1,
        "stop": "error",
        "actions": 0,
        "unchanged": 0,
    }
    assert len(stub.requests) == 1

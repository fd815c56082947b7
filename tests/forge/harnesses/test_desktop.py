"""The desktop harness: its program on a real Xvfb with a real xedit, driven by a scripted chat
endpoint (the model's test double); and the host-side adapter."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from forge.harnesses.desktop import MODULES, PROGRAM, DesktopHarness
from forge.harnesses.desktop_actions import DESKTOP_ACTIONS, ActionError, pixel_digest, xdotool_keys
from forge.harnesses.desktop_agent import OMITTED, keep_latest_images, screenshot_message
from forge.harnesses.desktop_display import missing_tools, task_desktop
from forge.harnesses.install import HarnessNotInstalled
from forge.harnesses.registry import get_harness, require
from forge.sandboxes.base import ExecResult
from rewards.registry import verify
from tasks.loader import load_suite
from tasks.schema import Task
from tests.forge.harnesses.helpers import PREFIX, attempt_ctx, run_task, task_sandbox
from tests.forge.harnesses.test_react import needs_bwrap, ok, reply, tool_call
from tests.forge.httpstub import StubServer

AGENT = Path(__file__).resolve().parents[3] / "forge" / "harnesses" / "desktop_agent.py"
needs_x = pytest.mark.skipif(
    bool(missing_tools()), reason=f"GUI tools missing: {', '.join(missing_tools())}"
)
EDITOR = Task.model_validate(
    {
        "id": "edit",
        "instruction": "x",
        "files": {"notes.txt": "first\n"},
        "services": [{"command": "xedit -geometry 640x456+0+0 notes.txt"}],
        "gui": {"display": True, "screen": [640, 480]},
        "verifier": {"type": "file_exists", "path": "notes.txt"},
    }
)


def png_size(png: bytes) -> tuple[int, int]:
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and png[12:16] == b"IHDR"
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def images(message: dict[str, Any]) -> list[bytes]:
    content = message["content"] if isinstance(message["content"], list) else []
    prefix = "data:image/png;base64,"
    urls = [p["image_url"]["url"] for p in content if p.get("type") == "image_url"]
    assert all(u.startswith(prefix) for u in urls)
    return [base64.b64decode(u[len(prefix) :]) for u in urls]


def call(i: int, name: str, **args: Any) -> dict[str, Any]:
    return tool_call(i, name, json.dumps(args))


def window_position(env: dict[str, str]) -> tuple[int, int]:
    wid = subprocess.run(
        ["xdotool", "search", "--onlyvisible", "--class", "xedit"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout.split()[0]  # fmt: skip
    out = subprocess.run(
        ["xdotool", "getwindowgeometry", "--shell", wid],
        env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    values = dict(line.split("=", 1) for line in out.split())
    return int(values["X"]), int(values["Y"])


@needs_x
@pytest.mark.slow
def test_agent_drives_xedit(tmp_path: Path) -> None:
    """Typed text lands in the saved file, clicks land on the mapped pixels, screenshots go out
    as image parts (only the latest kept), malformed calls come back as errors, and a drag of
    the title bar moves the window."""
    replies = [
        ok(reply(None, [call(1, "click", x=501, y=835), call(2, "type", text="hello desktop\n")])),
        ok(
            reply(
                None,
                [
                    tool_call(3, "click", "{not json"),
                    call(4, "click", x=2000, y=10),
                    call(5, "goto", url="http://example.com"),
                    call(6, "wait", seconds=0.1),
                ],
            )
        ),
        ok(reply(None, [call(7, "click", x=105, y=69)])),  # xedit's Save button
        ok(reply(None, [call(8, "drag", x=500, y=21, x2=500, y2=230)])),  # the title bar
        ok(reply(None, [call(9, "done", answer="saved")])),
    ]

    def handler(method: str, path: str, headers: dict[str, str], body: Any):
        if method == "POST" and path == f"{PREFIX}/chat/completions" and replies:
            return replies.pop(0)
        return 500, {"error": f"unexpected {method} {path}"}, {}

    stub = StubServer(handler)
    ws = tmp_path / "ws"
    ws.mkdir()
    try:
        with task_desktop(EDITOR, ws) as desk:
            before = window_position(desk.env)
            env = {
                **os.environ,
                "DISPLAY": desk.display,
                "OPENAI_BASE_URL": f"http://{stub.address}{PREFIX}",
                "OPENAI_API_KEY": "k",
                "FORGE_MODEL": "m",
                "FORGE_SCREEN": "640x480",
                "FORGE_MAX_TURNS": "8",
            }
            proc = subprocess.run(
                [sys.executable, str(AGENT), "Add a line and save."],
                env=env, capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            after = window_position(desk.env)
    finally:
        stub.close()
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    # five actions carried out (the three bad calls are not); the wait left the screen as it was
    assert summary == {"final_answer": "saved", "turns": 5, "stop": "done"} | {
        "actions": 5,
        "unchanged": 1,
    }
    assert (ws / "notes.txt").read_text() == "first\nhello desktop\n"
    # y 21 -> 230 of 1000 is pixel 10 -> 110: the window went down by exactly 100 pixels
    assert (after[0] - before[0], after[1] - before[1]) == (0, 100)

    bodies = [r[3] for r in stub.requests]
    assert len(bodies) == 5
    first = bodies[0]
    assert [t["function"]["name"] for t in first["tools"]] == DESKTOP_ACTIONS
    assert "goto" not in DESKTOP_ACTIONS and "done" in DESKTOP_ACTIONS
    assert first["messages"][0]["role"] == "system" and "640x480" in first["messages"][0]["content"]
    user = first["messages"][1]
    assert user["content"][0] == {"type": "text", "text": "Add a line and save."}
    (shot,) = images(user)
    assert png_size(shot) == (640, 480)

    msgs = bodies[1]["messages"]
    results = {m["tool_call_id"]: m["content"] for m in msgs if m["role"] == "tool"}
    assert results["call_1"].startswith("clicked at (501, 835) = pixel (320, 400)")
    assert results["call_2"] == "typed 14 characters; the screen changed"
    assert sum(len(images(m)) for m in msgs if m["role"] == "user") == 1  # only the latest
    assert msgs[1]["content"][1] == {"type": "text", "text": OMITTED}

    later = {m["tool_call_id"]: m["content"] for m in bodies[2]["messages"] if m["role"] == "tool"}
    assert later["call_3"].startswith("error: arguments of click are not valid JSON")
    assert later["call_4"].startswith("error: (x, y) = (2000, 10) is off the screen")
    assert later["call_5"].startswith("error: unknown tool 'goto'")
    assert later["call_6"] == "waited 0.1s; the screen did not change"


def test_keys_and_digests() -> None:
    assert xdotool_keys("ctrl+a") == ["ctrl+a"]
    assert xdotool_keys("Enter") == ["Return"]
    assert xdotool_keys("ctrl+x ctrl+s") == ["ctrl+x", "ctrl+s"]
    assert xdotool_keys("Control+ArrowLeft") == ["ctrl+Left"]
    assert xdotool_keys("ctrl++") == ["ctrl+plus"]
    with pytest.raises(ActionError):
        xdotool_keys("ctrl+")
    with pytest.raises(ActionError):
        xdotool_keys("  ")
    # the same pixels with different metadata chunks hash the same; other pixels do not
    ihdr = b"\x00\x00\x00\x0dIHDR" + bytes(13) + b"\x00\x00\x00\x00"
    text = b"\x00\x00\x00\x04tEXtabcd\x00\x00\x00\x00"
    idat = b"\x00\x00\x00\x03IDATxyz\x00\x00\x00\x00"
    png = b"\x89PNG\r\n\x1a\n" + ihdr
    assert pixel_digest(png + text + idat) == pixel_digest(png + idat)
    assert pixel_digest(png + idat) != pixel_digest(png + idat.replace(b"xyz", b"xyw"))


def test_keep_latest_images() -> None:
    msgs = [screenshot_message(b"a", "one"), screenshot_message(b"b", "two")]
    msgs.append(screenshot_message(b"c", "three"))
    keep_latest_images(msgs, 2)
    assert [len([p for p in m["content"] if p["type"] == "image_url"]) for m in msgs] == [0, 1, 1]
    assert msgs[0]["content"][1] == {"type": "text", "text": OMITTED}


@needs_x  # ro_mounts checks xdotool and import are there
def test_adapter() -> None:
    harness = get_harness("desktop", keep_screenshots=3, temperature=0.5, settle_s=0.2)
    assert isinstance(harness, DesktopHarness) and harness.protocol == "chat"
    mounts = harness.ro_mounts()
    assert sorted(Path(h).name for h in mounts) == sorted(MODULES)
    assert all(Path(h).is_file() for h in mounts)
    assert {str(Path(t).parent) for t in mounts.values()} == {str(Path(PROGRAM).parent)}
    ctx = attempt_ctx(extra={"screen": "800x600"}, max_turns=7)
    env = harness.env(ctx)
    assert env["FORGE_SCREEN"] == "800x600" and env["FORGE_KEEP_SCREENSHOTS"] == "3"
    assert env["FORGE_MAX_TURNS"] == "7" and env["FORGE_TEMPERATURE"] == "0.5"
    assert env["FORGE_SETTLE_S"] == "0.2" and env["OPENAI_BASE_URL"] == ctx.base_url
    assert "FORGE_SCREEN" not in harness.env(attempt_ctx())
    assert harness.command(ctx) == ["python3", PROGRAM, ctx.instruction]
    line = json.dumps({"final_answer": "7", "turns": 2, "stop": "done"})
    assert harness.final_answer(ExecResult(0, f"noise\n{line}\n", "")) == "7"
    with pytest.raises(ValueError, match="keep_screenshots"):
        DesktopHarness(keep_screenshots=-1)


def test_missing_tools_stop_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no xdotool, no import
    with pytest.raises(HarnessNotInstalled, match="xdotool, import"):
        require("desktop", {})


def test_no_display_is_reported(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DISPLAY"}
    proc = subprocess.run(
        [sys.executable, str(AGENT), "do it"], env=env, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 4 and "DISPLAY is not set" in proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["stop"] == "error"


@needs_x
@needs_bwrap
@pytest.mark.slow
def test_reference_episode_in_isolated_sandbox(tmp_path: Path) -> None:
    """A task end to end without Ray: an isolated LocalSandbox, the real services launcher
    (Xvfb, openbox and the task's application, xedit, inside the sandbox), the harness's own
    command and env, and a chat endpoint answering with the task's reference solution, then
    done; the verifier passes on the state the application left."""
    task = DesktopHarness.adapt_task(
        next(t for t in load_suite("desktop") if t.id == "xedit_append_item")
    )
    steps = task.reference_script()["steps"]
    replies = [ok(reply(None, [tool_call(i, s.pop("action"), json.dumps(s))])) for i, s in
               enumerate(steps)]  # fmt: skip
    replies.append(ok(reply(None, [call(len(steps), "done", answer="")])))
    stub = StubServer(lambda m, p, h, b: replies.pop(0), str(tmp_path / "p.sock"))
    harness = DesktopHarness()
    with closing(stub), task_sandbox(tmp_path, harness, task, stub.address) as sb:
        _, result = run_task(sb, harness, task, 120)
        assert result.exit_code == 0, result.stderr[-2000:]
        assert DesktopHarness.summary(result) == {
            "final_answer": "",
            "turns": len(steps) + 1,
            "stop": "done",
            "actions": len(steps),
            "unchanged": 0,
        }
        assert verify(task.verifier, sb, "").reward == 1.0


@needs_x
@needs_bwrap
@pytest.mark.slow
@pytest.mark.parametrize(
    ("suite", "task_id"), [("web", "bank_move_to_savings"), ("miniwob", "choose-list-s0")]
)
def test_reference_page_episode_on_a_pod(tmp_path: Path, suite: str, task_id: str) -> None:
    """A page task end to end on a HarnessPod (its application kept there, reached through the
    sandbox's relay: ``tasks.webapps.hosted``), Chromium in kiosk mode on the sandbox's X
    display (``desktop_web.on_desktop``) and the scripted model playing the reference
    solution through the desktop harness: the verifier passes on the state the pod kept."""
    from tests.rewards.test_cheating_gui import MINIWOB, play

    tasks = MINIWOB if suite == "miniwob" else {t.id: t for t in load_suite(suite)}
    if task_id not in tasks:
        pytest.skip("MiniWoB's pages: pip install --no-deps miniwob==1.1.0")
    (episode,) = play(tmp_path / "boxes", [(tasks[task_id], "desktop", {})])
    assert (episode.status, episode.reward) == ("ok", 1.0), (
        episode.failure,
        episode.verifier_detail,
        episode.harness_log[-2000:],
    )

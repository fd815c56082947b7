"""The cua harness: the Cua agent (PyPI ``cua-agent``, unmodified) on a desktop task end to end
in an isolated sandbox under the real services launcher (Xvfb, openbox, xedit), its UI-TARS
loop answered by a scripted chat endpoint; and the adapter."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from forge.harnesses.cua import PACKAGE, RUNNER, CuaHarness
from forge.harnesses.desktop_display import missing_tools
from forge.harnesses.install import PACKAGES
from forge.harnesses.registry import get_harness
from rewards.registry import verify
from tasks.loader import load_suite
from tests.forge.harnesses.helpers import PREFIX, attempt_ctx, run_task, task_sandbox
from tests.forge.harnesses.test_react import needs_bwrap, ok, reply
from tests.forge.httpstub import StubServer

# xedit_append_item's reference solution in UI-TARS's action format (points on a 0..1000 grid)
REPLIES = [
    "Thought: The list ends with bread; I click below it.\nAction: click(start_box='(501,835)')",
    "Thought: Now the new item.\nAction: type(content='- milk\\n')",
    "Thought: Save the file.\nAction: click(start_box='(105,69)')",
    "Thought: Saved.\nAction: finished(content='saved')",
]


def test_adapter() -> None:
    harness = get_harness("cua", temperature=0.5, keep_screenshots=2)
    assert isinstance(harness, CuaHarness) and harness.protocol == "chat"
    ctx = attempt_ctx(extra={"screen": "640x480"}, max_turns=9)
    env = harness.env(ctx)
    assert env["OPENAI_BASE_URL"] == ctx.base_url and env["FORGE_MAX_TURNS"] == "9"
    assert env["FORGE_CUA_LOOP"] == "ui-tars" and env["FORGE_TEMPERATURE"] == "0.5"
    assert env["FORGE_KEEP_SCREENSHOTS"] == "2" and env["PYTHONPATH"] == PACKAGE
    assert env["FORGE_SCREEN"] == "640x480"
    assert harness.command(ctx) == ["python3", RUNNER, ctx.instruction]
    with pytest.raises(ValueError, match=r"harness_options\.loop"):
        CuaHarness(loop=" ")
    with pytest.raises(ValueError, match=r"harness_options\.keep_screenshots"):
        CuaHarness(keep_screenshots=0)


@pytest.mark.slow
@pytest.mark.full  # needs `forge harness install cua` (the test command's set-up skips it)
@needs_bwrap
@pytest.mark.skipif(bool(missing_tools()), reason=f"GUI tools missing: {missing_tools()}")
@pytest.mark.skipif(not PACKAGES["cua"].installed(), reason="forge harness install cua")
def test_cua_edits_and_saves_in_isolated_sandbox(tmp_path: Path) -> None:
    """xedit_append_item end to end: Cua's UI-TARS loop parses each reply, the runner's
    computer acts on the sandbox's Xvfb, and the verifier passes on the file xedit saved."""
    task = next(t for t in load_suite("desktop") if t.id == "xedit_append_item")
    replies = list(REPLIES)

    def handler(method: str, path: str, headers: dict[str, str], body: Any) -> Any:
        if method == "POST" and path == f"{PREFIX}/chat/completions" and replies:
            return ok(reply(replies.pop(0)))
        return 500, {"error": f"unexpected {method} {path}"}, {}

    stub = StubServer(handler, str(tmp_path / "p.sock"))
    harness = CuaHarness()
    with closing(stub), task_sandbox(tmp_path, harness, task, stub.address) as sb:
        ctx, result = run_task(sb, harness, task, 150, max_turns=6)
        assert result.exit_code == 0, result.stderr[-3000:]
        summary = CuaHarness.summary(result)
        assert summary == {"final_answer": "saved", "turns": 4, "stop": "done", "actions": 3}, (
            result.stdout[-3000:],
            result.stderr[-3000:],
        )
        assert verify(task.verifier, sb, "").reward == 1.0
    bodies = [r[3] for r in stub.requests]
    assert len(bodies) == 4 and all(b["model"] == ctx.model for b in bodies)
    # each request carries the latest screenshot as a PNG data URL
    last = bodies[-1]["messages"][-1]["content"]
    assert any(p.get("type") == "image_url" for p in last if isinstance(p, dict))

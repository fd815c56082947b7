"""The agent-s harness: Agent S3 (PyPI ``gui-agents``, unmodified) on a desktop task end to end in
an isolated sandbox under the real services launcher (Xvfb, openbox, xedit), against a scripted
chat endpoint that answers Agent S's worker, grounding and reflection calls; and the adapter."""

from __future__ import annotations

import json
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from forge.harnesses.agent_s import PACKAGE, RUNNER, AgentSHarness
from forge.harnesses.desktop_display import missing_tools
from forge.harnesses.install import PACKAGES
from forge.harnesses.registry import get_harness
from rewards.registry import verify
from tasks.loader import load_suite
from tests.forge.harnesses.helpers import PREFIX, attempt_ctx, run_task, task_sandbox
from tests.forge.harnesses.test_react import needs_bwrap, ok, reply
from tests.forge.httpstub import StubServer

# The worker's plans for xedit_append_item, in Agent S3's own format (reasoning, then one
# agent call in a code block), and where the grounding model puts each element (0..1000).
PLANS = [
    'The list ends with "- bread".\n```python\nagent.click("The empty text area below the last'
    ' line", 1, "left")\n```',
    '```python\nagent.type(text="- milk", enter=True)\n```',
    '```python\nagent.click("The Save button in the toolbar", 1, "left")\n```',
    "The file is saved.\n```python\nagent.done()\n```",
]
POINTS = {
    "The empty text area below the last line": (501, 835),
    "The Save button in the toolbar": (105, 69),
}


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if p.get("type") == "text")


def role_of(body: dict[str, Any]) -> str:
    """Which of Agent S's three models a request is for."""
    system = text_of(body["messages"][0]) if body["messages"][0]["role"] == "system" else ""
    if text_of(body["messages"][-1]).startswith("Query:"):
        return "grounding"
    return "reflection" if "reflect on the trajectory" in system else "worker"


class AgentSModel:
    """A scripted chat endpoint playing Agent S's models: ``plans`` in turn for the worker, the
    point of ``points[description]`` for the grounding model, a fixed line for the reflection."""

    def __init__(self, plans: list[str], points: dict[str, tuple[int, int]]) -> None:
        self.plans = list(plans)
        self.points = points
        self.roles: list[str] = []

    def __call__(self, method: str, path: str, headers: dict[str, str], body: Any) -> Any:
        if method != "POST" or path != f"{PREFIX}/chat/completions":
            return 500, {"error": f"unexpected {method} {path}"}, {}
        role = role_of(body)
        self.roles.append(role)
        if role == "grounding":
            query = text_of(body["messages"][-1]).split("\n")[0].removeprefix("Query:")
            x, y = self.points[query]
            return ok(reply(f"({x}, {y})"))
        if role == "reflection":
            return ok(reply("The last action did what it was meant to; continue."))
        return ok(reply(self.plans.pop(0) if self.plans else "```python\nagent.fail()\n```"))


def test_adapter() -> None:
    harness = get_harness("agent-s", ground_model="ui-tars", reflection=False, settle_s=0.2)
    assert isinstance(harness, AgentSHarness) and harness.protocol == "chat"
    ctx = attempt_ctx(extra={"screen": "640x480"}, max_turns=9)
    env = harness.env(ctx)
    assert env["OPENAI_BASE_URL"] == ctx.base_url and env["FORGE_MAX_TURNS"] == "9"
    assert env["FORGE_GROUND_MODEL"] == "ui-tars" and env["FORGE_REFLECTION"] == "0"
    assert env["FORGE_GROUNDING_SIZE"] == "1000x1000" and env["PYTHONPATH"] == PACKAGE
    assert harness.command(ctx) == ["python3", RUNNER, ctx.instruction]
    for bad in ({"grounding_size": "1000"}, {"grounding_size": "0x5"}, {"reflection": "yes"}):
        with pytest.raises(ValueError, match="harness_options"):
            AgentSHarness(**bad)  # type: ignore[arg-type]


def test_role_of_tells_agent_s_calls_apart() -> None:
    def body(system: str, last: str) -> dict[str, Any]:
        user = {"role": "user", "content": [{"type": "text", "text": last}]}
        return {"messages": [{"role": "system", "content": system}, user]}

    assert role_of(body("You are a helpful assistant.", "Query:the OK button\n")) == "grounding"
    assert role_of(body("designed to reflect on the trajectory of a task", "x")) == "reflection"
    assert role_of(body("You are an expert in graphical user interfaces", "x")) == "worker"


@pytest.mark.slow
@pytest.mark.full  # needs `forge harness install agent-s` (the test command's set-up skips it)
@needs_bwrap
@pytest.mark.skipif(bool(missing_tools()), reason=f"GUI tools missing: {missing_tools()}")
@pytest.mark.skipif(not PACKAGES["agent-s"].installed(), reason="forge harness install agent-s")
def test_agent_s_edits_and_saves_in_isolated_sandbox(tmp_path: Path) -> None:
    """xedit_append_item end to end: Agent S's worker picks each action, its grounding call
    places the clicks, pyautogui acts on the sandbox's Xvfb, and the verifier passes on the file
    xedit saved."""
    task = next(t for t in load_suite("desktop") if t.id == "xedit_append_item")
    model = AgentSModel(PLANS, POINTS)
    stub = StubServer(model, str(tmp_path / "p.sock"))
    harness = AgentSHarness(settle_s=0.3)
    with closing(stub), task_sandbox(tmp_path, harness, task, stub.address) as sb:
        _, result = run_task(sb, harness, task, 150, max_turns=6)
        assert result.exit_code == 0, result.stderr[-3000:]
        summary = AgentSHarness.summary(result)
        assert summary == {
            "final_answer": "",
            "turns": 4,
            "stop": "done",
            "actions": 3,
            "errors": 0,
        }, result.stdout[-3000:]
        assert verify(task.verifier, sb, "").reward == 1.0
    # every call carried the screenshot; each click was grounded (its format check and its
    # action both ask), and the reflection came in from the second step
    bodies = [r[3] for r in stub.requests]
    assert all(
        any(p.get("type") == "image_url" for m in b["messages"] if isinstance(m["content"], list)
            for p in m["content"])
        for b in bodies
    )  # fmt: skip
    assert model.roles.count("worker") == 4 and model.roles.count("grounding") == 4
    assert model.roles.count("reflection") == 3 and model.roles[0] == "worker"
    assert json.loads(result.stdout.strip().splitlines()[-1])["stop"] == "done"

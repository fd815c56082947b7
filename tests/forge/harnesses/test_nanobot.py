"""The nanobot harness: its generated config and command, its workspace clean-up, and the real
nanobot in a HarnessPod."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from forge.harnesses.install import PACKAGES
from forge.harnesses.nanobot import CONFIG, MOUNT, RUNNER, SCAFFOLD
from forge.harnesses.registry import get_harness
from forge.sandboxes.base import ExecResult
from tests.forge.harnesses.helpers import attempt_ctx, oracle_and_noop

needs_nanobot = pytest.mark.skipif(
    not PACKAGES["nanobot"].installed(),
    reason="nanobot is not installed: forge harness install nanobot",
)


def test_config_points_nanobot_at_the_attempt() -> None:
    bot = get_harness("nanobot", max_tokens=64)
    config = json.loads(bot.files(attempt_ctx(max_turns=7))[CONFIG])
    assert config["providers"]["custom"] == {
        "apiKey": "key-1",
        "apiBase": "http://127.0.0.1:8931/episodes/e/attempts/0/v1",
    }
    defaults = config["agents"]["defaults"]
    assert defaults["provider"] == "custom" and defaults["model"] == "tiny"
    assert defaults["workspace"] == "/workspace" and defaults["maxToolIterations"] == 7
    assert defaults["maxTokens"] == 64 and defaults["timezone"] == "UTC"
    cmd = bot.command(attempt_ctx())
    assert cmd[:2] == ["python3", "-c"] and cmd[-2:] == ["-m", "Write hi to a.txt"]
    assert bot.env(attempt_ctx(paths={MOUNT: "/host/nb"}))["PYTHONPATH"] == "/host/nb"
    with pytest.raises(ValueError, match="max_tokens"):
        get_harness("nanobot", max_tokens=0)


def test_final_answer_is_the_runner_report() -> None:
    bot = get_harness("nanobot")
    out = "🐈 nanobot\n  ↳ $ ls\nDone.\n" + json.dumps({"final_answer": "42"}) + "\n"
    assert bot.final_answer(ExecResult(0, out, "", 1.0)) == "42"
    assert bot.final_answer(ExecResult(1, "Traceback", "", 1.0)) is None


def test_runner_reads_the_session_and_removes_only_new_scaffold(tmp_path) -> None:
    """The runner around nanobot's entry point, with a stand-in ``nanobot`` package that seeds the
    workspace and writes a session the way nanobot does."""
    fake = tmp_path / "lib" / "nanobot" / "cli"
    fake.mkdir(parents=True)
    (fake.parent / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    (fake / "entry.py").write_text(
        "import json, os, sys\n"
        "def main():\n"
        "    ws = sys.argv[sys.argv.index('-w') + 1]\n"
        "    cfg = sys.argv[sys.argv.index('-c') + 1]\n"
        "    for name in ('AGENTS.md', 'SOUL.md', 'answer.txt'):\n"
        "        if not os.path.exists(os.path.join(ws, name)):  # nanobot never overwrites\n"
        "            open(os.path.join(ws, name), 'w').write('x')\n"
        "    os.makedirs(os.path.join(ws, 'memory'))\n"
        "    d = os.path.join(os.path.dirname(cfg), 'sessions', 'w1')\n"
        "    os.makedirs(d)\n"
        "    rows = [{'_type': 'metadata'}, {'role': 'assistant', 'content': 'step'},\n"
        "            {'role': 'tool', 'content': 'ok'}, {'role': 'assistant', 'content': ' 42 '}]\n"
        "    open(os.path.join(d, 's.jsonl'), 'w').write('\\n'.join(map(json.dumps, rows)))\n"
        "    sys.exit(0)\n"
    )
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "SOUL.md").write_text("the task's own file")  # there before: kept
    config = tmp_path / "home" / "config.json"
    config.parent.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, str(config), str(ws), ",".join(SCAFFOLD), "-m", "hi"],
        env={"PYTHONPATH": str(tmp_path / "lib")},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == {"final_answer": "42"}
    assert sorted(p.name for p in ws.iterdir()) == ["SOUL.md", "answer.txt"]
    assert (ws / "SOUL.md").read_text() == "the task's own file"


@needs_nanobot
@pytest.mark.slow
@pytest.mark.ray
def test_real_nanobot_oracle_gets_1_and_noop_gets_0(ray_cluster) -> None:
    eps = oracle_and_noop(ray_cluster, "nanobot", "hello_file")
    good, bad = eps["oracle"], eps["noop"]
    assert all(t.protocol == "chat" for t in good.turns + bad.turns)
    assert good.reward == 1.0 and len(good.turns) == 2
    assert bad.reward == 0.0 and len(bad.turns) == 1
    tools = {t["function"]["name"] for t in good.turns[0].request.get("tools", [])}
    assert {"exec", "read_file", "write_file"} <= tools

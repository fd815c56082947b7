"""``forge run`` on a harness mix with the tiny model: each group stays in one harness, the
per-harness metrics add up to the step's, the evaluation runs through every harness, the
checkpoint keeps the draw's state, and a resumed run draws on from it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.chaos.runner import letters_suite
from tests.forge.react_cli import react_cli
from tests.forge.test_cli import FORGE, _env

ROOT = Path(__file__).resolve().parents[2]
# the react program as a third-party CLI agent, as a plain chat like the quickstart's react (the
# tiny model reads every byte of a prompt)
COMMAND = react_cli("react-cli", FORGE_TOOLS="", FORGE_SYSTEM_PROMPT="")


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-step run on {react: 1, command: 1}, adaptive, evaluated before and after; its dir."""
    tmp_path = tmp_path_factory.mktemp("mix")
    options = {"react": {"tools": [], "system_prompt": ""}, "command": COMMAND}
    args = [
        "run", str(ROOT / "examples" / "quickstart.yaml"), f"runs_dir={tmp_path}",
        f"tasks={letters_suite(tmp_path, max_tokens=16)}", "name=mix", "steps=2",
        "harness={react: 1, command: 1}", "harness_mix=adaptive",
        f"harness_options={json.dumps(options)}", "rollout.group_size=3",
        "rollout.groups_per_step=4", "eval_every=2", "checkpoint_every=1",
    ]  # fmt: skip
    r = subprocess.run([*FORGE, *args], capture_output=True, text=True, timeout=800, env=_env())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return tmp_path / "mix"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_two_harness_run_splits_by_harness(mixed: Path) -> None:
    run_dir = mixed
    records = _lines(run_dir / "metrics.jsonl")
    steps = [s for s in records if "by_harness" in s]
    assert [s["step"] for s in steps] == [1, 2]
    for s in steps:
        split = s["by_harness"]
        assert set(split) == {"react", "command"}
        assert sum(h["groups"] for h in split.values()) == s["groups"] == 4
        assert sum(h["episodes"] for h in split.values()) == s["episodes"] == 12
        weighted = sum(h["reward_mean"] * h["episodes"] for h in split.values()) / 12
        assert abs(weighted - s["reward_mean"]) < 1e-6, s
        assert abs(sum(s["harness_shares"].values()) - 1) < 1e-9
    evals = [s for s in records if "eval_pass_rate" in s]
    assert len(evals) == 2 and all(set(e["eval_by_harness"]) == {"react", "command"} for e in evals)
    episodes = _lines(run_dir / "episodes" / "episodes.jsonl")
    by_group: dict[str, set[str]] = {}
    for ep in episodes:  # one task in one harness per group
        by_group.setdefault(ep["episode_id"].rsplit("-", 1)[0], set()).add(
            ep["provenance"]["harness"]
        )
    assert by_group and all(len(h) == 1 for h in by_group.values()), by_group
    state = json.loads((run_dir / "checkpoints" / "step_2" / "run_state.json").read_text())
    assert state["harness_draw"]["draws"] >= 8, state  # 8 groups trained (more may be open)
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["harness"] == {
        "react": 1.0,
        "command": 1.0,
    }


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.full  # a second run, ~60 s: -m full; in CI the checkpoint's draw state (above) and
# its restore (tests/actors/test_harness_draw.py)
def test_a_resumed_mix_run_draws_on(mixed: Path) -> None:
    run_dir = mixed
    state = json.loads((run_dir / "checkpoints" / "step_2" / "run_state.json").read_text())
    again = [*FORGE, "run", "--resume", str(run_dir), "steps=3", "eval_every=0"]
    r = subprocess.run(again, capture_output=True, text=True, timeout=600, env=_env())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    after = json.loads((run_dir / "checkpoints" / "step_3" / "run_state.json").read_text())
    assert after["harness_draw"]["draws"] >= state["harness_draw"]["draws"] + 4, after
    kept = state["harness_draw"]["seen"]  # the windows went on from the saved ones
    assert all(len(after["harness_draw"]["seen"][h]) >= len(kept[h]) for h in kept)

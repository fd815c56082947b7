"""``forge analyze`` on GUI runs: action types, clicks that changed nothing, recovery, steps,
done share; and ``forge eval`` on a GUI suite end to end.

The real run: ``forge eval`` (its ``main``, in the session's Ray cluster) plays two shop tasks
through the ``browser`` harness with the scripted oracle, real Chromium in bubblewrap
sandboxes, the shop's own service and ``page_state`` verifier. The tasks differ only in the
reference solution the oracle plays: the shipped one (two clicks that change the page) after a
click on an empty spot (a no-effect click, then recovery, reward 1), and the empty click alone
(no effect, no recovery, reward 0). Each starts with a ``wait`` so the
empty click acts on the rendered page, not on the first screenshot (which can show the page
before it is drawn: see the limits in :mod:`forge.observe.analyze_gui`).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from forge.harnesses.install import PACKAGES
from forge.observe.analyze import analyze, table
from forge.observe.analyze_gui import gui_behaviour, gui_rates, is_gui_episode
from forge.sandboxes.bwrap import bwrap_works
from tests.forge.observe.test_analyze import AFTER, BEFORE
from tests.forge.test_cli import FORGE

ROOT = Path(__file__).resolve().parents[3]
EMPTY_SPOT = {"action": "click", "x": 980, "y": 980}  # below the shop's Place order button
WAIT = {"action": "wait", "seconds": 1}


def _tasks(folder: Path) -> Path:
    shop = yaml.safe_load((ROOT / "tasks" / "data" / "web" / "shop_blue_mug.yaml").read_text())
    solution = shop["solution"]
    tasks = [
        {**shop, "id": "misclick", "solution": [WAIT, EMPTY_SPOT, *solution]},
        {**shop, "id": "only_misclick", "solution": [WAIT, EMPTY_SPOT]},
    ]
    path = folder / "tasks.yaml"
    path.write_text(yaml.safe_dump({"tasks": tasks}, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def gui_run(ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``forge eval`` of the two tasks through ``browser``; its output folder."""
    from ray import serve

    from forge.config import load_config
    from forge.evaluate import main as eval_main

    if not bwrap_works():
        pytest.skip("bubblewrap cannot create namespaces here")
    if not PACKAGES["browser"].installed():
        pytest.skip("the browser harness is not installed (forge harness install browser)")
    folder = tmp_path_factory.mktemp("gui-run")
    overrides = [f"tasks={_tasks(folder)}", "harness=browser", "policy.num_cpus=0.25"]
    config = load_config(str(ROOT / "examples" / "oracle.yaml"), overrides)
    try:
        assert eval_main(config, ["browser"], 1, folder / "eval") == 0
        yield folder / "eval"
    finally:
        serve.delete("forge-eval-policy")


def _records(run: Path) -> dict[str, dict[str, Any]]:
    lines = (run / "browser" / "episodes.jsonl").read_text().splitlines()
    return {r["task_id"]: r for r in map(json.loads, lines)}


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.browser
@pytest.mark.full  # a forge eval of a GUI suite, ~30 s: -m full; in CI the GUI rates
# on recorded episodes (above) and GUI episodes in tests/forge/harnesses/test_browser_episode.py
def test_forge_eval_scores_a_gui_suite_and_keeps_the_screenshots(gui_run: Path) -> None:
    result = json.loads((gui_run / "eval.json").read_text())["harnesses"]["browser"]
    assert result["pass@1"] == 0.5 and result["failed_tasks"] == ["only_misclick"]
    records = _records(gui_run)
    assert {t: r["reward"] for t, r in records.items()} == {
        "misclick": 1.0,
        "only_misclick": 0.0,
    }
    for r in records.values():
        for turn in r["turns"]:
            assert turn["images"], (r["task_id"], turn["index"])
            assert all(
                list((gui_run / "browser" / "images").glob(f"{s}.png")) for s in turn["images"]
            )


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.browser
@pytest.mark.full  # the same evaluation: -m full
def test_the_empty_click_is_counted_and_the_oracles_clicks_are_not(gui_run: Path) -> None:
    records = _records(gui_run)
    acts = {t: gui_behaviour(r)["actions"] for t, r in records.items()}
    assert [a["tool"] for a in acts["misclick"]] == ["wait", "click", "click", "click"]
    assert [a["changed"] for a in acts["misclick"] if a["pointer"]] == [False, True, True]
    assert [a["changed"] for a in acts["only_misclick"] if a["pointer"]] == [False]
    # the harness's own before/after comparison agrees
    assert [a["harness_changed"] for a in acts["misclick"] if a["pointer"]] == [False, True, True]

    gui = analyze(gui_run / "browser")
    assert gui["versions"] == {}  # no text episodes: the text rates are not made up from clicks
    r = gui["gui"]["0"]
    assert r["episodes"] == 2 and r["reward_mean"] == 0.5
    assert r["actions"] == {"click": pytest.approx(4 / 6), "wait": pytest.approx(2 / 6)}
    assert r["steps_mean"] == 3.0 and r["done_share"] == 1.0
    assert (r["no_effect"], r["no_effect_episodes"]) == (2, 2)
    assert r["no_effect_share"] == 0.5 and r["harness_no_effect_share"] == 0.5
    assert r["recovery"] == 0.5  # misclick recovered and passed; only_misclick did neither
    assert r["error_share"] == 0.0 and r["unknown_tools"] == []

    # the command prints the GUI table and writes analysis.json beside the episodes
    done = subprocess.run(
        [*FORGE, "analyze", str(gui_run / "browser")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "| version | GUI episodes |" in done.stdout
    assert "| 0 | 2 | 0.50 | 3.00 | 1.00 | 0.50 (2) | 0.50 | 0.50 | click 0.67, wait 0.33 |" in (
        done.stdout
    )
    saved = json.loads((gui_run / "browser" / "analysis.json").read_text())
    assert saved["gui"]["0"]["no_effect"] == 2
    # the eval's top folder is not a run: the error names the agent folder to give
    top = subprocess.run([*FORGE, "analyze", str(gui_run)], capture_output=True, text=True)
    assert top.returncode == 2 and "give one agent's folder: browser" in top.stderr


def _turn(images: list[str], calls: list[dict], history: list[dict]) -> dict[str, Any]:
    return {"images": images, "tool_calls": calls, "request": {"messages": list(history)}}


def _click(i: int, name: str = "click", **args: Any) -> dict[str, Any]:
    return {"id": f"c{i}", "name": name, "arguments": json.dumps(args or {"x": 1, "y": 2})}


def test_rules_on_recorded_turns() -> None:
    """The screenshot rule, errors, two calls in one turn, the last turn, the harness's word."""
    c0, c1, c2, c3 = _click(0), _click(1, "scroll", x=5, y=5, dy=3), _click(2, "type"), _click(3)
    done = {"id": "d", "name": "done", "arguments": json.dumps({"answer": ""})}
    h1 = [{"role": "tool", "tool_call_id": "c0", "content": "error: click needs argument(s): x"}]
    h2 = [
        *h1,
        {"role": "tool", "tool_call_id": "c1", "content": "scrolled; the screen did not change"},
        {"role": "tool", "tool_call_id": "c2", "content": "typed"},
    ]
    ep = {
        "reward": 0.0,
        "turns": [
            _turn(["a"], [c0], []),  # an error: not a no-effect click
            _turn(["a"], [c1, c2], h1),  # both calls share the turn's screens: a -> a
            _turn(["old", "a"], [c3], h2),  # the last image is the one acted on: a -> b
            _turn(["b"], [done], h2),
        ],
    }
    acts = gui_behaviour(ep)["actions"]
    assert [(a["tool"], a["changed"], a["error"]) for a in acts] == [
        ("click", False, True),
        ("scroll", False, False),
        ("type", False, False),
        ("click", True, False),
    ]
    assert [a["harness_changed"] for a in acts] == [None, False, None, None]
    assert gui_behaviour(ep)["done_answer"] == ""
    r = gui_rates([ep])
    assert (r["no_effect"], r["no_effect_share"], r["error_share"]) == (1, 0.5, 0.25)
    assert r["recovery"] == 0.0  # changed the screen afterwards but did not succeed
    assert (r["done_share"], r["answered_share"]) == (1.0, 0.0)
    # an action in the last turn has no screenshot after it: unknown, not "no effect"
    cut = {"reward": 1.0, "turns": [_turn(["a"], [_click(9)], [])]}
    assert gui_behaviour(cut)["actions"][0]["changed"] is None
    assert gui_rates([cut])["no_effect_share"] is None and gui_rates([cut])["recovery"] is None
    assert is_gui_episode(ep) and not is_gui_episode(AFTER)


def test_text_rates_stay_as_they_were_beside_gui_episodes(tmp_path: Path) -> None:
    ep = {"reward": 1.0, "turns": [_turn(["a"], [_click(0)], []), _turn(["b"], [], [])]}
    (tmp_path / "episodes").mkdir()
    text_only = [json.dumps(e) for e in (BEFORE, BEFORE, AFTER)]
    (tmp_path / "episodes" / "episodes.jsonl").write_text("\n".join(text_only) + "\n")
    before = analyze(tmp_path)
    assert before["gui"] == {} and "GUI" not in table(before)
    (tmp_path / "episodes" / "episodes.jsonl").write_text("\n".join([*text_only, json.dumps(ep)]))
    mixed = analyze(tmp_path)
    assert mixed["versions"] == before["versions"]
    assert mixed["gui"]["0"]["actions"] == {"click": 1.0} and mixed["gui"]["0"]["no_effect"] == 0
    assert table(before) in table(mixed) and "| version | GUI episodes |" in table(mixed)

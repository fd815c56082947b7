"""``forge eval --model A,B``: the checkpoint x harness matrix, its cells' statistics and files."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from forge.eval_matrix import cell, label, markdown
from tests.actors.test_scheduler_mix import ASTRAY
from tests.forge.test_cli import FORGE, _env

ROOT = Path(__file__).resolve().parents[2]


def test_a_cell_has_the_standard_error_and_a_bootstrap_interval() -> None:
    result = {
        "k": 2,
        "passes": {"a": 2, "b": 1, "c": 0, "d": 1},
        "pass@k": 0.75,
        "pass^k": 0.25,
        "episodes": 8,
        "failures": {"timeout": 1},
    }
    c = cell(result)
    assert c["pass@1"] == 0.5 and c["tasks"] == 4
    # per-task rates 1, .5, 0, .5: sample sd sqrt(1/6), over sqrt(4) tasks
    assert abs(c["pass@1_se"] - (1 / 6) ** 0.5 / 2) < 1e-9
    lo, hi = c["pass@1_ci95"]
    assert 0.0 <= lo < 0.5 < hi <= 1.0
    assert cell(result) == c  # seeded: the same interval every time
    one = cell({**result, "passes": {"a": 2}})
    assert one["pass@1_se"] == 0.0 and one["pass@1_ci95"] == [1.0, 1.0]
    assert "0.500 ± 0.204" in markdown({"m": {"react": c}})


def test_labels_name_checkpoints_by_run_and_step(tmp_path: Path) -> None:
    ckpt = tmp_path / "runs" / "mix" / "checkpoints" / "step_8"
    ckpt.mkdir(parents=True)
    assert label(str(ckpt)) == "mix-step_8"
    assert label(str(tmp_path / "runs")) == "runs"
    assert label("tiny") == "tiny" and label("a/b c") == "a_b_c"


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.full  # two Policies and four agents, ~80 s: -m full; in CI the cells' statistics
# (above) and forge eval's agents (tests/forge/test_evaluate.py)
def test_two_checkpoints_by_two_harnesses(tmp_path: Path) -> None:
    """The oracle policy under two model names through react (it passes) and a command agent
    that works outside its workspace (it fails): 2 x 2 cells, each with its episodes."""
    import yaml

    astray = tmp_path / "astray.yaml"
    astray.write_text(yaml.safe_dump(ASTRAY))
    out = tmp_path / "matrix"
    args = [
        "eval", str(ROOT / "examples" / "oracle.yaml"), "--harness", "react",
        "--harness-config", str(astray), "--model", "tiny,tiny-vl", "-k", "2",
        "--tasks", "smoke", "task_ids=[hello_file,json_extract]", "--out", str(out),
        "rollout.min_pods=1", "rollout.max_pods=2",
    ]  # fmt: skip
    r = subprocess.run(
        [*FORGE, *args], capture_output=True, text=True, timeout=560, env=_env(), cwd=ROOT
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    report = json.loads((out / "matrix.json").read_text())
    assert list(report["matrix"]) == ["tiny", "tiny-vl"]
    for model, row in report["matrix"].items():
        assert list(row) == ["react", "astray"], row
        assert row["react"]["pass@1"] == 1.0 and row["astray"]["pass@1"] == 0.0, row
        assert row["react"]["pass^k"] == 1.0 and row["react"]["k"] == 2
        assert row["react"]["episodes"] == 4 and row["react"]["pass@1_se"] == 0.0
        for agent in row:
            lines = (out / model / agent / "episodes.jsonl").read_text().splitlines()
            assert len(lines) + sum(row[agent]["failures"].values()) == 4, (model, agent)
    assert "| tiny-vl | 1.000 ± 0.000" in (out / "matrix.md").read_text()
    assert (out / "matrix.png").stat().st_size > 1000

"""scripts/harbor_check.py's reading of a set and of its two plays: every folder gets a row
(loaded or the field at fault, and whose fault), and each miss its cause. The plays themselves
are `forge eval` runs (tested in tests/forge/test_evaluate.py and, on Harbor tasks with a real
daemon, tests/forge/sandboxes/test_docker_harbor.py); the whole script was run on
examples/harbor and on harbor-cookbook (docs/results/evaluations.md)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _module() -> Any:
    spec = importlib.util.spec_from_file_location("harbor_check", ROOT / "scripts/harbor_check.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["harbor_check"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_rows_for_every_folder_and_the_cause_of_each_miss(tmp_path: Path) -> None:
    hc = _module()
    shutil.copytree(ROOT / "examples/harbor/csv-total", tmp_path / "good")
    shutil.copytree(ROOT / "examples/harbor/csv-total", tmp_path / "public")
    toml = tmp_path / "public" / "task.toml"
    toml.write_text(toml.read_text().replace("[agent]\n", '[agent]\nnetwork_mode = "public"\n'))
    rows, tasks = hc.load(tmp_path)
    assert [t.id for t in tasks] == ["good"] and rows["good"]["load"] == "ok"
    assert rows["public"]["load"].startswith("agent.network_mode: public for one phase")
    assert rows["public"]["cause"] == "OpenForge"  # a field OpenForge does not run yet

    def ep(reward: float, out: str = "", status: str = "ok") -> dict[str, Any]:
        outputs = {"test-stdout.txt": out}
        return {"status": status, "reward": reward, "duration_s": 3.0, "failure": "sandbox_error",
                "verifier_detail": "test.sh exited 1", "verifier_outputs": outputs}  # fmt: skip

    good = {"task": "good"}
    hc.judge(good, ep(1.0), ep(0.0))
    assert (good["oracle"], good["noop"], "cause" in good) == ("1 (3s)", "0 (3s)", False)
    offline = {"task": "t"}
    hc.judge(offline, ep(0.0, "curl: (6) Could not resolve host: example.com"), ep(0.0))
    assert offline["cause"] == "environment"  # the network it needs is not here
    wrong = {"task": "t"}
    hc.judge(wrong, ep(0.0, "1 failed, 4 passed"), ep(0.0))
    assert (wrong["cause"], wrong["detail"]) == ("oracle", "1 failed, 4 passed")
    easy = {"task": "t"}
    hc.judge(easy, ep(1.0), ep(1.0))
    assert easy["cause"] == "task"  # its tests pass without the work
    broken = {"task": "t"}
    hc.judge(broken, ep(0.0, status="failed"), None)
    assert broken["cause"] == "OpenForge" and broken["oracle"] == "failed (sandbox_error)"
    assert hc._cause_of_text("The command '/bin/sh -c pip install flask' returned a non-zero "
                             "code: 127") == "environment"  # fmt: skip
    md = hc.table([good, offline])
    assert md.splitlines()[0] == "| task | load | build | oracle | noop | cause | detail |"

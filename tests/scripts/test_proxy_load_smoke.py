"""scripts/bench/proxy_load.py end to end at one session and one turn, with --baseline: the
older tree's HarnessPod runs from its own files beside today's, every call through both is
recorded, and the comparison is printed. No timing asserted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_bench_runs_today_beside_a_baseline_revision() -> None:
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled"}
    out = subprocess.run(
        [sys.executable, "scripts/bench/proxy_load.py", "--levels", "1", "--turns", "1",
         "--samples", "2", "--baseline", "HEAD"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    base = next(line for line in lines if line.startswith("base (HEAD): "))
    assert "/forge-baseline-" in base and base.endswith("actors/harness_pod.py")
    assert next(line for line in lines if line.startswith("proxy (now): ")).startswith(
        f"proxy (now): {ROOT}/actors/"
    )
    assert any(line.startswith("baseline HEAD vs now") for line in lines)
    assert lines[-1].startswith("errors 0;")

"""scripts/bench/sandbox_proxy.py end to end with a few calls: both ways (the pod serving the
sandbox's listener, and relayed) complete every call and the comparison is printed. No timing
asserted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from forge.sandboxes import netns
from forge.sandboxes.bwrap import bwrap_works

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not bwrap_works() or not netns.host_relays_work(),
        reason="needs bubblewrap and a process that may enter network namespaces (root)",
    ),
]

ROOT = Path(__file__).resolve().parents[2]


def test_bench_runs_both_ways_side_by_side() -> None:
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled"}
    out = subprocess.run(
        [sys.executable, "scripts/bench/sandbox_proxy.py", "--calls", "3", "--rounds", "2"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[0] == "2 rounds of 3 calls each way, alternated"
    assert {line.split()[0] for line in lines[2:4]} == {"served", "relayed"}
    assert lines[-1].startswith("relayed / served: latency p50 ")

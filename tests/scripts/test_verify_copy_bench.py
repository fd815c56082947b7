"""scripts/bench/verify_copy.py on the local backend with a few rounds: both ways score the
answer 1.0 (the bench stops otherwise) and the comparison is printed. No timing asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from forge.sandboxes.bwrap import bwrap_works

pytestmark = pytest.mark.skipif(not bwrap_works(), reason="needs bubblewrap")

ROOT = Path(__file__).resolve().parents[2]


def test_bench_verifies_both_ways_side_by_side() -> None:
    argv = ["scripts/bench/verify_copy.py", "--reps", "2", "--files", "3", "--backends", "local"]
    out = subprocess.run(
        [sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    header = lines.index("backend         copy     fresh  fresh/copy")
    name, copy, fresh, ratio = lines[header + 1].split()
    assert name == "local"
    assert float(copy) > 0 and float(fresh) > 0 and ratio.endswith("x")
    assert lines[-1] == "command: .venv/bin/python scripts/bench/verify_copy.py " + " ".join(
        argv[1:]
    )

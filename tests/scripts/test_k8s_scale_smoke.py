"""scripts/bench/k8s_scale.py's core at 10 pods: every sandbox created, used and deleted through
the kubernetes backend against kmock, 3 pod calls each besides the watch. No timing asserted."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("kmock")
pytest.importorskip("kubernetes")

BENCH = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "k8s_scale.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("k8s_scale", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_ten_sandboxes_through_the_backend() -> None:
    bench = load()
    r = bench.run_once(10, latency_ms=1, qps_limit=1000, n_agents=2, client_qps=100,
                       client_burst=100)  # fmt: skip
    assert r.failed == []
    assert r.ok == 10
    calls = bench.pod_calls(r)
    assert {v: round(calls.get(v, 0), 2) for v in ("POST", "GET", "DELETE")} == {
        "POST": 1.0, "GET": 1.0, "DELETE": 1.0}  # fmt: skip
    assert r.reap[0] == 2 and r.sweep[0] == 2

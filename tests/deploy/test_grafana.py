"""deploy/grafana/openforge.json: every metric it queries is one forge/observe/metrics.py
defines, under the name Ray exports it with (``ray_`` + name; a histogram's
``_bucket``/``_sum``/``_count``), and every forge metric has a panel, so the dashboard cannot
drift from the code."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "openforge.json"
KINDS = ("Counter", "Gauge", "Histogram")
SERIES = re.compile(r"\bray_[a-zA-Z_:][a-zA-Z0-9_:]*")


def defined_metrics() -> dict[str, str]:
    """Name -> kind of every metric forge/observe/metrics.py creates (read from its source, so
    no Ray)."""
    tree = ast.parse((ROOT / "forge" / "observe" / "metrics.py").read_text())
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in KINDS
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            out[node.args[0].value] = node.func.id
    return out


def exported_series(metrics: dict[str, str]) -> dict[str, str]:
    """Prometheus series name -> forge metric, as Ray 2.60 exports them (seen on its metrics
    endpoint: ray_forge_episodes_total, ray_forge_turn_latency_ms_bucket, ...)."""
    out: dict[str, str] = {}
    for name, kind in metrics.items():
        suffixes = ("_bucket", "_sum", "_count") if kind == "Histogram" else ("",)
        out.update({f"ray_{name}{s}": name for s in suffixes})
    return out


def queries(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for var in dashboard["templating"]["list"]:
        q = var.get("query")
        exprs.append(q["query"] if isinstance(q, dict) else str(q or ""))
    return exprs


def unknown_series(dashboard: dict[str, Any]) -> set[str]:
    series = exported_series(defined_metrics())
    return {s for e in queries(dashboard) for s in SERIES.findall(e)} - series.keys()


def load() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def test_forge_metrics_are_read_from_the_source() -> None:
    metrics = defined_metrics()
    assert metrics["forge_episodes_total"] == "Counter"
    assert metrics["forge_turn_latency_ms"] == "Histogram"
    assert metrics["forge_pods"] == "Gauge"
    assert len(metrics) >= 10


def test_dashboard_queries_only_forge_metrics_and_covers_them_all() -> None:
    dashboard = load()
    assert unknown_series(dashboard) == set()
    series = exported_series(defined_metrics())
    used = {series[s] for e in queries(dashboard) for s in SERIES.findall(e)}
    assert used == set(defined_metrics()), f"no panel for {set(defined_metrics()) - used}"


def test_dashboard_is_importable() -> None:
    dashboard = load()
    assert dashboard["uid"] == "openforge" and dashboard["title"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    names = [v["name"] for v in dashboard["templating"]["list"]]
    assert names[0] == "datasource"
    for panel in dashboard["panels"]:
        assert panel["datasource"] == "${datasource}"
        assert {"x", "y", "w", "h"} <= panel["gridPos"].keys()
        for target in panel["targets"]:
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]
            for var in re.findall(r"\$(\w+)", target["expr"]):
                assert var in names or var.startswith("__"), var


def test_a_misspelt_metric_is_caught() -> None:
    dashboard = load()
    dashboard["panels"][0]["targets"][0]["expr"] = "sum(rate(ray_forge_episode_total[5m]))"
    assert unknown_series(dashboard) == {"ray_forge_episode_total"}
    dashboard["panels"][0]["targets"][0]["expr"] = "sum(forge_pods)"  # without Ray's prefix
    assert unknown_series(dashboard) == set()  # not a ray_ series at all: caught by coverage
    dashboard["panels"][1]["targets"][0]["expr"] = "ray_forge_pods_bucket"  # a gauge has none
    assert unknown_series(dashboard) == {"ray_forge_pods_bucket"}

"""forge/observe/loggers.py and forge/observe/plot.py: a run's step records go to metrics.jsonl,
TensorBoard event files (read back here from the files) and an offline W&B run; forge plot draws
them."""

from __future__ import annotations

import json
import struct
import subprocess
import time
from pathlib import Path

import pytest

from forge.config import LoggingConfig, RunConfig
from forge.observe.loggers import LoggerMissing, MetricsLog, require, scalars
from tests.forge.test_cli import FORGE

RECORDS = [
    {"step": 0, "eval_pass_rate": 0.25},
    {"step": 1, "reward_mean": 0.5, "loss": 0.2, "truncated": {"turn_limit": 2}, "ok": True},
    {"step": 2, "reward_mean": 0.75, "loss": 0.1, "note": "text", "nan": float("nan")},
]


def _events(folder: Path) -> list[tuple[str, int, float]]:
    """(tag, step, value) of every scalar in the TensorBoard event files under ``folder``
    (TFRecord framing: length, its CRC, the Event proto, its CRC)."""
    from tensorboardX.proto import event_pb2

    out = []
    for path in sorted(folder.rglob("events.out.tfevents.*")):
        data = path.read_bytes()
        i = 0
        while i < len(data):
            (n,) = struct.unpack("<Q", data[i : i + 8])
            event = event_pb2.Event.FromString(data[i + 12 : i + 12 + n])
            i += 12 + n + 4
            out += [(v.tag, event.step, v.simple_value) for v in event.summary.value]
    return out


def test_scalars_flatten_numbers_only() -> None:
    assert scalars(RECORDS[1]) == {
        "step": 1.0, "reward_mean": 0.5, "loss": 0.2, "truncated/turn_limit": 2.0,
    }  # fmt: skip
    assert "nan" not in scalars(RECORDS[2]) and "note" not in scalars(RECORDS[2])


def test_metrics_tensorboard_and_offline_wandb(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("WANDB_SILENT", "true")
    config = LoggingConfig.model_validate({"tensorboard": True, "wandb": {"project": "forge-t"}})
    log = MetricsLog(tmp_path, config, "demo", {"name": "demo"})
    try:
        for record in RECORDS:
            log.write(record)
    finally:  # W&B's service process and the event writer stop even when a write fails
        log.close()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [0, 1, 2]
    events = _events(tmp_path / "tensorboard")
    assert ("reward_mean", 2, 0.75) in events and ("truncated/turn_limit", 1, 2.0) in events
    assert ("eval_pass_rate", 0, 0.25) in events and not any(t == "step" for t, _, _ in events)
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, runs
    (record,) = runs[0].glob("*.wandb")  # history records: protobuf, keys and JSON values
    data = record.read_bytes()
    deadline = time.monotonic() + 30  # W&B's service process may still be writing them
    while b"truncated/turn_limit" not in data and time.monotonic() < deadline:
        time.sleep(0.2)
        data = record.read_bytes()
    assert b"reward_mean" in data and b"0.75" in data and b"truncated/turn_limit" in data


def test_a_logger_not_installed_is_named(monkeypatch) -> None:
    import builtins

    real = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb":
            raise ImportError("no wandb")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    config = RunConfig.model_validate({"logging": {"wandb": {"project": "p"}}}).logging
    with pytest.raises(LoggerMissing, match=r"logging\.wandb: wandb is not installed"):
        require(config)


def test_forge_plot_writes_charts(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    r = subprocess.run([*FORGE, "plot", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    names = sorted(p.name for p in (tmp_path / "plots").glob("*.png"))
    assert names == ["eval_pass_rate.png", "loss.png", "overview.png", "reward_mean.png"]
    assert (tmp_path / "plots" / "overview.png").read_bytes()[:4] == b"\x89PNG"
    bad = subprocess.run(
        [*FORGE, "plot", str(tmp_path), "--metrics", "reward_mean,nope"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "metrics: nope not in this run" in bad.stderr

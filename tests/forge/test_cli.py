"""The ``forge`` command as a user runs it: separate processes, their own local Ray cluster."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

FORGE = [sys.executable, "-m", "forge.cli"]


def _env() -> dict[str, str]:
    # A cluster of its own: never join the test session's cluster.
    return {**os.environ, "RAY_ADDRESS": "local", "PYTHONUNBUFFERED": "1"}


def test_bad_config_is_refused_naming_the_field(tmp_path: Path) -> None:
    r = subprocess.run(
        [*FORGE, "run", "policy.replicas=0"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2
    assert "policy.replicas" in r.stderr


def test_tasks_command_names_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("id: no_instruction\nverifier: {type: file_exists, path: a}\n")
    r = subprocess.run([*FORGE, "tasks", str(bad)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "bad.yaml" in r.stderr and "instruction" in r.stderr
    ok = subprocess.run([*FORGE, "tasks", "smoke"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "tasks valid" in ok.stdout


@pytest.mark.slow
def test_forge_run_plays_and_records_an_episode(tmp_path: Path) -> None:
    r = subprocess.run(
        [
            *FORGE,
            "run",
            "policy.engine.name=scripted",
            "task_ids=[count_csv_rows]",
            f"runs_dir={tmp_path}",
            "name=cli",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(),
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "reward 1.00" in r.stdout
    lines = (tmp_path / "cli" / "episodes.jsonl").read_text().splitlines()
    episode = json.loads(lines[0])
    assert episode["task_id"] == "count_csv_rows" and episode["reward"] == 1.0
    assert all(t["completion_ids"] and t["prompt_ids"] for t in episode["turns"])
    assert (tmp_path / "cli" / "config.yaml").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_forge_serve_answers_on_loopback() -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [*FORGE, "serve", "--engine", "scripted", "--task", "smoke/hello_file", "--port"]
        + [str(port), "--num-cpus", "0.5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=_env(),
    )
    try:
        deadline = time.time() + 120
        while True:
            assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
            try:
                models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2)
                break
            except httpx.TransportError:
                assert time.time() < deadline, "forge serve did not come up"
                time.sleep(0.5)
        assert models.json()["data"][0]["id"] == "tiny"
        tool = {
            "type": "function",
            "function": {
                "name": "bash",
                "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
            },
        }
        body = {"model": "tiny", "messages": [{"role": "user", "content": "go"}], "tools": [tool]}
        r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=30)
        call = r.json()["choices"][0]["message"]["tool_calls"][0]["function"]
        assert call["name"] == "bash" and "hello.txt" in call["arguments"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)

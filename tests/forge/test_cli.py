"""The ``forge`` command as a user runs it: separate processes, their own local Ray cluster."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
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
    # a Harbor set: one line per task that loads; the folders that cannot, named, exit 1
    shutil.copytree(ROOT / "examples" / "harbor" / "csv-total", tmp_path / "set" / "good")
    (tmp_path / "set" / "bad").mkdir()
    (tmp_path / "set" / "bad" / "task.toml").write_text('version = "1.0"\n')
    r = subprocess.run(
        [*FORGE, "tasks", f"harbor:{tmp_path / 'set'}"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 1 and r.stdout.splitlines() == [
        f"{'good':28s} The file `/app/sales.csv` has a header line and the columns `region,am",
        "1 tasks valid; 3 problem(s) left folders out",
    ]
    assert f"left out {tmp_path / 'set' / 'bad'}: instruction.md: missing" in r.stderr


ROOT = Path(__file__).resolve().parents[2]
MISSING_MOUNT = "harness_options.mounts={missing/agent.py: /opt/agent/agent.py}"


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "examples/command-harness.yaml", MISSING_MOUNT],
        ["run", MISSING_MOUNT, "examples/command-harness.yaml"],
        ["eval", "examples/command-harness.yaml", "--harness", "command", MISSING_MOUNT],
        ["eval", "examples/oracle.yaml", "--harness-config", "AGENT"],
    ],
)
def test_missing_mount_is_refused_when_the_config_loads(tmp_path: Path, argv: list[str]) -> None:
    """Before Ray or anything else starts: exit 2 naming the field and the path."""
    agent = tmp_path / "agent.yaml"
    agent.write_text("name: a\nmounts: {missing/agent.py: /opt/a.py}\ncommand: [a]\n")
    argv = [str(agent) if a == "AGENT" else a for a in argv]
    t0 = time.perf_counter()
    r = subprocess.run([*FORGE, *argv], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    field = f"{agent}: mounts" if "--harness-config" in argv else "harness_options.mounts"
    assert f"{field}: 'missing/agent.py' does not exist (relative to {ROOT})" in r.stderr
    assert "Ray" not in r.stdout + r.stderr
    assert time.perf_counter() - t0 < 30


def test_overrides_may_follow_the_flags() -> None:
    from forge.cli import parse

    args = parse(["eval", "CFG", "--harness", "react", "task_ids=[a]", "-k", "2", "x=1"])
    assert (args.config, args.overrides, args.harness, args.k) == (
        "CFG",
        ["task_ids=[a]", "x=1"],
        "react",
        2,
    )
    args = parse(["-v", "run", "--resume", "runs/x", "steps=2"])
    assert (args.verbose, args.resume, args.config, args.overrides) == (
        True,
        "runs/x",
        "steps=2",
        [],
    )
    with pytest.raises(SystemExit):
        parse(["tasks", "smoke", "extra"])  # other commands take no stray arguments
    # as a user types it: the override after the flags reaches the config (and is checked)
    argv = ["eval", "examples/oracle.yaml", "--harness", "react", "policy.replicas=0"]
    r = subprocess.run([*FORGE, *argv], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 2 and "policy.replicas:" in r.stderr, r.stderr
    r = subprocess.run([*FORGE, "eval", "-k", "1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "give a config" in r.stderr


@pytest.mark.slow
@pytest.mark.full  # ~55 s, for suite time; in CI `forge run` checkpoints and serves in
# tests/forge/test_quickstart.py, and resumes (with its task cursor) in tests/chaos/test_restart.py
def test_forge_run_trains_checkpoints_and_resumes(tmp_path: Path) -> None:
    common = [
        "rollout.group_size=2",
        "rollout.groups_per_step=1",
        "rollout.min_pods=1",
        "rollout.max_pods=2",
        "rollout.attempt_timeout_s=400",  # the smoke tasks' limits and verifiers need 330 s
    ]
    first = [
        *FORGE,
        "run",
        str(ROOT / "examples" / "quickstart.yaml"),
        "policy.engine.name=scripted",
        "harness_options={}",  # the quickstart's defaults offer no tools; the oracle needs them
        "tasks=smoke",
        "task_ids=[count_csv_rows, hello_file, json_extract]",
        "steps=1",
        f"runs_dir={tmp_path}",
        "name=cli",
        *common,
    ]
    r = subprocess.run(first, capture_output=True, text=True, timeout=600, env=_env())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "step 1/1" in r.stdout and "reward 1.000" in r.stdout
    run_dir = tmp_path / "cli"
    episodes = [
        json.loads(x) for x in (run_dir / "episodes" / "episodes.jsonl").read_text().splitlines()
    ]
    assert len(episodes) == 2
    first_task = episodes[0]["task_id"]
    assert all(e["task_id"] == first_task and e["reward"] == 1.0 for e in episodes)
    assert all(t["completion_ids"] and t["prompt_ids"] for e in episodes for t in e["turns"])
    assert (run_dir / "config.yaml").exists()
    assert (run_dir / "checkpoints" / "step_1" / "config.json").exists()
    again = [*FORGE, "run", "--resume", str(run_dir), "steps=2"]
    r = subprocess.run(again, capture_output=True, text=True, timeout=600, env=_env())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "resumed from" in r.stdout and "step 2/2" in r.stdout
    steps = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2]
    # the oracle's groups all score 1.0: zero advantages, so the trainer never steps
    assert [s["policy_version"] for s in steps] == [0, 0]
    assert [s["updated"] for s in steps] == [0, 0]
    assert (run_dir / "checkpoints" / "step_2" / "config.json").exists()
    lines = (run_dir / "episodes" / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 4
    # the checkpoint carried the task cursor: the resumed run draws the next task, not the first
    state = json.loads((run_dir / "checkpoints" / "step_1" / "run_state.json").read_text())
    assert (state["cursor"], state["step"]) == (1, 1)
    assert {json.loads(x)["task_id"] for x in lines[2:]} != {first_task}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def forge_serve(*args: str, timeout_s: float = 180) -> Iterator[tuple[int, httpx.Response]]:
    """``forge serve ARGS`` on a free port, up: yields the port and its /v1/models answer."""
    port = _free_port()
    proc = subprocess.Popen(
        [*FORGE, "serve", *args, "--port", str(port), "--num-cpus", "0.5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=_env(),
    )
    try:
        deadline = time.time() + timeout_s
        while True:
            assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
            try:
                models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2)
                break
            except httpx.TransportError:
                assert time.time() < deadline, "forge serve did not come up"
                time.sleep(0.5)
        yield port, models
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.slow
def test_forge_serve_answers_on_loopback() -> None:
    with forge_serve("--engine", "scripted", "--task", "smoke/hello_file") as (port, models):
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


@pytest.mark.slow
def test_stalled_collection_is_reported_not_waited_on_forever(tmp_path: Path) -> None:
    """An attempt that never ends (the model's command sleeps for ten minutes) and a short stall
    timeout: the run stops with what it was waiting for, cleans up, and exits 3."""
    suite = tmp_path / "slow"
    suite.mkdir()
    (suite / "sleeper.yaml").write_text(
        "id: sleeper\ninstruction: wait\nverifier: {type: file_exists, path: never}\n"
        "solution: [sleep 600]\nlimits: {max_turns: 4, timeout_s: 900}\n"
    )
    args = [
        *FORGE,
        "run",
        str(ROOT / "examples" / "quickstart.yaml"),
        "policy.engine.name=scripted",
        "harness_options={}",
        f"tasks={suite}",
        "steps=1",
        f"runs_dir={tmp_path}",
        "name=stall",
        "rollout.group_size=1",
        "rollout.groups_per_step=1",
        "rollout.min_pods=1",  # one attempt: the quickstart's four pods would only slow the start
        "rollout.max_pods=1",
        "rollout.stall_timeout_s=5",  # from request(): its pod is up, the attempt dispatched
        "rollout.attempt_timeout_s=1000",  # the run refuses one shorter than the task needs
    ]
    r = subprocess.run(args, capture_output=True, text=True, timeout=600, env=_env())
    assert r.returncode == 3, r.stdout[-3000:] + r.stderr[-3000:]
    assert "collection stalled at step 1" in r.stderr
    assert "in flight: g" in r.stderr and "of task sleeper on pod-" in r.stderr
    assert "done: 0 step(s)" in r.stdout  # shutdown ran and the summary was printed


def test_kube_rbac_prints_what_the_kubernetes_backend_needs(capsys) -> None:
    import yaml

    from forge.cli import main

    assert main(["kube-rbac", "--namespace", "sandboxes", "--run-namespace", "ray"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    kinds = {(d["kind"], d["metadata"]["name"], d["metadata"]["namespace"]) for d in docs}
    assert ("ServiceAccount", "openforge-sandbox", "sandboxes") in kinds
    assert ("ServiceAccount", "openforge-run", "ray") in kinds  # the run's identity, where it runs
    assert {k for k, _, _ in kinds} == {"ServiceAccount", "Role", "RoleBinding"}
    [role] = [d for d in docs if d["kind"] == "Role"]
    pods = next(r for r in role["rules"] if "pods" in r["resources"])
    assert set(pods["verbs"]) == {"create", "get", "list", "watch", "delete"}

"""The command harness: a CLI agent described by config alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from forge.config import ConfigError, load_config
from forge.harnesses import get_harness
from forge.harnesses.base import AttemptContext
from forge.sandboxes.base import ExecResult
from tests.forge.harnesses.helpers import attempt_ctx

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "command-harness.yaml"


def _ctx(**kw) -> AttemptContext:
    return attempt_ctx(**kw)


def test_placeholders_are_filled_and_json_braces_kept() -> None:
    h = get_harness(
        "command",
        command=["/opt/a/agent", "--task", "{instruction}"],
        files={"{home}/.agent.json": '{"url": "{base_url}", "key": "{api_key}", "n": {unknown}}'},
        env={"AGENT_MODEL": "{model}", "WS": "{workspace}"},
        mounts={"/srv/agent": "/opt/a"},
    )
    ctx = _ctx()
    files = h.files(ctx)
    assert list(files) == ["/home/agent/.agent.json"]
    text = files["/home/agent/.agent.json"]
    assert '"url": "http://127.0.0.1:8931/episodes/e/attempts/0/v1"' in text
    assert '"key": "key-1"' in text and "{unknown}" in text
    assert h.env(ctx) == {"AGENT_MODEL": "tiny", "WS": "/workspace"}
    assert h.command(ctx) == ["/opt/a/agent", "--task", "Write hi to a.txt"]
    assert h.ro_mounts() == {"/srv/agent": "/opt/a"}
    # Where commands run on the host, sandbox paths in the command map to host paths.
    mapped = _ctx(paths={"/opt/a": "/srv/agent", "/home/agent": "/tmp/h"})
    assert h.command(mapped)[0] == "/srv/agent/agent"
    assert list(h.files(mapped)) == ["/tmp/h/.agent.json"]


def test_final_answer_sources() -> None:
    out = 'log line\n{"final_answer": "42", "turns": 2}\n{"other": 1}\n\n'
    by_field = get_harness("command", command=["a"], answer={"json_field": "final_answer"})
    assert by_field.final_answer(ExecResult(0, out, "", 1.0)) == "42"
    assert by_field.final_answer(ExecResult(0, "no json", "", 1.0)) is None
    last = get_harness("command", command=["a"])
    assert last.final_answer(ExecResult(0, out, "", 1.0)) == '{"other": 1}'
    assert last.final_answer(ExecResult(0, "", "", 1.0)) is None


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("harness_options={}", "command"),
        ("harness_options={command: []}", "non-empty list"),
        ("harness_options={command: [a], protocol: grpc}", "protocol"),
        ("harness_options={command: [a], answer: {file: x}}", "answer"),
        ("harness_options={command: [a], shell: true}", "unknown option(s) ['shell']"),
    ],
)
def test_bad_options_name_the_field(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, ["harness=command", override])
    assert "harness_options" in str(info.value) and message in str(info.value)


def test_example_mount_is_made_absolute() -> None:
    config = load_config(EXAMPLE)
    (host,) = config.harness_options["mounts"]
    assert Path(host).is_absolute() and Path(host).exists()


@pytest.mark.slow
@pytest.mark.ray
def test_example_config_plays_the_oracle(ray_cluster) -> None:
    from actors.harness_pod import HarnessPod
    from forge.config import PolicyConfig
    from serve.policy import deploy_policy
    from tasks import load_suite

    ray = ray_cluster
    options = load_config(EXAMPLE).harness_options
    task = next(t for t in load_suite("smoke") if t.id == "json_extract")
    config = PolicyConfig(engine={"name": "scripted"}, num_cpus=0.25)
    pod = ray.remote(HarnessPod).options(num_cpus=0.25).remote(deploy_policy(config, "cmd"))
    ray.get(pod.start.remote())
    ep = ray.get(pod.run_episode.remote(task.model_dump(), "command", harness_options=options))
    ray.get(pod.stop.remote())
    assert ep.status == "ok", (ep.failure, ep.harness_log[-2000:])
    assert ep.harness == "react-by-config"
    assert (ep.reward, len(ep.turns)) == (1.0, len(task.solution) + 1)
    # the answer came back through the configured json_field of the agent's stdout
    assert ep.final_answer == (task.reference_script().get("answer") or "Done.")

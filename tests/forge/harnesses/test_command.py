"""The command harness: a CLI agent described by config alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from forge.config import ConfigError, load_config
from forge.harnesses.base import AttemptContext
from forge.harnesses.command import link_out_of_mounts
from forge.harnesses.registry import get_harness
from forge.sandboxes.base import ExecResult, SandboxSpec
from forge.sandboxes.bwrap import bwrap_works
from forge.sandboxes.local import LocalSandbox
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
        ("harness_options={command: [a], answer: {file: /etc/x}}", "answer: file: '/etc/x'"),
        ("harness_options={command: [a], answer: {jsonpath: x}}", "answer: unknown key"),
        ("harness_options={command: [a], files: {/etc/x: y}}", "files: '/etc/x' is not under"),
        ("harness_options={command: [a], env: {A: [1]}}", "env: a mapping of strings"),
        ("harness_options={command: [a], mounts: {no/such/dir: /opt/a}}", "'no/such/dir'"),
        ("harness_options={command: [a], shell: true}", "unknown option(s) ['shell']"),
    ],
)
def test_bad_options_name_the_field(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, ["harness=command", override])
    assert "harness_options" in str(info.value) and message in str(info.value)


def test_task_limits_and_path_templates() -> None:
    h = get_harness(
        "command",
        command=["agent", "--max-turns", "{max_turns}", "--timeout={timeout_s}"],
        env={"PATH": "/opt/agent/bin:{path}", "LIMITS": "{max_turns}/{timeout_s}"},
        files={"{home}/limits.json": '{"turns": {max_turns}, "seconds": {timeout_s}}'},
    )
    ctx = _ctx(max_turns=7, timeout_s=600.0, path_var="/usr/local/bin:/usr/bin:/bin")
    assert h.command(ctx) == ["agent", "--max-turns", "7", "--timeout=600"]  # whole: an integer
    assert h.env(ctx) == {"PATH": "/opt/agent/bin:/usr/local/bin:/usr/bin:/bin", "LIMITS": "7/600"}
    assert h.files(ctx) == {"/home/agent/limits.json": '{"turns": 7, "seconds": 600}'}
    assert h.command(_ctx(max_turns=3, timeout_s=12.5))[1:] == [
        "--max-turns",
        "3",
        "--timeout=12.5",
    ]


def test_bad_mount_names_the_field_and_the_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(EXAMPLE, ["harness_options.mounts={missing/agent.py: /opt/agent/agent.py}"])
    text = str(info.value)
    assert "harness_options.mounts: 'missing/agent.py' does not exist" in text
    assert f"relative to {Path.cwd()}" in text
    (tmp_path / "agent").mkdir()
    ok = load_config(EXAMPLE, [f"harness_options.mounts={{{tmp_path}/agent: /opt/agent}}"])
    assert ok.harness_options["mounts"] == {str(tmp_path / "agent"): "/opt/agent"}


def test_answer_file_is_the_filled_sandbox_path() -> None:
    h = get_harness("command", command=["a"], answer={"file": "{home}/out/{model}.txt"})
    assert h.answer_file(_ctx()) == "/home/agent/out/tiny.txt"
    assert h.final_answer(ExecResult(0, "stdout is ignored", "", 1.0), b" Paris\n") == "Paris"
    assert h.final_answer(ExecResult(0, "stdout is ignored", "", 1.0), None) is None  # no file
    with pytest.raises(RuntimeError, match=r"answer\.file"):  # an episode that never read it
        h.final_answer(ExecResult(0, "", "", 1.0))
    by_stdout = get_harness("command", command=["a"], answer={"json_path": "a.b"})
    assert by_stdout.answer_file(_ctx()) is None
    assert by_stdout.final_answer(ExecResult(0, '{"a": {"b": "x"}}', "", 1.0)) == "x"


@pytest.mark.parametrize(
    "isolation",
    [
        pytest.param("required", marks=pytest.mark.skipif(not bwrap_works(), reason="no bwrap")),
        "none",
    ],
)
@pytest.mark.parametrize("where", ["answers/final.json", "{workspace}/answers/final.json"])
def test_answer_file_written_in_a_real_sandbox(tmp_path: Path, isolation: str, where: str) -> None:
    """What the episode does with ``answer_file``: run the command, read the file the agent
    wrote with ``Sandbox.get_file`` before the sandbox goes, hand it to ``final_answer``."""
    script = (
        "import json, os, sys; os.makedirs('answers', exist_ok=True); "
        "json.dump({'steps': [{'text': 'x'}, {'text': sys.argv[1]}]}, "
        "open(sys.argv[2], 'w'), indent=2)"
    )
    h = get_harness(
        "command",
        command=["python3", "-c", script, "{max_turns} turns", where],
        answer={"file": where, "json_path": "steps[-1].text"},
    )
    box = LocalSandbox(root=tmp_path / "sandboxes", isolation=isolation)
    box.create(SandboxSpec(labels={"run": "t", "pod": "p", "attempt": "0"}))
    try:
        ctx = _ctx(workspace=box.workspace, paths=box.path_map(), max_turns=5)
        result = box.exec(h.command(ctx), 30, h.env(ctx))
        assert result.exit_code == 0, result.stderr
        path = h.answer_file(ctx)
        assert path is not None
        assert h.final_answer(result, box.get_file(path)) == "5 turns"
        assert h.final_answer(result, box.get_file("answers/none.json")) is None
    finally:
        box.destroy()


def test_links_out_of_the_mounts_are_found_as_the_sandbox_resolves_them(tmp_path: Path) -> None:
    agent, other = tmp_path / "agent", tmp_path / "elsewhere"
    (agent / "bin").mkdir(parents=True)
    (other / "venv" / "bin").mkdir(parents=True)
    (other / "python3.11").write_text("")
    (agent / "bin" / "python").symlink_to(other / "python3.11")  # absolute, out
    (agent / "bin" / "py").symlink_to("python")  # relative, then out
    (agent / "bin" / "tool").symlink_to("../lib/tool")  # stays in
    (agent / "lib").mkdir()
    (agent / "lib" / "tool").write_text("")
    (agent / "venv").symlink_to(other / "venv")  # a folder on the way, out
    (agent / "loop").symlink_to("loop")
    mounts = {str(agent): "/opt/agent"}
    out = str(other / "python3.11")
    assert link_out_of_mounts("/opt/agent/bin/python", mounts) == ("/opt/agent/bin/python", out)
    assert link_out_of_mounts("/opt/agent/bin/py", mounts) == ("/opt/agent/bin/python", out)
    assert link_out_of_mounts("/opt/agent/venv/bin/python", mounts) == (
        "/opt/agent/venv",
        str(other / "venv"),
    )
    assert link_out_of_mounts("/opt/agent/bin/tool", mounts) is None
    assert link_out_of_mounts("/opt/agent/loop", mounts) is None  # the kernel's ELOOP
    assert link_out_of_mounts("/usr/bin/python3", mounts) is None  # the sandbox's own
    (tmp_path / "agent-link").symlink_to(agent)  # a mount's source may be a link itself
    via_link = {str(tmp_path / "agent-link"): "/opt/agent"}
    assert link_out_of_mounts("/opt/agent/bin/tool", via_link) is None
    # a second mount holding the target: the link stays in the sandbox
    both = {**mounts, str(other): str(other)}
    assert link_out_of_mounts("/opt/agent/bin/python", both) is None
    plain = get_harness("command", command=["/opt/agent/bin/tool", "x"], mounts=mounts)
    assert plain.command(_ctx()) == ["/opt/agent/bin/tool", "x"]  # nothing added


@pytest.mark.skipif(not bwrap_works(), reason="no bwrap")
def test_a_program_linked_out_of_its_mount_names_the_missing_target(tmp_path: Path) -> None:
    """A venv's python linked to an interpreter the sandbox does not mount exists on the host:
    the attempt fails naming the link's target, not with a bare "No such file or directory"
    for the path the agent's folder holds; a link to what the sandbox has runs as before."""
    agent, interpreters = tmp_path / "agent", tmp_path / "interpreters"
    (agent / "bin").mkdir(parents=True)
    interpreters.mkdir()
    (interpreters / "python3.11").symlink_to("/bin/echo")
    (agent / "bin" / "python").symlink_to(interpreters / "python3.11")
    (agent / "bin" / "echo").symlink_to("/bin/echo")  # out of the mount, but the sandbox has it
    mounts = {str(agent): "/opt/agent"}
    box = LocalSandbox(root=tmp_path / "sandboxes", isolation="required")
    missing = get_harness("command", command=["/opt/agent/bin/python", "-c", "1"], mounts=mounts)
    present = get_harness("command", command=["/opt/agent/bin/echo", "{max_turns}"], mounts=mounts)
    box.create(SandboxSpec(labels={"run": "t", "pod": "p", "attempt": "0"}, ro_mounts=mounts))
    try:
        ctx = _ctx(workspace=box.workspace, paths=box.path_map(), max_turns=5)
        result = box.exec(missing.command(ctx), 30, missing.env(ctx))
        assert result.exit_code == 127
        assert result.stderr.strip() == (
            "command: cannot run /opt/agent/bin/python: /opt/agent/bin/python is a link to "
            f"{interpreters}/python3.11, which this sandbox does not have (mount it, or the "
            "folder it is in, with harness_options.mounts)"
        )
        result = box.exec(present.command(ctx), 30, present.env(ctx))
        assert (result.exit_code, result.stdout) == (0, "5\n")
    finally:
        box.destroy()


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
    from tasks.loader import load_suite

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


@pytest.mark.slow
@pytest.mark.ray
def test_answer_from_a_file_the_agent_writes(ray_cluster) -> None:
    """The ReAct program's stdout redirected to a file in its home: the answer comes from
    that file (through an episode), not from stdout, which is empty."""
    from actors.harness_pod import HarnessPod
    from forge.config import PolicyConfig
    from serve.policy import deploy_policy
    from tasks.loader import load_suite

    ray = ray_cluster
    options = load_config(EXAMPLE).harness_options
    options["command"] = [
        "sh",
        "-c",
        'python3 "$1" "$2" > "$3"',
        "sh",
        "/opt/agent/react_agent.py",
        "{instruction}",
        "{home}/agent-out.jsonl",
    ]
    options["answer"] = {"file": "{home}/agent-out.jsonl", "json_field": "final_answer"}
    task = next(t for t in load_suite("smoke") if t.id == "json_extract")
    config = PolicyConfig(engine={"name": "scripted"}, num_cpus=0.25)
    pod = ray.remote(HarnessPod).options(num_cpus=0.25).remote(deploy_policy(config, "cmdf"))
    ray.get(pod.start.remote())
    ep = ray.get(pod.run_episode.remote(task.model_dump(), "command", harness_options=options))
    ray.get(pod.stop.remote())
    assert ep.status == "ok", (ep.failure, ep.harness_log[-2000:])
    assert ep.reward == 1.0
    assert ep.final_answer == (task.reference_script().get("answer") or "Done.")

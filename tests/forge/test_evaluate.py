"""``forge eval``: scoring, and the command on real harnesses with the oracle and noop policies."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from forge.config import RunConfig, load_config
from forge.evaluate import failure_causes, plan, rejections
from tests.forge.test_cli import FORGE, _env

ROOT = Path(__file__).resolve().parents[2]


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


AGENT = "command: [python3, /opt/agent/react_agent.py, '{instruction}']\n"


def test_failure_causes_show_each_failed_attempts_last_log_line(tmp_path: Path) -> None:
    linked = "command: cannot run /opt/a/python: /opt/a/python is a link to /home/u/py, which ..."
    records = [
        {"failure": "harness_crash", "harness_log": f"starting\n{linked}\n\n"},
        {"failure": "harness_crash", "harness_log": linked},
        {"failure": "sandbox_error", "failure_detail": "OSError: disk full", "harness_log": ""},
        {"failure": "proxy_rejected", "harness_log": "proxy rejected: 404 model: unknown"},
        {"failure": "harness_hung"},
    ]
    path = tmp_path / "failures.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert failure_causes(path) == {
        f"harness_crash: {linked}": 2,
        "sandbox_error: OSError: disk full": 1,
        "harness_hung: ?": 1,
    }
    assert failure_causes(tmp_path / "none.jsonl") == {}


def test_agents_from_harness_configs_are_keyed_by_name(tmp_path: Path) -> None:
    config = load_config(ROOT / "examples" / "oracle.yaml")
    options_only = _write(tmp_path / "one.yaml", f"name: solo\n{AGENT}")
    definition = _write(
        tmp_path / "def.yaml", f"harness: command\nharness_options:\n  name: defined\n  {AGENT}"
    )
    several = _write(
        tmp_path / "many.yaml",
        f"agents:\n  first:\n    {AGENT}  plain-react:\n    harness: react\n"
        "    harness_options: {max_tokens: 64}\n",
    )
    run_config = str(ROOT / "examples" / "command-harness.yaml")  # only its harness is read
    agents = plan(config, ["react"], [options_only, definition, several, run_config])
    assert [(a.name, a.harness, a.source) for a in agents] == [
        ("react", "react", "--harness"),
        ("solo", "command", options_only),
        ("defined", "command", definition),
        ("first", "command", several),
        ("plain-react", "react", several),
        ("react-by-config", "command", run_config),
    ]
    assert agents[3].options["name"] == "first"  # the key names the command agent
    assert agents[4].options == {"max_tokens": 64}
    mount = agents[5].options["mounts"]
    assert all(Path(host).is_absolute() for host in mount)  # resolved while the cwd is known


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("mounts: {no/such.py: /opt/a.py}\n" + AGENT, "{f}: mounts: 'no/such.py' does not exist"),
        (
            "agents:\n  a:\n    mounts: {no/such.py: /opt/a.py}\n    " + AGENT,
            "{f}: agents.a.mounts: 'no/such.py' does not exist",
        ),
        (
            "harness: command\nharness_options: {command: [a], mounts: {no/such.py: /x}}\n",
            "{f}: harness_options.mounts: 'no/such.py' does not exist",
        ),
        ("agents:\n  a: {command: [a], answer: {jsonpath: x}}\n", "agents.a.answer: unknown key"),
        ("agents:\n  a: {command: [a], name: b}\n", "{f}: agents.a: name 'b' differs"),
        ("agents:\n  a b: {command: [a]}\n", "{f}: agents.a b: 'a b' is not a name"),
        ("agents: {a: {command: [a]}}\ntasks: smoke\n", "{f}: tasks: nothing goes beside"),
        ("agents: []\n", "{f}: agents: a mapping of name -> agent"),
        ("name: ../up\ncommand: [a]\n", "{f}: name: '../up' is not a name"),
        (
            "harness: command\nharness_options: {name: a/b, command: [a]}\n",
            "{f}: harness_options.name: 'a/b' is not a name",
        ),
        ("command: [a]\nshell: true\n", "{f}: unknown option(s) ['shell']"),
        ("- a\n", "{f}: expected a mapping"),
    ],
)
def test_bad_harness_config_names_the_file_and_field(
    tmp_path: Path, text: str, message: str
) -> None:
    path = _write(tmp_path / "agent.yaml", text)
    with pytest.raises(ValueError) as info:
        plan(RunConfig(), [], [path])
    assert message.format(f=path) in str(info.value)


def test_a_name_defined_twice_names_both_files(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.yaml", f"name: same\n{AGENT}")
    b = _write(tmp_path / "b.yaml", f"agents:\n  same:\n    {AGENT}")
    with pytest.raises(ValueError, match=f"'same' is defined twice: by {a} and by {b}"):
        plan(RunConfig(), [], [a, b])
    unnamed = _write(tmp_path / "c.yaml", AGENT)  # a command agent is called "command"
    with pytest.raises(ValueError, match=f"by --harness and by {unnamed}"):
        plan(
            RunConfig(harness="command", harness_options={"command": ["x"]}), ["command"], [unnamed]
        )


BUILTIN = ["react"]
BY_CONFIG = ["react-by-config", "react-all-tools", "react-shell-only"]


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, Path]:
    """One ``forge eval`` (its own Ray cluster and Policy: most of its time) of the agents of
    the two tests below, on the oracle policy: a built-in harness (react; each real harness's
    oracle and noop episodes run in its own test), three command agents (the ReAct program
    described by config, from two files) and ``linked``, a command agent whose python is a link
    to a path its mounts leave out. Returns its stdout, its ``--out`` folder and where the
    link points."""
    tmp_path = tmp_path_factory.mktemp("compared")
    agent, elsewhere = tmp_path / "agent", tmp_path / "elsewhere"
    (agent / "bin").mkdir(parents=True)
    elsewhere.mkdir()
    (elsewhere / "python3").symlink_to(shutil.which("python3") or "/usr/bin/python3")
    (agent / "bin" / "python").symlink_to(elsewhere / "python3")
    shutil.copy(ROOT / "forge" / "harnesses" / "react_agent.py", agent / "react_agent.py")
    linked = _write(
        tmp_path / "linked.yaml",
        f"name: linked\nmounts: {{{agent}: /opt/agent}}\n"
        "command: [/opt/agent/bin/python, /opt/agent/react_agent.py, '{instruction}']\n"
        "answer: {json_field: final_answer}\n",
    )
    out = tmp_path / "eval"
    args = [
        "eval",
        str(ROOT / "examples" / "oracle.yaml"),
        "--harness",
        ",".join(BUILTIN),
        "--harness-config",
        str(ROOT / "examples" / "command-harness.yaml"),
        "--harness-config",
        str(ROOT / "examples" / "command-agents.yaml"),
        "--harness-config",
        linked,
        "--tasks",
        "smoke",
        "--out",
        str(out),
        "task_ids=[hello_file,json_extract]",  # an override after the flags
        # one pod per agent: a pod's start (a Ray worker) costs more than the episodes it runs
        "rollout.min_pods=1",
        "rollout.max_pods=1",
    ]
    r = subprocess.run(
        [*FORGE, *args], capture_output=True, text=True, timeout=800, env=_env(), cwd=ROOT
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout, out, elsewhere


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_forge_eval_compares_agents_by_name(compared: tuple[str, Path, Path]) -> None:
    """The agents of :func:`compared` in one table on the oracle policy; overrides after the
    flags; one rate printed for k=1."""
    stdout, out, _ = compared
    names = BY_CONFIG
    report = json.loads((out / "eval.json").read_text())
    assert list(report["harnesses"]) == [*BUILTIN, *names, "linked"]
    assert "| harness | pass@1 |" in stdout  # the table is printed
    for name in BUILTIN + names:
        row = report["harnesses"][name]
        assert row["harness"] == (name if name in BUILTIN else "command"), row
        assert row["tasks"] == 2 and row["pass@1"] == 1.0, (name, row)
        assert row["tool_calls"], name  # the oracle used the agent's tools
        episodes = [json.loads(x) for x in (out / name / "episodes.jsonl").read_text().splitlines()]
        assert {e["task_id"] for e in episodes} == {"hello_file", "json_extract"}
        assert {e["harness"] for e in episodes} == {name}
        assert f"[forge] {name}: pass@1 1.000 (2 episodes, " in stdout
        assert f"| {name} | 1.000 |" in (out / "eval.md").read_text()
    assert report["harnesses"]["react-shell-only"]["tool_calls"].keys() <= {"shell", "finish"}
    assert "pass@1 1.000, pass@1" not in stdout


def test_rejections_name_what_the_proxy_refused(tmp_path: Path) -> None:
    """The cause of each proxy_rejected attempt, from its log in the buffer's failures file."""
    log = "proxy rejected: 400 messages[1].role: expected 'user' or 'assistant'\nTraceback"
    records = [
        {"failure": "proxy_rejected", "harness_log": log},
        {"failure": "proxy_rejected", "harness_log": log},
        {"failure": "proxy_rejected", "harness_log": "proxy rejected: 404 model: unknown"},
        {"failure": "harness_crash", "harness_log": "proxy rejected: 400 never shown"},
    ]
    path = tmp_path / "failures.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert rejections(path) == {
        "400 messages[1].role: expected 'user' or 'assistant'": 2,
        "404 model: unknown": 1,
    }
    assert rejections(tmp_path / "none.jsonl") == {}
    earlier = len("".join(json.dumps(r) + "\n" for r in records[:2]))
    assert rejections(path, earlier) == {"404 model: unknown": 1}  # this eval's records only


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_forge_eval_counts_an_agent_whose_interpreter_is_a_link_out_of_its_mount(
    compared: tuple[str, Path, Path],
) -> None:
    """A command agent whose python is a link to a path its mounts leave out (``linked`` of
    :func:`compared`): each attempt fails naming that path, and the summary line counts them
    (it said "0 episodes")."""
    stdout, out, elsewhere = compared
    row = json.loads((out / "eval.json").read_text())["harnesses"]["linked"]
    assert row["episodes"] == 2 and sum(row["failures"].values()) == 2, row
    assert "[forge] linked: pass@1 0.000 (2 attempts: 0 scored, 2 failed (" in stdout, stdout
    missing = f"/opt/agent/bin/python is a link to {elsewhere}/python3, which this sandbox"
    (cause,) = row["failure_causes"]
    assert row["failure_causes"][cause] == 2
    assert missing in cause and f"[forge] linked: 2 failed attempts, {cause}" in stdout

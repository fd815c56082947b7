"""Harbor-format task folders read as Tasks (tasks.harbor): the example set, and bad folders
refused naming the file and field."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tasks.harbor import in_process, refuse_for_training, strip_canary
from tasks.loader import TaskError, load_suite

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "harbor"
pytest.importorskip("harbor.models.task.config", reason="the harbor package reads task.toml")


def test_the_example_tasks_load_with_their_image_workdir_tests_and_oracle():
    tasks = {t.id: t for t in load_suite(f"harbor:{EXAMPLES}")}
    assert sorted(tasks) == [
        "broken-build",  # loads; its image fails to build (the docker test plays the rest)
        "compose-api",
        "csv-total",
        "even-numbers",
        "fix-greeting",
        "install-tool",
        "port-config",
        "service-token",
        "skill-greeting",
    ]
    csv = tasks["csv-total"]
    assert csv.instruction.startswith("The file `/app/sales.csv`")  # the canary line dropped
    assert csv.environment is not None
    assert csv.environment.context == str(EXAMPLES / "csv-total" / "environment")
    assert (csv.environment.workdir, csv.environment.cpus, csv.environment.memory_mb) == (
        "/app",
        1,
        1024,
    )
    assert csv.limits.timeout_s == 120.0  # [agent] timeout_sec
    assert csv.environment.storage_mb is None  # unset; harbor-cookbook's say 10240
    assert csv.verifier == {
        "type": "harbor_tests",
        "tests": str(EXAMPLES / "csv-total" / "tests"),
        "timeout_s": 60.0,
        "env": {},
        "user": None,
        "agent_user": None,
        "in_place": True,  # Harbor's mode: in the agent's own container
        "runs_agent_code": False,  # [metadata] tests_run_agent_code = false
    }
    assert csv.tags == ["harbor", "files", "python"]
    assert tasks["fix-greeting"].tags[:2] == ["harbor", "tests-run-agent-code"]
    assert tasks["port-config"].environment.workdir == "/srv/app"  # WORKDIR /srv then app
    assert tasks["fix-greeting"].verifier["env"] == {"GREETING_CASES": "Ann,Bo Li,x"}
    assert tasks["fix-greeting"].limits.timeout_s == 300.0  # no [agent] timeout: the default
    (step,) = csv.solution
    assert "bash /solution/solve.sh" in step and step.startswith("mkdir -p /solution")
    assert tasks["port-config"].environment.image == "openforge-example/port-config:1.0"
    check = tasks["service-token"].environment.healthcheck
    assert (check.interval_s, check.retries) == (0.5, 20) and "8765/health" in check.command
    again = {t.id: t for t in load_suite(f"harbor:{EXAMPLES}")}
    assert again["csv-total"].solution == csv.solution  # the same text on every load


def test_one_task_folder_loads_alone():
    (task,) = load_suite(f"harbor:{EXAMPLES / 'even-numbers'}")
    assert task.id == "even-numbers"


def _copy(tmp_path: Path, name: str = "csv-total", to: str = "Task One") -> Path:
    dst = tmp_path / "set" / to
    shutil.copytree(EXAMPLES / name, dst)
    return dst


def test_bad_folders_are_refused_naming_the_file_and_field(tmp_path: Path):
    one = _copy(tmp_path)
    (one / "tests" / "test.sh").unlink()
    two = _copy(tmp_path, to="two")
    (two / "task.toml").write_text("[verifier]\ntimeout_sec = 'soon'\n")
    three = _copy(tmp_path, to="three")
    (three / "environment" / "Dockerfile").write_text("FROM debian:bookworm\nWORKDIR $HOME\n")
    four = _copy(tmp_path, to="four")
    (four / "environment" / "docker-compose.yaml").write_text(
        "services:\n  db:\n    image: postgres:16\n    volumes: [data:/var/lib/pg]\n"
    )
    with (four / "task.toml").open("a") as f:
        f.write("gpus = 1\n")  # in [environment]
    with pytest.raises(TaskError) as err:
        load_suite(f"harbor:{tmp_path / 'set'}")
    text = str(err.value)
    assert (
        f"{four}: environment/docker-compose.yaml: services.db.volumes: not supported by OpenForge"
        in text
    )
    assert f"{four / 'task.toml'}: environment.gpus: GPUs are not supported" in text
    assert f"{one}: tests/test.sh: missing" in text
    assert f"{two / 'task.toml'}: verifier.timeout_sec:" in text
    assert f"{three / 'environment' / 'Dockerfile'}: WORKDIR:" in text


def test_a_run_plays_the_folders_that_load_and_reports_the_rest(tmp_path: Path):
    """A set someone else wrote plays without its bad folders (issue 32): a multi-step task
    is refused with that reason alone (not "instruction.md: missing"), a folder missing its
    tests names the file; the others load. With none left it is an error again."""
    _copy(tmp_path, to="good")
    multi = _copy(tmp_path, to="multi")
    (multi / "instruction.md").unlink()  # a multi-step task's instructions are per step
    with (multi / "task.toml").open("a") as f:
        f.write('\n[[steps]]\nname = "one"\n')
    broken = _copy(tmp_path, to="broken")
    (broken / "tests" / "test.sh").unlink()
    skipped: list[tuple[str, str, str]] = []
    tasks = load_suite(f"harbor:{tmp_path / 'set'}", skipped)
    assert [t.id for t in tasks] == ["good"]
    assert sorted(skipped) == [
        (str(broken), "tests/test.sh", "missing"),
        (str(multi / "task.toml"), "steps", "multi-step tasks are not supported"),
    ]
    with pytest.raises(TaskError, match="multi-step tasks are not supported") as err:
        load_suite(f"harbor:{tmp_path / 'set'}")  # no list given: every problem is an error
    assert "instruction.md" not in str(err.value)
    shutil.rmtree(tmp_path / "set" / "good")
    with pytest.raises(TaskError, match=r"tests/test\.sh: missing"):
        load_suite(f"harbor:{tmp_path / 'set'}", [])  # nothing left to play


def test_task_toml_fields_are_honoured_or_refused_by_name(tmp_path: Path):
    """Harbor's verifier.environment_mode picks where the tests run; a health check is kept;
    what OpenForge does not run yet is refused naming the field (issue 32)."""
    one = _copy(tmp_path, to="separate")
    text = (one / "task.toml").read_text()
    text = text.replace("[verifier]\n", '[verifier]\nenvironment_mode = "separate"\n')
    text += '\n[environment.healthcheck]\ncommand = "test -e /tmp/up"\nretries = 7\n'
    (one / "task.toml").write_text(text)
    [task] = load_suite(f"harbor:{one}")
    assert task.verifier["in_place"] is False  # sealed: a fresh container
    assert task.environment.healthcheck.command == "test -e /tmp/up"
    assert task.environment.healthcheck.retries == 7
    two = _copy(tmp_path, to="verifier-image")
    text = (two / "task.toml").read_text() + "\n[verifier.environment]\ncpus = 1\n"
    (two / "task.toml").write_text(text)
    with pytest.raises(TaskError, match=r"verifier\.environment: a verifier image of its own"):
        load_suite(f"harbor:{two}")
    # skills_dir and mcp_servers are honoured: tests/forge/harnesses/test_task_tools.py
    three = _copy(tmp_path, to="refused")
    text = (three / "task.toml").read_text()
    text = text.replace("[agent]\n", '[agent]\nnetwork_mode = "public"\n')
    text = text.replace("[environment]\n", '[environment]\nos = "windows"\n'
                        'network_mode = "allowlist"\nallowed_hosts = ["pypi.org"]\n')  # fmt: skip
    (three / "task.toml").write_text('artifacts = ["/app/out"]\n' + text)
    with pytest.raises(TaskError) as err:
        load_suite(f"harbor:{three}")
    fields = {field for _, field, _ in err.value.problems}
    assert fields == {
        "environment.os", "environment.allowed_hosts", "agent.network_mode", "artifacts"
    }, err.value.problems  # fmt: skip


def test_in_place_after_a_root_agent_is_named_open_to_shims():
    from tasks.harbor import open_to_shims, set_verify_mode

    task = next(t for t in load_suite(f"harbor:{EXAMPLES}") if t.id == "csv-total").model_dump()
    assert open_to_shims(task)  # in place, its agent root (Harbor's default)
    set_verify_mode(task, "sealed")
    assert not open_to_shims(task) and task["verifier"]["in_place"] is False
    set_verify_mode(task, "in_place")
    task["environment"]["agent_user"] = "1000:1000"
    assert not open_to_shims(task)  # an unprivileged agent cannot replace the system's tools


COMPOSE = """
services:
  main:
    environment: {API_URL: "http://api-server:5000"}
    depends_on:
      api-server: {condition: service_healthy}
  api-server:
    build: {context: ./api-server}
    environment:
      - TOKEN=${FORGE_TEST_TOKEN:-fallback}
    expose: ["5000"]
    healthcheck:
      test: ["CMD", "python3", "-c", "import socket; socket.create_connection(('localhost', 5000))"]
      interval: 2s
      timeout: 1m30s
      retries: 15
      start_period: 500ms
"""


def test_a_compose_environment_becomes_services_beside_the_agent(tmp_path: Path):
    """Harbor's docker-compose.yaml (as harbor-cookbook's multi-container recipe writes it):
    main's environment joins the task's, the other services are read with their build,
    environment (${VAR:-default} from the host), health check; unknown keys are refused."""
    one = _copy(tmp_path, to="multi")
    (one / "environment" / "docker-compose.yaml").write_text(COMPOSE)
    [task] = load_suite(f"harbor:{one}")
    env = task.environment
    assert env.env["API_URL"] == "http://api-server:5000"
    [api] = env.services
    assert (api.name, api.context, api.env) == (
        "api-server",
        str(one / "environment" / "api-server"),
        {"TOKEN": "fallback"},
    )
    assert api.healthcheck.interval_s == 2.0 and api.healthcheck.timeout_s == 90.0
    assert api.healthcheck.start_period_s == 0.5 and api.healthcheck.retries == 15
    assert api.healthcheck.command.startswith("python3 -c 'import socket;")


def test_ids_are_made_from_folder_names_and_must_be_unique(tmp_path: Path):
    _copy(tmp_path, to="Fix It")
    _copy(tmp_path, to="fix-it")
    with pytest.raises(TaskError, match="duplicate id 'fix-it'"):
        load_suite(f"harbor:{tmp_path / 'set'}")


def test_a_folder_without_tasks_is_refused(tmp_path: Path):
    with pytest.raises(TaskError, match="no Harbor tasks"):
        load_suite(f"harbor:{tmp_path}")
    with pytest.raises(TaskError, match="no such folder"):
        load_suite(f"harbor:{tmp_path / 'absent'}")


def test_canary_lines_are_stripped_only_at_the_top():
    text = "<!-- canary GUID x -->\n# BENCHMARK DATA canary\n\nDo it.\n# canary stays\n"
    assert strip_canary(text) == "Do it.\n# canary stays\n"


def test_agent_and_verifier_users_are_honoured(tmp_path: Path):
    """task.toml's agent.user runs the harness (environment.user) and owns the workdir copy
    the tests see; verifier.user runs test.sh."""
    one = _copy(tmp_path)  # csv-total: it has [agent] and [verifier] sections
    text = (one / "task.toml").read_text().replace("[agent]\n", '[agent]\nuser = "player"\n')
    text = text.replace("[verifier]\n", "[verifier]\nuser = 1001\n")
    (one / "task.toml").write_text(text)
    (task,) = load_suite(f"harbor:{one}")
    assert task.environment is not None and task.environment.agent_user == "player"
    assert (task.verifier["user"], task.verifier["agent_user"]) == ("1001", "player")


def test_tasks_whose_tests_run_the_agents_code_are_refused_for_training(tmp_path: Path):
    tasks = {t.id: t for t in load_suite(f"harbor:{EXAMPLES}")}
    assert in_process(tasks["fix-greeting"]) and not in_process(tasks["csv-total"])
    refuse_for_training([tasks["csv-total"].model_dump()])  # declared: reads files only
    with pytest.raises(TaskError, match=r"fix-greeting: metadata\.tests_run_agent_code: its tests"):
        refuse_for_training([t.model_dump() for t in tasks.values()])
    undeclared = _copy(tmp_path, name="port-config", to="undeclared")
    toml = undeclared / "task.toml"
    toml.write_text(toml.read_text().replace("tests_run_agent_code = false\n", ""))
    (task,) = load_suite(f"harbor:{undeclared}")
    assert in_process(task)  # Harbor's model unless the task says otherwise
    toml.write_text(
        toml.read_text().replace("[metadata]\n", '[metadata]\ntests_run_agent_code = "no"\n')
    )
    with pytest.raises(TaskError, match=r"metadata\.tests_run_agent_code: must be true or false"):
        load_suite(f"harbor:{undeclared}")

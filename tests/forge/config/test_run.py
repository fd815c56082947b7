"""RunConfig: defaults, YAML files, dotted key=value overrides, and errors that name the field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from forge.config import ConfigError, PolicyConfig, RunConfig, load_config


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


def test_defaults_are_valid() -> None:
    config = load_config()
    assert config == RunConfig()
    assert config.policy.engine.name == "torch"
    assert config.policy.engine.model == "tiny"
    assert config.policy.replicas == 1
    assert config.task_ids == []
    assert config.run_dir == Path("runs") / "quickstart"
    # A dumped config validates back to itself.
    assert RunConfig.model_validate(config.model_dump()) == config


def test_empty_yaml_file_gives_the_defaults(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, "")) == RunConfig()


def test_yaml_file_sets_nested_fields(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "name: demo\n"
        "policy:\n"
        "  engine: {name: scripted, mode: noop}\n"
        "  max_batch_size: 4\n"
        "task_ids: [a, b]\n",
    )
    config = load_config(path)
    assert config.name == "demo"
    assert config.policy.engine.name == "scripted"
    assert config.policy.engine.mode == "noop"
    assert config.policy.engine.model == "tiny"  # untouched fields keep their defaults
    assert config.policy.max_batch_size == 4
    assert config.task_ids == ["a", "b"]


def test_overrides_are_dotted_and_typed_by_yaml(tmp_path: Path) -> None:
    path = write(tmp_path, "name: demo\npolicy:\n  max_batch_size: 4\n")
    config = load_config(
        path,
        [
            "policy.max_batch_size=8",
            "policy.engine.seed=7",
            "policy.num_gpus=0.5",
            "sandbox.isolation=none",
            "sandbox.root=null",
            "task_ids=[x, y]",
            "temperature=0.5",
            "name=other=name",  # only the first '=' splits
            " harness = react ",
        ],
    )
    assert config.policy.max_batch_size == 8  # the override beats the file
    assert config.policy.engine.seed == 7
    assert config.policy.num_gpus == 0.5
    assert config.sandbox.isolation == "none"
    assert config.sandbox.root is None
    assert config.task_ids == ["x", "y"]
    assert config.temperature == 0.5
    assert config.name == "other=name"
    assert config.harness == "react"


def test_overrides_create_missing_sections() -> None:
    config = load_config(None, ["policy.engine.name=scripted", "proxy.max_turns_per_attempt=3"])
    assert config.policy.engine.name == "scripted"
    assert config.proxy.max_turns_per_attempt == 3


def test_quoted_override_stays_a_string() -> None:
    # Values are YAML: quoting keeps a number-like value a string.
    config = load_config(None, ["name='123'"])
    assert config.name == "123"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (["policy.engine.nmae=torch"], "policy.engine.nmae"),
        (["policy.replicas=0"], "policy.replicas"),
        (["policy.engine.name=vllm2"], "policy.engine.name"),
        (["policy.batch_wait_ms=soon"], "policy.batch_wait_ms"),
        (["sandbox.backend=docker-ish"], "sandbox.backend"),
        (["temperature=-1"], "temperature"),
        (["temperature=0"], "temperature"),  # greedy: nothing to train on
        (["sandbox.isolation=auto"], "sandbox.isolation"),
        (["sandbox.isolate_network=false"], "sandbox.isolate_network"),  # removed
        (["rollout.policy_failures=ignore"], "rollout.policy_failures"),
        (["trainer.rollout_correction=is"], "trainer.rollout_correction"),
        (["bogus=1"], "bogus"),
        (["proxy.max_body_bytes=10"], "proxy.max_body_bytes"),
    ],
)
def test_bad_override_names_the_dotted_field(overrides: list[str], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    lines = str(err.value).splitlines()
    assert lines[0] == "invalid config:"
    assert any(line.strip().startswith(f"{field}:") for line in lines[1:]), str(err.value)


def test_bad_field_in_a_file_names_the_file_and_field(tmp_path: Path) -> None:
    path = write(tmp_path, "policy:\n  engine:\n    device: cpu\n    colour: blue\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert f"{path}: policy.engine.colour:" in str(err.value)


def test_every_error_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, ["policy.replicas=0", "harness=[1]"])
    text = str(err.value)
    assert "policy.replicas:" in text
    assert "harness:" in text


@pytest.mark.parametrize("item", ["policy.replicas", "name", ""])
def test_override_without_equals_is_an_error(item: str) -> None:
    with pytest.raises(ConfigError, match="key=value") as err:
        load_config(None, [item])
    assert repr(item) in str(err.value)


def test_override_through_a_scalar_is_an_error() -> None:
    with pytest.raises(ConfigError, match="name is not a section"):
        load_config(None, ["name=demo", "name.first=x"])


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", "policy: [unclosed\n"])
def test_yaml_that_is_not_a_mapping_is_an_error(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=re.escape(str(path))):
        load_config(path)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml"):
        load_config(tmp_path / "nope.yaml")


def test_config_error_is_a_value_error() -> None:
    assert issubclass(ConfigError, ValueError)


def test_policy_config_validates_from_a_dict() -> None:
    config = PolicyConfig.model_validate({"engine": {"name": "scripted"}, "replicas": 2})
    assert config.engine.name == "scripted"
    assert config.replicas == 2
    with pytest.raises(ValueError, match="extra"):
        PolicyConfig.model_validate({"replica": 2})


def test_a_harness_option_error_names_the_option() -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, ["harness=command", "harness_options={command: [a], protocol: grpc}"])
    text = str(err.value)
    assert "  harness_options.protocol: 'grpc' is not one of chat, responses, anthropic" in text
    assert "Value error" not in text
    # a message about something that is not one of the options keeps the field as it is
    with pytest.raises(ConfigError) as err:
        load_config(None, ["harness=command", "harness_options={}"])
    assert "  harness_options: CommandHarness: missing" in str(err.value)


def test_kubernetes_sandbox_settings_and_their_errors() -> None:
    from forge.sandboxes import kube_manifests as km

    config = load_config(
        None,
        [
            "sandbox.backend=kubernetes",
            "sandbox.kubernetes.namespace=sandboxes",
            "sandbox.kubernetes.proxy_ports=[8000, 8100]",
            "proxy.host=0.0.0.0",
        ],
    )
    kube = config.sandbox.kubernetes
    assert (kube.namespace, kube.proxy_ports, config.proxy.host) == (
        "sandboxes",
        (8000, 8100),
        "0.0.0.0",
    )
    assert RunConfig().proxy.host == "127.0.0.1"  # nothing listens beyond loopback by default
    # The defaults the manifests use, stated once each side of the import boundary.
    assert kube.harness_selector == km.HARNESS_SELECTOR
    assert kube.service_account == km.SANDBOX_ACCOUNT
    for override, field in [
        ("sandbox.kubernetes.namespace=Not_A_Name", "sandbox.kubernetes.namespace"),
        ("sandbox.kubernetes.qps=0", "sandbox.kubernetes.qps"),
        ("sandbox.kubernetes.proxy_ports=[9000, 8000]", "sandbox.kubernetes.proxy_ports"),
        ("sandbox.kubernetes.proxy_ports=null", "sandbox.kubernetes.proxy_ports"),  # never all
        ("sandbox.kubernetes.harness_selector={}", "sandbox.kubernetes.harness_selector"),
        (
            "sandbox.kubernetes.harness_selector={openforge.role: sandbox}",
            "sandbox.kubernetes.harness_selector",
        ),
        ("sandbox.kubernetes.proxy_cidrs=[10.0.0.0/33]", "sandbox.kubernetes.proxy_cidrs"),
        ("sandbox.kubernetes.namespce=x", "sandbox.kubernetes.namespce"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(field) + ":"):
            load_config(None, [override])


# Run configs only: a file of `agents:` is a --harness-config for forge eval, not a run.
EXAMPLES = [
    p
    for p in sorted((Path(__file__).resolve().parents[3] / "examples").glob("*.yaml"))
    if not re.search(r"^agents:", p.read_text(), re.MULTILINE)
]


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_config_loads_and_names_real_parts(path: Path) -> None:
    """Each shipped example is a valid run config whose suite loads and whose harness (with
    its options) can be built: a renamed suite or option would break what the README runs."""
    from forge.harnesses.registry import get_harness
    from tasks.loader import load_suite

    config = load_config(path)
    assert load_suite(config.tasks), config.tasks
    if config.harness != "command":  # command agents check their own mounts at load time
        get_harness(config.harness, **config.harness_options)

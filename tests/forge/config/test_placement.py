"""``placement``: per actor kind, the Ray options a run asks for; defaults as before the section
existed; errors that name the field; which nodes could ever take an actor."""

from __future__ import annotations

from pathlib import Path

import pytest

from forge.config import ConfigError, RunConfig, load_config
from forge.config.placement import node_fits, selector_matches, unplaceable

KINDS = ("policy", "trainer", "harness_pod", "scheduler", "replay_buffer")


def test_defaults_ask_for_what_a_run_asked_for_before() -> None:
    """The options each actor was created with before ``placement`` existed (policy.num_cpus
    and num_gpus, 1 CPU for the trainer, rollout.pod_num_cpus, nothing for the control plane);
    HarnessPods spread, which on one machine is the same machine."""
    config = RunConfig()
    assert {k: config.actor_options(k) for k in KINDS} == {
        "policy": {"num_cpus": 1.0, "num_gpus": 0.0},
        "trainer": {"num_cpus": 1.0, "num_gpus": 0.0},
        "harness_pod": {"num_cpus": 0.25, "num_gpus": 0.0, "scheduling_strategy": "SPREAD"},
        "scheduler": {"num_cpus": 0.0, "num_gpus": 0.0},
        "replay_buffer": {"num_cpus": 0.0, "num_gpus": 0.0},
    }
    # The older fields stay the defaults the placement falls back on.
    config = load_config(None, ["policy.num_cpus=3", "policy.num_gpus=1", "rollout.pod_num_cpus=2"])
    assert config.actor_options("policy") == {"num_cpus": 3.0, "num_gpus": 1.0}
    assert config.actor_options("harness_pod")["num_cpus"] == 2.0


CLUSTER = """
policy: {num_gpus: 1}
trainer: {lr: 1.0e-6, device: cuda}
placement:
  policy: {label_selector: {openforge/node: gpu}}
  trainer: {num_gpus: 1, label_selector: {openforge/node: gpu}}
  harness_pod: {num_cpus: 0.5, resources: {harness_pod: 1}, strategy: spread}
  scheduler: {label_selector: {openforge/node: head}}
  replay_buffer: {label_selector: {openforge/node: "in(head,cpu)"}}
"""


def test_a_cluster_placement_from_yaml_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(CLUSTER)
    config = load_config(path, ["placement.harness_pod.strategy=default"])
    assert config.actor_options("policy") == {
        "num_cpus": 1.0,
        "num_gpus": 1.0,
        "label_selector": {"openforge/node": "gpu"},
    }
    assert config.actor_options("trainer") == {
        "num_cpus": 1.0,
        "num_gpus": 1.0,
        "label_selector": {"openforge/node": "gpu"},
    }
    # the override beat the file's spread; the placement's CPUs beat rollout.pod_num_cpus
    assert config.actor_options("harness_pod") == {
        "num_cpus": 0.5,
        "num_gpus": 0.0,
        "resources": {"harness_pod": 1.0},
    }
    assert config.actor_options("replay_buffer")["label_selector"] == {
        "openforge/node": "in(head,cpu)"
    }
    # A dumped config (runs/<name>/config.yaml) validates back to itself.
    assert RunConfig.model_validate(config.model_dump()) == config


BAD = [  # (override under placement., the field its error names under placement., words)
    ("harness_pod.resources={CPU: 1}", "harness_pod.resources.CPU", "num_cpus"),
    ("trainer.resources={gpu_node: -1}", "trainer.resources.gpu_node", ">= 0"),
    ("trainer.num_gpus=-1", "trainer.num_gpus", "greater than or equal"),
    ("policy.label_selector={'bad key!': gpu}", "policy.label_selector.bad key!", "label key"),
    ("scheduler.label_selector={a/node: 'in(a b)'}", "scheduler.label_selector.a/node", "selector"),
    ("harness_pod.strategy=pack", "harness_pod.strategy", "spread"),
    ("scheduler.strategy=spread", "scheduler.strategy", "not permitted"),
    ("pods={}", "pods", "not permitted"),
]


@pytest.mark.parametrize(("override", "field", "words"), BAD)
def test_bad_placement_is_refused_naming_the_field(override: str, field: str, words: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_config(None, [f"placement.{override}"])
    line = next(x for x in str(e.value).splitlines() if x.strip().startswith(f"placement.{field}:"))
    assert words in line, str(e.value)


def test_label_selectors_match_as_ray_reads_them() -> None:
    labels = {"openforge/node": "cpu", "zone": "a"}
    assert selector_matches({}, labels)
    assert selector_matches({"openforge/node": "cpu"}, labels)
    assert not selector_matches({"openforge/node": "gpu"}, labels)
    assert selector_matches({"openforge/node": "!gpu"}, labels)
    assert not selector_matches({"openforge/node": "!cpu"}, labels)
    assert selector_matches({"openforge/node": "in(cpu,head)", "zone": "a"}, labels)
    assert not selector_matches({"openforge/node": "!in(cpu, head)"}, labels)
    assert not selector_matches({"missing": "x"}, labels)
    assert selector_matches({"missing": "!x"}, labels)


def _node(resources: dict[str, float], labels: dict[str, str], alive: bool = True) -> dict:
    return {"Alive": alive, "Resources": resources, "Labels": labels}


def test_unplaceable_names_the_kinds_no_node_can_take() -> None:
    head = _node({"CPU": 8.0}, {"openforge/node": "head"})
    gpu = _node({"CPU": 48.0, "GPU": 4.0}, {"openforge/node": "gpu"})
    cpu = _node({"CPU": 16.0, "harness_pod": 8.0}, {"openforge/node": "cpu"}, alive=False)
    kinds = {k: RunConfig().actor_options(k) for k in KINDS}
    assert unplaceable(kinds, [head]) == []  # the defaults fit any node
    pod = {"num_cpus": 0.25, "resources": {"harness_pod": 1.0}}
    trainer = {"num_cpus": 1.0, "num_gpus": 1.0, "label_selector": {"openforge/node": "gpu"}}
    assert node_fits(trainer, gpu) and not node_fits(trainer, head)
    assert not node_fits({"num_gpus": 8.0}, gpu)  # more than the node has in all
    lines = unplaceable({"harness_pod": pod, "trainer": trainer}, [head, gpu, cpu])
    assert len(lines) == 1 and lines[0].startswith("placement.harness_pod:"), lines
    assert "harness_pod" in lines[0] and "2 alive" in lines[0]


def test_the_driver_warns_of_cuda_actors_that_ask_for_no_gpu() -> None:
    from forge.driver import placement_warnings

    head = _node({"CPU": 8.0}, {"openforge/node": "head"})
    gpu = _node({"CPU": 48.0, "GPU": 4.0}, {"openforge/node": "gpu"})
    config = load_config(None, ["trainer.device=cuda", "policy.engine.device=cuda"])
    placed = {k: config.actor_options(k) for k in KINDS}
    assert placement_warnings(config, placed, [gpu]) == []  # one machine: it has the GPU
    lines = placement_warnings(config, placed, [head, gpu])
    assert [line.split(":")[0] for line in lines] == ["placement.trainer", "placement.policy"]
    asks = ["placement.trainer.num_gpus=1", "policy.num_gpus=1"]
    config = load_config(None, ["trainer.device=cuda", "policy.engine.device=cuda", *asks])
    placed = {k: config.actor_options(k) for k in KINDS}
    assert placement_warnings(config, placed, [head, gpu]) == []

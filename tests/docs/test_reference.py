"""The generated reference (scripts/docs_reference.py): every RunConfig field, nested sections
included, has a description and a row in the config reference; every ``forge`` subcommand and
each of its arguments is in the CLI reference."""

from __future__ import annotations

import argparse

import pytest

from forge.cli import build_parser
from forge.config import RunConfig
from tests.docs.helpers import load_script

ref = load_script("docs_reference")


@pytest.fixture(scope="module")
def config_page() -> str:
    return ref.config_page()


@pytest.fixture(scope="module")
def cli_page() -> str:
    return ref.cli_page()


def test_the_walk_reaches_nested_sections() -> None:
    names = [dotted for dotted, *_ in ref.config_fields()]
    assert len(names) == len(set(names))
    for dotted in (
        "policy.engine.model",
        "sandbox.kubernetes.namespace",
        "trainer.verl.ranks",
        "placement.harness_pod.strategy",
        "logging.wandb.project",
    ):
        assert dotted in names
    assert set(RunConfig.model_fields) <= set(names)


def test_every_config_field_is_described_and_in_the_reference(config_page: str) -> None:
    undescribed = [d for d, _, _, f in ref.config_fields() if not (f.description or "").strip()]
    assert not undescribed, f"fields without a description: {undescribed}"
    missing = [d for d, *_ in ref.config_fields() if f"| `{d}`<br>" not in config_page]
    assert not missing, f"fields missing from the config reference: {missing}"


def test_config_reference_rows_carry_type_and_default(config_page: str) -> None:
    row = next(
        line for line in config_page.splitlines() if line.startswith("| `policy.replicas`<br>")
    )
    assert "int (>= 1)" in row and "`1`" in row and "Number of Policy replicas" in row
    row = next(
        line
        for line in config_page.splitlines()
        if line.startswith("| `logging.wandb.project`<br>")
    )
    assert "required" in row


def test_every_subcommand_and_argument_is_in_the_cli_reference(cli_page: str) -> None:
    parser = build_parser()
    commands = parser.get_default("commands")
    assert commands and set(commands) == set(ref.subcommands())
    for name, sub in commands.items():
        assert f"## `forge {name}`" in cli_page, name
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            shown = action.option_strings[0] if action.option_strings else action.dest
            assert f"`{shown}" in cli_page, f"forge {name}: {shown}"


def test_the_reference_script_writes_both_pages(tmp_path) -> None:
    assert ref.main([str(tmp_path)]) == 0
    assert (tmp_path / "config.md").read_text() == ref.config_page()
    assert (tmp_path / "cli.md").read_text() == ref.cli_page()

"""forge/__init__.py: OpenForge stops at import on a Python older than 3.11, saying which Python
it found and what to do (on 3.10 ``asyncio.wait_for`` raises ``asyncio.TimeoutError``, which the
scheduler, buffer, batcher and weight-sync loops do not catch, and ``datetime.UTC`` is missing)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

import forge
from forge import MIN_PYTHON, python_problem

ROOT = Path(__file__).resolve().parents[2]
# What a 3.10 interpreter reports, then the import a `forge` command or a Ray worker does first.
AS_PY310 = "import sys; sys.version_info = (3, 10, 12, 'final', 0); import {module}"


def test_the_check_agrees_with_pyproject() -> None:
    wanted = SpecifierSet(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    )
    need = ".".join(map(str, MIN_PYTHON))
    assert need in wanted and "3.10" not in wanted and "3.10.12" not in wanted
    assert python_problem() is None  # the tests' own Python
    assert python_problem((3, 11, 0, "final", 0)) is None
    assert python_problem((3, 13, 1)) is None


def test_the_message_names_the_version_found_and_the_fix() -> None:
    message = python_problem((3, 10, 12, "final", 0), "/usr/bin/python3")
    assert message is not None
    assert "needs Python 3.11 or newer" in message
    assert "this is Python 3.10.12 (/usr/bin/python3)" in message
    assert "apt-get install python3.11 python3.11-venv" in message
    assert "PYTHON=python3.11 bash scripts/setup.sh" in message


@pytest.mark.parametrize("module", ["forge", "forge.cli"])
def test_import_on_an_older_python_stops_with_the_message(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", AS_PY310.format(module=module)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "RuntimeError: OpenForge needs Python 3.11 or newer; this is Python 3.10.12"
    )
    assert "scripts/setup.sh" in last
    assert forge.__name__ == "forge"  # this process imported it on its own Python

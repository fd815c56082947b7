"""Fixtures for verifier tests: a workspace sandbox double (see ``sandbox_double``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from forge.sandboxes.base import SandboxSpec
from tests.rewards.sandbox_double import DirSandbox


@pytest.fixture
def sandbox(tmp_path: Path) -> DirSandbox:
    box = DirSandbox(tmp_path / "ws")
    box.create(SandboxSpec())
    return box

"""The chaos suite's table: each fault test adds its row; the run's summary prints them all
(``pytest tests/chaos -s``, or ``scripts/chaos.py``), and ``CHAOS_TABLE=path`` keeps them as
JSON lines."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from tests.chaos.ledger import Audit, table

ROWS: list[dict[str, Any]] = []


@pytest.fixture
def chaos_row():
    """Call with the fault's :class:`Audit` to put it in the table (whatever the test's verdict
    on it)."""

    def add(audit: Audit) -> None:
        row = audit.row()
        ROWS.append(row)
        print("\n" + audit.explain(), flush=True)
        out = os.environ.get("CHAOS_TABLE")
        if out:
            with open(out, "a") as f:
                f.write(json.dumps(row) + "\n")

    return add


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if ROWS:
        terminalreporter.write_sep("=", "chaos table")
        terminalreporter.write_line(table(ROWS))

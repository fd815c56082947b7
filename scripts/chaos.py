"""Run the chaos suite (tests/chaos) and print its table: per fault, the attempts the run
dispatched, how many failed, and how many were lost, duplicated or leaked (all three must be 0).

    .venv/bin/python scripts/chaos.py            # all six faults (a few minutes)
    .venv/bin/python scripts/chaos.py -k replica # extra arguments go to pytest
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.chaos.ledger import table  # noqa: E402


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="forge-chaos-") as tmp:
        rows_file = Path(tmp) / "rows.jsonl"
        env = {
            **os.environ,
            "CHAOS_TABLE": str(rows_file),
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            "RAY_AUTH_MODE": "disabled",
        }
        cmd = [sys.executable, "-m", "pytest", "tests/chaos", "-p", "no:cacheprovider", *argv]
        code = subprocess.call(cmd, cwd=ROOT, env=env)
        rows = (
            [json.loads(x) for x in rows_file.read_text().splitlines()]
            if rows_file.exists()
            else []
        )
    print()
    print(table(rows) if rows else "no fault ran")
    print(f"\npytest exit status {code}")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

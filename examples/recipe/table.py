"""The recipe's table from its evaluations: ``python examples/recipe/table.py OUT``."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(out: Path) -> str:
    rows = ["| stage | harness | pass@1 | pass@k | k | tasks |", "|---|---|---|---|---|---|"]
    for stage in ("base", "sft", "rl"):
        path = out / f"eval-{stage}" / "eval.json"
        if not path.exists():
            rows.append(f"| {stage} | (not run) | | | | |")
            continue
        for name, r in json.loads(path.read_text())["harnesses"].items():
            rows.append(
                f"| {stage} | {name} | {r['pass@1']:.3f} | {r['pass@k']:.3f} | {r['k']} | "
                f"{r['tasks']} |"
            )
    return "\n".join(rows)


if __name__ == "__main__":
    print(main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/recipe")))

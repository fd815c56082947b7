"""The recipe's table from its evaluations: ``python examples/recipe/table.py OUT``.

Per stage and harness: held-out pass@1 and pass@k, and what ``forge analyze`` reads from the
same episodes (shell-call share, self-verification, tool coverage, error recovery)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from forge.observe.analyze import analyze

STAGES = ("base", "sft", "rl")


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def behaviour(folder: Path) -> dict:
    """``forge analyze FOLDER``'s rates: one evaluation, so one policy version."""
    versions = analyze(folder)["versions"]
    empty = dict.fromkeys(("shell_share", "self_verify", "tool_coverage", "error_recovery"))
    return next(iter(versions.values()), empty)


def main(out: Path) -> str:
    rows = [
        "| stage | harness | pass@1 | pass@k | k | tasks | shell share | self-verify | "
        "tool coverage | recovery |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for stage in STAGES:
        path = out / f"eval-{stage}" / "eval.json"
        if not path.exists():
            rows.append(f"| {stage} | (not run) | | | | | | | | |")
            continue
        for name, r in json.loads(path.read_text())["harnesses"].items():
            b = behaviour(path.parent / name)
            rows.append(
                f"| {stage} | {name} | {r['pass@1']:.3f} | {r['pass@k']:.3f} | {r['k']} | "
                f"{r['tasks']} | {_fmt(b['shell_share'])} | {_fmt(b['self_verify'])} | "
                f"{_fmt(b['tool_coverage'])} | {_fmt(b['error_recovery'])} |"
            )
    return "\n".join(rows)


if __name__ == "__main__":
    print(main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/recipe")))

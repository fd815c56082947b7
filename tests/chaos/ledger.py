"""What a run left on disk, checked against what was seen to happen: the chaos suite's audit.

The ReplayBuffer writes three files under ``<run_dir>/episodes/``, each record one JSON line:

- ``episodes.jsonl``: every episode of every group put in the buffer (``group_id`` + the
  episode), written before the group is acknowledged;
- ``dropped.jsonl``: a group that will not be trained on, with its ``reason`` and the finished
  ``episodes`` it had (a group evicted as stale names only its ``group_id``: its episodes are in
  ``episodes.jsonl`` already);
- ``failures.jsonl``: a failed attempt, with its ``reason`` (retried, or part of a dropped group).

An attempt is named by ``(episode_id, attempt)`` (``episode_id`` is ``<group_id>-<slot>``). "On
disk exactly once" means: every attempt the run dispatched (counted by the scheduler, and every
attempt an outside observer saw get a sandbox) has exactly one record in those files, and every
record that is not a trained episode carries a reason. Besides:

- a slot's attempts are numbered 0, 1, ... without a gap (a retry never hides a lost attempt);
- a buffered group has exactly one episode per slot;
- every line parses (no torn record, e.g. after a crash mid-write).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.chaos.procs import Observer

FILES = ("episodes.jsonl", "dropped.jsonl", "failures.jsonl")


@dataclass
class Record:
    file: str
    group_id: str
    episode_id: str
    attempt: int
    status: str
    reason: str | None


@dataclass
class Audit:
    fault: str
    records: list[Record] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    leaked: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # unreasoned drops, gaps, torn lines
    steps: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def keys(self) -> set[tuple[str, int]]:
        return {(r.episode_id, r.attempt) for r in self.records}

    def of(self, episode_id: str, attempt: int) -> list[Record]:
        return [r for r in self.records if (r.episode_id, r.attempt) == (episode_id, attempt)]

    def row(self) -> dict[str, Any]:
        return {
            "fault": self.fault,
            "attempts": len(self.keys()),
            "failed": sum(r.file == "failures.jsonl" for r in self.records),
            "lost": len(self.lost),
            "duplicated": len(self.duplicated),
            "leaked": len(self.leaked),
            "steps": len(self.steps),
        }

    def explain(self) -> str:
        parts = []
        for name in ("lost", "duplicated", "leaked", "problems", "notes"):
            items = getattr(self, name)
            if items:
                parts.append(f"{name} ({len(items)}):\n  " + "\n  ".join(items[:20]))
        bad = self.lost or self.duplicated or self.leaked or self.problems
        return f"[{self.fault}] " + ("" if bad else "clean\n") + "\n".join(parts)


def _lines(path: Path, audit: Audit) -> list[dict[str, Any]]:
    out = []
    if not path.exists():
        return out
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except ValueError:
            audit.problems.append(f"{path.name}:{i}: not a JSON record: {line[:80]!r}")
    return out


def read_records(run_dir: Path, audit: Audit) -> None:
    d = run_dir / "episodes"
    for rec in _lines(d / "episodes.jsonl", audit):
        audit.records.append(
            Record(
                "episodes.jsonl",
                rec["group_id"],
                rec["episode_id"],
                rec["attempt"],
                rec.get("status", "?"),
                rec.get("failure") or rec.get("truncated"),  # truncated: scored 0, trained
            )
        )
    for rec in _lines(d / "dropped.jsonl", audit):
        if not rec.get("reason"):
            audit.problems.append(f"dropped group {rec.get('group_id')} without a reason")
        for ep in rec.get("episodes", []):
            audit.records.append(
                Record(
                    "dropped.jsonl",
                    rec["group_id"],
                    ep["episode_id"],
                    ep["attempt"],
                    ep.get("status", "?"),
                    rec.get("reason"),
                )
            )
    for rec in _lines(d / "failures.jsonl", audit):
        if not rec.get("reason"):
            audit.problems.append(f"failed attempt {rec.get('episode_id')} without a reason")
        audit.records.append(
            Record(
                "failures.jsonl",
                rec["group_id"],
                rec["episode_id"],
                rec["attempt"],
                rec.get("status", "?"),
                rec.get("reason"),
            )
        )


def audit_run(
    fault: str,
    run_dir: Path,
    observer: Observer,
    group_size: int,
    dispatched: int | None = None,
    steps: int | None = None,
) -> Audit:
    """Check ``run_dir``'s records against what ``observer`` saw and (when the scheduler's
    counts survived the run) ``dispatched``, the number of attempts it dispatched."""
    audit = Audit(fault)
    read_records(run_dir, audit)
    counts = Counter((r.episode_id, r.attempt) for r in audit.records)
    audit.duplicated = [
        f"{eid} attempt {n}: {c} records (" + ", ".join(r.file for r in audit.of(eid, n)) + ")"
        for (eid, n), c in sorted(counts.items())
        if c > 1
    ]
    keys = set(counts)
    # Seen to start (it got a sandbox), but nowhere on disk.
    audit.lost = [
        f"{eid} attempt {n} (pod {labels.get('pod')}): got a sandbox, has no record"
        for (eid, n), labels in sorted(observer.attempts.items())
        if (eid, n) not in keys
    ]
    if dispatched is not None and dispatched > len(keys):
        audit.lost.append(f"scheduler dispatched {dispatched} attempts; {len(keys)} on disk")
    # A slot's attempts are 0..k without a gap.
    by_slot: dict[str, list[int]] = {}
    for eid, n in keys:
        by_slot.setdefault(eid, []).append(n)
    for eid, numbers in sorted(by_slot.items()):
        missing = sorted(set(range(max(numbers) + 1)) - set(numbers))
        if missing:
            audit.lost += [
                f"{eid} attempt {n}: a later attempt exists, it has none" for n in missing
            ]
    # A buffered group holds one episode per slot.
    buffered: dict[str, list[Record]] = {}
    for r in audit.records:
        if r.file == "episodes.jsonl":
            buffered.setdefault(r.group_id, []).append(r)
    for gid, recs in sorted(buffered.items()):
        slots = sorted(int(r.episode_id.rsplit("-", 1)[1]) for r in recs)
        if slots != list(range(group_size)):
            audit.problems.append(f"buffered group {gid} has slots {slots}")
    reasons = Counter(f"{r.file}:{r.reason}" for r in audit.records if r.reason)
    if reasons:
        audit.notes.append(
            "records with a reason: " + ", ".join(f"{k} x{v}" for k, v in sorted(reasons.items()))
        )
    audit.leaked = observer.leaked()
    metrics = run_dir / "metrics.jsonl"
    if metrics.exists():
        audit.steps = [r["step"] for r in _lines(metrics, audit)]
    if steps is not None and audit.steps != list(range(1, steps + 1)):
        audit.problems.append(f"steps recorded {audit.steps}, expected 1..{steps}")
    return audit


def assert_clean(audit: Audit) -> None:
    """0 lost, 0 duplicated, 0 leaked, and no unreasoned drop, gap or torn record."""
    assert not audit.lost, audit.explain()
    assert not audit.duplicated, audit.explain()
    assert not audit.leaked, audit.explain()
    assert not audit.problems, audit.explain()


def table(rows: list[dict[str, Any]]) -> str:
    """The chaos table: one row per fault."""
    head = ["fault", "attempts", "failed", "lost", "duplicated", "leaked", "steps"]
    cells = [head] + [[str(r.get(h, "")) for h in head] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)

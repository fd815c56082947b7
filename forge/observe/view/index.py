"""An index over a run's records, read live and never whole: ``forge view`` opens a run of
10,000 episodes by reading each record's summary once (its byte offset in the file, its task,
group, reward, status and policy version) and loads a whole episode only when its page asks.

The files are append-only JSON lines (``metrics.jsonl``, ``episodes/episodes.jsonl``,
``episodes/dropped.jsonl``, ``episodes/failures.jsonl``); :meth:`RunIndex.refresh` reads only
what was appended since the last call, so pages follow a run while it runs. A half-written last
line is left for the next refresh.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class EpisodeRow:
    """What the lists show of an episode, and where its record is."""

    offset: int
    length: int
    episode_id: str
    task_id: str
    group_id: str
    attempt: int
    harness: str
    reward: float
    status: str
    failure: str | None
    truncated: str | None
    version: int  # the newest policy version among its turns
    turns: int
    services: int = 0  # calls of the task's services


def _row(offset: int, length: int, ep: dict[str, Any]) -> EpisodeRow:
    turns = ep.get("turns") or []
    return EpisodeRow(
        offset=offset,
        length=length,
        episode_id=str(ep.get("episode_id", "")),
        task_id=str(ep.get("task_id", "")),
        group_id=str(ep.get("group_id", "")),
        attempt=int(ep.get("attempt", 0)),
        harness=str(ep.get("harness", "")),
        reward=float(ep.get("reward", 0.0)),
        status=str(ep.get("status", "")),
        failure=ep.get("failure"),
        truncated=ep.get("truncated"),
        version=max((int(t.get("policy_version", 0)) for t in turns), default=0),
        turns=len(turns),
        services=len(ep.get("service_calls") or []),
    )


@dataclass
class _Tail:
    """An append-only JSON-lines file read from where the last read stopped."""

    path: Path
    offset: int = 0

    def read(self) -> list[tuple[int, int, dict[str, Any]]]:
        """(offset, length, record) of each whole line appended since the last read."""
        if not self.path.exists():
            return []
        out = []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            while True:
                start = f.tell()
                line = f.readline()
                if not line.endswith(b"\n"):  # nothing more, or a line still being written
                    break
                self.offset = f.tell()
                if line.strip():
                    try:
                        out.append((start, len(line), json.loads(line)))
                    except ValueError:
                        continue  # a damaged line: skipped, the rest still shown
        return out


@dataclass
class RunIndex:
    run_dir: Path
    episodes_path: Path = field(init=False)
    steps: list[dict[str, Any]] = field(default_factory=list)
    episodes: list[EpisodeRow] = field(default_factory=list)
    dropped: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        from forge.observe.analyze import episodes_file

        self.episodes_path = episodes_file(self.run_dir)  # FileNotFoundError names the fix
        home = self.episodes_path.parent
        self._lock = threading.Lock()
        self._by_id: dict[tuple[str, int], int] = {}
        self._tails = {
            "steps": _Tail(self.run_dir / "metrics.jsonl"),
            "episodes": _Tail(self.episodes_path),
            "dropped": _Tail(home / "dropped.jsonl"),
            "failures": _Tail(home / "failures.jsonl"),
        }
        self.refresh()

    def refresh(self) -> None:
        """Read what the run appended since the last refresh."""
        with self._lock:
            self.steps += [r for _, _, r in self._tails["steps"].read()]
            for offset, length, ep in self._tails["episodes"].read():
                row = _row(offset, length, ep)
                self._by_id[(row.episode_id, row.attempt)] = len(self.episodes)
                self.episodes.append(row)
            self.dropped += [_summary(r) for _, _, r in self._tails["dropped"].read()]
            self.failures += [_summary(r) for _, _, r in self._tails["failures"].read()]

    def find(self, episode_id: str, attempt: int | None = None) -> EpisodeRow | None:
        if attempt is not None:
            i = self._by_id.get((episode_id, attempt))
            return None if i is None else self.episodes[i]
        rows = [r for r in self.episodes if r.episode_id == episode_id]
        return rows[-1] if rows else None

    def load(self, row: EpisodeRow) -> dict[str, Any]:
        """The whole record of one episode (read from its offset)."""
        with open(self.episodes_path, "rb") as f:
            f.seek(row.offset)
            return json.loads(f.read(row.length))

    def train_steps(self) -> list[dict[str, Any]]:
        """The metrics lines of training steps (not the step-0 evaluation line)."""
        return [s for s in self.steps if "reward_mean" in s]

    def page(self, rows: list[EpisodeRow], page: int, size: int = 50) -> list[EpisodeRow]:
        return rows[page * size : (page + 1) * size]


def _summary(record: dict[str, Any]) -> dict[str, Any]:
    """A dropped or failure record without its episodes' turns (they can be large)."""
    out = {k: v for k, v in record.items() if k not in ("episodes", "turns", "segments")}
    episodes = record.get("episodes")
    if isinstance(episodes, list):
        out["episodes"] = len(episodes)
    return out

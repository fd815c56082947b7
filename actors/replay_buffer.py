"""ReplayBuffer: finished, rewarded GRPO groups, handed to the trainer through the object store.

A plain class; ``ray.remote(ReplayBuffer)`` where it is created. Every episode that reaches it is
appended to ``<run_dir>/episodes/episodes.jsonl`` (and synced to disk) before the group is
acknowledged, each distinct image of its turns written once before it to
``episodes/images/<sha256>.<ext>`` (:mod:`forge.episode_images`); dropped groups are appended
to ``dropped.jsonl`` with their reason, failed attempts to ``failures.jsonl`` with theirs. The
trainer samples whole groups, oldest first, as boxes (:func:`unbox`): one object-store put per
:meth:`sample`, not per group (a put per group was a third of the buffer's time in
``scheduler_throughput``); a group whose oldest turn is more than
``max_staleness`` policy versions behind the trainer is evicted and counted instead of trained
on.

Nothing dispatched goes unaccounted, even when the run dies: the scheduler reports each attempt
it dispatches (a ``dispatched`` event of :meth:`record`, the call that brings the buffer many
records at once) to ``attempts.jsonl``, a journal of ids that also notes every
attempt and group that reaches a record. An attempt that never did (it was running, or had
finished in a group still open, when the run stopped or crashed) gets a ``failures.jsonl``
record with reason ``interrupted``, and its unfinished group a ``dropped.jsonl`` one: at
:meth:`close`, and, after a crash, when a buffer opens the run directory again (``--resume``). A
record torn by a crash mid-write is cut off when the file is opened again, so every line parses.
Groups still in the buffer at :meth:`close` (never trained on) are marked ``untrained`` in
``dropped.jsonl`` (like ``stale`` ones, by ``group_id``: their episodes are in ``episodes.jsonl``).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import deque
from pathlib import Path
from typing import Any

from forge.episode_images import write_images
from forge.types import Episode

INTERRUPTED = "interrupted"
UNTRAINED = "untrained"  # buffered, never sampled: the run ended first (episodes.jsonl has them)


def unbox(boxes: list[list[Any]]) -> list[list[Episode]]:
    """The groups of :meth:`ReplayBuffer.sample`'s boxes: ``[ref, i]`` is group ``i`` of the
    groups under ``ref`` (a sample's groups share one object), ``[ref]`` a group on its own.
    The list keeps Ray from resolving the ref in transit: the episodes go from the object
    store straight to the process that unboxes them, each object fetched once."""
    import ray

    refs = list({id(box[0]): box[0] for box in boxes}.values())
    objects = dict(zip((id(r) for r in refs), ray.get(refs), strict=True)) if refs else {}
    return [objects[id(box[0])][box[1]] if len(box) > 1 else objects[id(box[0])] for box in boxes]


def group_version(group: list[Episode]) -> int:
    """The oldest policy version that produced any token of the group."""
    versions = [t.policy_version for ep in group for t in ep.turns]
    return min(versions) if versions else 0


class ReplayBuffer:
    def __init__(self, run_dir: str, capacity: int = 64, max_staleness: int = 1) -> None:
        self.capacity = capacity
        self.max_staleness = max_staleness
        self.dir = Path(run_dir) / "episodes"
        self.dir.mkdir(parents=True, exist_ok=True)
        names = ("episodes", "dropped", "failures", "attempts")
        for name in names:
            cut_torn_tail(self.dir / f"{name}.jsonl")
        self._episodes, self._dropped, self._failures, self._journal = (
            open(self.dir / f"{name}.jsonl", "a", buffering=1)  # noqa: SIM115
            for name in names
        )
        self._open_attempts: dict[tuple[str, int], str] = {}  # dispatched, no record yet
        self._open_groups: set[str] = set()  # an attempt dispatched, no group record yet
        self._groups: deque[tuple[int, list[Episode], str]] = deque()
        self._arrived = asyncio.Event()
        self.counts = {
            "groups_in": 0,
            "episodes_written": 0,
            "images_written": 0,  # distinct image files, content-addressed
            "groups_sampled": 0,
            "groups_evicted_stale": 0,
            "groups_dropped": 0,
            "episodes_dropped": 0,
            "attempts_failed": 0,
            "attempts_interrupted": 0,
            "groups_interrupted": 0,
            "groups_untrained": 0,
        }
        self._recover()

    def _write(self, f: Any, record: dict[str, Any]) -> None:
        f.write(json.dumps(record) + "\n")
        self._sync(f)

    @staticmethod
    def _sync(f: Any) -> None:
        f.flush()
        os.fsync(f.fileno())

    # -- the journal --------------------------------------------------------------------------

    def dispatched(self, group_id: str, episode_id: str, attempt: int) -> None:
        """An attempt of a training group has started (before it can reach any record)."""
        self.record([("dispatched", group_id, episode_id, attempt)])

    def _journal_dispatched(self, group_id: str, episode_id: str, attempt: int) -> None:
        line = {"event": "dispatched", "group_id": group_id, "episode_id": episode_id}
        self._journal.write(json.dumps({**line, "attempt": attempt}) + "\n")
        self._open_attempts[(episode_id, attempt)] = group_id
        self._open_groups.add(group_id)

    def _recorded(self, group_id: str, episodes: list[Any], closed: bool) -> None:
        """Note in the journal that these attempts (and the group, if ``closed``) have their
        records (written and synced just before)."""
        keys = [(ep["episode_id"], ep["attempt"]) for ep in episodes]
        tracked = [k for k in keys if self._open_attempts.pop(k, None) is not None]
        if closed and group_id in self._open_groups:
            self._open_groups.discard(group_id)
        elif not tracked:
            return  # nothing this journal waits for (attempts not reported as dispatched)
        line = {"event": "recorded", "group_id": group_id, "closed": closed, "attempts": keys}
        self._journal.write(json.dumps(line) + "\n")  # no sync: the records are synced

    def _recover(self) -> None:
        """After a crash: attempts the journal saw dispatched but never recorded (and groups
        never closed) are recorded as interrupted now."""
        attempts: dict[tuple[str, int], str] = {}
        groups: set[str] = set()
        for line in (self.dir / "attempts.jsonl").read_text().splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == "dispatched":
                attempts[(event["episode_id"], event["attempt"])] = event["group_id"]
                groups.add(event["group_id"])
            elif event.get("event") == "recorded":
                for eid, n in event["attempts"]:
                    attempts.pop((eid, n), None)
                if event["closed"]:
                    groups.discard(event["group_id"])
        if attempts or groups:
            # A record may have reached its file before the crash stopped the journal's note.
            attempts, groups = self._unrecorded(attempts, groups)
        self._open_attempts, self._open_groups = attempts, groups
        self._interrupt()

    def _unrecorded(
        self, attempts: dict[tuple[str, int], str], groups: set[str]
    ) -> tuple[dict[tuple[str, int], str], set[str]]:
        ids = {eid for eid, _ in attempts} | groups
        for name in ("episodes", "dropped", "failures"):
            for line in (self.dir / f"{name}.jsonl").read_text().splitlines():
                if not any(i in line for i in ids):
                    continue
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                eps = rec.get("episodes", []) if name == "dropped" else [rec]
                for ep in eps:
                    attempts.pop((ep.get("episode_id"), ep.get("attempt")), None)
                if name != "failures":
                    groups.discard(rec.get("group_id"))
        return attempts, groups

    def _interrupt(self) -> None:
        """Record every attempt still open as failed (``interrupted``), then every group still
        open as dropped (``interrupted``)."""
        events: list[tuple[Any, ...]] = []
        for (episode_id, attempt), group_id in sorted(self._open_attempts.items()):
            ep = Episode(
                episode_id=episode_id,
                task_id="?",
                attempt=attempt,
                harness="?",
                reward=0.0,
                status="failed",
                failure=INTERRUPTED,
            )
            events.append(("failure", ep, group_id, INTERRUPTED))
        events += [("drop", [], group_id, INTERRUPTED) for group_id in sorted(self._open_groups)]
        self.counts["attempts_interrupted"] += len(self._open_attempts)
        self.counts["groups_interrupted"] += len(self._open_groups)
        self.record(events)

    # -- records --------------------------------------------------------------------------------

    def record(self, events: list[tuple[Any, ...]]) -> int:
        """Many records in one call, in order (the Scheduler sends what it owes the buffer this
        way, not one call per attempt); returns the buffer size. Each event is one of
        ``("dispatched", group_id, episode_id, attempt)``, ``("put", episodes, group_id)``,
        ``("drop", episodes, group_id, reason)`` or ``("failure", episode, group_id, reason)``.

        The records are written, then each file they went to is synced once; only then does
        the journal note them (with the ``dispatched`` lines, in event order; synced once), and
        only then can the put groups be sampled."""
        arity = {"dispatched": 4, "put": 3, "drop": 4, "failure": 4}
        for i, event in enumerate(events):
            if (
                not isinstance(event, tuple | list)
                or not event
                or arity.get(event[0]) != len(event)
            ):
                raise ValueError(f"events[{i}]: not a record event ({str(event)[:200]})")
        notes: list[tuple[Any, ...]] = []
        written: set[Any] = set()
        groups: list[tuple[int, list[Episode], str]] = []
        for event in events:
            kind = event[0]
            if kind == "dispatched":
                notes.append(event)
                continue
            if kind == "put":
                _, group, group_id = event
                f = self._episodes
                records = lines = [{"group_id": group_id, **ep.to_dict()} for ep in group]
                groups.append((group_version(group), group, group_id))
                self.counts["episodes_written"] += len(group)
                self.counts["groups_in"] += 1
            elif kind == "drop":
                _, group, group_id, reason = event
                f, records = self._dropped, [e.to_dict() for e in group]
                lines = [{"group_id": group_id, "reason": reason, "episodes": records}]
                self.counts["groups_dropped"] += 1
                self.counts["episodes_dropped"] += len(group)
            else:
                _, episode, group_id, reason = event
                group = [episode]
                f = self._failures
                records = lines = [{"group_id": group_id, "reason": reason, **episode.to_dict()}]
                self.counts["attempts_failed"] += 1
            self.counts["images_written"] += write_images(self.dir, group)  # before the records
            for line in lines:
                f.write(json.dumps(line) + "\n")
            written.add(f)
            notes.append(("recorded", group_id, records, kind != "failure"))
        for f in written:
            self._sync(f)
        for note in notes:
            if note[0] == "dispatched":
                self._journal_dispatched(*note[1:])
            else:
                self._recorded(*note[1:])
        if any(note[0] == "dispatched" for note in notes):
            self._sync(self._journal)
        if groups:
            self._groups.extend(groups)
            self._arrived.set()
        return len(self._groups)

    def put(self, group: list[Episode], group_id: str) -> int:
        """Store a finished group; returns the buffer size. Episodes reach disk first."""
        return self.record([("put", group, group_id)])

    def drop(self, group: list[Episode], group_id: str, reason: str) -> None:
        """A group that will not be trained on (a failure outlived its retries): logged, counted."""
        self.record([("drop", group, group_id, reason)])

    def log_failure(self, episode: Episode, group_id: str, reason: str) -> None:
        """A failed attempt (retried, or part of a dropped group): on disk with its reason."""
        self.record([("failure", episode, group_id, reason)])

    def _evict_stale(self, trainer_version: int) -> None:
        keep = deque()
        for item in self._groups:
            if trainer_version - item[0] > self.max_staleness:
                self.counts["groups_evicted_stale"] += 1
                self._write(self._dropped, {"group_id": item[2], "reason": "stale"})
            else:
                keep.append(item)
        self._groups = keep

    async def sample(
        self, n: int, trainer_version: int, timeout_s: float | None = None
    ) -> list[list[Any]]:
        """Up to ``n`` whole groups as boxes (:func:`unbox`; all in one object-store put),
        oldest first, none stale; waits up to ``timeout_s`` for ``n`` to be there (None: return
        what there is now)."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while True:
            self._evict_stale(trainer_version)
            if len(self._groups) >= n or deadline is None or loop.time() >= deadline:
                break
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), deadline - loop.time())
            except TimeoutError:
                pass
        out = [self._groups.popleft()[1] for _ in range(min(n, len(self._groups)))]
        self.counts["groups_sampled"] += len(out)
        if not out:
            return []
        import ray

        ref = ray.put(out)
        return [[ref, i] for i in range(len(out))]

    def size(self) -> int:
        return len(self._groups)

    def full(self) -> bool:
        return len(self._groups) >= self.capacity

    def stats(self) -> dict[str, int]:
        return {**self.counts, "size": len(self._groups)}

    def close(self) -> None:
        """Record what is still open as interrupted and the groups never sampled as
        ``untrained`` (the run is over), then close the files."""
        if not self._episodes.closed:
            self._interrupt()
            for _, _, group_id in self._groups:
                self._write(self._dropped, {"group_id": group_id, "reason": UNTRAINED})
                self.counts["groups_untrained"] += 1
            self._groups.clear()
        for f in (self._episodes, self._dropped, self._failures, self._journal):
            f.close()


def cut_torn_tail(path: Path) -> None:
    """Cut a last line that lacks its newline (a write torn by a crash): appending after it
    would glue the next record to it."""
    try:
        with open(path, "rb+") as f:
            size = f.seek(0, os.SEEK_END)
            if size == 0:
                return
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return
            keep = size - 1
            while keep > 0:  # back to the last newline (files are short-lined near the end)
                step = min(keep, 1 << 16)
                f.seek(keep - step)
                chunk = f.read(step)
                nl = chunk.rfind(b"\n")
                if nl >= 0:
                    keep = keep - step + nl + 1
                    break
                keep -= step
            f.truncate(keep)
    except FileNotFoundError:
        return

"""Faults that end a ``forge run`` process, then ``forge run --resume`` finishes the run:

5. the Trainer actor killed (its worker process SIGKILLed mid-run): the run stops, the resumed
   run continues from the last checkpoint (``checkpoint_every=1``);
6. the driver SIGKILLed mid-collection, with everything it started (its local Ray cluster: GCS,
   raylet, actors), in one instant, as when the machine or container it runs in dies. The
   sandboxes of the attempts it was running are left as orphans (their processes die with their
   pods: bwrap's --die-with-parent); the resumed run's reconcile pass reaps them. (SIGKILL of
   the driver alone lets Ray stop its actors, whose sandboxes are destroyed on the way out, so
   it leaves no orphan to reconcile; its attempts are accounted for all the same.)

Each ``forge run`` is a subprocess with a Ray cluster of its own. Afterwards every attempt that
got a sandbox in either process is on disk exactly once (or dropped with its reason), no sandbox
process or directory is left, and the run has recorded each of its steps once.
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.chaos import runner
from tests.chaos.ledger import assert_clean, audit_run
from tests.chaos.procs import (
    Observer,
    all_procs,
    harness_procs,
    poll,
    session,
    signal_proc,
    wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
STEPS = 2
RUN_TIMEOUT_S = 600


def descendants(pid: int) -> list[Any]:
    procs = all_procs()
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    out, stack = [], list(children.get(pid, []))
    while stack:
        p = procs.get(stack.pop())
        if p is not None:
            out.append(p)
            stack.extend(children.get(p.pid, []))
    return out


def in_step(run: runner.ForgeRun, run_dir: Path, root: Path, step: int) -> bool:
    """Collecting step ``step``: its checkpoint before is there and an attempt is running."""
    if run.proc.poll() is not None:
        raise AssertionError(f"forge run ended before step {step}:\n{run.text()[-3000:]}")
    before = run_dir / "checkpoints" / f"step_{step - 1}" / "trainer_state.json"
    return before.exists() and bool(harness_procs(root))


def test_trainer_killed_then_resumed(tmp_path: Path, chaos_row: Any) -> None:
    args = [str(runner.QUICKSTART), *runner.overrides(tmp_path, "trainer-killed", steps=STEPS)]
    run_dir, root = tmp_path / "trainer-killed", tmp_path / "sandboxes"
    with Observer(root) as observer:
        first = runner.ForgeRun(args, tmp_path / "first.log")
        try:
            wait_for(
                "step 2 to be collecting", lambda: in_step(first, run_dir, root, 2), RUN_TIMEOUT_S
            )
            trainer = wait_for(
                "the Trainer actor's process",
                lambda: [
                    p for p in descendants(first.proc.pid) if p.argv[0].startswith("ray::Trainer")
                ],
                60,
            )
            assert signal_proc(trainer[0], signal.SIGKILL)
            rc = first.wait(RUN_TIMEOUT_S)
        finally:
            first.kill_session()
        out = first.text()
        assert rc != 0, out[-3000:]  # the run stops, saying why
        assert re.search(r"Trainer|ActorDied|actor died", out), out[-3000:]
        out = runner.resume(run_dir, tmp_path / "resumed.log", STEPS, RUN_TIMEOUT_S)
        assert "resumed from" in out and "step_1" in out, out[-3000:]
        # the checkpoint carried the task cursor: the resumed step draws the groups after step 1's
        state = json.loads((run_dir / "checkpoints" / "step_1" / "run_state.json").read_text())
        assert state == {"cursor": 2, "step": 1}  # rollout.groups_per_step=2
        poll(lambda: not observer.leaked(), 15, every=0.2)
    audit = audit_run("trainer-killed", run_dir, observer, runner.GROUP_SIZE, steps=STEPS)
    chaos_row(audit)
    assert_clean(audit)


def test_driver_sigkilled_then_resumed(tmp_path: Path, chaos_row: Any) -> None:
    args = [str(runner.QUICKSTART), *runner.overrides(tmp_path, "driver-killed", steps=STEPS)]
    run_dir, root = tmp_path / "driver-killed", tmp_path / "sandboxes"
    with Observer(root) as observer:
        first = runner.ForgeRun(args, tmp_path / "first.log")
        try:
            wait_for(
                "step 2 to be collecting", lambda: in_step(first, run_dir, root, 2), RUN_TIMEOUT_S
            )
            # SIGKILL to the driver's process group: no finally, no atexit, no shutdown, and no
            # actor outlives it long enough to clean up after itself.
            first.kill_session()
            left = poll(lambda: not session(first.proc.pid), 120, every=0.5)
            assert left, f"processes of the killed run still alive: {session(first.proc.pid)}"
        finally:
            first.kill_session()
        orphans = sorted(d.name for d in root.iterdir()) if root.is_dir() else []
        assert orphans, "the driver was killed mid-attempt: its sandboxes should be orphans"
        out = runner.resume(run_dir, tmp_path / "resumed.log", STEPS, RUN_TIMEOUT_S)
        reaped = re.search(r"reaped (\d+) orphaned sandbox", out)
        assert reaped and int(reaped.group(1)) >= len(orphans), (orphans, out[-3000:])
        poll(lambda: not observer.leaked(), 15, every=0.2)
    audit = audit_run("driver-killed", run_dir, observer, runner.GROUP_SIZE, steps=STEPS)
    chaos_row(audit)
    assert_clean(audit)
    assert os.path.isdir(run_dir / "checkpoints" / f"step_{STEPS}")

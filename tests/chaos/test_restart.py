"""Faults that end a ``forge run`` process, then ``forge run --resume`` goes on with the run.
One run takes both, one after the other (each ``forge run`` starts a Ray cluster, a Policy and
pods: the chain starts three processes where a run for each fault started four):

5. the Trainer actor killed (its worker process SIGKILLed) while step 2 collects: the run stops,
   saying why; ``--resume`` continues from the last checkpoint (step 1, ``checkpoint_every=1``),
   with its task cursor;
6. that resumed run's driver SIGKILLed while step 3 collects, with everything it started (its
   local Ray cluster: GCS, raylet, actors), in one instant, as when the machine or container it
   runs in dies. The sandboxes of the attempts it was running are left as orphans (their
   processes die with their pods: bwrap's --die-with-parent); the next resumed run's reconcile
   pass reaps them, and it finishes step 3. (SIGKILL of the driver alone lets Ray stop its
   actors, whose sandboxes are destroyed on the way out, so it leaves no orphan to reconcile;
   its attempts are accounted for all the same.)

Each ``forge run`` is a subprocess with a Ray cluster of its own. Afterwards every attempt that
got a sandbox in any of the three processes is on disk exactly once (or dropped with its
reason), no sandbox process or directory is left, and the run has recorded each of its steps
once.
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
STEPS = 3  # the Trainer is killed in step 2, the resumed run's driver in step 3
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


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The run, its two faults and the two resumes; what each test asserts on."""
    tmp = tmp_path_factory.mktemp("restart")
    name = "trainer-then-driver-killed"
    args = [str(runner.QUICKSTART), *runner.overrides(tmp, name, steps=STEPS)]
    run_dir, root = tmp / name, tmp / "sandboxes"
    seen: dict[str, Any] = {"run_dir": run_dir, "row": False}
    with Observer(root) as observer:
        # 5. the Trainer killed while step 2 collects
        first = runner.ForgeRun(args, tmp / "first.log")
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
            seen["trainer_killed_rc"] = first.wait(RUN_TIMEOUT_S)
        finally:
            first.kill_session()
        seen["trainer_killed_out"] = first.text()
        state = run_dir / "checkpoints" / "step_1" / "run_state.json"
        seen["step_1_state"] = json.loads(state.read_text()) if state.exists() else None
        # 6. the resumed run's driver and its whole cluster SIGKILLed while step 3 collects
        second = runner.ForgeRun(["--resume", str(run_dir), f"steps={STEPS}"], tmp / "second.log")
        try:
            wait_for(
                "step 3 to be collecting", lambda: in_step(second, run_dir, root, 3), RUN_TIMEOUT_S
            )
            # SIGKILL to the driver's process group: no finally, no atexit, no shutdown, and no
            # actor outlives it long enough to clean up after itself.
            second.kill_session()
            left = poll(lambda: not session(second.proc.pid), 120, every=0.5)
            assert left, f"processes of the killed run still alive: {session(second.proc.pid)}"
        finally:
            second.kill_session()
        seen["driver_killed_out"] = second.text()
        seen["orphans"] = sorted(d.name for d in root.iterdir()) if root.is_dir() else []
        seen["last_out"] = runner.resume(run_dir, tmp / "last.log", STEPS, RUN_TIMEOUT_S)
        poll(lambda: not observer.leaked(), 15, every=0.2)
    seen["audit"] = audit_run(name, run_dir, observer, runner.GROUP_SIZE, steps=STEPS)
    return seen


def audited(chain: dict[str, Any], chaos_row: Any) -> None:
    """The whole run's audit: clean (in the chaos table once, whichever test comes first)."""
    if not chain["row"]:
        chaos_row(chain["audit"])
        chain["row"] = True
    assert_clean(chain["audit"])


@pytest.mark.full  # the chain below, ~250 s: -m full; in CI a resumed run in
# tests/forge/test_driver_mix.py, the kills in tests/chaos/test_in_process.py, reaping in
# tests/chaos/test_reconcile.py
def test_trainer_killed_then_resumed(chain: dict[str, Any], chaos_row: Any) -> None:
    out = chain["trainer_killed_out"]
    assert chain["trainer_killed_rc"] != 0, out[-3000:]  # the run stops, saying why
    assert re.search(r"Trainer|ActorDied|actor died", out), out[-3000:]
    resumed = chain["driver_killed_out"]  # the resumed run, until its driver was killed
    assert "resumed from" in resumed and "step_1" in resumed, resumed[-3000:]
    # the checkpoint carried the task cursor: the resumed step draws the groups after step 1's
    assert chain["step_1_state"] == {"cursor": 2, "step": 1}  # rollout.groups_per_step=2
    # the resumed run trained step 2 (its checkpoint is what the driver kill waited for)
    assert os.path.isdir(chain["run_dir"] / "checkpoints" / "step_2")
    audited(chain, chaos_row)


@pytest.mark.full  # the same chain: -m full
def test_driver_sigkilled_then_resumed(chain: dict[str, Any], chaos_row: Any) -> None:
    orphans = chain["orphans"]
    assert orphans, "the driver was killed mid-attempt: its sandboxes should be orphans"
    out = chain["last_out"]
    assert "resumed from" in out and "step_2" in out, out[-3000:]
    reaped = re.search(r"reaped (\d+) orphaned sandbox", out)
    assert reaped and int(reaped.group(1)) >= len(orphans), (orphans, out[-3000:])
    audited(chain, chaos_row)
    assert os.path.isdir(chain["run_dir"] / "checkpoints" / f"step_{STEPS}")

"""Small, real ``forge run``s for the chaos suite: in this process (the driver's ``Run``, on the
test session's Ray cluster, so a fault can reach its actors) or as ``forge run`` subprocesses
(each with a Ray cluster of its own, so the driver itself can be killed)."""

from __future__ import annotations

import json
import os
import signal
import string
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forge.config import RunConfig, load_config
from tests.chaos.procs import session

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
FORGE = [sys.executable, "-m", "forge.cli"]
GROUP_SIZE = 2


def letters_suite(root: Path, max_tokens: int = 128) -> Path:
    """One task whose reward varies within a group even for the untrained model (the share of
    the reply's characters that are letters), so the trainer steps and publishes every step.
    128 sampled tokens (the default) make an attempt last long enough (seconds) to be hit while
    it runs."""
    suite = root / "letters"
    suite.mkdir(parents=True, exist_ok=True)
    (suite / "letters.yaml").write_text(
        "id: letters\n"
        'instruction: "Reply with a word."\n'
        f"verifier: {{type: answer_chars, chars: {string.ascii_letters}}}\n"
        "solution: []\n"
        "answer: word\n"
        f"limits: {{max_turns: 2, timeout_s: 60, max_tokens_per_turn: {max_tokens}}}\n"
    )
    return suite


def resume(run_dir: Path, log: Path, steps: int, timeout_s: float) -> str:
    """``forge run --resume RUN_DIR steps=N`` to its end; its output (the run must succeed)."""
    again = ForgeRun(["--resume", str(run_dir), f"steps={steps}"], log)
    try:
        rc = again.wait(timeout_s)
    finally:
        again.kill_session()
    out = again.text()
    assert rc == 0, out[-3000:]
    return out


def overrides(tmp: Path, name: str, steps: int = 2, timeout_s: float = 30) -> list[str]:
    """The quickstart, small: 2 groups of 2 per step, a checkpoint every step, short timeouts,
    sandboxes under ``tmp/sandboxes`` (so the test sees exactly this run's)."""
    return [
        f"runs_dir={tmp}",
        f"name={name}",
        f"tasks={letters_suite(tmp)}",
        f"steps={steps}",
        "checkpoint_every=1",
        f"rollout.group_size={GROUP_SIZE}",
        "rollout.groups_per_step=2",
        "rollout.min_pods=2",
        "rollout.max_pods=3",
        "rollout.max_retries=2",
        "rollout.attempt_timeout_s=90",
        f"task_limits={{timeout_s: {timeout_s}}}",
        f"sandbox.root={tmp / 'sandboxes'}",
    ]


def config(tmp: Path, name: str, **kw: Any) -> RunConfig:
    return load_config(QUICKSTART, overrides(tmp, name, **kw))


# -- in this process --------------------------------------------------------------------------


class InjectorThread(threading.Thread):
    """Runs ``inject`` beside the run; its failure is raised by :meth:`result`."""

    def __init__(self, inject: Callable[[], Any]) -> None:
        super().__init__(name="chaos-injector", daemon=True)
        self.inject = inject
        self.value: Any = None
        self.error: str | None = None

    def run(self) -> None:
        try:
            self.value = self.inject()
        except BaseException:  # reported by result()
            self.error = traceback.format_exc()

    def result(self, timeout_s: float = 120) -> Any:
        self.join(timeout_s)
        if self.is_alive():
            raise AssertionError("the fault injector did not finish")
        if self.error:
            raise AssertionError(f"the fault injector failed:\n{self.error}")
        return self.value


def drive(
    run: Any,
    steps: int,
    before_step: Callable[[int], None] | None = None,
    pending: Callable[[], bool] | None = None,
    max_extra_steps: int = 3,
    after_step: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """``forge.driver.main``'s loop on ``run``: ``run.one_step`` (collect -> train -> publish
    -> checkpoint) ``steps`` times, each record to metrics.jsonl, then ``finish`` (the last
    checkpoint and shutdown, whatever happened); ``before_step(step)`` arms a fault,
    ``after_step(step)`` looks at the run between a step and the next (or ``finish``). While
    ``pending()`` says the fault has not landed yet, up to ``max_extra_steps`` more steps run
    (a step's samples may all be collected ahead, in the step before: then nothing is running
    for the fault to hit). Returns the scheduler's final counts."""
    from forge.driver import finish
    from forge.observe.progress import Progress

    progress = Progress(run.config, start_step=run.step)
    code = 1
    with open(run.dir / "metrics.jsonl", "a", buffering=1) as metrics_file:
        try:
            while run.step < steps or (
                pending is not None and pending() and run.step < steps + max_extra_steps
            ):
                if before_step is not None:
                    before_step(run.step + 1)
                metrics_file.write(json.dumps(run.one_step(progress)) + "\n")
                if after_step is not None:
                    after_step(run.step)
            code = 0
        finally:
            final = finish(run, code)
    return final


def teardown(run: Any) -> None:
    """Kill what a finished in-process run leaves on the shared cluster (its trainer, buffer,
    weight store and scheduler), so the next run gets the CPUs."""
    import ray

    for actor in (
        getattr(run, "trainer", None),
        getattr(run, "buffer", None),
        getattr(run, "scheduler", None),
        getattr(getattr(run, "sync", None), "store", None),
    ):
        if actor is not None:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # already gone
                pass


# -- forge run subprocesses ------------------------------------------------------------------


def env() -> dict[str, str]:
    # A Ray cluster of its own (never the test session's), loopback only.
    return {
        **os.environ,
        "RAY_ADDRESS": "local",
        "PYTHONUNBUFFERED": "1",
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "RAY_AUTH_MODE": "disabled",
    }


class ForgeRun:
    """``forge run ARGS`` as a subprocess in its own session, output to a log file."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.log = log
        self._out = open(log, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [*FORGE, "run", *args],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env=env(),
            cwd=ROOT,
            start_new_session=True,
        )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait(self, timeout_s: float) -> int:
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"forge run did not finish in {timeout_s:.0f}s:\n{self.text()[-4000:]}"
            ) from None
        finally:
            self._out.close()

    def kill(self) -> None:
        """SIGKILL the driver alone (its session's other processes are left to their fate)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def kill_session(self) -> None:
        """SIGKILL the driver and everything it started (its session: the local Ray cluster's
        processes and actors; sandboxes lead sessions of their own), all at once."""
        for pid in [self.proc.pid, *session(self.proc.pid)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.proc.wait()

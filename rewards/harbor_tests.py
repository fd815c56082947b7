"""Harbor tests: a Harbor task's ``tests/test.sh``, run as Harbor runs it, scored by the reward
file it writes.

In an episode it runs in a verifier sandbox of its own (:mod:`rewards.runner`): a fresh
container of the task's image (not the agent's container: no process of the agent's is left,
nothing it changed outside its workdir carries over) whose workdir holds a copy of the agent's
final workdir. Only then are the tests copied to ``/tests``, ``/logs/verifier`` made empty, and
``/tests/test.sh`` run from the workdir with its output in ``/logs/verifier/test-stdout.txt``.
The reward is read as Harbor reads it: ``/logs/verifier/reward.json`` (a number, or a mapping
of names to numbers: its ``reward``, else its one value, else their mean) before
``reward.txt`` (one number). No reward file, or one that is not a finite number, is a reward of
0 with the reason (what the agent left may break the tests).
"""

from __future__ import annotations

import io
import json
import math
import shlex
import tarfile
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, field_validator

from forge.sandboxes.base import Sandbox
from rewards.base import Verdict
from rewards.command import INTERPRETER_ENV, _tail
from rewards.common import VerifierModel

TESTS = "/tests"
LOGS = "/logs/verifier"


def tests_tar(folder: Path) -> bytes:
    """The tests folder as an uncompressed tar (names relative to it; files keep their modes)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in sorted(folder.rglob("*")):
            if "__pycache__" in path.parts or not (path.is_file() or path.is_dir()):
                continue
            tar.add(path, arcname=str(path.relative_to(folder)), recursive=False)
    return buf.getvalue()


def parse_reward(json_text: str | None, txt: str | None) -> tuple[float | None, str]:
    """The reward a test run wrote (``reward.json`` first, as Harbor reads them) and what it
    was; ``(None, why)`` when there is none or it is not a finite number."""
    if json_text is not None:
        try:
            data: Any = json.loads(json_text)
        except ValueError as e:
            return None, f"reward.json is not JSON ({e})"
        values = data if isinstance(data, dict) else {"reward": data}
        if not values or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            for v in values.values()
        ):
            return None, f"reward.json holds no finite numbers: {_tail(json_text, 120)}"
        if "reward" in values:
            reward = float(values["reward"])
        else:
            reward = sum(values.values()) / len(values)
        return reward, f"reward.json {json.dumps(values, sort_keys=True)}"
    if txt is not None:
        try:
            reward = float(txt.strip())
        except ValueError:
            return None, f"reward.txt is not a number: {_tail(txt, 120)!r}"
        if not math.isfinite(reward):
            return None, f"reward.txt is not finite: {txt.strip()!r}"
        return reward, f"reward.txt {txt.strip()}"
    return None, "the tests wrote neither reward.json nor reward.txt"


class HarborTests(VerifierModel):
    """``tests/test.sh`` of a Harbor task (loaded by :mod:`tasks.harbor`); see the module
    docstring."""

    kind: ClassVar[str] = "harbor_tests"
    runs_commands: ClassVar[bool] = True
    tests: str = Field(description="Host path of the task's tests/ folder (with test.sh).")
    timeout_s: float = Field(default=600.0, gt=0, description="Most seconds test.sh may run.")
    env: dict[str, str] = Field(default_factory=dict, description="test.sh's extra environment.")

    @field_validator("tests")
    @classmethod
    def _has_test_sh(cls, v: str) -> str:
        if not (Path(v) / "test.sh").is_file():
            raise ValueError(f"no test.sh in {v}")
        return v

    def verify(self, sandbox: Sandbox, final_answer: str | None) -> Verdict:
        from rewards.runner import VERIFIER_DIR

        staged = f"{VERIFIER_DIR}/tests"
        sandbox.put_archive(staged, tests_tar(Path(self.tests)))
        setup = (
            f"rm -rf {TESTS} {LOGS} && mkdir -p {LOGS} /logs/agent && cp -a {staged} {TESTS} "
            f"&& chmod +x {TESTS}/test.sh"
        )
        ready = sandbox.exec(["sh", "-c", setup], 60.0, INTERPRETER_ENV)
        if ready.exit_code != 0:  # the verifier's own sandbox failed: not the agent's doing
            raise RuntimeError(f"placing the tests failed: {ready.stderr.strip()}")
        run = f"{TESTS}/test.sh > {LOGS}/test-stdout.txt 2>&1"
        result = sandbox.exec(["sh", "-c", run], self.timeout_s, {**INTERPRETER_ENV, **self.env})
        if result.timed_out:
            return Verdict(0.0, f"test.sh timed out after {self.timeout_s:g}s")
        read = {name: _read(sandbox, f"{LOGS}/{name}") for name in ("reward.json", "reward.txt")}
        reward, what = parse_reward(read["reward.json"], read["reward.txt"])
        if reward is None:
            output = _tail(_read(sandbox, f"{LOGS}/test-stdout.txt") or "")
            return Verdict(0.0, f"test.sh exited {result.exit_code}: {what}; output: {output}")
        return Verdict(reward, f"test.sh exited {result.exit_code}: {what}")


def _read(sandbox: Sandbox, path: str) -> str | None:
    """A file's text from anywhere in the sandbox (``get_file`` reaches only its workspace and
    home); None when it is absent."""
    r = sandbox.exec(["sh", "-c", f"test -f {shlex.quote(path)} && cat {shlex.quote(path)}"], 30.0)
    return r.stdout if r.exit_code == 0 else None

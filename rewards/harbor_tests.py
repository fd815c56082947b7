"""Harbor tests: a Harbor task's ``tests/test.sh``, run as Harbor runs it, scored by the reward
file it writes, when the run ended normally.

Where it runs (:mod:`rewards.runner`), by :attr:`HarborTests.in_place`:

- **in place** (Harbor's mode, the default): in the agent's own container once the harness
  has exited, as its authors expect: every file, process-free state and installed binary the
  agent left is there, so tests that check a service's files, a binary outside the workdir or
  the system state pass for a correct agent.
- **sealed**: in a fresh container of the task's image whose workdir holds a copy of the
  agent's final workdir: nothing it changed outside its workdir carries over, and the tests
  run with the interpreter settings of :data:`rewards.command.INTERPRETER_ENV` (no module
  shadows, ``sitecustomize``, ``.pth`` files); some tests then cannot pass (a sibling-module
  import under ``PYTHONSAFEPATH``, a check outside the workdir).

Either way, as root:

1. every process still running in the sandbox is killed (the agent's daemons; in place, the
   harness has exited already), so nothing the agent started runs beside the tests; the
   image's ``ENTRYPOINT`` and its services are spared (they run in a session of their own
   that no process of the agent's can join: :mod:`forge.sandboxes.task_services`);
2. the tests are copied to ``/tests`` (staged first in the sandbox's random verifier folder),
   ``/logs/verifier`` is made anew (owned by the verifier's user, writable by no other), and
   the workdir is given to the agent's user (``agent.user``), as Harbor leaves it;
3. every symlink in the workdir that leads to the verifier's own files (``/tests``,
   ``/logs``, ``/solution``, the verifier folder, or a folder above one of them), or that
   cannot be resolved, is removed: a link the agent left (``output.json ->
   /tests/expected.json``) must not let the tests read their own files through the agent's
   path;
4. ``/tests/test.sh`` runs from the workdir as ``verifier.user`` (default root), its output in
   ``/logs/verifier/test-stdout.txt``, with the task's own environment and no variable of
   OpenForge's in place (sealed: the interpreter settings too);
5. every process is killed again (a daemon the tests' run of the agent's code started could
   write a reward file after the tests), and the reward is read as Harbor reads it:
   ``/logs/verifier/reward.json`` (a number, or a mapping of names to numbers: its
   ``reward``, else its one value, else their mean) before ``reward.txt`` (one number), each
   only when it is a regular file. The tests' output and ``ctrf.json`` (when written) are kept
   with the episode (:attr:`rewards.base.Verdict.outputs`), and so are the named rewards it
   wrote (``rewards``: for Harbor's own metrics in ``forge eval``).

A run that did not end normally scores 0 whatever the reward files say: timed out, or
``test.sh`` killed by a signal (the agent's program killing the tests after forging a reward).
A non-zero exit status is not such an end: Harbor's verifier ignores the status (its tests
commonly exit with pytest's status after writing ``reward.txt``), so the reward file decides.
No reward file, or one that is not a finite number, is a reward of 0 with the reason.

What remains (``docs/harbor.md``): in place, an agent that ran as root could have replaced
what the tests run (a shim for ``python`` or ``pytest``); the runner records every path it
changed outside the workdir beside the episode, so such shims are visible, and sealed mode
rules them out. Tests that run the agent's program as the verifier's user (Harbor's model)
run code the agent wrote with every right the tests have, in either mode; such code can write
the reward file and end normally. Task authors declare it (``[metadata]
tests_run_agent_code``, :attr:`HarborTests.runs_agent_code`) and training refuses such tasks
(:func:`tasks.harbor.refuse_for_training`).
"""

from __future__ import annotations

import io
import json
import math
import tarfile
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, field_validator

from forge.sandboxes.base import ExecResult, Sandbox
from rewards.base import Verdict
from rewards.command import INTERPRETER_ENV, _tail
from rewards.common import VerifierModel, clip, verifier_dir

TESTS = "/tests"
LOGS = "/logs/verifier"
PROTECTED = (TESTS, "/logs", "/solution")  # the verifier's own places (and its folder)

# $1 staged tests, $2 workdir, $3 verifier user, $4 agent user, $5 the verifier's folder.
# Prints each link it removed (NUL-separated).
SETUP = r"""
set -e
staged=$1 ws=$2 vuser=$3 auser=$4 vdir=$5
rm -rf /tests /logs/verifier
mkdir -p /logs/verifier /logs/agent
cp -R "$staged" /tests
chmod -R go-w /tests
chmod +x /tests/test.sh
chmod 0755 /logs/verifier
if [ -n "$vuser" ]; then chown "$vuser" /logs/verifier; fi
find "$ws" -type l -exec sh -c '
  vdir=$1; shift
  for link; do
    t=$(readlink -f -- "$link" 2>/dev/null) || t=
    bad=
    if [ -z "$t" ] || [ "$t" = / ]; then bad=1; fi
    for p in /tests /logs /solution "$vdir"; do
      case "$t" in "$p"|"$p"/*) bad=1 ;; esac
      case "$p" in "$t"/*) bad=1 ;; esac
    done
    if [ -n "$bad" ]; then rm -f -- "$link"; printf "%s\0" "$link"; fi
  done' sh "$vdir" {} +
if [ -n "$auser" ]; then chown -hR "$auser" "$ws"; fi
"""
RUN = f"exec {TESTS}/test.sh > {LOGS}/test-stdout.txt 2>&1"
# Kill every process but init, the sandbox's agent (this shell's parent), this shell and the
# session $1 (the image's ENTRYPOINT and its services: forge.sandboxes.task_services).
KILL = r"""
spare=$1
for d in /proc/[0-9]*; do
  p=${d#/proc/}
  case "$p" in 1|$$|$PPID) continue ;; esac
  if [ -n "$spare" ]; then
    s=$(cat "$d/stat" 2>/dev/null) || continue
    s=${s##*) }; set -- $s
    [ "$4" = "$spare" ] && continue
  fi
  kill -9 "$p" 2>/dev/null || true
done
"""
READ = 'test -f "$1" && test ! -L "$1" && cat -- "$1"'
OUTPUTS = ("test-stdout.txt", "ctrf.json")  # kept with the episode when the tests wrote them
OUTPUT_CHARS = 20_000  # the last characters of each


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
        except RecursionError:
            return None, "reward.json is nested too deeply to read"
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


def _named(json_text: str | None, reward: float) -> dict[str, float]:
    """The named rewards a run wrote (``reward.json``'s mapping; else ``reward``), as Harbor's
    metrics average them per name."""
    data = json.loads(json_text) if json_text is not None else None
    return {k: float(v) for k, v in data.items()} if isinstance(data, dict) else {"reward": reward}


def abnormal_end(result: ExecResult, timeout_s: float) -> str | None:
    """Why a test run did not end normally (timed out, killed by a signal), else None."""
    if result.timed_out:
        return f"test.sh timed out after {timeout_s:g}s"
    if result.exit_code < 0:
        return f"test.sh was killed by signal {-result.exit_code}"
    return None


class HarborTests(VerifierModel):
    """``tests/test.sh`` of a Harbor task (loaded by :mod:`tasks.harbor`); see the module
    docstring."""

    kind: ClassVar[str] = "harbor_tests"
    runs_commands: ClassVar[bool] = True
    tests: str = Field(description="Host path of the task's tests/ folder (with test.sh).")
    timeout_s: float = Field(default=600.0, gt=0, description="Most seconds test.sh may run.")
    env: dict[str, str] = Field(default_factory=dict, description="test.sh's extra environment.")
    user: str | None = Field(
        default=None,
        description="Who test.sh runs as (task.toml's verifier.user: a name or UID[:GID]); "
        "None: root.",
    )
    agent_user: str | None = Field(
        default=None,
        description="Who owns the workdir copy the tests see (task.toml's agent.user).",
    )
    in_place: bool = Field(
        default=True,
        description="Run in the agent's own container once its processes are gone (Harbor's "
        "mode); False: sealed, in a fresh container with a copy of the agent's workdir and "
        "OpenForge's interpreter settings (the module docstring says what each guarantees).",
    )
    runs_agent_code: bool = Field(
        default=True,
        description="The tests run code the agent wrote (Harbor's model): what that code does "
        "can forge the reward, so training refuses the task (docs/harbor.md).",
    )

    @field_validator("tests")
    @classmethod
    def _has_test_sh(cls, v: str) -> str:
        if not (Path(v) / "test.sh").is_file():
            raise ValueError(f"no test.sh in {v}")
        return v

    def verify(self, sandbox: Sandbox, final_answer: str | None) -> Verdict:
        spare = str(getattr(sandbox, "service_session", None) or "")  # the task's services
        kill = ["sh", "-c", KILL, "kill", spare]
        _exec(sandbox, kill, 60.0, INTERPRETER_ENV)  # the agent's leftovers
        vdir = verifier_dir(sandbox)
        staged = f"{vdir}/tests"
        sandbox.put_archive(staged, tests_tar(Path(self.tests)))
        args = [staged, sandbox.workspace, self.user or "", self.agent_user or "", vdir]
        ready = _exec(sandbox, ["sh", "-c", SETUP, "setup", *args], 120.0, INTERPRETER_ENV)
        if ready.exit_code != 0:  # the verifier's own sandbox failed: not the agent's doing
            raise RuntimeError(f"placing the tests failed: {ready.stderr.strip()}")
        removed = [name for name in ready.stdout.split("\0") if name]
        env = dict(self.env) if self.in_place else {**INTERPRETER_ENV, **self.env}
        result = _exec(sandbox, ["sh", "-c", RUN], self.timeout_s, env, self.user or "root")
        _exec(sandbox, kill, 60.0, INTERPRETER_ENV)
        outputs = {name: _read(sandbox, f"{LOGS}/{name}") for name in OUTPUTS}
        kept = {name: _tail(text, OUTPUT_CHARS) for name, text in outputs.items() if text}
        links = f"; removed links to the verifier's files: {clip(', '.join(removed))}"
        note = links if removed else ""
        shown = _tail(outputs["test-stdout.txt"] or "")
        why = abnormal_end(result, self.timeout_s)
        if why is not None:
            detail = f"{why}, whatever its reward files say{note}; output: {shown}"
            return Verdict(0.0, detail, kept)
        read = {name: _read(sandbox, f"{LOGS}/{name}") for name in ("reward.json", "reward.txt")}
        reward, what = parse_reward(read["reward.json"], read["reward.txt"])
        if reward is None:
            detail = f"test.sh exited {result.exit_code}: {what}{note}; output: {shown}"
            return Verdict(0.0, detail, kept)
        kept["rewards"] = json.dumps(_named(read["reward.json"], reward), sort_keys=True)
        return Verdict(reward, f"test.sh exited {result.exit_code}: {what}{note}", kept)


def _exec(
    sandbox: Sandbox, cmd: list[str], timeout_s: float, env: dict[str, str], user: str = "root"
) -> ExecResult:
    """``cmd`` as ``user`` in a container sandbox (its agent switches users)."""
    return sandbox.exec(cmd, timeout_s, env, user=user)  # type: ignore[call-arg]


def _read(sandbox: Sandbox, path: str) -> str | None:
    """A regular file's text from anywhere in the sandbox (``get_file`` reaches only its
    workspace and home); None when it is absent, a link or not a regular file."""
    r = _exec(sandbox, ["sh", "-c", READ, "read", path], 30.0, INTERPRETER_ENV)
    return r.stdout if r.exit_code == 0 else None


__all__ = ["HarborTests", "abnormal_end", "parse_reward", "tests_tar"]

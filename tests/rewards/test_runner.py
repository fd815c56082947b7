"""run_verifier: the agent's workspace is verified in fresh bubblewrap sandboxes (commands) or
read from its copy (file checks)."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from forge.sandboxes.base import SandboxSpec
from forge.sandboxes.bwrap import bwrap_works
from forge.sandboxes.local import LocalSandbox
from rewards.runner import run_verifier
from tasks.schema import Task

pytestmark = pytest.mark.skipif(not bwrap_works(), reason="bubblewrap unavailable")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "boxes"


@pytest.fixture
def made(root: Path) -> Iterator[list[LocalSandbox]]:
    boxes: list[LocalSandbox] = []
    yield boxes
    for b in boxes:
        b.destroy()


@pytest.fixture
def new_sandbox(root: Path, made: list[LocalSandbox]) -> Callable[[], LocalSandbox]:
    def make() -> LocalSandbox:
        box = LocalSandbox(root=root, isolation="required")
        made.append(box)
        return box

    return make


def agent(new_sandbox: Callable[[], LocalSandbox], task: Task, script: str) -> LocalSandbox:
    """An agent's sandbox after the agent ran ``script`` in its seeded workspace."""
    box = new_sandbox()
    box.create(SandboxSpec(labels={"run": "runner", "attempt": "agent"}))
    for path, text in task.files.items():
        box.put_file(path, text)
    done = box.exec(["sh", "-c", script], 30)
    assert done.exit_code == 0, done.stderr
    return box


def task(verifier: object, files: dict[str, str] | None = None) -> Task:
    return Task(id="t", instruction="do it", files=files or {}, verifier=verifier)


CHECK = textwrap.dedent(
    """\
    import os, sys
    pristine = open(os.path.join(os.environ['VERIFIER_DIR'], 'task', 'in.txt')).read()
    sys.exit(0 if open('out.txt').read() == pristine.upper() else 1)
    """
)


OWN = {"files": {"check.py": CHECK}}


def test_verifier_files_and_pristine_inputs_decide_not_the_agents_edits(new_sandbox) -> None:
    t = task(
        {
            "type": "command",
            "cmd": 'python3 "$VERIFIER_DIR/check.py"',
            "files": {"check.py": CHECK},
        },
        files={"in.txt": "hello\n"},
    )
    honest = agent(new_sandbox, t, "tr a-z A-Z < in.txt > out.txt")
    assert run_verifier(t, honest, None, new_sandbox).reward == 1.0
    # rewriting the input to match a made-up output fools a check that reads the workspace
    forged = agent(new_sandbox, t, "echo x > in.txt; echo X > out.txt")
    assert run_verifier(t, forged, None, new_sandbox).reward == 0.0
    # the verifier's own files were never in the agent's sandbox
    spy = agent(new_sandbox, t, "test ! -e check.py && test ! -e $HOME/verifier")
    assert run_verifier(t, spy, None, new_sandbox).reward == 0.0


ENV_CHECK = textwrap.dedent(
    """\
    python3 - <<'PY'
    import os, site, sys
    cwd = os.getcwd()
    assert cwd == '/workspace', cwd
    assert '' not in sys.path and cwd not in sys.path, sys.path
    assert not site.ENABLE_USER_SITE
    assert os.listdir(os.environ['HOME']) in ([], ['verifier']), os.listdir(os.environ['HOME'])
    assert all(p.startswith(('/usr', '/bin', '/sbin', '/root/.pyenv'))
               for p in os.environ['PATH'].split(':')), os.environ['PATH']
    for var in ('PYTHONPATH', 'PYTHONSTARTUP', 'BASH_ENV', 'ENV', 'PYTHONHOME'):
        assert var not in os.environ, var
    import json
    assert json.__file__.startswith('/usr/lib/'), json.__file__
    PY
    """
)


def test_verifier_runs_clean_whatever_the_agent_planted(new_sandbox) -> None:
    t = task({"type": "command", "cmd": ENV_CHECK})
    plant = (
        "printf 'import os\\nos._exit(3)\\n' > json.py && cp json.py sitecustomize.py && "
        "mkdir -p ~/.local/lib/python3.11/site-packages && "
        "cp json.py ~/.local/lib/python3.11/site-packages/usercustomize.py && "
        "echo 'exit 0' > ~/.bashrc"
    )
    box = agent(new_sandbox, t, plant)
    verdict = run_verifier(t, box, None, new_sandbox)
    assert verdict.reward == 1.0, verdict.detail


def test_agent_sandbox_is_gone_before_verification(new_sandbox, made) -> None:
    t = task([{"type": "file_exists", "path": "a"}, {"type": "command", "cmd": "test -f a"}])
    box = agent(new_sandbox, t, "touch a")
    agent_dir = box.dir
    seen: list[bool] = []

    def make() -> LocalSandbox:
        seen.append(agent_dir is not None and agent_dir.exists())
        return new_sandbox()

    assert run_verifier(t, box, None, make).reward == 1.0
    assert seen == [False]  # one fresh sandbox; the agent's was deleted before it was made
    assert all(b.dir is not None and not b.dir.exists() for b in made)  # all destroyed


def test_a_command_cannot_change_what_the_next_verifier_sees(new_sandbox) -> None:
    t = task(
        [
            {"type": "command", "cmd": "rm -f out.txt && echo forged > other.txt"},
            {"type": "file_equals", "path": "out.txt", "content": "right"},
            {"type": "file_absent", "path": "other.txt"},
        ]
    )
    box = agent(new_sandbox, t, "echo right > out.txt")
    verdict = run_verifier(t, box, None, new_sandbox)
    assert verdict.reward == 1.0, verdict.detail


def test_answer_only_tasks_need_no_sandbox(new_sandbox) -> None:
    t = task({"type": "answer_equals", "value": "42"})
    box = agent(new_sandbox, t, "true")

    def refuse() -> LocalSandbox:
        raise AssertionError("no sandbox needed")

    assert run_verifier(t, box, "42", refuse).reward == 1.0
    assert box.dir is not None and not box.dir.exists()


def test_file_checks_read_the_copy_without_a_sandbox(new_sandbox) -> None:
    """Only commands get a verifier sandbox; file checks read the copy taken before the agent's
    sandbox was destroyed, links followed inside the workspace only."""
    t = task(
        [
            {"type": "file_equals", "path": "out.txt", "content": "right"},
            {"type": "json_field", "path": "d/r.json", "field": "a", "equals": 1},
            {"type": "file_absent", "path": "gone"},
            {"type": "file_absent", "path": "passwd"},  # a link out reads as absent
        ]
    )
    script = "mkdir d && echo right > out.txt && echo '{\"a\": 1}' > d/r.json"
    box = agent(new_sandbox, t, script + " && ln -s /etc/passwd passwd")

    def refuse() -> LocalSandbox:
        raise AssertionError("no sandbox needed")

    verdict = run_verifier(t, box, None, refuse)
    assert verdict.reward == 1.0, verdict.detail
    assert box.dir is not None and not box.dir.exists()
    wrong = agent(new_sandbox, t, "echo wrong > out.txt && touch gone")
    assert run_verifier(t, wrong, None, refuse).reward == 0.0


def test_huge_workspace_is_a_wrong_answer(new_sandbox) -> None:
    t = task({"type": "file_exists", "path": "a"})
    box = agent(new_sandbox, t, "touch a && truncate -s 1T big")
    verdict = run_verifier(t, box, None, new_sandbox)
    assert verdict.reward == 0.0 and "too large" in verdict.detail


def test_links_and_fifos_in_the_workspace(new_sandbox) -> None:
    t = task(
        [
            {"type": "file_regex", "path": "a", "pattern": "root"},
            {"type": "file_exists", "path": "fifo"},
            {"type": "command", "cmd": "cat fifo2", "timeout_s": 10},
        ]
    )
    box = agent(new_sandbox, t, "ln -s /etc/passwd a && mkfifo fifo fifo2")
    verdict = run_verifier(t, box, None, new_sandbox)
    assert verdict.reward == 0.0
    parts = verdict.detail.split("; [")
    assert "outside the sandbox" in parts[0]  # the host never followed the link
    assert "does not exist" in parts[1] and "exited 1" in parts[2]  # FIFOs are not copied


def test_unisolated_sandboxes_verify_the_same_way(tmp_path: Path) -> None:
    """isolation=none (only when asked): the verifier still gets a fresh copy, a fresh home,
    $VERIFIER_DIR at its host path and an interpreter that ignores the agent's json.py."""
    t = task(
        {"type": "command", "cmd": 'python3 "$VERIFIER_DIR/check.py"', **OWN},
        files={"in.txt": "hello\n"},
    )

    def make() -> LocalSandbox:
        return LocalSandbox(root=tmp_path, isolation="none")

    box = make()
    box.create(SandboxSpec(labels={"run": "none"}))
    box.put_file("in.txt", "hello\n")
    box.put_file("json.py", "import os\nos._exit(0)\n")
    done = box.exec(["sh", "-c", "tr a-z A-Z < in.txt > out.txt"], 30)
    assert done.exit_code == 0, done.stderr
    assert run_verifier(t, box, None, make).reward == 1.0
    box = make()
    box.create(SandboxSpec(labels={"run": "none"}))
    box.put_file("json.py", "import os\nos._exit(3)\n")
    shadowed = task({"type": "command", "cmd": "python3 -c 'import json'"})
    assert run_verifier(shadowed, box, None, make).reward == 1.0  # 3 if the shadow ran
    assert os.listdir(tmp_path) == []


def test_links_never_reach_the_verifiers_own_files(new_sandbox) -> None:
    """A link the agent leaves to where the verifier's files once were (a fixed
    $HOME/verifier) scored 1.0: the verifier read its own expected file through the agent's
    path. Now the folder has a random name per verifier sandbox, and a workspace link into the
    home reads as absent whatever it names."""
    t = task(
        [
            {"type": "file_equals", "path": "out.txt", "content": "secret"},
            {"type": "command", "cmd": 'cmp -s out.txt "$VERIFIER_DIR/task/in.txt"'},
        ],
        files={"in.txt": "secret"},
    )
    cheat = "rm in.txt && ln -s /home/agent/verifier/task/in.txt out.txt"
    verdict = run_verifier(t, agent(new_sandbox, t, cheat), None, new_sandbox)
    assert verdict.reward == 0.0, verdict.detail
    honest = agent(new_sandbox, t, "cp in.txt out.txt")
    assert run_verifier(t, honest, None, new_sandbox).reward == 1.0


def test_a_workspace_link_into_the_home_reads_as_absent(new_sandbox) -> None:
    from rewards.common import read_text

    box = new_sandbox()
    box.create(SandboxSpec(labels={"run": "runner"}))
    box.put_file("/home/agent/own.txt", "the verifier's")
    done = box.exec(["sh", "-c", "ln -s /home/agent/own.txt a && ln -s ../home/agent b"], 30)
    assert done.exit_code == 0, done.stderr
    for path in ("a", "b/own.txt", "/workspace/a"):
        text, why = read_text(box, path)
        assert text is None and "link out of /workspace" in why, (path, why)
    assert read_text(box, "/home/agent/own.txt")[0] == "the verifier's"  # named directly


def test_a_workspace_1200_deep_is_a_wrong_answer_and_leaves_nothing(new_sandbox, root) -> None:
    """It was verifier_error (RecursionError in the archive walk) and left the sandbox folder,
    which then crashed every later run of that name at start."""
    from tests.forge.sandboxes.test_orphans import deep

    t = task({"type": "file_exists", "path": "a"})
    box = agent(new_sandbox, t, "touch a")
    assert box.dir is not None
    deep(box.host_workspace / "tree", 1200)
    verdict = run_verifier(t, box, None, new_sandbox)
    assert verdict.reward == 0.0 and "levels" in verdict.detail, verdict.detail
    assert os.listdir(root) == []


def test_the_transcript_is_built_only_for_a_verifier_that_reads_it(new_sandbox) -> None:
    built: list[int] = []

    def transcript() -> dict[str, object]:
        built.append(1)
        return {"messages": [{"role": "assistant", "content": "done it"}], "tool_calls": []}

    files = task({"type": "file_exists", "path": "a"})
    assert run_verifier(files, agent(new_sandbox, files, "touch a"), None, new_sandbox,
                        transcript=transcript).reward == 1.0  # fmt: skip
    assert built == []
    both = task([{"type": "file_exists", "path": "a"}, {"type": "transcript", "said": "done"}])
    assert run_verifier(both, agent(new_sandbox, both, "touch a"), None, new_sandbox,
                        transcript=transcript).reward == 1.0  # fmt: skip
    assert built == [1]

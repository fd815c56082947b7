"""sandbox.isolation: ``required`` never falls back to an unisolated process; ``none`` runs one
only when asked, and says so."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from forge.config import SandboxConfig
from forge.sandboxes import bwrap
from forge.sandboxes.bwrap import IsolationUnavailable, bwrap_works
from forge.sandboxes.local import LocalSandbox
from forge.sandboxes.registry import check_isolation

REPO = str(Path(__file__).resolve().parents[3])

WITHOUT_BWRAP = """
import json, logging
logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
from forge.config import SandboxConfig
from forge.sandboxes.base import SandboxSpec
from forge.sandboxes.bwrap import IsolationUnavailable
from forge.sandboxes.local import LocalSandbox
from forge.sandboxes.registry import check_isolation
out = {}
def attempt(name, fn):
    try:
        fn()
        out[name] = "ok"
    except IsolationUnavailable as e:
        out[name] = str(e)
attempt("check", lambda: check_isolation(SandboxConfig()))
attempt("sandbox", lambda: LocalSandbox(root=ROOT, isolation="required"))
check_isolation(SandboxConfig(isolation="none"))
sb = LocalSandbox(root=ROOT, isolation="none")
sb.create(SandboxSpec(labels={"run": "nobwrap"}))
r = sb.exec(["sh", "-c", "echo ran in $PWD"], 20)
out["none"] = [r.exit_code, r.stdout.strip(), sb.isolated, str(sb.host_workspace)]
sb.destroy()
print(json.dumps(out))
"""


def test_without_bwrap_required_stops_with_install_hint_and_none_runs(tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"  # PATH without bwrap (nor anything else)
    empty.mkdir()
    code = f"ROOT = {str(tmp_path / 'sb')!r}\n" + textwrap.dedent(WITHOUT_BWRAP)
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={"PATH": str(empty), "PYTHONPATH": REPO},
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    for where in ("check", "sandbox"):
        msg = out[where]
        assert "sandbox.isolation=required" in msg and "not installed" in msg, msg
        assert "apt-get install bubblewrap" in msg and "sandbox.isolation=none" in msg, msg
    exit_code, stdout, isolated, workspace = out["none"]
    assert (exit_code, stdout, isolated) == (0, f"ran in {workspace}", False)
    # the unisolated runs said so, naming the shared network
    assert "sandbox.isolation=none" in done.stderr and "network" in done.stderr, done.stderr


def test_broken_bwrap_names_the_problem(monkeypatch) -> None:
    monkeypatch.setattr(bwrap, "_probe_result", "bwrap is installed but cannot create a sandbox")
    with pytest.raises(IsolationUnavailable, match=r"cannot create a sandbox.*apt-get install"):
        check_isolation(SandboxConfig(isolation="required"))
    with pytest.raises(IsolationUnavailable):
        LocalSandbox(isolation="required")
    check_isolation(SandboxConfig(isolation="none"))  # asked for: no error
    assert not LocalSandbox(isolation="none").isolated


@pytest.mark.skipif(not bwrap_works(), reason="bubblewrap missing or cannot create namespaces")
def test_required_with_working_bwrap_isolates() -> None:
    check_isolation(SandboxConfig())
    assert LocalSandbox().isolated


@pytest.mark.parametrize("value", ["auto", "bwrap", "", None])
def test_unknown_isolation_values_are_refused(value: object) -> None:
    with pytest.raises(ValueError, match="isolation must be one of"):
        LocalSandbox(isolation=value)  # type: ignore[arg-type]


def test_forge_eval_stops_before_starting_anything(monkeypatch, tmp_path: Path, capsys) -> None:
    from forge import evaluate
    from forge.config import RunConfig

    monkeypatch.setattr(bwrap, "_probe_result", "bubblewrap (bwrap) is not installed")
    monkeypatch.setattr(evaluate, "init_ray", lambda *a, **k: pytest.fail("Ray was started"))
    assert evaluate.main(RunConfig(), ["react"], 1, tmp_path) == 2
    err = capsys.readouterr().err
    assert "forge eval: sandbox.isolation=required" in err and "apt-get install bubblewrap" in err

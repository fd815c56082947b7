"""The end of a run: the final checkpoint and shutdown always run, and never hide the error
that ended the run."""

from __future__ import annotations

from typing import Any

import pytest

from forge.driver import finish


class EndingRun:
    """The two things ``finish`` asks of a Run, with a checkpoint that fails."""

    def __init__(self) -> None:
        self.step = 3
        self.shut = False

    def checkpoint(self) -> str:
        raise OSError("disk full")

    def shutdown(self) -> dict[str, Any]:
        self.shut = True
        return {"attempts_ok": 1}


def test_failed_checkpoint_does_not_hide_the_run_error(capsys) -> None:
    run = EndingRun()
    assert finish(run, code=1) == {"attempts_ok": 1}  # type: ignore[arg-type]
    assert run.shut  # shutdown ran after the failed checkpoint
    assert "final checkpoint failed: OSError: disk full" in capsys.readouterr().err


def test_failed_checkpoint_fails_a_run_that_ended_well() -> None:
    run = EndingRun()
    with pytest.raises(OSError, match="disk full"):
        finish(run, code=0)  # type: ignore[arg-type]
    assert run.shut

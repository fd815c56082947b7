"""The calm console of ``forge run``: OpenForge's warnings and errors on the console, every
other record (the held ones from before the run's directory was known included) in forge.log.
The Ray and Serve side is checked end to end by tests/forge/test_quickstart.py."""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from forge.observe.console import LOG_NAME, attach_run_log, calm, quiet_libraries, run_log_path


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    lib = logging.getLogger("somelib")
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
        if h not in handlers:
            h.close()
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)
    lib.handlers.clear()
    lib.propagate = True
    logging.captureWarnings(False)


def test_own_warnings_on_the_console_everything_else_in_the_run_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], restore_logging: None
) -> None:
    lib = logging.getLogger("somelib")
    lib.addHandler(logging.StreamHandler(sys.stderr))  # as Ray and Serve do for theirs
    lib.propagate = False
    calm()
    lib.info("Started <router> before the run dir was known")
    logging.getLogger("forge.driver").info("an own info line")
    logging.getLogger("actors.scheduler").warning("an own warning")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("old API", DeprecationWarning, stacklevel=1)
    assert run_log_path() is None

    path = attach_run_log(tmp_path / "run")
    assert path == tmp_path / "run" / LOG_NAME and run_log_path() == path
    lib.error("a library's error after it")

    err = capsys.readouterr().err
    assert err.splitlines() == ["[forge] WARNING actors.scheduler: an own warning"], err
    log = path.read_text()
    for line in (
        "somelib: Started <router> before the run dir was known",
        "forge.driver: an own info line",
        "actors.scheduler: an own warning",
        "py.warnings:",
        "somelib: a library's error after it",
    ):
        assert line in log, log
    assert log.index("Started <router>") < log.index("a library's error")  # held ones first


def test_verbose_leaves_the_console_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], restore_logging: None
) -> None:
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, force=True)  # what -v sets up
    lib = logging.getLogger("somelib")
    lib.addHandler(logging.StreamHandler(sys.stderr))
    quiet_libraries()
    assert attach_run_log(tmp_path / "run") is None
    assert not (tmp_path / "run" / LOG_NAME).exists() and lib.handlers

"""A calm terminal for ``forge run``: OpenForge's own progress lines, warnings and errors on the
console; Ray's, Serve's and the libraries' log lines, the Ray workers' output and Python's
warnings in the run's log file (``RUN_DIR/forge.log``). ``forge -v run`` puts everything back
on the console, as a plain ``logging`` set-up at DEBUG would.

Records logged before the run's directory is known are held in memory and written to the file
when it is attached, so nothing logged at start-up is lost."""

from __future__ import annotations

import logging
import logging.handlers
import sys
from pathlib import Path
from typing import Any

OWN = ("forge", "actors", "serve", "rewards", "tasks")  # OpenForge's packages
LOG_NAME = "forge.log"
WORKERS = "ray.workers"  # the logger the Ray workers' output is written through
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

__all__ = ["LOG_NAME", "attach_run_log", "calm", "quiet_libraries", "run_log_path"]


class _Own(logging.Filter):
    """OpenForge's own records at WARNING and above: what the console shows."""

    def filter(self, record: logging.LogRecord) -> bool:
        own = record.name.split(".", 1)[0] in OWN
        return own and record.levelno >= logging.WARNING


class _Console(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when the record comes (pytest's capture included)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    def emit(self, record: logging.LogRecord) -> None:
        self.setStream(sys.stderr)
        super().emit(record)


def calm() -> None:
    """Console for OpenForge's warnings and errors only; every other record waits in memory
    for :func:`attach_run_log`. Python's warnings become log records (``py.warnings``)."""
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.setLevel(logging.INFO)
    console = _Console()
    console.addFilter(_Own())
    console.setFormatter(logging.Formatter("[forge] %(levelname)s %(name)s: %(message)s"))
    root.addHandler(console)
    # Held until the run's log file is known (at most 10,000 records; then the oldest go first).
    root.addHandler(logging.handlers.MemoryHandler(10_000, flushLevel=logging.CRITICAL + 1))
    logging.captureWarnings(True)
    quiet_libraries()


def run_log_path() -> Path | None:
    """The log file :func:`attach_run_log` opened, if any."""
    for h in logging.getLogger().handlers:
        if isinstance(h, logging.FileHandler):
            return Path(h.baseFilename)
    return None


def attach_run_log(run_dir: Path) -> Path | None:
    """Write every record (the held ones first) to ``run_dir/forge.log``; ``None`` when the
    console is not calm (``-v``: everything already goes to the console)."""
    root = logging.getLogger()
    held = [h for h in root.handlers if isinstance(h, logging.handlers.MemoryHandler)]
    if not held:
        return run_log_path()
    path = run_dir / LOG_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    file = logging.FileHandler(path, encoding="utf-8")
    file.setFormatter(logging.Formatter(FORMAT))
    for h in held:
        h.setTarget(file)
        h.close()  # flushes the held records into the file
        root.removeHandler(h)
    root.addHandler(file)
    quiet_libraries()  # those imported since calm()
    return path


def quiet_libraries() -> None:
    """Send the libraries' own console handlers (Ray's, Serve's: each adds one to its logger
    and stops propagation) to the root logger instead; and, once Ray is connected, the
    workers' output too. Called again after Ray and Serve start, since each sets up its
    loggers then. A no-op under ``-v``."""
    if run_log_path() is None and not _held():
        return
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if not isinstance(logger, logging.Logger) or name.split(".", 1)[0] in OWN:
            continue
        for h in list(logger.handlers):
            if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler):
                logger.removeHandler(h)
        logger.propagate = True
    _workers_to_log()


def _held() -> bool:
    return any(isinstance(h, logging.handlers.MemoryHandler) for h in logging.getLogger().handlers)


def _workers_to_log() -> None:
    """Ray prints each worker's stdout and stderr on the driver's; write them through the
    ``ray.workers`` logger instead (so, to the run's log file). Uses Ray's stream dispatcher,
    which is not a public API: if it is missing, the workers' lines stay on the console."""
    try:
        from ray._private import worker as ray_worker
        from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher
    except ImportError:
        return
    if not getattr(ray_worker.global_worker, "connected", False):
        return
    log = logging.getLogger(WORKERS)

    def to_log(data: dict[str, Any]) -> None:
        who = data.get("actor_name") or data.get("task_name") or ""
        prefix = f"({who} pid={data.get('pid')}) "
        level = logging.WARNING if data.get("is_err") else logging.INFO
        for line in data.get("lines", []):
            log.log(level, "%s%s", prefix, line)

    dispatcher.remove_handler("ray_print_logs")
    dispatcher.remove_handler("forge_run_log")
    dispatcher.add_handler("forge_run_log", to_log)

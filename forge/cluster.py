"""Connect to Ray: join a running cluster when there is one, else start a local one on loopback."""

from __future__ import annotations

import logging
import os
import socket
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def init_ray(address: str | None = None, num_cpus: int | None = None, **kwargs: Any) -> str:
    """Join ``address`` (or ``RAY_ADDRESS``, or a cluster started with ``ray start``); else
    start a local cluster bound to 127.0.0.1 (always, with ``address="local"``).
    Returns ``"joined"`` or ``"local"``."""
    import ray  # after forge/__init__.py set the loopback-only environment

    if ray.is_initialized():
        return "joined"
    address = address or os.environ.get("RAY_ADDRESS")
    if not address and not _running_cluster():
        address = "local"
    if address != "local":
        try:
            ray.init(address=address or "auto", **kwargs)
            log.info("joined the Ray cluster at %s", address or "auto")
            return "joined"
        except ConnectionError:
            if address:
                raise
    ray.init(num_cpus=num_cpus, _node_ip_address="127.0.0.1", **kwargs)
    log.info("started a local Ray cluster on 127.0.0.1")
    return "local"


def _running_cluster() -> bool:
    """Whether the cluster ``ray start`` recorded on this machine answers. Ray's ``auto`` would
    spend a minute retrying a dead one whose address file was left behind."""
    tmp = os.environ.get("RAY_TMPDIR") or os.path.join(tempfile.gettempdir(), "ray")
    try:
        host, port = Path(tmp, "ray_current_cluster").read_text().strip().rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except (OSError, ValueError):
        return False

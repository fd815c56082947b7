"""Connect to Ray: join a running cluster when there is one, else start a local one on loopback."""

from __future__ import annotations

import logging
import os
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

"""Warm sandbox pools (``sandbox.warm_pool``): agent-phase sandboxes made ahead, so an attempt's
sandbox start is a handover instead of a container's or pod's creation (0.2-0.4 s on docker; a
pod's scheduling, image pull and agent start on kubernetes).

A pool lives in one process (a HarnessPod's) and holds sandboxes of one kind: everything fixed
when a sandbox is made (the backend and its settings, the harness and so the image, read-only
mounts, the proxy's and egress proxy's sockets, the proxy port, the labels but the attempt's:
run, HarnessPod, phase network). The pool is made by the first attempt of its kind (which
creates its own sandbox meanwhile; :func:`prewarm` makes it ahead) and refilled to ``size`` by
its own threads. A handover pops one ready sandbox under the pool's lock, so no sandbox is ever
handed out twice; it checks the agent answers, then the backend gives it the attempt
(:func:`hand_over`): its deadline counting from the handover, its environment, its identity
(kubernetes patches the pod's labels in the background; a docker container's cannot change, so
its host folder's ``attempt.json`` records it). Only the agent phase is served (a verifier's
sandbox, or a task's own image, is created as before), and a sandbox serves one attempt: it is
destroyed after it, never returned.

Leaks: a warm sandbox carries the run's and HarnessPod's labels, ``warm`` (the pool's id and
its number), its creator's pid (docker) or the HarnessPod's heartbeat Lease (kubernetes), and a
deadline label of its creation + ``max_age_s`` + ``max_attempt_s``, so the reapers
(``reap_containers``, ``reap_pods``) find it after a crash like any other; a clean exit
destroys what the pools hold (:func:`shutdown`, at exit too). A failed warm create is logged
and retried later with a backoff, never raised: the attempt then creates its own.
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import logging
import secrets
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from forge.sandboxes.base import SandboxSpec

if TYPE_CHECKING:  # the config sits above the parts: read here as the backends hand it over
    from forge.config.sandbox import SandboxConfig, WarmPoolConfig

log = logging.getLogger(__name__)
ATTEMPT_LABELS = ("episode", "attempt")  # what the attempt, not the pool, fixes
WARM = "warm"  # the label of a warm sandbox: "<pool id>-<n>"
BACKOFF_S = (1.0, 60.0)  # first and longest wait after a failed warm create
HEALTH_TIMEOUT_S = 2.0  # a warm sandbox's agent must answer within this at handover
CREATE_SLACK_S = 10.0  # beyond a backend's start timeout: what a create does besides

_pools: dict[tuple[Any, ...], WarmPool] = {}
_full: set[tuple[Any, ...]] = set()  # kinds refused a pool (max_pools), logged once
_lock = threading.Lock()
_exit_hook = False


def poolable(cfg: WarmPoolConfig, spec: SandboxSpec) -> bool:
    """Whether ``spec`` may be served warm: pools on, the agent phase (not a verifier's),
    the images' own (not a task's own image), no longer than a warm sandbox's time, and not a
    pool's own sandbox."""
    return (
        cfg.size > 0
        and spec.labels.get("role", "harness") == "harness"
        and WARM not in spec.labels
        and not spec.environment
        and spec.deadline_s <= cfg.max_attempt_s
    )


def spec_key(spec: SandboxSpec) -> tuple[Any, ...]:
    """What of ``spec`` a warm sandbox is made with (all but the attempt's labels, its
    deadline and its environment, which the handover applies)."""
    labels = tuple(sorted((k, str(v)) for k, v in spec.labels.items() if k not in ATTEMPT_LABELS))
    mounts = tuple(sorted(spec.ro_mounts.items()))
    sockets = (spec.proxy_socket, spec.proxy_port, spec.proxy_tcp, spec.egress_socket)
    return (labels, mounts, *sockets)


class WarmPool:
    """Up to ``cfg.size`` ready sandboxes made by ``make()`` (a new, not yet created sandbox
    of the backend) with ``spec``'s fixed parts; see the module docstring."""

    def __init__(
        self, key: tuple[Any, ...], make: Callable[[], Any], spec: SandboxSpec, cfg: WarmPoolConfig
    ) -> None:
        self.key, self.make, self.cfg = key, make, cfg
        self.id = secrets.token_hex(4)
        fixed = {k: v for k, v in spec.labels.items() if k not in ATTEMPT_LABELS}
        self.template = dataclasses.replace(
            spec, labels=fixed, env={}, deadline_s=cfg.max_age_s + cfg.max_attempt_s
        )
        self.created = self.handed = self.missed = self.failed = self.expired = 0
        self._ready: collections.deque[tuple[float, Any]] = collections.deque()
        self._filling = 0
        self._count = 0
        self._fails = 0
        self._stopped = False
        self._cond = threading.Condition()
        self._threads = [
            threading.Thread(target=self._fill, name=f"forge-warm-{self.id}", daemon=True)
            for _ in range(min(cfg.size, cfg.fill_parallel))
        ]

    def __repr__(self) -> str:
        return f"WarmPool({self.id}, {self.ready()}/{self.cfg.size} ready)"

    def start(self) -> WarmPool:
        for t in self._threads:
            t.start()
        return self

    def ready(self) -> int:
        with self._cond:
            return len(self._ready)

    def ready_sandboxes(self) -> list[Any]:
        """The sandboxes ready now, oldest first (for tests and the bench)."""
        with self._cond:
            return [box for _, box in self._ready]

    def wait_full(self, timeout_s: float) -> bool:
        """Block until ``size`` sandboxes are ready and none is being made; False on timeout."""
        end = time.monotonic() + timeout_s
        with self._cond:
            while len(self._ready) < self.cfg.size or self._filling:
                left = end - time.monotonic()
                if left <= 0 or self._stopped:
                    return False
                self._cond.wait(left)
            return True

    def take(self) -> Any | None:
        """One ready sandbox, never handed to anyone else, whose agent answers; None when the
        pool has none (the caller creates its own)."""
        while True:
            with self._cond:
                stale = self._expire()
                box = self._ready.popleft()[1] if self._ready and not self._stopped else None
                self._cond.notify_all()  # a filler makes its replacement
                self.missed += box is None
            _destroy(stale)
            if box is None:
                return None
            try:
                box._state.agent.health(timeout_s=HEALTH_TIMEOUT_S)
            except Exception as e:  # died while it waited (OOM, removed by hand): the next one
                log.warning("warm sandbox %s does not answer (%s): destroyed", box.name, e)
                _destroy([box])
                continue
            with self._cond:
                self.handed += 1
            return box

    def close(self) -> None:
        """Stop refilling and destroy the ready sandboxes (one being made is destroyed by its
        filler when its create returns); idempotent."""
        with self._cond:
            self._stopped = True
            boxes = [box for _, box in self._ready]
            self._ready.clear()
            self._cond.notify_all()
        _destroy(boxes)

    def join(self, timeout_s: float) -> None:
        end = time.monotonic() + timeout_s
        for t in self._threads:
            if t.is_alive():
                t.join(max(0.0, end - time.monotonic()))

    # -- the fillers ------------------------------------------------------------------------

    def _expire(self) -> list[Any]:
        """Pop the ready sandboxes older than ``max_age_s`` (under the lock)."""
        limit = time.monotonic() - self.cfg.max_age_s
        stale = [box for made, box in self._ready if made < limit]
        if stale:  # parallel fillers append out of order: look at every one
            self._ready = collections.deque((m, b) for m, b in self._ready if m >= limit)
        self.expired += len(stale)
        return stale

    def _fill(self) -> None:
        """A filler thread: make a sandbox whenever the pool is short, drop the aged ones."""
        while True:
            n = 0
            with self._cond:
                stale = self._expire()
                stopped = self._stopped
                if not stopped and len(self._ready) + self._filling < self.cfg.size:
                    self._filling += 1
                    self._count += 1
                    n = self._count
                elif not stopped and not stale:  # full: sleep until asked or one ages
                    oldest = min((m for m, _ in self._ready), default=time.monotonic())
                    self._cond.wait(max(0.05, oldest + self.cfg.max_age_s - time.monotonic()))
            _destroy(stale)
            if stopped:
                return
            if n:
                self._fill_one(n)

    def _fill_one(self, n: int) -> None:
        made = time.monotonic()  # its age counts from before its create, as its deadline label
        box = self._create(n)
        with self._cond:
            self._filling -= 1
            if box is not None and not self._stopped:
                self._ready.append((made, box))
                box = None
            self._cond.notify_all()
            fails = self._fails
        _destroy([box] if box is not None else [])  # made after the pool closed
        if fails:  # back off before the next try; a closing pool ends it
            with self._cond:
                wait = min(BACKOFF_S[1], BACKOFF_S[0] * 2 ** (fails - 1))
                self._cond.wait_for(lambda: self._stopped, wait)

    def _create(self, n: int) -> Any | None:
        """A new warm sandbox, or None (logged) when its create failed."""
        spec = dataclasses.replace(
            self.template, labels={**self.template.labels, WARM: f"{self.id}-{n}"}
        )
        box = self.make()
        try:
            box.create(spec)
        except Exception as e:  # never fatal: the attempts create their own meanwhile
            with self._cond:
                self._fails += 1
                self.failed += 1
            log.warning("warm pool %s: creating a sandbox failed (%s: %s); retrying later",
                        self.id, type(e).__name__, e)  # fmt: skip
            return None
        with self._cond:
            self._fails = 0
            self.created += 1
        return box


def _destroy(boxes: list[Any]) -> None:
    for box in boxes:
        try:
            box.destroy()
        except Exception as e:  # the reapers get it by its labels
            log.warning("warm sandbox %s: destroy failed: %s", getattr(box, "name", box), e)


def pool_for(box: Any, spec: SandboxSpec, make: bool = True) -> WarmPool | None:
    """The pool serving sandboxes like ``box`` (a backend's new sandbox) for ``spec``: made and
    started when missing and ``make``; None when ``spec`` cannot be served warm or the process
    has ``max_pools`` already."""
    cfg: WarmPoolConfig = box.config.warm_pool
    if not poolable(cfg, spec):
        return None
    key = (type(box).__name__, *box.warm_key(), *spec_key(spec))
    global _exit_hook
    with _lock:
        pool = _pools.get(key)
        if pool is not None or not make:
            return pool
        if len(_pools) >= cfg.max_pools:
            if key not in _full:
                _full.add(key)
                log.info("sandbox.warm_pool: %d pools already (max_pools); sandboxes of "
                         "another kind are made per attempt", len(_pools))  # fmt: skip
            return None
        pool = _pools[key] = WarmPool(key, box.warm_factory(), spec, cfg)
        if not _exit_hook:
            atexit.register(shutdown)
            _exit_hook = True
    log.info("warm pool %s: %d %s sandboxes for %s", pool.id, cfg.size, type(box).__name__,
             dict(pool.template.labels))  # fmt: skip
    return pool.start()


def prewarm(box: Any, spec: SandboxSpec) -> WarmPool | None:
    """Start filling the pool for attempts like ``spec`` before the first one comes (a
    HarnessPod at its start); ``box`` is a new sandbox of the backend (``sandbox_for``)."""
    return pool_for(box, spec)


def take(box: Any, spec: SandboxSpec) -> Any | None:
    """A ready warm sandbox for ``spec``'s attempt, popped for it alone, or None: pools off, a
    spec they do not serve, or none ready (the pool is made or refills meanwhile)."""
    pool = pool_for(box, spec)
    return pool.take() if pool is not None else None


def hand_over(box: Any, warm: Any, spec: SandboxSpec) -> None:
    """Move ``warm``'s resources into ``box`` (the backend's new sandbox that the attempt
    holds) for ``spec``'s attempt: ``box``'s finalizer cleans them up from now on, ``warm``'s
    never will; its deadline counts from now, its commands get ``spec.env``. The backend adds
    what is its own (identity records, addresses)."""
    warm._finalizer.detach()
    for f in dataclasses.fields(warm._state):
        setattr(box._state, f.name, getattr(warm._state, f.name))
    box.spec, box.image, box.name = spec, warm.image, warm.name
    box.deadline = time.time() + spec.deadline_s
    box._state.agent.base_env.update(spec.env)


def pools() -> list[WarmPool]:
    with _lock:
        return list(_pools.values())


def longest_create_s(config: SandboxConfig) -> float:
    """How long a warm sandbox being made may still take (its backend's start timeout, and
    slack): what a closing HarnessPod waits for, so that its filler destroys what it was making
    before the pod's process ends."""
    start = config.start_timeout_s
    if config.backend == "kubernetes":
        start = max(start, config.kubernetes.pod_start_timeout_s)
    return start + CREATE_SLACK_S


def shutdown(labels: dict[str, str] | None = None, timeout_s: float = 10.0) -> int:
    """Close the pools (those whose labels include ``labels``: a HarnessPod's run and pod),
    destroying their ready sandboxes and waiting up to ``timeout_s`` for those being made;
    returns how many pools. Runs at exit for every pool."""
    want = set((labels or {}).items())
    with _lock:
        doomed = [k for k, p in _pools.items() if want <= set(p.template.labels.items())]
        closing = [_pools.pop(k) for k in doomed]
        _full.clear()
    for pool in closing:
        pool.close()
    end = time.monotonic() + timeout_s
    for pool in closing:
        pool.join(max(0.0, end - time.monotonic()))
    return len(closing)

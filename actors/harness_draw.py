"""Which harness each training group plays in: a draw over the run's mix.

``fixed`` draws by the configured weights. ``adaptive`` is a bandit over harnesses: each
harness's share moves toward where the policy's training pass rate is lowest (most left to
learn) or rising fastest (learning now), over a window of its latest episodes, and never falls
below ``floor`` (so no harness starves). The draw is a pure function of the seed, the number of
draws so far and the windows, which :meth:`HarnessDraw.state` saves in a checkpoint: a resumed
run goes on drawing as the interrupted one would have.
"""

from __future__ import annotations

import random
from collections import deque
from typing import Any

WINDOW = 64  # a harness's latest training episodes the adaptive shares read
MIN_SEEN = 8  # episodes before a harness's rise is trusted
RISE_GAIN = 2.0  # how much a rising pass rate counts against one left to learn


class HarnessDraw:
    def __init__(
        self,
        weights: dict[str, float],
        mode: str = "fixed",
        floor: float = 0.1,
        seed: int = 0,
        state: dict[str, Any] | None = None,
    ) -> None:
        total = sum(weights.values())
        self.base = {name: w / total for name, w in weights.items()}
        self.mode, self.floor, self.seed = mode, floor, seed
        self.draws = 0
        self.seen: dict[str, deque[float]] = {h: deque(maxlen=WINDOW) for h in self.base}
        if state:
            self.draws = int(state.get("draws", 0))
            for h, passes in (state.get("seen") or {}).items():
                if h in self.seen:
                    self.seen[h].extend(float(p) for p in passes)
        self._shares = self._compute()

    @property
    def single(self) -> str | None:
        return next(iter(self.base)) if len(self.base) == 1 else None

    def draw(self) -> str:
        """The next group's harness."""
        if self.single is not None:
            return self.single
        x = random.Random(f"{self.seed}:{self.draws}").random()
        self.draws += 1
        acc = 0.0
        for name, share in self._shares.items():
            acc += share
            if x < acc:
                return name
        return name  # rounding: the last one

    def record(self, harness: str, rewards: list[float]) -> None:
        """A training group of ``harness`` was buffered with these rewards."""
        if harness not in self.seen:
            return
        self.seen[harness].extend(1.0 if r >= 1.0 else 0.0 for r in rewards)
        if self.mode == "adaptive":
            self._shares = self._compute()

    def shares(self) -> dict[str, float]:
        """Each harness's probability of the next draw."""
        return dict(self._shares)

    def state(self) -> dict[str, Any]:
        return {"draws": self.draws, "seen": {h: list(s) for h, s in self.seen.items()}}

    def _compute(self) -> dict[str, float]:
        if self.mode != "adaptive" or len(self.base) == 1:
            return dict(self.base)
        scores = {h: self.base[h] * (self._score(h) + 1e-3) for h in self.base}
        total = sum(scores.values())
        spare = 1.0 - self.floor * len(scores)
        return {h: self.floor + spare * s / total for h, s in scores.items()}

    def _score(self, harness: str) -> float:
        """What is left to learn (1 - pass rate) plus how fast the pass rate rises (the later
        half of the window over the earlier); a harness not yet seen scores as unlearned."""
        seen = list(self.seen[harness])
        if not seen:
            return 1.0
        left = 1.0 - sum(seen) / len(seen)
        rise = 0.0
        if len(seen) >= MIN_SEEN:
            half = len(seen) // 2
            early, late = seen[:half], seen[half:]
            rise = max(0.0, sum(late) / len(late) - sum(early) / len(early))
        return left + RISE_GAIN * rise

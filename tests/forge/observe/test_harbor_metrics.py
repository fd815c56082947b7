"""Harbor's own metrics beside OpenForge's: the mean reward over every trial (a failed attempt
counts 0) and each named reward's mean, from what the Harbor verifier kept per episode."""

from __future__ import annotations

import json

from forge.evaluate import score, table
from forge.observe.harbor_metrics import harbor_metrics
from forge.types import Episode


def _ep(task: str, reward: float, named: dict[str, float] | None) -> Episode:
    outputs = {"test-stdout.txt": "..."}
    if named is not None:
        outputs["rewards"] = json.dumps(named)
    return Episode("e", task, 0, "react", reward, "ok", verifier_outputs=outputs)


def test_the_mean_counts_failed_trials_and_each_named_reward_is_averaged() -> None:
    eps = [
        _ep("a", 1.0, {"reward": 1.0, "cases_passed": 3.0}),
        _ep("b", 0.5, {"reward": 0.5, "cases_passed": 1.0}),
        _ep("c", 0.0, None),  # timed out: no rewards kept, scored 0
    ]
    h = harbor_metrics(eps, failed=1)
    assert h == {"mean": 1.5 / 4, "trials": 4, "rewards": {"cases_passed": 2.0, "reward": 0.75}}
    r = score(["a", "b", "c", "d"], eps, 1, {"sandbox_error": 1})
    assert r["pass@1"] == 0.25 and r["harbor"] == h  # partial credit counts only in Harbor's
    md = table({"react": r})
    assert "| react | 0.375 | 4 | cases_passed 2.000, reward 0.750 |" in md
    plain = Episode("e", "toy", 0, "react", 1.0, "ok")
    assert harbor_metrics([plain], 0) is None and "Harbor" not in table(
        {"x": score(["toy"], [plain], 1, {})}
    )

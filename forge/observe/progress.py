"""The live progress display of ``forge run`` and the record each step writes to metrics.jsonl."""

from __future__ import annotations

import sys
import time
from typing import Any

from forge.config import RunConfig


class Progress:
    def __init__(self, config: RunConfig, start_step: int = 0) -> None:
        self.config = config
        self.tty = sys.stdout.isatty()
        self.t_start = time.perf_counter()
        self.t_last = self.t_start
        self.last_tokens = 0
        self.last_episodes = 0
        self.start_step = start_step
        self.rewards: list[float] = []
        self.evals: list[tuple[int, float]] = []  # (step, held-out pass rate)
        self.last: dict[str, Any] = {}  # the scheduler's counts at the previous step
        self.last_by_harness: dict[str, Any] = {}  # the same, per harness of a mix

    def collecting(self, sched: dict[str, Any]) -> None:
        if not self.tty:
            return
        line = (
            f"  collecting: {sched['attempts_ok']} episodes done, {sched['queue']} queued, "
            f"{sched['pods']} pods, {sched['groups_dropped']} groups dropped"
        )
        print("\r" + line.ljust(100), end="", flush=True)

    def step(
        self,
        step: int,
        version: int,
        train: dict[str, Any],
        collect_s: float,
        sched: dict[str, Any],
        buffer: dict[str, Any],
    ) -> dict[str, Any]:
        now = time.perf_counter()
        dt = max(now - self.t_last, 1e-9)
        episodes = sched["attempts_ok"] - self.last_episodes
        tokens = sched["sampled_tokens"] - self.last_tokens
        self.t_last, self.last_episodes, self.last_tokens = (
            now,
            sched["attempts_ok"],
            sched["sampled_tokens"],
        )
        record = {
            **{k: v for k, v in train.items() if isinstance(v, (int, float))},
            **self._episode_counts(sched),
            "trainer_step": train.get("step", 0),
            "train_tokens_per_s": train.get("tokens_per_s", 0.0),
            "step": step,
            "policy_version": version,
            "reward_mean": train.get("reward_mean", 0.0),
            "pass_rate": train.get("pass_rate", 0.0),
            "episodes": train.get("episodes_in", 0),  # in this step's groups
            "episodes_trained": train.get("episodes", 0),  # those with a nonzero advantage
            "groups": train.get("groups", 0),
            "dropped_groups": buffer["groups_dropped"],
            "evicted_stale_groups": buffer["groups_evicted_stale"],
            "failed_attempts": sched["attempts_failed"],
            "episodes_per_s": episodes / dt,
            "tokens_per_s": tokens / dt,
            "collect_s": collect_s,  # the trainer waited for this step's groups
            "rollout_idle_s": sched.get("rollout_idle_s", 0.0),  # all so far: nothing to run
            "step_s": dt,
            "elapsed_s": now - self.t_start,
        }
        if "eval_by_harness" in train:  # an evaluation through several harnesses
            record["eval_by_harness"] = train["eval_by_harness"]
        if len(self.config.harnesses) > 1:  # a mix: every curve per harness too
            record["by_harness"] = self._per_harness(train, sched)
            record["harness_shares"] = dict(sched.get("harness_shares", {}))
        self.rewards.append(record["reward_mean"])
        if "eval_pass_rate" in record:
            self.evals.append((step, record["eval_pass_rate"]))
        ev = f" | eval {record['eval_pass_rate']:.2f}" if "eval_pass_rate" in record else ""
        if "by_harness" in record:  # the pass rate of each harness of the mix, and its share
            ev += " | " + " ".join(
                f"{h} {m['pass_rate']:.2f}" if m["episodes"] else f"{h} -"
                for h, m in record["by_harness"].items()
            )
        print(
            ("\r" if self.tty else "")
            + f"[forge] step {step}/{self.config.steps} | reward {record['reward_mean']:.3f} | "
            f"pass {record['pass_rate']:.2f}{ev} | {record['episodes_per_s']:.2f} ep/s | "
            f"{record['tokens_per_s']:.0f} tok/s | dropped {record['dropped_groups']} | "
            f"v{version} | {dt:.1f}s",
            flush=True,
        )
        return record

    def _per_harness(self, train: dict[str, Any], sched: dict[str, Any]) -> dict[str, Any]:
        """This step's batch metrics of each harness of the mix (the trainer's split, which
        adds up to the step's) and its attempts by how they ended (the scheduler's counts)."""
        last, self.last_by_harness = self.last_by_harness, sched.get("by_harness", {})
        out: dict[str, Any] = {}
        for name in self.config.harnesses:
            split = dict(train.get("by_harness", {}).get(name, {}))
            for key in ("groups", "episodes", "tokens_sampled", "truncated"):
                split.setdefault(key, 0.0)
            counts = changes(self.last_by_harness.get(name, {}), last.get(name, {}))
            episodes = counts.get("attempts_ok", 0)
            out[name] = {
                **split,
                "policy_failures": counts.get("attempts_truncated", 0),
                "infra_failures": counts.get("attempts_failed", 0),
                "infra_failure_reasons": counts.get("failures", {}),
                "truncated_reasons": counts.get("truncations", {}),
                "resets": counts.get("resets", {}),
                "segments_per_episode": counts.get("segments", 0) / episodes if episodes else 0.0,
                "share": float(sched.get("harness_shares", {}).get(name, 0.0)),
            }
        return out

    def _episode_counts(self, sched: dict[str, Any]) -> dict[str, Any]:
        """This step's attempts by how they ended, segments per episode and resets by reason.

        ``policy_failures``: episodes the policy ended (``truncated``, reward 0, trained on);
        ``infra_failures``: attempts that failed for the infrastructure (retried or dropped).
        """
        last, self.last = self.last, sched

        def delta(key: str) -> int:
            return int(sched.get(key, 0)) - int(last.get(key, 0))

        def deltas(key: str) -> dict[str, int]:
            now, before = sched.get(key, {}), last.get(key, {})
            return {k: v - before.get(k, 0) for k, v in now.items() if v - before.get(k, 0)}

        episodes = delta("attempts_ok")
        return {
            "policy_failures": delta("attempts_truncated"),
            "infra_failures": delta("attempts_failed"),
            "truncated": deltas("truncations"),
            "infra_failure_reasons": deltas("failures"),
            "segments_per_episode": delta("segments") / episodes if episodes else 0.0,
            "resets": deltas("resets"),
        }

    def evaluated(self, step: int, stats: dict[str, float]) -> dict[str, Any]:
        """The record of an evaluation outside a training step (the one before the first)."""
        self.evals.append((step, stats["eval_pass_rate"]))
        each = stats.get("eval_by_harness", {})
        split = " ".join(f"{h} {r['pass_rate']:.3f}" for h, r in each.items())
        print(
            f"[forge] eval at step {step}: pass rate {stats['eval_pass_rate']:.3f} "
            f"({self.config.eval_tasks or self.config.tasks}, k={self.config.eval_k})"
            + (f"; by harness: {split}" if split else ""),
            flush=True,
        )
        return {"step": step, **stats, "elapsed_s": time.perf_counter() - self.t_start}

    def summary(self, step: int, final: dict[str, Any]) -> None:
        took = time.perf_counter() - self.t_start
        first = f"{self.rewards[0]:.3f}" if self.rewards else "-"
        reasons = f" {final['failures']}" if final["failures"] else ""
        last = sum(self.rewards[-3:]) / len(self.rewards[-3:]) if self.rewards else float("nan")
        print(
            f"[forge] done: {step - self.start_step} step(s) in {took:.0f}s; reward first step "
            f"{first}, mean of last 3 {last:.3f}; {final['attempts_ok']} episodes, "
            f"{final['attempts_failed']} failed attempts{reasons}, "
            f"{final['groups_dropped']} dropped groups; run dir {self.config.run_dir}",
            flush=True,
        )
        if len(self.evals) > 1:
            curve = " -> ".join(f"{rate:.3f} (step {s})" for s, rate in self.evals)
            print(f"[forge] eval pass rate: {curve}", flush=True)


def changes(now: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """``now - before`` for counts, and for mappings of counts (zeros left out)."""
    out: dict[str, Any] = {}
    for key, value in now.items():
        if isinstance(value, dict):
            old = before.get(key, {})
            out[key] = {k: v - old.get(k, 0) for k, v in value.items() if v - old.get(k, 0)}
        else:
            out[key] = value - before.get(key, 0)
    return out


def eval_rates(episodes: list[Any], attempts: int) -> dict[str, float]:
    """Pass rate (of ``attempts``: one that never ended counts as failed) and mean reward."""
    passed = sum(1 for ep in episodes if ep.status == "ok" and ep.reward >= 1.0)
    return {
        "pass_rate": passed / max(1, attempts),
        "reward_mean": sum(ep.reward for ep in episodes) / max(1, len(episodes)),
        "episodes": float(len(episodes)),
    }

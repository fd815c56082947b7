"""``forge eval``: the harness comparison. Every task K times per harness, same policy.

For each harness in turn a Scheduler plays ``k`` attempts of every task (no retries: an attempt
that fails counts as a failure, with its reason) and the episodes are scored
(:mod:`forge.eval_scores`: pass@1, pass@k, pass^k, mean turns, tool calls, failures).
``DIR/eval.json`` holds
``{"harnesses": {NAME: {...}}}``, ``DIR/eval.md`` the table, ``DIR/<harness>/episodes.jsonl``
every finished episode and ``DIR/<harness>/episodes/failures.jsonl`` every failed attempt.

The rows are agents: a built-in harness named with ``--harness`` (the config's own harness with
the config's options, any other as shipped), or an agent defined in a ``--harness-config FILE``
(repeatable). Such a file holds one of:

    a harness definition    harness: KIND + harness_options: {...} (a whole run config is fine:
                            only those two fields are read; policy and tasks come from CONFIG)
    a command agent         just the options of ``harness: command``, with its ``name``
    several named agents    agents: {NAME: <either of the above>, ...}

A row is keyed by its agent's name: the ``agents`` key, else ``harness_options.name`` of a
command agent, else the harness kind. Names are unique across all files and ``--harness`` and
name the output folder ``DIR/<name>/``; ``eval.json`` records each row's harness kind and where
it was defined.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
import yaml
from pydantic import ValidationError

from forge.cluster import init_ray
from forge.config import ConfigError, RunConfig, error_line
from forge.episode_images import write_images
from forge.eval_scores import score, summary, table
from forge.harnesses.install import HarnessNotInstalled
from forge.harnesses.registry import HARNESSES, require
from forge.observe.analyze_services import services_table
from forge.sandboxes.bwrap import IsolationUnavailable
from forge.sandboxes.registry import check_isolation
from forge.served_judge import ServedJudge
from forge.task_set import Problem, load_tasks, playable

PROGRESS_EVERY_S = 15.0


@dataclass
class Agent:
    """One row of the comparison: a harness kind with its options, under a name."""

    name: str
    harness: str
    options: dict[str, Any]
    source: str  # where it was defined: "--harness" or a harness-config file


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _definition(body: Any, path: str, field: str) -> tuple[str, dict[str, Any]]:
    """``(harness, options)`` of the agent defined by ``body`` at ``field`` (empty: the top
    level) of file ``path``, validated as a run config validates its harness."""
    if not isinstance(body, dict):
        raise ConfigError(f"{path}: {field or 'top level'}: expected a mapping")
    shaped = "harness" in body or "harness_options" in body
    data = body if shaped else {"harness": "command", "harness_options": body}
    try:
        run = RunConfig.model_validate(data)
    except ValidationError as e:
        lines = []
        for err in e.errors():
            line = error_line(err)
            if not shaped:  # the user wrote the options themselves: name their fields
                line = line.removeprefix("harness_options")
                line = f"{field}{line}" if field else line.lstrip(".: ")
            elif field:
                line = f"{field}.{line}"
            lines.append(f"{path}: {line}")
        raise ConfigError("invalid harness config:\n  " + "\n  ".join(lines)) from None
    if not isinstance(run.harness, str) or run.eval_harnesses:
        where = f"{field}.harness" if field else "harness"
        raise ConfigError(f"{path}: {where}: an agent is one harness, not a mix")
    return run.harness, run.harness_options


def agents_from_file(path: str) -> list[Agent]:
    """The agents a ``--harness-config`` file defines (the shapes are in the module's doc)."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"--harness-config {path}: {e}") from None
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"{path}: expected a mapping (a harness definition or agents: {{...}})")
    if "agents" not in data:
        harness, options = _definition(data, path, "")
        name = options.get("name", harness) if harness == "command" else harness
        field = "harness_options.name" if "harness_options" in data else "name"
        return [_named(Agent(name, harness, options, path), field)]
    if set(data) != {"agents"}:
        extra = sorted(set(data) - {"agents"})
        raise ConfigError(f"{path}: {extra[0]}: nothing goes beside agents")
    if not isinstance(data["agents"], dict) or not data["agents"]:
        raise ConfigError(f"{path}: agents: a mapping of name -> agent")
    agents = []
    for key, body in data["agents"].items():
        field = f"agents.{key}"
        harness, options = _definition(body, path, field)
        if harness == "command":
            given = options.setdefault("name", str(key))
            if given != str(key):
                raise ConfigError(f"{path}: {field}: name {given!r} differs from its key")
        agents.append(_named(Agent(str(key), harness, options, path), field))
    return agents


def _named(agent: Agent, field: str) -> Agent:
    if not NAME.fullmatch(agent.name) or agent.name in (".", ".."):
        raise ConfigError(
            f"{agent.source}: {field}: {agent.name!r} is not a name of letters, digits, "
            "'.', '_' and '-' (it names the agent's output folder)"
        )
    return agent


def plan(config: RunConfig, harnesses: list[str], files: list[str]) -> list[Agent]:
    """The rows: built-in ``harnesses`` then the agents of ``files``; ValueError on an unknown
    harness, a bad file or a name defined twice."""
    agents = []
    for kind in harnesses:
        if kind not in HARNESSES:
            raise ValueError(f"--harness: unknown {kind!r}; known: {', '.join(sorted(HARNESSES))}")
        # the config's options belong to its own harness; the others run as shipped
        options = config.options_for(kind)
        name = options.get("name", kind) if kind == "command" else kind
        field = "harness_options.name" if kind == "command" else kind
        agents.append(_named(Agent(name, kind, dict(options), "--harness"), field))
    for path in files:
        agents.extend(agents_from_file(path))
    seen: dict[str, str] = {}
    for agent in agents:
        if agent.name in seen:
            raise ValueError(
                f"agent name {agent.name!r} is defined twice: by {seen[agent.name]} and by "
                f"{agent.source} (give each agent its own name)"
            )
        seen[agent.name] = agent.source
    return agents


def _failure_records(failures_file: Path, start: int) -> list[dict[str, Any]]:
    """The failed attempts' records after byte ``start`` of ``failures_file`` (an earlier eval
    into the same folder wrote those before)."""
    if not failures_file.exists():
        return []
    with open(failures_file, "rb") as f:
        f.seek(start)
        text = f.read().decode(errors="replace")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def rejections(failures_file: Path, start: int = 0) -> dict[str, int]:
    """The first refusal of each ``proxy_rejected`` attempt ("400 messages[1].role: ..."), most
    common first: what the proxy refused that the agent sent, so the cause is on screen. Reads
    the records after byte ``start``."""
    causes: Counter[str] = Counter()
    for record in _failure_records(failures_file, start):
        if record.get("failure") != "proxy_rejected":
            continue
        log = record.get("harness_log") or ""
        first = next((x for x in log.splitlines() if x.startswith("proxy rejected: ")), "")
        causes[first.removeprefix("proxy rejected: ")[:200] or "?"] += 1
    return dict(causes.most_common())


def failure_causes(failures_file: Path, start: int = 0) -> dict[str, int]:
    """``"REASON: LINE"`` of every other failed attempt, most common first: the last line of its
    harness's log (``command: cannot run ...: ... is a link to ...``) or what raised, so the
    cause is on screen beside the count. Reads the records after byte ``start``."""
    causes: Counter[str] = Counter()
    for record in _failure_records(failures_file, start):
        reason = record.get("failure") or "unknown"
        if reason == "proxy_rejected":  # rejections() shows what the proxy refused
            continue
        text = record.get("failure_detail") or record.get("harness_log") or ""
        last = next((x.strip() for x in reversed(text.splitlines()) if x.strip()), "?")
        causes[f"{reason}: {last[:300]}"] += 1
    return dict(causes.most_common())


def evaluate(config: RunConfig, agents: list[Agent], k: int, out: Path) -> dict[str, Any]:
    from serve.policy import deploy_policy

    runs = {}
    for agent in agents:
        data = config.model_dump()
        data["rollout"]["max_retries"] = 0
        data.update(harness=agent.harness, harness_options=agent.options)
        try:
            runs[agent.name] = RunConfig.model_validate(data)
        except ValidationError as e:
            raise ValueError(f"{agent.source} {agent.name}: {error_line(e.errors()[0])}") from None
        require(agent.harness, agent.options)  # stops before anything starts
    check_isolation(config.sandbox, config.proxy)  # so does a host that cannot isolate sandboxes
    skipped: list[Problem] = []  # tasks that cannot play: said, recorded, left out
    say = lambda m: print(f"[forge] {m}", flush=True)  # noqa: E731
    [tasks] = playable(
        [load_tasks(config.tasks, config.task_ids, skipped)],
        config,
        skipped,
        out,
        say,
        [a.harness for a in agents],
    )
    init_ray(
        num_cpus=max(os.cpu_count() or 1, *(r.cpus_needed(trainer=False) for r in runs.values()))
    )
    policy = deploy_policy(
        config.policy, app_name="forge-eval-policy", placement=config.placement.policy
    )
    judge = ServedJudge.start(config)  # the run's own judge, if it serves one
    try:
        return _play(agents, runs, tasks, policy, judge.config, k, out)
    finally:
        judge.stop()


def _play(
    agents: list[Agent],
    runs: dict[str, RunConfig],
    tasks: list[dict[str, Any]],
    policy: Any,
    judged: RunConfig,
    k: int,
    out: Path,
) -> dict[str, dict[str, Any]]:
    """Each agent's ``k`` attempts at every task, scored; ``judged``: where the pods' judge is."""
    from actors.replay_buffer import ReplayBuffer
    from actors.scheduler import Scheduler

    results: dict[str, dict[str, Any]] = {}
    for agent in agents:
        name = agent.name
        t0 = time.perf_counter()
        run = runs[name].model_copy(update={"placement": judged.placement})
        folder = out / name
        failures_file = folder / "episodes" / "failures.jsonl"
        seen = failures_file.stat().st_size if failures_file.exists() else 0
        buffer = (
            ray.remote(ReplayBuffer)
            .options(**run.actor_options("replay_buffer"))
            .remote(str(folder), 1, 0)
        )
        sched = (
            ray.remote(Scheduler)
            .options(**run.actor_options("scheduler"))
            .remote(run.model_dump(), policy, buffer, tasks)
        )
        ray.get(sched.start.remote())
        pending = sched.evaluate.remote(tasks * k, judged.eval_temperature)
        while not ray.wait([pending], timeout=PROGRESS_EVERY_S)[0]:
            st = ray.get(sched.stats.remote())
            print(
                f"[forge] {name}: {st['attempts_ok']}/{len(tasks) * k} episodes, "
                f"{st['attempts_failed']} failed attempts, {st['pods']} pods, "
                f"{time.perf_counter() - t0:.0f}s",
                flush=True,
            )
        episodes = ray.get(pending)
        failures = ray.get(sched.stop.remote())["failures"]
        ray.get(buffer.close.remote())
        write_images(folder, episodes)  # screenshots beside the episodes, by sha256
        with open(folder / "episodes.jsonl", "w") as f:
            for ep in episodes:
                f.write(json.dumps(ep.to_dict()) + "\n")
        bars = {t["id"]: t["pass_threshold"] for t in tasks if t.get("pass_threshold", 1.0) != 1}
        results[name] = score([t["id"] for t in tasks], episodes, k, failures, bars)
        results[name].update(
            harness=agent.harness,
            source=agent.source,
            seconds=time.perf_counter() - t0,
            rejections=rejections(failures_file, seen),
            failure_causes=failure_causes(failures_file, seen),
        )
        print(summary(name, results[name]), flush=True)
        for cause, n in results[name]["rejections"].items():
            print(f"[forge] {name}: {n} attempts ended after the proxy refused: {cause}")
        for cause, n in results[name]["failure_causes"].items():
            print(f"[forge] {name}: {n} failed attempt{'s' if n != 1 else ''}, {cause}")
    return results


def main(
    config: RunConfig,
    harnesses: list[str],
    k: int,
    out: Path,
    harness_configs: list[str] | None = None,
) -> int:
    """``forge eval``: the built-in ``harnesses`` and the agents of ``harness_configs``."""
    try:
        agents = plan(config, harnesses, harness_configs or [])
        if not agents:
            raise ValueError("no harness to evaluate: give --harness or --harness-config")
        out.mkdir(parents=True, exist_ok=True)
        results = evaluate(config, agents, k, out)
    except (ValueError, HarnessNotInstalled, IsolationUnavailable) as e:
        print(f"forge eval: {e}", file=sys.stderr)
        return 2
    report = {"tasks": config.tasks, "model": config.policy.engine.model, "harnesses": results}
    (out / "eval.json").write_text(json.dumps(report, indent=2))
    md = table(results)
    if any(r.get("services") for r in results.values()):
        md += "\n\n" + services_table({n: r.get("services") for n, r in results.items()})
    (out / "eval.md").write_text(md + "\n")
    print(md)
    return 0

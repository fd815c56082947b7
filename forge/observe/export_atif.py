"""``forge export RUN_DIR --format atif``: episodes as Harbor's Agent Trajectory Interchange
Format (ATIF), one JSON document per episode, validated with the ``harbor`` package's own
``Trajectory`` model when it is installed (scripts/setup.sh installs it).

An episode becomes: the system and user messages of its first request (``source: system`` /
``user`` steps), then one ``agent`` step per model call with its text, tool calls (arguments as
objects), token counts, the exact prompt and completion token ids and the completion's
log-probabilities, and the tool results that came back (from the next request's history, in
any of the three wire protocols) as its observation. The reward, task, status and failure go
in the trajectory's ``extra``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from forge.observe.analyze import episodes_file
from forge.observe.tool_calls import tool_results
from forge.transcript import arguments_of, opening, text_of

SCHEMA = "ATIF-v1.6"
EXTRA = (  # what an OpenForge episode adds, in the trajectory's extra
    "task_id", "group_id", "attempt", "reward", "status", "failure", "truncated",
    "final_answer", "verifier_detail",
)  # fmt: skip


def _results(request: dict[str, Any]) -> dict[str, str]:
    """Tool results in a request's history by call id (chat, Responses, Anthropic), as text."""
    return {call_id: text_of(value) for call_id, value in tool_results(request).items()}


def trajectory(ep: dict[str, Any], model: str | None = None) -> dict[str, Any]:
    """One episode record (a line of episodes.jsonl) as an ATIF trajectory (plain JSON)."""
    turns = ep.get("turns") or []
    steps: list[dict[str, Any]] = []
    if turns:
        for m in opening(turns[0].get("request") or {}):
            steps.append({"step_id": len(steps) + 1, "source": m["role"], "message": m["content"]})
    for i, turn in enumerate(turns):
        later = _results(turns[i + 1].get("request") or {}) if i + 1 < len(turns) else {}
        calls = turn.get("tool_calls") or []
        step: dict[str, Any] = {
            "step_id": len(steps) + 1,
            "timestamp": datetime.fromtimestamp(turn.get("started_at", 0.0), UTC).isoformat(),
            "source": "agent",
            "model_name": model,
            "message": turn.get("text") or "",
            "metrics": {
                "prompt_tokens": len(turn.get("prompt_ids") or []),
                "completion_tokens": len(turn.get("completion_ids") or []),
                "prompt_token_ids": turn.get("prompt_ids") or [],
                "completion_token_ids": turn.get("completion_ids") or [],
                "logprobs": turn.get("logprobs") or [],
                "extra": {
                    "policy_version": turn.get("policy_version", 0),
                    "finish_reason": turn.get("finish_reason"),
                },
            },
        }
        if calls:
            step["tool_calls"] = [
                {"tool_call_id": c.get("id", ""), "function_name": c.get("name", ""),
                 "arguments": arguments_of(c.get("arguments"))}
                for c in calls
            ]  # fmt: skip
            seen = [c for c in calls if c.get("id") in later]
            if seen:
                results = [{"source_call_id": c["id"], "content": later[c["id"]]} for c in seen]
                step["observation"] = {"results": results}
        steps.append(step)
    if not steps:  # ATIF needs one step: an attempt that never reached the model
        steps.append({"step_id": 1, "source": "system", "message": ep.get("failure") or ""})
    prompt = sum(len(t.get("prompt_ids") or []) for t in turns)
    completion = sum(len(t.get("completion_ids") or []) for t in turns)
    return {
        "schema_version": SCHEMA,
        "session_id": f"{ep.get('episode_id')}-{ep.get('attempt', 0)}",
        "agent": {"name": ep.get("harness", "?"), "version": "openforge", "model_name": model},
        "steps": steps,
        "final_metrics": {
            "total_prompt_tokens": prompt,
            "total_completion_tokens": completion,
            "total_steps": len(steps),
        },
        "extra": {k: ep.get(k) for k in EXTRA},
    }


def validator() -> Any | None:
    """harbor's ``Trajectory`` model (None when harbor is not installed)."""
    try:
        from harbor.models.trajectories import Trajectory
    except ImportError:
        return None
    return Trajectory


def export(run_dir: Path, out: Path | None = None) -> Iterator[tuple[Path, bool]]:
    """Write every episode of ``run_dir`` as ATIF; yields (path, validated by harbor)."""
    import yaml

    config = run_dir / "config.yaml"
    model = None
    if config.exists():
        model = ((yaml.safe_load(config.read_text()) or {}).get("policy") or {}).get("engine", {})
        model = model.get("model") if isinstance(model, dict) else None
    out = out or run_dir / "atif"
    out.mkdir(parents=True, exist_ok=True)
    check = validator()
    for line in episodes_file(run_dir).read_text().splitlines():
        if not line.strip():
            continue
        ep = json.loads(line)
        doc = trajectory(ep, model)
        if check is not None:
            check.model_validate(doc)  # a pydantic ValidationError names the field
        path = out / f"{doc['session_id']}.json"
        path.write_text(json.dumps(doc))
        yield path, check is not None

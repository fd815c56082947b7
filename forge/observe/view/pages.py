"""The pages of ``forge view``: the run, a policy version's groups, an episode, a comparison."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from forge.observe.view.html import chart, esc, link, logprob_colour, num, page, q, table
from forge.observe.view.index import EpisodeRow, RunIndex

CHARTS = [  # (title, metrics key): what a researcher watches per step
    ("reward", "reward_mean"),
    ("pass rate", "pass_rate"),
    ("loss", "loss"),
    ("entropy", "entropy"),
    ("KL (engine vs trainer)", "logprob_kl"),
    ("staleness (max)", "staleness_max"),
    ("train tokens/s", "train_tokens_per_s"),
    ("grad norm", "grad_norm"),
]
Decode = Callable[[int], str]


def harness_charts(steps: list[dict], xs: list[float], evals: list[dict]) -> list[str]:
    """A run on a harness mix: each harness's training and held-out pass rate."""
    out = []
    names = dict.fromkeys(h for s in steps for h in s.get("by_harness", {}))
    for h in names:
        ys = [s.get("by_harness", {}).get(h, {}).get("pass_rate") for s in steps]
        out.append(chart(f"pass rate: {h}", xs, ys))
    names = dict.fromkeys(h for s in evals for h in s.get("eval_by_harness", {}))
    for h in names:
        ys = [s.get("eval_by_harness", {}).get(h, {}).get("pass_rate") for s in evals]
        out.append(chart(f"held-out pass rate: {h}", [s["step"] for s in evals], ys))
    return out


def run_page(index: RunIndex, name: str) -> str:
    steps = index.train_steps()
    xs = [float(s.get("step", i + 1)) for i, s in enumerate(steps)]
    charts = [chart(title, xs, [s.get(key) for s in steps]) for title, key in CHARTS]
    evals = [s for s in index.steps if "eval_pass_rate" in s]
    eval_xs, eval_ys = [s["step"] for s in evals], [s["eval_pass_rate"] for s in evals]
    charts.append(chart("held-out pass rate", eval_xs, eval_ys))
    charts += harness_charts(steps, xs, evals)
    versions: dict[int, list[EpisodeRow]] = defaultdict(list)
    for row in index.episodes:
        versions[row.version].append(row)
    rows = [
        [
            link(f"/version/{v}", v),
            num(len(eps)),
            num(sum(r.reward for r in eps) / len(eps)),
            num(len({r.group_id for r in eps})),
        ]
        for v, eps in sorted(versions.items())
    ]
    summary = (
        f"<p><span id='n-episodes'>{len(index.episodes)}</span> episodes, "
        f"<span id='n-steps'>{len(steps)}</span> training steps, "
        f"{len(index.dropped)} dropped groups, {len(index.failures)} failed attempts</p>"
    )
    body = (
        summary
        + f"<div class='charts'>{''.join(charts)}</div><h3>Episodes by policy version</h3>"
        + table(["version", "episodes", "mean reward", "groups"], rows)
    )
    return page(f"Run {name}", body, name)


def _advantages(rewards: list[float]) -> list[float]:
    import torch

    from forge.train.grpo import group_advantages

    return group_advantages(torch.tensor([rewards])).tolist()[0]


def version_page(index: RunIndex, name: str, version: int) -> str:
    """The groups sampled at one policy version: rewards, advantages, zero-variance groups; the
    dropped groups and failed attempts of the run with their reasons."""
    groups: dict[str, list[EpisodeRow]] = defaultdict(list)
    for row in index.episodes:
        if row.version == version:  # a forge eval's episodes have no group: one per task
            groups[row.group_id or f"task {row.task_id}"].append(row)
    rows, classes = [], []
    for group_id, eps in groups.items():
        rewards = [r.reward for r in eps]
        advantages = _advantages(rewards)
        flat = len(set(rewards)) == 1
        cells = " ".join(
            f"{link(_episode_href(r), f'{r.reward:g}')} ({a:+.2f})"
            for r, a in zip(eps, advantages, strict=True)
        )
        rows.append([esc(group_id), esc(eps[0].task_id), cells, "zero variance" if flat else ""])
        classes.append("flag" if flat else "")
    step = next((s for s in index.train_steps() if s.get("policy_version") == version + 1), {})
    gap = step.get("logprob_abs_diff_max")
    body = (
        f"<p>{len(groups)} groups sampled with version {version}"
        + (f"; the step they trained: engine-vs-trainer log-prob gap max {gap:.2e}" if gap else "")
        + "</p>"
        + table(["group", "task", "rewards (advantage)", ""], rows, classes)
        + "<h3>Dropped groups</h3>"
        + table(
            ["group", "reason", "episodes"],
            [
                [esc(d.get("group_id")), esc(d.get("reason")), num(d.get("episodes", "-"))]
                for d in index.dropped
            ],
        )
        + "<h3>Failed attempts</h3>"
        + table(
            ["episode", "attempt", "task", "reason", "detail"],
            [
                [
                    esc(f.get("episode_id")),
                    num(f.get("attempt", 0)),
                    esc(f.get("task_id")),
                    esc(f.get("reason")),
                    esc(str(f.get("failure_detail", ""))[:300]),
                ]
                for f in index.failures
            ],
            ["bad"] * len(index.failures),
        )
    )
    return page(f"Version {version}", body, name)


def _episode_href(row: EpisodeRow) -> str:
    return f"/episode/{q(row.episode_id)}/{row.attempt}"


def episodes_page(index: RunIndex, name: str, page_no: int, task: str | None) -> str:
    rows = [r for r in index.episodes if task is None or r.task_id == task]
    shown = index.page(rows, page_no)
    cells = [
        [link(_episode_href(r), r.episode_id), num(r.attempt), esc(r.task_id), esc(r.harness),
         num(r.reward), esc(r.status), esc(r.failure or r.truncated or ""), num(r.version),
         num(r.turns)]
        for r in shown
    ]  # fmt: skip
    nav = []
    if page_no > 0:
        nav.append(link(f"/episodes?page={page_no - 1}", "previous"))
    if (page_no + 1) * 50 < len(rows):
        nav.append(link(f"/episodes?page={page_no + 1}", "next"))
    head = ["episode", "attempt", "task", "harness", "reward", "status", "why", "version", "turns"]
    body = (
        f"<p>{len(rows)} episodes; page {page_no + 1}</p>"
        + table(head, cells, ["bad" if r.status != "ok" else "" for r in shown])
        + " ".join(nav)
    )
    return page("Episodes", body, name)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, dict):
                kind = p.get("type")
                if kind in ("text", "input_text", "output_text"):
                    parts.append(str(p.get("text", "")))
                elif kind in ("image_url", "input_image", "image"):
                    parts.append("[image]")
                elif kind == "tool_use":
                    parts.append(f"call {p.get('name')}({json.dumps(p.get('input'))})")
                elif kind == "tool_result":
                    parts.append(f"result: {_text(p.get('content'))}")
                else:
                    parts.append(json.dumps(p)[:2000])
        return "\n".join(parts)
    return "" if content is None else json.dumps(content)


def conversation(request: dict[str, Any]) -> list[tuple[str, str]]:
    """(role, text) of a request's history in any of the three protocols."""
    out: list[tuple[str, str]] = []
    if isinstance(request.get("system"), str | list):  # anthropic
        out.append(("system", _text(request["system"])))
    if isinstance(request.get("instructions"), str):  # responses
        out.append(("system", request["instructions"]))
    for m in request.get("messages") or request.get("input") or []:
        if not isinstance(m, dict):
            continue
        kind = m.get("type")
        if kind == "function_call":
            out.append(("assistant", f"call {m.get('name')}({m.get('arguments')})"))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            out.append(("tool", _text(m.get("output"))))
        else:
            text = _text(m.get("content"))
            for c in m.get("tool_calls") or []:
                fn = c.get("function") or {}
                text += f"\ncall {fn.get('name')}({fn.get('arguments')})"
            out.append((str(m.get("role", kind or "?")), text))
    return out


def _tokens(segment: dict[str, Any], decode: Decode) -> str:
    spans = []
    marks = zip(segment["tokens"], segment["loss_mask"], segment["logprobs"], strict=False)
    for tok, mask, lp in marks:
        text = esc(decode(tok))
        if mask:
            spans.append(
                f"<span class='tok' style='background:{logprob_colour(lp)}' "
                f"title='logprob {lp:.3f}'>{text}</span>"
            )
        else:
            spans.append(f"<span class='tok masked'>{text}</span>")
    return "".join(spans)


def episode_page(index: RunIndex, name: str, row: EpisodeRow, decode: Decode) -> str:
    ep = index.load(row)
    meta = [
        ["task", esc(ep.get("task_id"))], ["harness", esc(ep.get("harness"))],
        ["status", esc(ep.get("status"))], ["reward", num(ep.get("reward", 0.0))],
        ["failure", esc(ep.get("failure") or "")], ["truncated", esc(ep.get("truncated") or "")],
        ["verifier", esc(ep.get("verifier_detail", ""))],
        ["final answer", esc(ep.get("final_answer") or "")],
        ["segments", num(len(ep.get("segments") or []))],
        ["reset reasons", esc(json.dumps(ep.get("reset_reasons") or {}))],
        ["policy version", num(row.version)],
    ]  # fmt: skip
    turns = ep.get("turns") or []
    chat = ""
    if turns:
        last = turns[-1]
        for role, text in conversation(last.get("request") or {}):
            cls = {"tool": "tool", "system": "sys"}.get(role, "")
            chat += f"<div class='msg {cls}'><span class='role'>{esc(role)}</span>\n"
            chat += f"{esc(text)}</div>"
        calls = "".join(
            f"\ncall {c['name']}({c['arguments']})" for c in last.get("tool_calls") or []
        )
        chat += (
            f"<div class='msg'><span class='role'>assistant (last turn)</span>\n"
            f"{esc((last.get('text') or '') + calls)}</div>"
        )
    segs = "".join(
        f"<h4>segment {i} ({sum(s['loss_mask'])} trained of {len(s['tokens'])} tokens)</h4>"
        f"<div class='segment'>{_tokens(s, decode)}</div>"
        for i, s in enumerate(ep.get("segments") or [])
    )
    screens = "".join(
        f"<figure class='screen'><img src='{_episode_href(row)}/screen/{t.get('index', i)}.png' "
        f"width='480' alt='turn {t.get('index', i)}'><figcaption>turn {t.get('index', i)}: "
        + esc("; ".join(f"{c['name']}({c['arguments']})" for c in t.get("tool_calls") or []))
        + "</figcaption></figure>"
        for i, t in enumerate(turns)
        if t.get("images")
    )
    if screens:
        screens = "<h3>Screens (the model's action marked)</h3>" + screens
    services = ""
    if ep.get("service_calls"):
        services = "<h3>Service calls</h3>" + table(
            ["turn", "service", "op", "via", "writes", "refused"],
            [[num(c.get("turn", 0)), esc(c["service"]), esc(c["op"]), esc(c.get("via")),
              esc(c.get("writes", "")), esc(c.get("error", ""))] for c in ep["service_calls"]],
        )  # fmt: skip
    outputs = "".join(
        f"<h4>{esc(name)}</h4><pre class='output'>{esc(text)}</pre>"
        for name, text in (ep.get("verifier_outputs") or {}).items()
    )
    if outputs:
        outputs = "<h3>Verifier outputs</h3>" + outputs
    body = (
        table(["", ""], meta)
        + outputs
        + services
        + screens
        + "<h3>Conversation (as the harness sent it)</h3>"
        + chat
        + "<h3>Tokens (coloured: trained, by log-probability; grey: not trained)</h3>"
        + segs
    )
    return page(f"Episode {row.episode_id}/{row.attempt}", body, name)


def compare_page(index: RunIndex, name: str, task: str | None, a: int | None, b: int | None):
    tasks = sorted({r.task_id for r in index.episodes})
    versions = sorted({r.version for r in index.episodes})
    if task is None or a is None or b is None:
        first, last = (versions[0], versions[-1]) if versions else (0, 0)
        items = "".join(
            f"<li>{link(f'/compare?task={q(t)}&a={first}&b={last}', t)}</li>" for t in tasks
        )
        intro = f"<p>A task, at versions {first} and {last}:</p>"
        return page("Compare", f"{intro}<ul>{items}</ul>", name)
    cols = []
    for v in (a, b):
        rows = [r for r in index.episodes if r.task_id == task and r.version == v]
        if not rows:
            cols.append(f"<div><h3>version {v}</h3><p>no episode</p></div>")
            continue
        ep = index.load(rows[0])
        mean = sum(r.reward for r in rows) / len(rows)
        msgs = "".join(
            f"<div class='msg'><span class='role'>{esc(role)}</span>\n{esc(text)}</div>"
            for role, text in conversation((ep.get("turns") or [{}])[-1].get("request") or {})
        )
        cols.append(
            f"<div><h3>version {v}</h3><p>{len(rows)} episodes, mean reward "
            f"<span class='mean'>{mean:.3f}</span>; shown: "
            f"{link(_episode_href(rows[0]), rows[0].episode_id)} (reward {rows[0].reward:g}), "
            f"answer {esc(ep.get('final_answer') or '')}</p>{msgs}</div>"
        )
    return page(f"Compare {task}: {a} vs {b}", f"<div class='cols'>{''.join(cols)}</div>", name)

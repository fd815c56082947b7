"""``forge analyze`` for GUI episodes: how the policy used the screen, per policy version.

A GUI episode is one whose turns recorded a screenshot (``Turn.images``) or whose first request
offers the ``click`` tool of :mod:`forge.harnesses.gui_actions` (a browser run observing page
text only). Its actions are the tool calls of its turns other than ``done``; each is judged by
the screenshots around it:

    before       the last image of the turn's request: the screenshot the model acted on
    after        the last image of the next turn's request: the screen after the turn's calls
    changed      ``before != after`` by sha256, so pixel for pixel; unknown (None) when either
                 is missing (the last turn, a run without screenshots in context)

The rates, for every policy version that produced GUI episodes:

    actions          share of each tool among all actions (click 0.5, type 0.25, ...)
    steps_mean       actions per episode
    done_share       share of episodes that called ``done`` with a string ``answer`` (what the
                     harnesses take as finished); answered_share: that answer was not empty
    no_effect_share  share of the pointer actions (click, double_click, scroll, drag) with a
                     known ``changed`` that left the screen as it was; no_effect counts them.
                     A call whose result is an error (``error: ...``) is not counted: it did
                     nothing because it failed, which error_share counts instead
    harness_no_effect_share  the same share by the harness's own before/after comparison around
                     the action, where its tool result states one ("page changed: yes|no",
                     browser; "the screen changed|did not change", desktop)
    recovery         share of the episodes with a no-effect action that later make an action
                     other than ``wait`` that changes the screen, and succeed (reward >= 1)

Two limits of the screenshot rule, stated as such: every call of one turn shares the turn's
before and after (two clicks in one reply that undo each other count as no effect), and the
screen can change while the model thinks (a page still loading, an animation, a caret), which
makes an action look effective; the harness's verdict, taken around the action alone, does not
have that confound, so a gap between the two shares points at such a page.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from forge.harnesses.gui_actions import ACTIONS
from forge.observe.tool_calls import _results

POINTER = ("click", "double_click", "scroll", "drag")
HARNESS_VERDICT = re.compile(
    r"page changed: (?P<page>yes|no)|the screen (?P<screen>changed|did not change)"
)


def _args(call: dict[str, Any]) -> dict[str, Any]:
    raw = call.get("arguments")
    try:
        args = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return {}
    return args if isinstance(args, dict) else {}


def _offers_click(turn: dict[str, Any]) -> bool:
    for tool in (turn.get("request") or {}).get("tools") or []:
        fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        if isinstance(fn, dict) and fn.get("name") == "click":
            return True
    return False


def is_gui_episode(episode: dict[str, Any]) -> bool:
    """Whether a recorded episode is a GUI one (screenshots, or the GUI tools offered)."""
    turns = episode.get("turns") or []
    return any(t.get("images") for t in turns) or bool(turns and _offers_click(turns[0]))


def _harness_changed(result: str | None) -> bool | None:
    match = HARNESS_VERDICT.search(result or "")
    if match is None:
        return None
    return match["page"] == "yes" or match["screen"] == "changed"


def _result(raw: str | None) -> tuple[str | None, bool]:
    """(text, is an error) of a tool result as :func:`forge.observe.tool_calls._results` keeps it
    (JSON of the chat content, the Responses output or the Anthropic block); (None, False) if
    absent."""
    if raw is None:
        return None, False
    result = json.loads(raw)
    if isinstance(result, dict):  # an Anthropic tool_result block
        content = result.get("content")
        text = content if isinstance(content, str) else json.dumps(content)
        return text, bool(result.get("is_error")) or text.startswith("error")
    text = result if isinstance(result, str) else json.dumps(result)
    return text, text.startswith("error")


def gui_behaviour(episode: dict[str, Any]) -> dict[str, Any]:
    """One GUI episode's actions in order, each ``{"tool", "turn", "pointer", "changed",
    "harness_changed", "error"}``, and its ``done`` answer (None when it never called done)."""
    turns = episode.get("turns") or []
    results: dict[str, str] = {}
    for turn in turns:
        results.update(_results(turn.get("request") or {}))
    screens = [(t.get("images") or [None])[-1] for t in turns]
    actions: list[dict[str, Any]] = []
    answer: str | None = None
    for i, turn in enumerate(turns):
        before = screens[i]
        after = screens[i + 1] if i + 1 < len(turns) else None
        for call in turn.get("tool_calls") or []:
            name = str(call.get("name", ""))
            if name == "done":
                given = _args(call).get("answer")
                if isinstance(given, str) and answer is None:
                    answer = given
                continue
            text, error = _result(results.get(call.get("id", "")))
            actions.append(
                {
                    "tool": name,
                    "turn": i,
                    "pointer": name in POINTER,
                    "changed": None if before is None or after is None else before != after,
                    "harness_changed": _harness_changed(text),
                    "error": error,
                }
            )
    return {"actions": actions, "done_answer": answer}


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def gui_rates(episodes: list[dict[str, Any]]) -> dict[str, Any]:
    """The GUI rates of the module docstring over ``episodes`` (records of one version)."""
    tools: Counter[str] = Counter()
    n_actions = n_errors = judged = no_effect = h_judged = h_no_effect = 0
    done = answered = stalled = recovered = 0
    for ep in episodes:
        b = gui_behaviour(ep)
        acts = b["actions"]
        n_actions += len(acts)
        tools.update(a["tool"] for a in acts)
        n_errors += sum(a["error"] for a in acts)
        done += b["done_answer"] is not None
        answered += bool(b["done_answer"])
        first_stall = None
        for j, a in enumerate(acts):
            if not a["pointer"] or a["error"]:
                continue
            if a["changed"] is not None:
                judged += 1
                if not a["changed"]:
                    no_effect += 1
                    first_stall = j if first_stall is None else first_stall
            if a["harness_changed"] is not None:
                h_judged += 1
                h_no_effect += not a["harness_changed"]
        if first_stall is not None:
            stalled += 1
            later = acts[first_stall + 1 :]
            moved = any(a["changed"] and a["tool"] != "wait" for a in later)
            recovered += moved and float(ep.get("reward", 0.0)) >= 1.0
    n = len(episodes)
    return {
        "episodes": n,
        "reward_mean": sum(float(ep.get("reward", 0.0)) for ep in episodes) / max(1, n),
        "actions": {t: c / n_actions for t, c in sorted(tools.items(), key=lambda x: -x[1])},
        "action_count": n_actions,
        "unknown_tools": sorted(t for t in tools if t not in ACTIONS),
        "steps_mean": n_actions / n if n else None,
        "done_share": _share(done, n),
        "answered_share": _share(answered, n),
        "error_share": _share(n_errors, n_actions),
        "no_effect": no_effect,
        "no_effect_share": _share(no_effect, judged),
        "harness_no_effect_share": _share(h_no_effect, h_judged),
        "no_effect_episodes": stalled,
        "recovery": _share(recovered, stalled),
    }


def gui_table(report: dict[str, Any]) -> str:
    """The ``gui`` part of a report as a markdown table, one row per policy version."""

    def fmt(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}"

    lines = [
        "| version | GUI episodes | reward | steps | done | no-effect (screens) | "
        "no-effect (harness) | recovery | actions |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for v, r in report["gui"].items():
        shares = ", ".join(f"{t} {s:.2f}" for t, s in r["actions"].items()) or "-"
        lines.append(
            f"| {v} | {r['episodes']} | {r['reward_mean']:.2f} | {fmt(r['steps_mean'])} | "
            f"{fmt(r['done_share'])} | {fmt(r['no_effect_share'])} ({r['no_effect']}) | "
            f"{fmt(r['harness_no_effect_share'])} | {fmt(r['recovery'])} | {shares} |"
        )
    return "\n".join(lines)

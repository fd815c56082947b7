"""Draw OpenForge's architecture picture, docs/assets/architecture.svg (the README and the docs
site show it). The picture is this file: edit the boxes and arrows below, then run

    .venv/bin/python scripts/architecture_svg.py           # rewrites docs/assets/architecture.svg

The output is deterministic; tests/docs/test_architecture.py checks the committed SVG is what
this script draws. Standard library only.
"""

from __future__ import annotations

import sys
from html import escape
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "docs" / "assets" / "architecture.svg"
WIDTH, HEIGHT = 960, 530

# fill, stroke
ACTOR = ("#e8f0fe", "#3b6fd8")
SERVE = ("#e6f4ea", "#2e8b57")
SANDBOX = ("#fff4e0", "#c98a1b")
DRIVER = ("#f1f3f4", "#5f6368")

# (x, y, width, height, colours, title, lines)
BOXES = [
    (
        40,
        40,
        880,
        44,
        DRIVER,
        "Driver (forge run)",
        ["collect \u2192 train \u2192 publish weights \u2192 evaluate, every step"],
    ),
    (
        40,
        130,
        220,
        78,
        ACTOR,
        "Scheduler",
        ["GRPO groups over an elastic", "pool of HarnessPods;", "retries, drops with reasons"],
    ),
    (
        370,
        130,
        240,
        78,
        ACTOR,
        "HarnessPod",
        ["the recording proxy: a URL and", "key per attempt, a Turn per call,", "token for token"],
    ),
    (
        700,
        130,
        220,
        78,
        SERVE,
        "Policy (Ray Serve)",
        [
            "engine: torch, vLLM, scripted;",
            "token ids, logprobs and the",
            "policy version per call",
        ],
    ),
    (
        40,
        290,
        220,
        64,
        ACTOR,
        "ReplayBuffer",
        ["whole groups as object refs,", "every Episode on disk"],
    ),
    (660, 296, 190, 60, SANDBOX, "Verifier", ["in a fresh sandbox: reward"]),
    (
        40,
        430,
        220,
        64,
        ACTOR,
        "Trainer (torch or veRL)",
        ["group advantages, loss on", "sampled tokens only"],
    ),
]
# the Sandbox frame and the Harness inside it
SANDBOX_FRAME = (370, 266, 240, 116, "Sandbox: local, docker or kubernetes")
HARNESS = (
    392,
    300,
    196,
    66,
    "Harness, unmodified",
    ["react, pi, codex, openclaw,", "browser, desktop, ..."],
)

# (points, label, label x, label y, anchor)
ARROWS = [
    ([(150, 84), (150, 130)], "collect a step", 160, 112, "start"),
    ([(260, 156), (370, 156)], "attempt", 315, 150, "middle"),
    ([(370, 186), (260, 186)], "Episode + reward", 315, 202, "middle"),
    ([(610, 156), (700, 156)], "Serve handle", 655, 150, "middle"),
    ([(700, 186), (610, 186)], "tokens", 655, 202, "middle"),
    ([(440, 300), (440, 208)], "model calls over HTTP", 432, 236, "end"),
    ([(540, 208), (540, 266)], "create, exec,", 548, 232, "start"),
    ([(610, 326), (660, 326)], "workspace", 635, 318, "middle"),
    ([(150, 208), (150, 290)], "finished groups", 160, 252, "start"),
    ([(150, 354), (150, 430)], "whole groups", 160, 396, "start"),
    (
        [(260, 462), (895, 462), (895, 208)],
        "WeightSync: new weights to every replica (object store, or NCCL/gloo broadcast)",
        580,
        454,
        "middle",
    ),
]
# second lines of two arrow labels
NOTES = [
    ("/episodes/{id}/attempts/{n}/v1", 432, 250, "end"),
    ("destroy", 548, 246, "start"),
    ("copy", 635, 342, "middle"),
]


def _text(
    x: float,
    y: float,
    text: str,
    size: int = 12,
    weight: str = "normal",
    anchor: str = "middle",
    fill: str = "#202124",
) -> str:
    return (
        f'<text x="{x}" y="{y}" font-size="{size}" font-weight="{weight}" '
        f'text-anchor="{anchor}" fill="{fill}">{escape(text)}</text>'
    )


def _box(
    x: int, y: int, w: int, h: int, colours: tuple[str, str], title: str, lines: list[str]
) -> list[str]:
    fill, stroke = colours
    out = [
        f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="8" fill="{fill}" '
        f'stroke="{stroke}" stroke-width="1.5"/>'
    ]
    if len(lines) == 1 and h < 50:  # one-line box: title and line side by side
        out.append(_text(x + w / 2, y + h / 2 + 5, f"{title}: {lines[0]}", size=14, weight="bold"))
        return out
    out.append(_text(x + w / 2, y + 20, title, size=14, weight="bold"))
    out += [_text(x + w / 2, y + 38 + 15 * i, line) for i, line in enumerate(lines)]
    return out


def _arrow(points: list[tuple[int, int]]) -> str:
    path = " ".join(f"{x},{y}" for x, y in points)
    return (
        f'<polyline points="{path}" fill="none" stroke="#5f6368" stroke-width="1.6" '
        'marker-end="url(#head)"/>'
    )


def render() -> str:
    """The SVG, as text."""
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="Helvetica, Arial, sans-serif">',
        "<title>OpenForge: the actors of a run and how an episode flows through them</title>",
        '<defs><marker id="head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" '
        'fill="#5f6368"/></marker></defs>',
        f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
        f'<rect x="12" y="12" width="{WIDTH - 24}" height="{HEIGHT - 24}" rx="12" fill="none" '
        'stroke="#9aa0a6" stroke-width="1.2" stroke-dasharray="6 4"/>',
        _text(
            24,
            30,
            "Ray cluster: one machine or a cloud cluster, the same code",
            size=12,
            anchor="start",
            fill="#5f6368",
        ),
    ]
    x, y, w, h, label = SANDBOX_FRAME
    fill, stroke = SANDBOX
    parts.append(
        f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="8" fill="{fill}" '
        f'stroke="{stroke}" stroke-width="1.5" stroke-dasharray="5 3"/>'
    )
    parts.append(_text(x + w / 2, y + 18, label, size=11, fill="#7a5200"))
    hx, hy, hw, hh, title, lines = HARNESS
    parts += _box(hx, hy, hw, hh, ("#ffffff", stroke), title, lines)
    for box in BOXES:
        parts += _box(*box)
    for points, label, lx, ly, anchor in ARROWS:
        parts.append(_arrow(points))
        parts.append(_text(lx, ly, label, size=11, anchor=anchor, fill="#3c4043"))
    for label, lx, ly, anchor in NOTES:
        parts.append(_text(lx, ly, label, size=11, anchor=anchor, fill="#3c4043"))
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main() -> int:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(render(), encoding="utf-8")
    print(OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Small HTML builders for ``forge view``: a page frame, tables, links and line charts drawn
as inline SVG on the server (no script, no external asset: the pages work offline)."""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from urllib.parse import quote

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222}
header{background:#1f2937;color:#fff;padding:8px 16px}header a{color:#cbd5e1;margin-right:16px}
main{padding:12px 16px}table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f4f6}.num{text-align:right;font-variant-numeric:tabular-nums}
.flag{background:#fef3c7}.bad{background:#fee2e2}.ok{background:#dcfce7}
.charts{display:flex;flex-wrap:wrap;gap:12px}.chart{border:1px solid #ddd;padding:4px}
.msg{border:1px solid #ddd;margin:6px 0;padding:6px;white-space:pre-wrap;word-break:break-word}
.role{font-weight:bold;color:#374151}.tool{background:#eef2ff}.sys{background:#f9fafb}
.tok{font-family:monospace;white-space:pre-wrap;border-radius:2px}.masked{color:#9ca3af}
.cols{display:flex;gap:12px}.cols>div{flex:1;min-width:0}.screen img{border:1px solid #ccc}
"""


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def link(href: str, text: object) -> str:
    return f'<a href="{esc(href)}">{esc(text)}</a>'


def q(value: str) -> str:
    return quote(value, safe="")


def page(title: str, body: str, run: str) -> str:
    nav = f'<a href="/">run {esc(run)}</a>' + '<a href="/episodes">episodes</a>'
    nav += '<a href="/compare">compare</a>'
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title>"
        f"<style>{STYLE}</style></head><body><header>{nav}</header>"
        f"<main><h2>{esc(title)}</h2>{body}</main></body></html>"
    )


def table(head: Sequence[str], rows: Iterable[Sequence[str]], classes: Iterable[str] = ()) -> str:
    """``rows`` hold cell HTML (already escaped); ``classes``: a CSS class per row."""
    cls = list(classes)
    out = ["<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>"]
    for i, row in enumerate(rows):
        c = f' class="{cls[i]}"' if i < len(cls) and cls[i] else ""
        out.append(f"<tr{c}>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>")
    return "".join(out) + "</table>"


def num(value: object, digits: int = 3) -> str:
    if isinstance(value, float):
        return f'<span class="num">{value:.{digits}f}</span>'
    return f'<span class="num">{esc(value)}</span>'


def chart(title: str, xs: Sequence[float], ys: Sequence[float | None], w: int = 300, h: int = 150):
    """A line chart of (x, y) points (None: no point), with its first, last and range shown."""
    pts = [(x, y) for x, y in zip(xs, ys, strict=False) if y is not None and math.isfinite(y)]
    head = f"<div class='chart' data-metric='{esc(title)}'><b>{esc(title)}</b>"
    if not pts:
        return head + "<div>no data</div></div>"
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(p[1] for p in pts), max(p[1] for p in pts)
    sx = (w - 20) / ((x1 - x0) or 1)
    sy = (h - 20) / ((y1 - y0) or 1)
    line = " ".join(f"{10 + (x - x0) * sx:.1f},{h - 10 - (y - y0) * sy:.1f}" for x, y in pts)
    svg = (
        f"<svg width='{w}' height='{h}' role='img'><rect width='{w}' height='{h}' fill='#fff'/>"
        f"<polyline fill='none' stroke='#2563eb' stroke-width='1.5' points='{line}'/></svg>"
    )
    last = pts[-1][1]
    return (
        f"{head}{svg}<div>last <span class='last'>{last:.4g}</span> "
        f"(min {y0:.4g}, max {y1:.4g}, {len(pts)} points)</div></div>"
    )


def logprob_colour(logprob: float) -> str:
    """Green for a likely token, red for an unlikely one (by its probability)."""
    p = math.exp(max(-20.0, min(0.0, logprob)))
    return f"hsl({int(120 * p)},70%,85%)"

"""GUI screenshots with the model's next action drawn on them, for looking at GUI episodes.

:func:`draw_actions` marks one screenshot with the tool calls of ``forge.harnesses.gui_actions``
the model made after seeing it: a ring with a centre dot at a click (two rings for a double
click), a ring and an arrow along the wheel's direction for a scroll, an arrow from start to end
for a drag, and a caption naming every call (typed text, keys, address, answer). Calls are
numbered in order. Coordinates are read as the harness reads them: 0..1000 across the image.

:func:`marked_turns` does that for every turn of an episode: the last image of the turn's
request (the screenshot the model acted on) with the turn's calls.
``python -m forge.observe.gui_marks EPISODES.jsonl OUT_DIR`` writes them as PNG files, reading
the pixels from the ``images`` folder beside the episode records.
"""

from __future__ import annotations

import io
import json
import math
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

from forge.harnesses.gui_actions import to_pixels

COLOURS = ((230, 20, 20), (20, 110, 230), (20, 160, 60), (200, 120, 0))
RADIUS = 12
CAPTION_LIMIT = 60


def _call(call: Any) -> tuple[str, dict[str, Any]]:
    """(name, arguments) of a tool call: a ToolCall, or its dict form in an episode record."""
    if isinstance(call, dict):
        name, raw = call.get("name", ""), call.get("arguments", "")
    else:
        name, raw = call.name, call.arguments
    try:
        args = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        args = None
    return str(name), args if isinstance(args, dict) else {}


def _point(args: dict[str, Any], size: tuple[int, int], kx: str = "x", ky: str = "y"):
    try:
        return to_pixels(float(args[kx]), float(args[ky]), *size)
    except (KeyError, TypeError, ValueError):
        return None


def _ring(draw: ImageDraw.ImageDraw, p: tuple[int, int], r: int, colour: tuple) -> None:
    draw.ellipse((p[0] - r, p[1] - r, p[0] + r, p[1] + r), outline=colour, width=3)


def _arrow(draw: ImageDraw.ImageDraw, a: tuple[int, int], b: tuple[int, int], colour: tuple):
    draw.line((a, b), fill=colour, width=3)
    angle = math.atan2(b[1] - a[1], b[0] - a[0])
    for side in (-0.5, 0.5):
        tip = (b[0] - 14 * math.cos(angle + side), b[1] - 14 * math.sin(angle + side))
        draw.line((b, tip), fill=colour, width=3)


def _caption(name: str, args: dict[str, Any]) -> str:
    shown = {k: v for k, v in args.items() if k not in ("x", "y", "x2", "y2")}
    where = [f"{args[k]}" for k in ("x", "y") if k in args]
    text = name + (f"({', '.join(where)})" if where else "")
    if "x2" in args or "y2" in args:
        text += f" -> ({args.get('x2')}, {args.get('y2')})"
    if shown:
        text += " " + " ".join(f"{k}={v!r}" for k, v in shown.items())
    return text if len(text) <= CAPTION_LIMIT else text[: CAPTION_LIMIT - 3] + "..."


def draw_actions(png: bytes, calls: Iterable[Any]) -> bytes:
    """``png`` (any image Pillow reads) with ``calls`` drawn on it, as PNG bytes."""
    image = Image.open(io.BytesIO(png)).convert("RGB")
    draw = ImageDraw.Draw(image)
    size = image.size
    captions: list[tuple[str, tuple]] = []
    for i, raw in enumerate(calls):
        name, args = _call(raw)
        colour = COLOURS[i % len(COLOURS)]
        captions.append((f"{i + 1}. {_caption(name, args)}", colour))
        p = _point(args, size)
        if p is None:
            continue
        if name in ("click", "double_click", "scroll", "drag"):
            _ring(draw, p, RADIUS, colour)
            draw.ellipse((p[0] - 2, p[1] - 2, p[0] + 2, p[1] + 2), fill=colour)
            draw.text((p[0] + RADIUS + 2, p[1] - RADIUS), str(i + 1), fill=colour)
        if name == "double_click":
            _ring(draw, p, RADIUS + 6, colour)
        elif name == "drag":
            end = _point(args, size, "x2", "y2")
            if end is not None:
                _arrow(draw, p, end, colour)
        elif name == "scroll":
            dx, dy = _number(args.get("dx")), _number(args.get("dy"))
            if dx or dy:
                length = 40 / math.hypot(dx, dy)
                _arrow(draw, p, (round(p[0] + dx * length), round(p[1] + dy * length)), colour)
    for j, (text, colour) in enumerate(captions):
        y = 4 + 14 * j
        box = draw.textbbox((4, y), text)
        draw.rectangle(
            (box[0] - 2, box[1] - 1, box[2] + 2, box[3] + 1), fill=(255, 255, 255), outline=colour
        )
        draw.text((4, y), text, fill=colour)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def _number(value: Any) -> float:
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0


def _field(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


def marked_turns(episode: Any, image: Callable[[str], bytes]) -> list[tuple[int, bytes]]:
    """(turn index, marked PNG) for every turn whose request held an image: its last image (by
    sha256, its bytes from ``image``) with the turn's tool calls. ``episode`` is an Episode or
    its record (a dict from an episodes JSON line)."""
    out = []
    for turn in _field(episode, "turns") or []:
        shas = _field(turn, "images") or []
        if not shas:
            continue
        calls = _field(turn, "tool_calls") or []
        out.append((int(_field(turn, "index") or 0), draw_actions(image(shas[-1]), calls)))
    return out


def episode_images(episode: Any) -> Callable[[str], bytes]:
    """The pixels of an in-memory Episode's images, by sha256."""
    images = _field(episode, "images") or {}
    return lambda sha: images[sha].data


def folder_images(folder: Path) -> Callable[[str], bytes]:
    """The pixels of images written beside episode records (``folder/images/<sha256>.*``)."""

    def read(sha: str) -> bytes:
        for path in sorted((folder / "images").glob(f"{sha}.*")):
            return path.read_bytes()
        raise FileNotFoundError(f"no image {sha} under {folder / 'images'}")

    return read


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m forge.observe.gui_marks EPISODES.jsonl OUT_DIR", file=sys.stderr)
        return 2
    records, out = Path(argv[1]), Path(argv[2])
    out.mkdir(parents=True, exist_ok=True)
    read = folder_images(records.parent)
    written = 0
    for line in records.read_text().splitlines():
        if not line.strip():
            continue
        episode = json.loads(line)
        name = f"{episode.get('task_id', 'task')}-{episode.get('episode_id', 'e')}"
        for index, png in marked_turns(episode, read):
            (out / f"{name}-turn{index:03d}.png").write_bytes(png)
            written += 1
    print(f"wrote {written} marked screenshots to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

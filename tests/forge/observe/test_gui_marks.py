"""Screenshots with the next GUI action drawn on them."""

from __future__ import annotations

import io
import json
from pathlib import Path

from PIL import Image

from forge.harnesses.gui_actions import to_pixels
from forge.observe import gui_marks
from forge.observe.gui_marks import COLOURS, draw_actions, marked_turns
from forge.types import ToolCall

SIZE = (640, 480)


def blank() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", SIZE, (255, 255, 255)).save(out, format="PNG")
    return out.getvalue()


def pixels(png: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(png))
    assert image.size == SIZE and image.format == "PNG"
    return image.convert("RGB")


def captioned(image: Image.Image, line: int) -> bool:
    """Whether caption ``line`` (14 pixels a line, from the top left) holds drawn pixels."""
    box = [(x, y) for x in range(0, 120) for y in range(2 + 14 * line, 16 + 14 * line)]
    return sum(image.getpixel(p) != (255, 255, 255) for p in box) > 20


def call(name: str, **args: object) -> dict[str, str]:
    return {"name": name, "arguments": json.dumps(args)}


def test_click_is_a_ring_with_a_dot_at_the_point() -> None:
    image = pixels(draw_actions(blank(), [call("click", x=500, y=500)]))
    cx, cy = to_pixels(500, 500, *SIZE)
    red = COLOURS[0]
    assert image.getpixel((cx, cy)) == red  # the dot
    assert image.getpixel((cx + 12, cy)) == red and image.getpixel((cx, cy - 12)) == red  # ring
    assert image.getpixel((cx + 7, cy)) == (255, 255, 255)  # inside the ring: the screen
    assert image.getpixel((600, 400)) == (255, 255, 255)  # elsewhere untouched
    assert captioned(image, 0)


def test_drag_is_an_arrow_and_calls_are_numbered_in_colours() -> None:
    calls = [
        ToolCall("c1", "type", '{"text": "hi"}'),
        ToolCall("c2", "drag", '{"x": 100, "y": 500, "x2": 900, "y2": 500}'),
    ]
    image = pixels(draw_actions(blank(), calls))
    start, end = to_pixels(100, 500, *SIZE), to_pixels(900, 500, *SIZE)
    blue = COLOURS[1]  # the second call's colour
    assert image.getpixel(((start[0] + end[0]) // 2, start[1])) == blue  # the shaft
    assert image.getpixel((end[0] - 10, end[1] - 5)) == blue  # a barb of the head
    assert image.getpixel((start[0] + 12, start[1] - 1)) == blue  # the ring at the start
    assert image.getpixel(((start[0] + end[0]) // 2, start[1] + 30)) == (255, 255, 255)


def test_scroll_arrow_points_along_the_wheel() -> None:
    image = pixels(draw_actions(blank(), [call("scroll", x=500, y=500, dy=3)]))
    cx, cy = to_pixels(500, 500, *SIZE)
    assert image.getpixel((cx, cy + 30)) == COLOURS[0]  # below: scrolling down
    assert image.getpixel((cx, cy - 30)) == (255, 255, 255)


def test_malformed_and_pointless_calls_only_caption() -> None:
    calls = [call("click", x="left"), {"name": "done", "arguments": "{not json"}]
    image = pixels(draw_actions(blank(), calls))
    cx, cy = to_pixels(500, 500, *SIZE)
    assert image.getpixel((cx, cy)) == (255, 255, 255)
    assert captioned(image, 0) and captioned(image, 1)


def test_marked_turns_and_the_command(tmp_path: Path) -> None:
    shot = blank()
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "abc.png").write_bytes(shot)
    episode = {
        "task_id": "t",
        "episode_id": "e1",
        "turns": [
            {"index": 0, "images": ["abc"], "tool_calls": [call("click", x=500, y=500)]},
            {"index": 1, "images": [], "tool_calls": []},
            {"index": 2, "images": ["old", "abc"], "tool_calls": [call("done", answer="x")]},
        ],
    }
    marked = marked_turns(episode, gui_marks.folder_images(tmp_path))
    assert [i for i, _ in marked] == [0, 2]
    cx, cy = to_pixels(500, 500, *SIZE)
    assert pixels(marked[0][1]).getpixel((cx, cy)) == COLOURS[0]
    assert pixels(marked[1][1]).getpixel((cx, cy)) == (255, 255, 255)
    records = tmp_path / "episodes.jsonl"
    records.write_text(json.dumps(episode) + "\n")
    assert gui_marks.main(["x", str(records), str(tmp_path / "out")]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "t-e1-turn000.png",
        "t-e1-turn002.png",
    ]

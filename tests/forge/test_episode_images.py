"""Content-addressed screenshots beside the episode records."""

from __future__ import annotations

import hashlib

import pytest

from forge.episode_images import image_file, load_images, read_image, write_images
from forge.types import Episode, Turn, image_part

PNG = b"\x89PNG\r\n\x1a\n" + b"pixels"


def _episode(name: str, *images: bytes) -> Episode:
    parts = [image_part(data, "image/png") for data in images]
    turn = Turn(name, 0, 0, "chat", {}, [1], [2], [-1.0], "", [], "stop", 0, 0.0, 0.0)
    turn.images = [p.sha256 for p in parts]
    episode = Episode(name, "t", 0, "react", 1.0, "ok", turns=[turn])
    episode.images = {p.sha256: p for p in parts}
    return episode


def test_each_distinct_image_is_written_once(tmp_path) -> None:
    other = PNG + b"2"
    assert write_images(tmp_path, [_episode("a", PNG), _episode("b", PNG, other)]) == 2
    assert write_images(tmp_path, [_episode("c", other)]) == 0  # already there
    sha = hashlib.sha256(PNG).hexdigest()
    assert image_file(tmp_path, sha, "image/png").read_bytes() == PNG
    assert sorted(p.name for p in (tmp_path / "images").iterdir()) == sorted(
        f"{hashlib.sha256(x).hexdigest()}.png" for x in (PNG, other)
    )
    assert read_image(tmp_path, sha).mime == "image/png"


def test_pixels_come_back_for_an_episode_read_from_its_line(tmp_path) -> None:
    episode = _episode("a", PNG)
    write_images(tmp_path, [episode])
    record = episode.to_dict()
    assert "images" not in record and record["turns"][0]["images"] == list(episode.images)
    back = Episode(**{**record, "turns": [Turn(**t) for t in record["turns"]], "segments": []})
    assert load_images(tmp_path, back).images[record["turns"][0]["images"][0]].data == PNG
    with pytest.raises(FileNotFoundError):
        read_image(tmp_path, "0" * 64)

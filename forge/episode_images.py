"""Episodes' screenshots on disk: content-addressed files beside the episode records.

An episode's JSON line keeps each image as a reference (``{"sha256", "mime"}`` in the recorded
request, the sha256 list in ``Turn.images``); the bytes travel with the Episode in memory
(:attr:`forge.types.Episode.images`) and are written once per distinct image to
``<folder>/images/<sha256>.<ext>``, before the line that refers to them is appended, so no
record ever points at a missing file. Writes are atomic (a temporary file renamed into place)
and synced; an image already there is not written again.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from forge.types import Episode, ImagePart

EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp"}
MIMES = {ext: mime for mime, ext in EXTENSIONS.items()}


def image_file(folder: str | os.PathLike[str], sha256: str, mime: str) -> Path:
    """Where the image ``sha256`` of type ``mime`` lies under ``folder``."""
    return Path(folder) / "images" / f"{sha256}.{EXTENSIONS.get(mime, 'bin')}"


def write_images(folder: str | os.PathLike[str], episodes: Iterable[Episode]) -> int:
    """Write every image of ``episodes`` not yet under ``folder/images``; returns how many
    files were written."""
    written = 0
    for episode in episodes:
        for image in episode.images.values():
            target = image_file(folder, image.sha256, image.mime)
            if target.exists():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(image.data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, target)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            written += 1
    return written


def read_image(folder: str | os.PathLike[str], sha256: str) -> ImagePart:
    """The image ``sha256`` written under ``folder`` (any extension), as an :class:`ImagePart`."""
    for path in sorted((Path(folder) / "images").glob(f"{sha256}.*")):
        mime = MIMES.get(path.suffix.lstrip("."))
        if mime is not None:
            return ImagePart(mime=mime, sha256=sha256, data=path.read_bytes())
    raise FileNotFoundError(f"no image {sha256} under {Path(folder) / 'images'}")


def load_images(folder: str | os.PathLike[str], episode: Episode) -> Episode:
    """Put back the pixels of an episode read from its JSON line (``Turn.images``)."""
    for turn in episode.turns:
        for sha in turn.images:
            if sha not in episode.images:
                episode.images[sha] = read_image(folder, sha)
    return episode

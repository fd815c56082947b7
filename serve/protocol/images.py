"""Images in requests: the wire forms of the three protocols -> :class:`forge.types.ImagePart`.

An image arrives as a ``data:`` URL (Chat ``image_url``, Responses ``input_image``), as base64
with a media type (Anthropic's ``source: {type: base64, ...}``) or, only where the server is
configured with a local image directory, as a ``file://`` URL or a path inside that directory.
Remote (``http``) URLs are refused: the server fetches nothing, and a training record must hold
the exact bytes the model saw.

Validation is strict and every refusal is a 400 naming the field: base64 that does not decode,
a media type outside :data:`MIME_TYPES`, bytes that are not that type (checked by their magic
number), or more than :attr:`ImageOptions.max_bytes` bytes. The limits are set per server with
:func:`image_options` (a context variable, so the protocol parsers keep their one-argument
signature).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import contextvars
import copy
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forge.episode_images import EXTENSIONS
from forge.types import ImagePart, image_part
from serve.protocol.common import at, expect_dict, invalid, opt_str, req_str

DEFAULT_MAX_IMAGE_BYTES = 10 * 1024 * 1024
MIME_TYPES = tuple(EXTENSIONS)


@dataclass(frozen=True)
class ImageOptions:
    """What images a server accepts: ``max_bytes`` per image (decoded), and ``local_dir``,
    the one directory ``file://`` URLs and paths may read from (None: none)."""

    max_bytes: int = DEFAULT_MAX_IMAGE_BYTES
    local_dir: str | None = None


_DEFAULTS = ImageOptions()
_OPTIONS: contextvars.ContextVar[ImageOptions | None] = contextvars.ContextVar(
    "forge_image_options", default=None
)


@contextlib.contextmanager
def image_options(options: ImageOptions | None) -> Iterator[None]:
    """Parse requests under ``options`` (None: the defaults) inside the ``with`` block."""
    token = _OPTIONS.set(options)
    try:
        yield
    finally:
        _OPTIONS.reset(token)


def current_options() -> ImageOptions:
    return _OPTIONS.get() or _DEFAULTS


def sniff_mime(data: bytes) -> str | None:
    """The image type ``data`` starts like, by magic number; None for anything else."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _checked(data: bytes, mime: str, path: str) -> ImagePart:
    limit = current_options().max_bytes
    if len(data) > limit:
        raise invalid(path, f"image is {len(data)} bytes, over the limit of {limit}")
    if not data:
        raise invalid(path, "image is empty")
    actual = sniff_mime(data)
    if actual != mime:
        found = actual or "not a PNG, JPEG, GIF or WebP image"
        raise invalid(path, f"image data does not match its media type {mime!r} ({found})")
    return image_part(data, mime, path)


def from_base64(data: str, mime: str, path: str, mime_path: str | None = None) -> ImagePart:
    """An image given as base64 text and a media type (Anthropic's base64 source)."""
    mime = mime.lower()
    if mime not in MIME_TYPES:
        raise invalid(
            mime_path or path, f"unsupported image type {mime!r:.60}; expected one of {MIME_TYPES}"
        )
    limit = current_options().max_bytes
    if len(data) > (limit + 2) // 3 * 4 + 4:  # refuse before decoding what is plainly too big
        raise invalid(path, f"image is over the limit of {limit} bytes")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise invalid(path, "image data is not valid base64") from None
    return _checked(raw, mime, path)


def from_url(url: str, path: str) -> ImagePart:
    """An image given as a URL: ``data:<mime>;base64,<data>``, or a local file where allowed."""
    if url.startswith("data:"):
        header, comma, data = url[5:].partition(",")
        if not comma or not header.endswith(";base64"):
            raise invalid(path, "expected a data URL of the form data:<mime type>;base64,<data>")
        return from_base64(data, header[: -len(";base64")], path)
    if url.startswith(("http://", "https://")):
        raise invalid(path, "remote image URLs are not fetched; send a base64 data URL")
    if url.startswith("file://") or url.startswith("/"):
        return _from_file(url[len("file://") :] if url.startswith("file://") else url, path)
    raise invalid(path, f"expected a data: URL, got {url[:40]!r}")


def _from_file(name: str, path: str) -> ImagePart:
    root = current_options().local_dir
    if not root:
        raise invalid(path, "local image files are not allowed on this server; send a data URL")
    base = Path(root).resolve()
    target = Path(os.path.realpath(name))
    if not target.is_relative_to(base):
        raise invalid(path, f"local images must lie under {base}")
    try:
        size = target.stat().st_size
        limit = current_options().max_bytes
        if size > limit:
            raise invalid(path, f"image is {size} bytes, over the limit of {limit}")
        data = target.read_bytes()
    except OSError as e:
        raise invalid(path, f"cannot read image file: {e.strerror}") from None
    mime = sniff_mime(data)
    if mime is None:
        raise invalid(path, "file is not a PNG, JPEG, GIF or WebP image")
    return _checked(data, mime, path)


# --------------------------------------------------------------------------------------------
# The wire forms, one parser per protocol: (part, its path) -> ImagePart


def chat_image(part: dict[str, Any], path: str) -> ImagePart:
    """Chat ``{"type": "image_url", "image_url": {"url": ..., "detail": ...}}`` (or a bare
    URL string in ``image_url``)."""
    value = part.get("image_url")
    if isinstance(value, str):
        return from_url(value, at(path, "image_url"))
    spec = expect_dict(value, at(path, "image_url"))
    opt_str(spec, "detail", at(path, "image_url"))
    return from_url(req_str(spec, "url", at(path, "image_url")), at(at(path, "image_url"), "url"))


def responses_image(part: dict[str, Any], path: str) -> ImagePart:
    """Responses ``{"type": "input_image", "image_url": "data:...", "detail": ...}``."""
    if part.get("image_url") is None and part.get("file_id") is not None:
        raise invalid(at(path, "file_id"), "is not supported: send the image as a data URL")
    opt_str(part, "detail", path)
    return from_url(req_str(part, "image_url", path), at(path, "image_url"))


def anthropic_image(block: dict[str, Any], path: str) -> ImagePart:
    """Anthropic ``{"type": "image", "source": {"type": "base64", "media_type", "data"}}``."""
    source_path = at(path, "source")
    source = expect_dict(block.get("source"), source_path)
    kind = source.get("type")
    if kind != "base64":
        raise invalid(
            at(source_path, "type"), f"expected 'base64' (nothing is fetched), got {kind!r:.40}"
        )
    mime = req_str(source, "media_type", source_path)
    data = req_str(source, "data", source_path)
    return from_base64(data, mime, at(source_path, "data"), at(source_path, "media_type"))


# --------------------------------------------------------------------------------------------
# Records: a request body with each image's data replaced by its reference

_PATH_TOKEN = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def image_ref(image: ImagePart) -> dict[str, str]:
    """What a record keeps of an image: its content address and type (the bytes are written
    once beside the episodes, ``images/<sha256>.<ext>``)."""
    return {"sha256": image.sha256, "mime": image.mime}


def redact_images(body: dict[str, Any], images: list[ImagePart]) -> dict[str, Any]:
    """A copy of ``body`` with the data of each of ``images`` (at its :attr:`ImagePart.field`)
    replaced by :func:`image_ref`; ``body`` itself is unchanged. Without images, ``body``."""
    if not images:
        return body
    out = copy.deepcopy(body)  # strings are shared, not copied
    for image in images:
        keys: list[str | int] = [
            name if name else int(index) for name, index in _PATH_TOKEN.findall(image.field)
        ]
        if not keys:
            continue
        parent: Any = out
        try:
            for key in keys[:-1]:
                parent = parent[key]
            parent[keys[-1]]  # the field must exist
        except (KeyError, IndexError, TypeError):
            raise ValueError(f"image field {image.field!r} is not in the body") from None
        parent[keys[-1]] = image_ref(image)
    return out

"""A request body: bytes -> one JSON object, strictly, before any protocol parser reads it.

Everything past this point may echo, render or tokenize what the client sent, so the body is
held to what every later step can handle: UTF-8 text, standard JSON (no ``NaN``, no
``Infinity``, no number that overflows a float), nesting at most :data:`MAX_JSON_DEPTH` deep and
no string (or key) holding a lone surrogate (``"\\ud800"``, which no UTF-8 encoder can write
back). Every refusal is a 400 naming the field: ``body`` or the path inside it.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from serve.protocol.common import ProtocolError, at, invalid

# Deeper than any real request (a tool's JSON schema nests a few dozen levels at most), and
# shallow enough that every later json.dumps of the body (or a part of it) cannot recurse out.
MAX_JSON_DEPTH = 128


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def loads_strict(text: str | bytes) -> Any:
    """``text`` as standard JSON; raises ``ValueError`` (NaN, Infinity, overflowing numbers,
    integers past Python's digit limit) or ``RecursionError`` (absurd nesting)."""
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)


def parse_body(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object; :class:`ProtocolError` (400) naming the field otherwise."""
    if not raw.strip():
        raise ProtocolError(400, "body: is empty; expected a JSON object", "body")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ProtocolError(400, f"body: is not valid UTF-8: {e}", "body") from None
    try:
        body = loads_strict(text)
    except RecursionError:
        raise ProtocolError(400, "body: is nested too deeply", "body") from None
    except ValueError as e:
        raise ProtocolError(400, f"body: is not valid JSON: {e}", "body") from None
    if not isinstance(body, dict):
        kind = "an array" if isinstance(body, list) else type(body).__name__
        raise ProtocolError(400, f"body: expected a JSON object, got {kind}", "body")
    # What the walk looks for can only come from what the text holds: a lone surrogate from a
    # \uD800-\uDFFF escape (UTF-8 cannot encode one), a level deeper than the limit from more
    # brackets than the limit. Most bodies hold neither, and are not walked at all.
    texts = _SURROGATE_ESCAPE.search(raw) is not None
    depth = raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH
    if texts or depth:
        check_json(body, texts=texts)
    return body


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def check_json(body: dict[str, Any], *, texts: bool = True) -> None:
    """Raise a 400 naming the first field nested deeper than :data:`MAX_JSON_DEPTH` or (with
    ``texts``) holding text that is not valid Unicode (a lone surrogate, in a value or a key)."""
    # (value, depth, path): the path is a linked tuple (parent, key), rendered only on error.
    stack: list[tuple[Any, int, Any]] = [(body, 1, None)]
    while stack:
        value, depth, path = stack.pop()
        if isinstance(value, str):
            if texts:
                _check_text(value, path)
            continue
        if not isinstance(value, (dict, list)):
            continue
        if depth > MAX_JSON_DEPTH:
            raise invalid(_render(path), f"is nested more than {MAX_JSON_DEPTH} levels deep")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            child = (path, key)
            if texts and isinstance(key, str):
                _check_text(key, child)
            stack.append((item, depth + 1, child))


def _check_text(text: str, path: Any) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise invalid(_render(path), "is not valid Unicode (a lone surrogate)") from None


def _render(path: Any) -> str:
    keys: list[str | int] = []
    while path is not None:
        path, key = path
        keys.append(key)
    out = ""
    for key in reversed(keys):
        if isinstance(key, str):  # a key that is itself bad is shown escaped
            key = key.encode("utf-8", "backslashreplace").decode("utf-8")
        out = at(out, key)
    return out or "body"

"""Shared pieces of the wire protocols: errors, wire options and validation helpers (the events
of streamed answers: :mod:`serve.protocol.sse`).

Every protocol module (``chat``, ``responses``, ``anthropic``) exposes the same three functions:

- ``parse_request(body) -> (ChatRequest, WireOptions)``: strict validation of a client body into
  the internal :class:`~forge.types.ChatRequest`; raises :class:`ProtocolError` naming the field.
- ``render_response(completion, opts) -> dict``: the protocol's JSON answer.
- ``render_stream(live, opts) -> AsyncIterator[bytes]``: the same answer as server-sent events,
  sent as a :class:`~serve.live.LiveCompletion` produces it (content text as it is sampled).
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from forge.types import ImagePart, TextPart

WireProtocol = Literal["chat", "responses", "anthropic"]


class ProtocolError(Exception):
    """A request the server answers with an error status, in the protocol's own error format.

    ``field`` names the offending request field (``messages[2].content``) when there is one;
    ``retry_after`` (seconds) becomes a ``Retry-After`` header, meant for 503 during weight swaps.
    """

    def __init__(
        self,
        status: int,
        message: str,
        field: str | None = None,
        *,
        retry_after: float | None = None,
        error_type: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field
        self.retry_after = retry_after
        self.error_type = error_type


_ID_PREFIX = os.urandom(6).hex()  # this process's; a counter after it (uuid4 costs a syscall)
_ID_COUNTER = itertools.count()


def _new_prefix() -> None:
    global _ID_PREFIX
    _ID_PREFIX = os.urandom(6).hex()


os.register_at_fork(after_in_child=_new_prefix)  # a forked child counts on its own


def new_request_id() -> str:
    """A request id unique across processes (a random prefix per process, then a count): 24
    hex digits, as the ids the protocols answer with (``chatcmpl-...``, ``msg_...``) carry."""
    return f"{_ID_PREFIX}{next(_ID_COUNTER) & 0xFFFFFFFFFFFF:012x}"


def invalid(field: str, problem: str) -> ProtocolError:
    """A 400 whose message starts with the field at fault: ``"messages[2].role: ..."``."""
    return ProtocolError(400, f"{field}: {problem}", field)


@dataclass
class WireOptions:
    """How to answer one request on the wire; the Policy never sees these.

    ``tool_kinds`` maps each offered tool's internal name to its :attr:`forge.types.Tool.kind`,
    so a renderer can turn a call back into the client's own tool type. ``echo`` holds request
    fields a protocol repeats in its answer (the Responses API echoes ``tools`` and friends).
    ``max_tokens_set`` tells whether the client gave a token limit (if not, the request carries
    :class:`~forge.types.SamplingParams`' default and a backend may substitute its own).
    """

    protocol: WireProtocol
    stream: bool = False
    include_usage: bool = False
    return_token_ids: bool = False
    model: str = ""
    request_id: str = field(default_factory=new_request_id)
    tool_kinds: dict[str, str] = field(default_factory=dict)
    echo: dict[str, Any] = field(default_factory=dict)
    max_tokens_set: bool = False


# --------------------------------------------------------------------------------------------
# Tool kinds: "function", "custom", "namespace:NS" (a function inside a Codex namespace group),
# "namespace:NS:custom" (a free-text tool inside one). Namespaced tools are named "NS__TOOL".

NAMESPACE_SEP = "__"


def namespace_kind(namespace: str, custom: bool) -> str:
    return f"namespace:{namespace}:custom" if custom else f"namespace:{namespace}"


def split_kind(kind: str) -> tuple[str | None, bool]:
    """``kind`` -> (namespace or None, is free-text custom tool)."""
    if kind.startswith("namespace:"):
        rest = kind[len("namespace:") :]
        if rest.endswith(":custom"):
            return rest[: -len(":custom")], True
        return rest, False
    return None, kind == "custom"


def custom_input_schema(description: str = "") -> dict[str, Any]:
    """The JSON schema standing in for a free-text tool: one required string ``input``."""
    prop: dict[str, Any] = {"type": "string"}
    if description:
        prop["description"] = description
    return {"type": "object", "properties": {"input": prop}, "required": ["input"]}


def custom_arguments(text: str) -> str:
    """Free text -> the JSON arguments of its stand-in function call."""
    return json.dumps({"input": text}, ensure_ascii=False)


def custom_input(arguments: str) -> str:
    """The stand-in function call's JSON arguments -> the free text (raw text if unparsable)."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    if isinstance(value, dict) and isinstance(value.get("input"), str):
        return value["input"]
    return arguments


# --------------------------------------------------------------------------------------------
# Error bodies


_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    410: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    503: "service_unavailable",
}
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    410: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}


def error_body(protocol: WireProtocol, err: ProtocolError) -> dict[str, Any]:
    """The JSON error body a client of ``protocol`` expects for ``err``."""
    if protocol == "anthropic":
        kind = err.error_type or _ANTHROPIC_TYPES.get(err.status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": err.message}}
    kind = err.error_type or _OPENAI_TYPES.get(err.status, "server_error")
    return {"error": {"message": err.message, "type": kind, "param": err.field, "code": None}}


# --------------------------------------------------------------------------------------------
# Validation helpers: each raises a 400 naming the field path.


def at(parent: str, key: str | int) -> str:
    """Field path: ``at("messages", 2)`` -> ``messages[2]``; ``at("messages[2]", "role")``."""
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else key


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def expect_dict(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise invalid(path, f"expected an object, got {_type_name(value)}")
    return value


def expect_list(value: Any, path: str, *, non_empty: bool = False) -> list[Any]:
    if not isinstance(value, list):
        raise invalid(path, f"expected an array, got {_type_name(value)}")
    if non_empty and not value:
        raise invalid(path, "must not be empty")
    return value


def req_str(obj: dict[str, Any], key: str, parent: str = "", *, non_empty: bool = False) -> str:
    path = at(parent, key)
    if key not in obj or obj[key] is None:
        raise invalid(path, "is required")
    value = obj[key]
    if not isinstance(value, str):
        raise invalid(path, f"expected a string, got {_type_name(value)}")
    if non_empty and not value:
        raise invalid(path, "must not be empty")
    return value


def opt_str(obj: dict[str, Any], key: str, parent: str = "") -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid(at(parent, key), f"expected a string, got {_type_name(value)}")
    return value


def opt_bool(obj: dict[str, Any], key: str, parent: str = "") -> bool | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, bool):
        raise invalid(at(parent, key), f"expected a boolean, got {_type_name(value)}")
    return value


def opt_number(
    obj: dict[str, Any], key: str, lo: float, hi: float, parent: str = ""
) -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    path = at(parent, key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise invalid(path, f"expected a number, got {_type_name(value)}")
    if not lo <= value <= hi:
        raise invalid(path, f"must be between {lo:g} and {hi:g}, got {value:g}")
    return float(value)


def opt_int(obj: dict[str, Any], key: str, minimum: int, parent: str = "") -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    path = at(parent, key)
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise invalid(path, f"expected an integer, got {_type_name(value)}")
    if value < minimum:
        raise invalid(path, f"must be at least {minimum}, got {value}")
    return value


def opt_stop(obj: dict[str, Any], key: str) -> list[str]:
    """``stop`` as a string or an array of strings -> list."""
    value = obj.get(key)
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    items = expect_list(value, key)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise invalid(at(key, i), f"expected a string, got {_type_name(item)}")
    return list(items)


def opt_schema(obj: dict[str, Any], key: str, parent: str) -> dict[str, Any]:
    """A tool's JSON schema (an object); absent -> an empty object schema."""
    value = obj.get(key)
    if value is None:
        return {"type": "object", "properties": {}}
    return expect_dict(value, at(parent, key))


def parse_json_object(text: str) -> dict[str, Any] | None:
    """``text`` parsed as a JSON object, or None."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


_MEDIA_PARTS = (  # a tuple: a client's unhashable value is just not in it
    "image_url",
    "input_image",
    "image",
    "input_audio",
    "input_file",
    "file",
    "document",
    "audio",
    "video",
)


ImageParser = Callable[[dict[str, Any], str], ImagePart]


def text_content(
    value: Any, path: str, text_types: tuple[str, ...] = ("text",), *, allow_none: bool = False
) -> str:
    """Message content as a string, or a list of text parts joined with newlines.

    Media parts (images, files, audio) are refused with a 400: this content is text only.
    """
    return content_parts(value, path, text_types, allow_none=allow_none)[0]


def content_parts(
    value: Any,
    path: str,
    text_types: tuple[str, ...] = ("text",),
    images: dict[str, ImageParser] | None = None,
    *,
    allow_none: bool = False,
) -> tuple[str, list[TextPart | ImagePart] | None]:
    """Message content as ``(joined text, parts)``: a string, or a list of text parts (joined
    with newlines) and image parts of the kinds ``images`` maps to their parsers. ``parts``
    is the content in order when it holds an image, else None.

    Other media parts (files, audio; images where ``images`` lacks the kind) are a 400.
    """
    if value is None and allow_none:
        return "", None
    if isinstance(value, str):
        return value, None
    if not isinstance(value, list):
        raise invalid(path, "expected string or list of content parts")
    texts: list[str] = []
    parts: list[TextPart | ImagePart] = []
    for i, part in enumerate(value):
        part_path = at(path, i)
        part = expect_dict(part, part_path)
        kind = part.get("type")
        if kind in text_types:
            text = req_str(part, "text", part_path)
            texts.append(text)
            parts.append(TextPart(text))
        elif images and isinstance(kind, str) and kind in images:
            parts.append(images[kind](part, part_path))
        elif kind in _MEDIA_PARTS:
            raise invalid(at(part_path, "type"), f"{kind!r} content is not supported here")
        else:
            wanted = " or ".join(repr(t) for t in (*text_types, *(images or {})))
            raise invalid(at(part_path, "type"), f"expected {wanted}, got {kind!r}")
    has_image = any(isinstance(p, ImagePart) for p in parts)
    return "\n".join(texts), parts if has_image else None

"""Structured output on the wire: the JSON schema a reply must follow, in each protocol's form.

- Chat Completions: ``response_format`` ``{"type": "json_schema", "json_schema": {"name",
  "schema", "strict"}}``, ``{"type": "json_object"}`` (any object) or ``{"type": "text"}``.
- Responses: ``text.format`` with the same types, the schema's fields inline
  (``{"type": "json_schema", "name", "schema", "strict"}``).
- Anthropic Messages: ``output_format`` ``{"type": "json_schema", "schema"}``.

Each parser returns the schema (``{"type": "object"}`` for ``json_object``) or None, and refuses
a malformed one with a 400 naming the field. The schema is compiled here once, without the
model's vocabulary, so a schema the grammar engine cannot follow is the client's 400, not a
failed generation.
"""

from __future__ import annotations

from typing import Any

from serve.engines.constrained import json_grammar
from serve.protocol.common import at, expect_dict, invalid

ANY_OBJECT: dict[str, Any] = {"type": "object"}


def check_schema(schema: dict[str, Any], field: str) -> dict[str, Any]:
    """``schema`` if the grammar engine can follow it; a 400 naming ``field`` otherwise."""
    try:
        json_grammar(schema)
    except ImportError:  # the set-up installs it; a bare environment says what is missing
        raise invalid(field, "structured output needs the xgrammar package") from None
    except Exception as e:
        raise invalid(field, f"is not a JSON schema this server can follow: {e}") from None
    return schema


def _by_type(spec: dict[str, Any], path: str, schema_at: str) -> dict[str, Any] | None:
    kind = spec.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return ANY_OBJECT
    if kind != "json_schema":
        raise invalid(at(path, "type"), f"expected text, json_object or json_schema, got {kind!r}")
    holder = expect_dict(spec.get(schema_at), at(path, schema_at)) if schema_at else spec
    where = at(at(path, schema_at), "schema") if schema_at else at(path, "schema")
    return check_schema(expect_dict(holder.get("schema"), where), where)


def chat_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    """The schema of a chat body's ``response_format``, or None."""
    if body.get("response_format") is None:
        return None
    spec = expect_dict(body["response_format"], "response_format")
    return _by_type(spec, "response_format", "json_schema")


def responses_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    """The schema of a Responses body's ``text.format``, or None."""
    if body.get("text") is None:
        return None
    text = expect_dict(body["text"], "text")
    if text.get("format") is None:
        return None
    return _by_type(expect_dict(text["format"], "text.format"), "text.format", "")


def anthropic_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    """The schema of a Messages body's ``output_format``, or None."""
    if body.get("output_format") is None:
        return None
    spec = expect_dict(body["output_format"], "output_format")
    if spec.get("type") != "json_schema":
        raise invalid("output_format.type", f"expected json_schema, got {spec.get('type')!r}")
    return check_schema(
        expect_dict(spec.get("schema"), "output_format.schema"), "output_format.schema"
    )

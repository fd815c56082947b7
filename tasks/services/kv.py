"""A key-value app API (an app's settings and records): get, set, list, delete.

State: ``{items: [{key, value}]}`` in insertion order; values are strings.
"""

from __future__ import annotations

from typing import Any

from tasks.services.base import Op, Param, ServiceError, app


def _find(state: dict, key: str) -> dict[str, Any] | None:
    return next((i for i in state["items"] if i["key"] == key), None)


def get(state: dict, key: str) -> dict:
    item = _find(state, key)
    if item is None:
        raise ServiceError(f"key: no key {key!r}")
    return item


def set_value(state: dict, key: str, value: str) -> dict:
    item = _find(state, key)
    if item is None:
        state["items"].append({"key": key, "value": value})
    else:
        item["value"] = value
    return {"set": key}


def list_keys(state: dict, prefix: str = "") -> list:
    return [i for i in state["items"] if i["key"].startswith(prefix)]


def delete(state: dict, key: str) -> dict:
    state["items"].remove(get(state, key))
    return {"deleted": key}


KEY = Param("string", "The key (dot-separated, e.g. app.theme).", required=True)
OPS = [
    Op("list", "List keys and values, optionally those with a prefix.", list_keys,
       {"prefix": Param("string", "Only keys that start with this.")}),
    Op("get", "The value of a key.", get, {"key": KEY}),
    Op("set", "Set a key to a value (creates it if missing).", set_value,
       {"key": KEY, "value": Param("string", "The new value.", required=True)}, writes=True),
    Op("delete", "Delete a key.", delete, {"key": KEY}, writes=True),
]  # fmt: skip


def default_seed() -> dict[str, Any]:
    return {
        "items": [
            {"key": "app.theme", "value": "light"},
            {"key": "app.language", "value": "en"},
            {"key": "notify.email", "value": "daily"},
            {"key": "notify.push", "value": "off"},
            {"key": "billing.plan", "value": "team"},
            {"key": "billing.seats", "value": "12"},
            {"key": "sync.interval_min", "value": "30"},
        ]
    }


def initial(seed: dict[str, Any]) -> dict[str, Any]:
    items = seed.get("items")
    if not isinstance(items, list) or not all(
        isinstance(i, dict) and isinstance(i.get("key"), str) for i in items
    ):
        raise ValueError("kv: a seed has items (a list of {key, value})")
    return seed


APP = app("kv", "An app's key-value settings and records.", OPS, initial, default_seed)

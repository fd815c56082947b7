"""Notes: a small document store of titled notes with tags.

State: ``{notes: [{id, title, body, tags}]}``.
"""

from __future__ import annotations

from typing import Any

from tasks.services.base import Op, Param, ServiceError, app, by_id, matches, next_id


def list_notes(state: dict, tag: str | None = None) -> list:
    return [
        {"id": n["id"], "title": n["title"], "tags": n["tags"]}
        for n in state["notes"]
        if tag is None or tag in n["tags"]
    ]


def search(state: dict, query: str) -> list:
    return [
        {"id": n["id"], "title": n["title"], "tags": n["tags"]}
        for n in state["notes"]
        if matches(query, n["title"], n["body"], n["tags"])
    ]


def read(state: dict, id: str) -> dict:
    return by_id(state["notes"], id, "note")


def create(state: dict, title: str, body: str, tags: list | None = None) -> dict:
    note = {"id": next_id(state["notes"], "n"), "title": title.strip(), "body": body,
            "tags": [t.strip().lower() for t in tags or []]}  # fmt: skip
    state["notes"].append(note)
    return {"created": note["id"]}


def update(
    state: dict,
    id: str,
    title: str | None = None,
    body: str | None = None,
    append: str | None = None,
    tags: list | None = None,
) -> dict:
    note = by_id(state["notes"], id, "note")
    if title is None and body is None and append is None and tags is None:
        raise ServiceError("update: give title, body, append or tags")
    if body is not None and append is not None:
        raise ServiceError("append: give body (replace) or append, not both")
    if title is not None:
        note["title"] = title.strip()
    if body is not None:
        note["body"] = body
    if append is not None:
        note["body"] = note["body"].rstrip("\n") + "\n" + append
    if tags is not None:
        note["tags"] = [t.strip().lower() for t in tags]
    return {"updated": id}


def delete(state: dict, id: str) -> dict:
    state["notes"].remove(by_id(state["notes"], id, "note"))
    return {"deleted": id}


ID = Param("string", "The note id (n-001).", required=True)
OPS = [
    Op("list", "List notes (id, title, tags), optionally of one tag.", list_notes,
       {"tag": Param("string", "Only notes with this tag.")}),
    Op("search", "Find notes whose title, body or tags contain every word of the query.",
       search, {"query": Param("string", "Words to look for.", required=True)}),
    Op("read", "Read one note.", read, {"id": ID}),
    Op("create", "Write a new note.", create,
       {"title": Param("string", "Title.", required=True),
        "body": Param("string", "Text.", required=True),
        "tags": Param("array", "Tags.")}, writes=True),
    Op("update", "Change a note: its title, its whole body, append a line, or its tags.",
       update,
       {"id": ID, "title": Param("string", "New title."),
        "body": Param("string", "New text (replaces the body)."),
        "append": Param("string", "A line added at the end of the body."),
        "tags": Param("array", "New tags (replace the old ones).")}, writes=True),
    Op("delete", "Delete a note.", delete, {"id": ID}, writes=True),
]  # fmt: skip


def default_seed() -> dict[str, Any]:
    return {
        "notes": [
            {"id": "n-001", "title": "Groceries", "body": "oat milk\neggs\nspinach",
             "tags": ["home"]},
            {"id": "n-002", "title": "Offsite ideas", "body": "boat tour\ncooking class",
             "tags": ["work", "offsite"]},
            {"id": "n-003", "title": "Wifi at the cabin", "body": "network: pinecone\n"
             "password: lantern-42", "tags": ["home"]},
            {"id": "n-004", "title": "Book list", "body": "The Dispossessed\nPiranesi",
             "tags": ["reading"]},
            {"id": "n-005", "title": "Budget assumptions", "body": "travel: EUR 3,200\n"
             "software: EUR 1,150\nconsulting: EUR 4,350", "tags": ["work", "finance"]},
        ]
    }  # fmt: skip


def initial(seed: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(seed.get("notes"), list):
        raise ValueError("notes: a seed has notes (a list)")
    for n in seed["notes"]:
        n.setdefault("tags", [])
        n.setdefault("body", "")
    return seed


APP = app("notes", "The user's notes (a small document store).", OPS, initial, default_seed)

"""Calendar: events, free/busy of people, invitations.

State: ``{me, events: [{id, title, start, end, attendees, location, status}], busy: {email:
[[start, end], ...]}}`` with times as ``YYYY-MM-DD HH:MM``; ``busy`` holds other people's
commitments that are not on the user's calendar.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tasks.services.base import (
    TIME_FORMAT,
    Op,
    Param,
    ServiceError,
    app,
    by_id,
    day,
    emails,
    matches,
    next_id,
    when,
)


def _live(state: dict) -> list[dict[str, Any]]:
    return [e for e in state["events"] if e.get("status", "confirmed") != "cancelled"]


def _span(start: str, end: str | None) -> tuple[str, str]:
    start = when(start, "start")
    if end is None:
        raise ServiceError("end: required")
    end = when(end, "end")
    if end <= start:
        raise ServiceError(f"end: {end} is not after start {start}")
    return start, end


def _overlaps(a: tuple[str, str], b: tuple[str, str]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def list_events(state: dict, date: str | None = None, query: str | None = None) -> list:
    d = day(date, "date") if date else None
    return [
        e
        for e in sorted(_live(state), key=lambda e: e["start"])
        if (d is None or e["start"].startswith(d))
        and (query is None or matches(query, e["title"], e.get("location"), e["attendees"]))
    ]


def get(state: dict, id: str) -> dict:
    return by_id(state["events"], id, "event")


def _conflicts(state: dict, span: tuple[str, str], skip: str | None = None) -> list[str]:
    return [
        e["id"] for e in _live(state) if e["id"] != skip and _overlaps(span, (e["start"], e["end"]))
    ]


def create(
    state: dict,
    title: str,
    start: str,
    end: str,
    attendees: list | None = None,
    location: str = "",
) -> dict:
    span = _span(start, end)
    event = {
        "id": next_id(state["events"], "ev"),
        "title": title.strip(),
        "start": span[0],
        "end": span[1],
        "attendees": emails(attendees or [], "attendees"),
        "location": location,
        "status": "confirmed",
    }
    clashes = _conflicts(state, span)
    state["events"].append(event)
    return {"created": event["id"], "conflicts": clashes}


def move(state: dict, id: str, start: str, end: str | None = None) -> dict:
    event = by_id(state["events"], id, "event")
    if end is None:  # keep the duration
        length = datetime.strptime(event["end"], TIME_FORMAT) - datetime.strptime(
            event["start"], TIME_FORMAT
        )
        end = (datetime.strptime(when(start, "start"), TIME_FORMAT) + length).strftime(TIME_FORMAT)
    span = _span(start, end)
    event["start"], event["end"] = span
    return {"moved": id, "start": span[0], "end": span[1], "conflicts": _conflicts(state, span, id)}


def cancel(state: dict, id: str) -> dict:
    event = by_id(state["events"], id, "event")
    event["status"] = "cancelled"
    return {"cancelled": id}


def invite(state: dict, id: str, attendees: list) -> dict:
    event = by_id(state["events"], id, "event")
    added = [a for a in emails(attendees, "attendees") if a not in event["attendees"]]
    event["attendees"] += added
    return {"invited": added, "event": id}


def free_busy(state: dict, email: str, date: str) -> dict:
    who = emails([email], "email")[0]
    d = day(date, "date")
    busy = [
        [e["start"], e["end"]]
        for e in _live(state)
        if e["start"].startswith(d) and (who == state["me"] or who in e["attendees"])
    ]
    busy += [list(b) for b in state.get("busy", {}).get(who, []) if b[0].startswith(d)]
    return {"email": who, "date": d, "busy": sorted(busy)}


ID = Param("string", "The event id (ev-001).", required=True)
OPS = [
    Op(
        "list",
        "List events, by start time: of one day, and/or matching a query.",
        list_events,
        {
            "date": Param("string", "A day, YYYY-MM-DD."),
            "query": Param("string", "Words in the title, location or attendees."),
        },
    ),
    Op("get", "One event.", get, {"id": ID}),
    Op(
        "free_busy",
        "When a person (or the user) is busy on a day.",
        free_busy,
        {
            "email": Param("string", "The person's address.", required=True),
            "date": Param("string", "The day, YYYY-MM-DD.", required=True),
        },
    ),
    Op(
        "create",
        "Create an event (and invite its attendees); reports events it overlaps.",
        create,
        {
            "title": Param("string", "Title.", required=True),
            "start": Param("string", "Start, YYYY-MM-DD HH:MM.", required=True),
            "end": Param("string", "End, YYYY-MM-DD HH:MM.", required=True),
            "attendees": Param("array", "Addresses to invite."),
            "location": Param("string", "Where."),
        },
        writes=True,
    ),
    Op(
        "move",
        "Move an event to a new start (keeps its length unless end is given).",
        move,
        {
            "id": ID,
            "start": Param("string", "New start, YYYY-MM-DD HH:MM.", required=True),
            "end": Param("string", "New end, YYYY-MM-DD HH:MM."),
        },
        writes=True,
    ),
    Op("cancel", "Cancel an event.", cancel, {"id": ID}, writes=True),
    Op(
        "invite",
        "Invite more people to an event.",
        invite,
        {"id": ID, "attendees": Param("array", "Addresses to invite.", required=True)},
        writes=True,
    ),
]


def _ev(n: int, title: str, start: str, end: str, attendees: list[str], location: str = ""):
    return {
        "id": f"ev-{n:03d}",
        "title": title,
        "start": start,
        "end": end,
        "attendees": attendees,
        "location": location,
        "status": "confirmed",
    }


def default_seed() -> dict[str, Any]:
    return {
        "me": "alex@northwind.example",
        "events": [
            _ev(1, "Weekly team sync", "2026-03-02 10:00", "2026-03-02 10:30",
                ["priya@northwind.example", "jordan@northwind.example"], "Room 4"),
            _ev(2, "1:1 with Priya", "2026-03-03 14:00", "2026-03-03 14:30",
                ["priya@northwind.example"]),
            _ev(3, "Dentist", "2026-03-04 08:30", "2026-03-04 09:30", []),
            _ev(4, "Q1 budget review", "2026-03-05 15:00", "2026-03-05 16:00",
                ["priya@northwind.example", "sam@lumen.example"], "Room 2"),
            _ev(5, "Vendor call: Castellan", "2026-03-06 11:00", "2026-03-06 11:45",
                ["marco@castellan.example"], "video"),
            _ev(6, "Team offsite", "2026-03-12 09:00", "2026-03-12 17:00",
                ["jordan@northwind.example", "priya@northwind.example"], "Harbor Hall"),
            _ev(7, "Flight to Lisbon", "2026-03-18 07:10", "2026-03-18 09:55", []),
        ],
        "busy": {
            "priya@northwind.example": [["2026-03-03 09:00", "2026-03-03 12:00"],
                                        ["2026-03-04 13:00", "2026-03-04 17:00"]],
            "lena@orbit.example": [["2026-03-10 12:00", "2026-03-10 13:30"]],
            "sam@lumen.example": [["2026-03-04 10:00", "2026-03-04 11:00"]],
        },
    }  # fmt: skip


def initial(seed: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(seed.get("me"), str) or not isinstance(seed.get("events"), list):
        raise ValueError("calendar: a seed has me (an address) and events (a list)")
    for e in seed["events"]:
        e.setdefault("attendees", [])
        e.setdefault("location", "")
        e.setdefault("status", "confirmed")
    seed.setdefault("busy", {})
    return seed


APP = app("calendar", "The user's calendar: events, free/busy, invitations.", OPS, initial,
          default_seed)  # fmt: skip

"""Mail: folders, threads, attachments, send, reply, forward, move.

State: ``{me, messages: [{id, folder, from, to, cc, subject, body, date, thread, read,
attachments: [{name, content}]}]}``; folders are ``inbox``, ``archive``, ``sent``, ``trash``
and any a message is moved to.
"""

from __future__ import annotations

import copy
from typing import Any

from tasks.services.base import Op, Param, ServiceError, app, by_id, emails, matches, next_id

NOW = "2026-03-02 09:00"  # the seeded mailbox's "now": sent mail carries this date


def _summary(m: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": m["id"],
        "folder": m["folder"],
        "from": m["from"],
        "to": m["to"],
        "subject": m["subject"],
        "date": m["date"],
        "read": m["read"],
        "attachments": [a["name"] for a in m.get("attachments", [])],
    }


def list_messages(state: dict, folder: str = "inbox", unread_only: bool = False) -> list:
    return [
        _summary(m)
        for m in state["messages"]
        if m["folder"] == folder and not (unread_only and m["read"])
    ]


def search(state: dict, query: str, folder: str | None = None) -> list:
    return [
        _summary(m)
        for m in state["messages"]
        if (folder is None or m["folder"] == folder)
        and matches(query, m["from"], m["to"], m["subject"], m["body"])
    ]


def read(state: dict, id: str) -> dict:
    message = by_id(state["messages"], id, "message")
    message["read"] = True
    shown = {k: v for k, v in message.items() if k != "attachments"}
    return {**shown, "attachments": [a["name"] for a in message.get("attachments", [])]}


def attachment(state: dict, id: str, name: str) -> dict:
    message = by_id(state["messages"], id, "message")
    for a in message.get("attachments", []):
        if a["name"] == name:
            return {"name": name, "content": a["content"]}
    names = ", ".join(a["name"] for a in message.get("attachments", [])) or "none"
    raise ServiceError(f"name: message {id} has no attachment {name!r} (it has: {names})")


def _new(state: dict, to: list, subject: str, body: str, cc: list, thread: str | None) -> dict:
    message = {
        "id": next_id(state["messages"], "m"),
        "folder": "sent",
        "from": state["me"],
        "to": emails(to, "to"),
        "cc": emails(cc, "cc"),
        "subject": subject,
        "body": body,
        "date": NOW,
        "thread": thread,
        "read": True,
        "attachments": [],
    }
    if not message["to"]:
        raise ServiceError("to: at least one recipient")
    message["thread"] = thread or message["id"]
    state["messages"].append(message)
    return message


def send(state: dict, to: list, subject: str, body: str, cc: list | None = None) -> dict:
    return {"sent": _new(state, to, subject, body, cc or [], None)["id"]}


def reply(state: dict, id: str, body: str, all: bool = False) -> dict:
    original = by_id(state["messages"], id, "message")
    to = [original["from"]]
    cc = [a for a in original["to"] + original.get("cc", []) if a != state["me"]] if all else []
    subject = original["subject"]
    subject = subject if subject.lower().startswith("re:") else f"Re: {subject}"
    return {"sent": _new(state, to, subject, body, cc, original["thread"])["id"]}


def forward(state: dict, id: str, to: list, body: str = "") -> dict:
    original = by_id(state["messages"], id, "message")
    quoted = f"{body}\n\n---------- Forwarded message ----------\nFrom: {original['from']}\n"
    quoted += f"Subject: {original['subject']}\n\n{original['body']}"
    message = _new(state, to, f"Fwd: {original['subject']}", quoted.strip(), [], None)
    message["attachments"] = copy.deepcopy(original.get("attachments", []))
    return {"sent": message["id"]}


def move(state: dict, id: str, folder: str) -> dict:
    message = by_id(state["messages"], id, "message")
    if message["folder"] == "sent" and folder != "trash":
        raise ServiceError("folder: sent mail moves only to trash")
    message["folder"] = folder.strip().lower()
    return {"moved": id, "folder": message["folder"]}


def folders(state: dict) -> dict:
    counts: dict[str, int] = {}
    for m in state["messages"]:
        counts[m["folder"]] = counts.get(m["folder"], 0) + 1
    return counts


ID = Param("string", "The message id (m-001).", required=True)
OPS = [
    Op("folders", "Count the messages in each folder.", folders),
    Op(
        "list",
        "List the messages in a folder, newest last.",
        list_messages,
        {
            "folder": Param("string", "Folder name (default inbox)."),
            "unread_only": Param("boolean", "Only messages not read yet."),
        },
    ),
    Op(
        "search",
        "Find messages whose sender, recipients, subject or body contain every word of the query.",
        search,
        {
            "query": Param("string", "Words to look for.", required=True),
            "folder": Param("string", "Only this folder."),
        },
    ),
    Op("read", "Read one message (marks it read).", read, {"id": ID}),
    Op(
        "attachment",
        "Read the text of one attachment of a message.",
        attachment,
        {"id": ID, "name": Param("string", "The attachment's file name.", required=True)},
    ),
    Op(
        "send",
        "Send a new message.",
        send,
        {
            "to": Param("array", "Recipient addresses.", required=True),
            "subject": Param("string", "Subject line.", required=True),
            "body": Param("string", "Message text.", required=True),
            "cc": Param("array", "Copy addresses."),
        },
        writes=True,
    ),
    Op(
        "reply",
        "Reply to a message (to its sender; all: also everyone it was sent to).",
        reply,
        {
            "id": ID,
            "body": Param("string", "Reply text.", required=True),
            "all": Param("boolean", "Reply to all."),
        },
        writes=True,
    ),
    Op(
        "forward",
        "Forward a message with its attachments.",
        forward,
        {
            "id": ID,
            "to": Param("array", "Recipient addresses.", required=True),
            "body": Param("string", "Text above the forwarded message."),
        },
        writes=True,
    ),
    Op(
        "move",
        "Move a message to a folder (archive, trash, or any name).",
        move,
        {"id": ID, "folder": Param("string", "Target folder.", required=True)},
        writes=True,
    ),
]


def _msg(n: int, sender: str, subject: str, body: str, date: str, **extra: Any) -> dict:
    return {
        "id": f"m-{n:03d}",
        "folder": "inbox",
        "from": sender,
        "to": ["alex@northwind.example"],
        "cc": [],
        "subject": subject,
        "body": body,
        "date": date,
        "thread": f"m-{n:03d}",
        "read": False,
        "attachments": [],
        **extra,
    }


def default_seed() -> dict[str, Any]:
    return {
        "me": "alex@northwind.example",
        "messages": [
            _msg(1, "priya@northwind.example", "Q1 budget review",
                 "Hi Alex, the Q1 budget review moved to Thursday. Can you send me the "
                 "final numbers by Wednesday noon? Thanks, Priya", "2026-02-26 10:12"),
            _msg(2, "noreply@travelhub.example", "Your booking confirmation",
                 "Booking reference TRV-48213. Flight to Lisbon on 2026-03-18, seat 14C.",
                 "2026-02-26 16:40", read=True),
            _msg(3, "marco@castellan.example", "Invoice 2291",
                 "Please find attached invoice 2291 for the February consulting work.",
                 "2026-02-27 08:05",
                 attachments=[{"name": "invoice-2291.txt",
                               "content": "Invoice 2291\nCastellan Consulting\nTotal due: "
                                          "EUR 4,350.00\nDue date: 2026-03-20\n"}]),
            _msg(4, "jordan@northwind.example", "Offsite planning",
                 "Team offsite is on 2026-03-12. Please tell me your dietary needs and "
                 "whether you need a hotel room.", "2026-02-27 11:30"),
            _msg(5, "newsletter@devweekly.example", "Dev Weekly #212",
                 "This week: faster builds, better tests, and the return of the monolith.",
                 "2026-02-28 07:00", read=True),
            _msg(6, "priya@northwind.example", "Re: Q1 budget review",
                 "One more thing: include the travel line separately please.",
                 "2026-02-28 09:45", thread="m-001"),
            _msg(7, "sam@lumen.example", "Contract renewal",
                 "Hi Alex, our contract renews on 2026-04-01. The new rate is EUR 95/hour. "
                 "Let me know if that works. Best, Sam", "2026-03-01 14:20"),
            _msg(8, "it@northwind.example", "Password expiry notice",
                 "Your password expires in 5 days. Change it from the staff portal.",
                 "2026-03-01 18:02"),
            _msg(9, "lena@orbit.example", "Lunch next week?",
                 "Are you free for lunch on Tuesday or Wednesday next week?",
                 "2026-03-02 08:15"),
            _msg(10, "marco@castellan.example", "Invoice 2290 (paid)",
                 "Thanks for settling invoice 2290.", "2026-02-20 12:00", folder="archive",
                 read=True),
        ],
    }  # fmt: skip


def initial(seed: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(seed.get("me"), str) or not isinstance(seed.get("messages"), list):
        raise ValueError("mail: a seed has me (an address) and messages (a list)")
    for m in seed["messages"]:
        m.setdefault("folder", "inbox")
        m.setdefault("cc", [])
        m.setdefault("read", False)
        m.setdefault("thread", m.get("id"))
        m.setdefault("attachments", [])
    return seed


APP = app("mail", "Mailbox of the user: read, search, send, reply, forward, file.", OPS,
          initial, default_seed)  # fmt: skip

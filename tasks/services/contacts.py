"""Contacts: people with email, phone, company and notes.

State: ``{contacts: [{id, name, email, phone, company, notes}]}``.
"""

from __future__ import annotations

from typing import Any

from tasks.services.base import Op, Param, ServiceError, app, by_id, emails, matches, next_id

FIELDS = ("email", "phone", "company", "notes")


def search(state: dict, query: str) -> list:
    return [
        c
        for c in state["contacts"]
        if matches(query, c["name"], c.get("email"), c.get("company"), c.get("phone"))
    ]


def get(state: dict, id: str) -> dict:
    return by_id(state["contacts"], id, "contact")


def _fields(values: dict[str, Any]) -> dict[str, str]:
    out = {k: v for k, v in values.items() if v is not None}
    if out.get("email"):
        out["email"] = emails([out["email"]], "email")[0]
    return out


def create(
    state: dict,
    name: str,
    email: str | None = None,
    phone: str | None = None,
    company: str | None = None,
    notes: str | None = None,
) -> dict:
    fields = _fields({"email": email, "phone": phone, "company": company, "notes": notes})
    if fields.get("email") and any(c.get("email") == fields["email"] for c in state["contacts"]):
        raise ServiceError(f"email: a contact with {fields['email']} exists")
    contact = {"id": next_id(state["contacts"], "c"), "name": name.strip()}
    contact.update({k: fields.get(k, "") for k in FIELDS})
    state["contacts"].append(contact)
    return {"created": contact["id"]}


def update(
    state: dict,
    id: str,
    name: str | None = None,
    email: str | None = None,
    phone: str | None = None,
    company: str | None = None,
    notes: str | None = None,
) -> dict:
    contact = by_id(state["contacts"], id, "contact")
    fields = _fields(
        {"name": name, "email": email, "phone": phone, "company": company, "notes": notes}
    )
    if not fields:
        raise ServiceError("update: give at least one field to change")
    contact.update(fields)
    return {"updated": id, "fields": sorted(fields)}


def delete(state: dict, id: str) -> dict:
    contact = by_id(state["contacts"], id, "contact")
    state["contacts"].remove(contact)
    return {"deleted": id}


ID = Param("string", "The contact id (c-001).", required=True)
FIELD_PARAMS = {
    "email": Param("string", "Email address."),
    "phone": Param("string", "Phone number."),
    "company": Param("string", "Company."),
    "notes": Param("string", "Free text."),
}
OPS = [
    Op(
        "search",
        "Find contacts whose name, email, company or phone contain every word of the query.",
        search,
        {"query": Param("string", "Words to look for.", required=True)},
    ),
    Op("get", "One contact.", get, {"id": ID}),
    Op(
        "create",
        "Add a contact.",
        create,
        {"name": Param("string", "Full name.", required=True), **FIELD_PARAMS},
        writes=True,
    ),
    Op(
        "update",
        "Change fields of a contact.",
        update,
        {"id": ID, "name": Param("string", "Full name."), **FIELD_PARAMS},
        writes=True,
    ),
    Op("delete", "Delete a contact.", delete, {"id": ID}, writes=True),
]


def _c(n: int, name: str, email: str, phone: str, company: str, notes: str = "") -> dict:
    return {"id": f"c-{n:03d}", "name": name, "email": email, "phone": phone,
            "company": company, "notes": notes}  # fmt: skip


def default_seed() -> dict[str, Any]:
    return {
        "contacts": [
            _c(1, "Priya Raman", "priya@northwind.example", "+1 415 555 0101", "Northwind",
               "Finance lead"),
            _c(2, "Jordan Blake", "jordan@northwind.example", "+1 415 555 0102", "Northwind"),
            _c(3, "Marco Castellan", "marco@castellan.example", "+39 02 5550 1234",
               "Castellan Consulting", "Invoices monthly"),
            _c(4, "Sam Okafor", "sam@lumen.example", "+44 20 5550 7788", "Lumen"),
            _c(5, "Lena Fischer", "lena@orbit.example", "+49 30 5550 4411", "Orbit"),
            _c(6, "Sam Ortiz", "sam.ortiz@harbor.example", "+1 206 555 0199", "Harbor"),
            _c(7, "Dana Whitfield", "dana@northwind.example", "+1 415 555 0107", "Northwind",
               "IT"),
        ]
    }  # fmt: skip


def initial(seed: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(seed.get("contacts"), list):
        raise ValueError("contacts: a seed has contacts (a list)")
    for c in seed["contacts"]:
        for k in FIELDS:
            c.setdefault(k, "")
    return seed


APP = app("contacts", "The user's address book.", OPS, initial, default_seed)

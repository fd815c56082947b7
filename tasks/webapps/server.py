"""The project's web applications (shop, mail, booking, calendar, bank) and their server.

A task names one as its service::

    python3 /opt/forge/webapps/server.py shop --port 8765 [--seed .app/seed.json]

In an episode it does not run in the sandbox: the HarnessPod builds :class:`App` for the
attempt and serves it under the attempt's URL, and the sandbox runs a relay on the port
(:mod:`tasks.webapps.hosted`), so the state ``page_state`` reads is out of the agent's reach.
Run as a program (standard library only: the development tools, the suite tests) it serves the
app itself and writes its state atomically (a temporary file, then a rename) to ``--state``.

It serves the app's page (``APP/index.html``) and the shared files at ``/static/``, ``/health``
(200 once it listens), ``GET /api/data`` (the seeded content and the current state) and
``POST /api/ACTION`` with a JSON body. ``--seed`` is a JSON file (relative: from the working
directory; in an episode, one of the task's files) that replaces the app's default content
(``seeds/APP.json``). Pages are laid out for a 640x480 viewport with fixed positions, so GUI
reference solutions can click by normalised coordinates.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import threading
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

if __package__:  # imported from the tasks package (tests)
    from tasks.webapps.httpstate import (
        NOT_FOUND,
        JsonHandler,
        Reply,
        json_reply,
        parse_object,
        serve_until_stopped,
        write_atomic,
    )
else:  # run as a program: httpstate.py is beside it, and its folder is on sys.path
    from httpstate import (
        NOT_FOUND,
        JsonHandler,
        Reply,
        json_reply,
        parse_object,
        serve_until_stopped,
        write_atomic,
    )

HERE = Path(__file__).resolve().parent
APPS = ("shop", "mail", "booking", "calendar", "bank")
TYPES = {".html": "text/html; charset=utf-8", ".css": "text/css", ".js": "text/javascript"}


class ActionError(ValueError):
    """A request the app refuses (answered 400 with the message)."""


def _need(body: dict[str, Any], key: str) -> Any:
    value = body.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ActionError(f"{key} is required")
    return value.strip() if isinstance(value, str) else value


# -- the apps: initial state from the seed, and actions (state, seed, body) -> None ----------


def shop_state(seed: dict[str, Any]) -> dict[str, Any]:
    return {"cart": [], "orders": []}


def _product(seed: dict[str, Any], pid: Any) -> dict[str, Any]:
    for p in seed["products"]:
        if p["id"] == pid:
            return p
    raise ActionError(f"no product {pid!r}")


def shop_add(state: dict[str, Any], seed: dict[str, Any], body: dict[str, Any]) -> None:
    product = _product(seed, _need(body, "id"))
    for line in state["cart"]:
        if line["id"] == product["id"]:
            line["qty"] += 1
            return
    state["cart"].append({"id": product["id"], "name": product["name"], "qty": 1})


def shop_remove(state: dict[str, Any], seed: dict[str, Any], body: dict[str, Any]) -> None:
    pid = _need(body, "id")
    state["cart"] = [line for line in state["cart"] if line["id"] != pid]


def shop_order(state: dict[str, Any], seed: dict[str, Any], body: dict[str, Any]) -> None:
    if not state["cart"]:
        raise ActionError("the cart is empty")
    items = []
    for line in state["cart"]:
        price = _product(seed, line["id"])["price"]
        items.append({"name": line["name"], "qty": line["qty"], "price": price})
    total = round(sum(i["qty"] * i["price"] for i in items), 2)
    state["orders"].append({"number": len(state["orders"]) + 1, "items": items, "total": total})
    state["cart"] = []


def mail_state(seed: dict[str, Any]) -> dict[str, Any]:
    return {"sent": [], "archived": []}


def mail_send(state: dict[str, Any], seed: dict[str, Any], body: dict[str, Any]) -> None:
    to = _need(body, "to")
    subject = str(body.get("subject") or "").strip()
    text = str(body.get("body") or "").strip()
    state["sent"].append({"to": to, "subject": subject, "body": text})


def mail_archive(state: dict[str, Any], seed: dict[str, Any], body: dict[str, Any]) -> None:
    mid = _need(body, "id")
    if mid not in {m["id"] for m in seed["inbox"]}:
        raise ActionError(f"no mail {mid!r}")
    if mid not in state["archived"]:
        state["archived"].append(mid)


def booking_state(seed: dict[str, Any]) -> dict[str, Any]:
    return {"bookings": []}


def booking_book(state: dict[str, Any], seed: dict[str, Any], body: dict[str, Any]) -> None:
    name, day, time = _need(body, "name"), _need(body, "day"), _need(body, "time")
    if day not in seed["days"] or time not in seed["times"]:
        raise ActionError(f"no slot {day} {time}")
    taken = set(seed.get("taken", [])) | {f"{b['day']} {b['time']}" for b in state["bookings"]}
    if f"{day} {time}" in taken:
        raise ActionError(f"{day} {time} is taken")
    state["bookings"].append({"name": name, "day": day, "time": time})


def calendar_state(seed: dict[str, Any]) -> dict[str, Any]:
    return {"events": copy.deepcopy(seed["events"]), "deleted": []}


def _event(state: dict[str, Any], eid: Any) -> dict[str, Any]:
    for e in state["events"]:
        if e["id"] == eid:
            return e
    raise ActionError(f"no event {eid!r}")


def _check_event(seed: dict[str, Any], body: dict[str, Any]) -> dict[str, str]:
    title, day, start = _need(body, "title"), _need(body, "day"), _need(body, "start")
    if day not in seed["days"]:
        raise ActionError(f"day must be one of {', '.join(seed['days'])}")
    hh, _, mm = start.partition(":")
    if not (hh.isdigit() and mm.isdigit() and len(mm) == 2 and 0 <= int(hh) < 24 and int(mm) < 60):
        raise ActionError("start is HH:MM")
    return {"title": title, "day": day, "start": f"{int(hh):02d}:{mm}"}


def calendar_save(state: dict[str, Any], seed: dict[str, Any], body: dict[str, Any]) -> None:
    fields = _check_event(seed, body)
    if body.get("id") is None:
        next_id = max([e["id"] for e in state["events"]] + [0]) + 1
        state["events"].append({"id": next_id, **fields})
    else:
        _event(state, body["id"]).update(fields)


def calendar_delete(state: dict[str, Any], seed: dict[str, Any], body: dict[str, Any]) -> None:
    event = _event(state, _need(body, "id"))
    state["events"].remove(event)
    state["deleted"].append(event["title"])


def bank_state(seed: dict[str, Any]) -> dict[str, Any]:
    balances = {a["name"]: a["balance"] for a in seed["accounts"]}
    return {"balances": balances, "transfers": []}


def _amount(text: Any) -> float:
    raw = str(text).strip().replace(",", "").removeprefix("$")
    whole, _, cents = raw.partition(".")
    if not whole.isdigit() or not (cents == "" or (cents.isdigit() and len(cents) <= 2)):
        raise ActionError("amount is a number like 12.50")
    value = round(float(raw), 2)
    if value <= 0:
        raise ActionError("amount must be more than 0")
    return value


def bank_transfer(state: dict[str, Any], seed: dict[str, Any], body: dict[str, Any]) -> None:
    source, target = _need(body, "from"), _need(body, "to")
    amount = _amount(_need(body, "amount"))
    accounts = state["balances"]
    if source not in accounts:
        raise ActionError(f"no account {source!r}")
    if target == source:
        raise ActionError("choose a different recipient")
    if target not in accounts and target not in seed["payees"]:
        raise ActionError(f"no payee {target!r}")
    if amount > accounts[source]:
        raise ActionError(f"not enough money in {source}")
    accounts[source] = round(accounts[source] - amount, 2)
    if target in accounts:
        accounts[target] = round(accounts[target] + amount, 2)
    reference = str(body.get("reference") or "").strip()
    state["transfers"].append(
        {"from": source, "to": target, "amount": amount, "reference": reference}
    )


Action = Callable[[dict[str, Any], dict[str, Any], dict[str, Any]], None]
APP_DEFS: dict[str, tuple[Callable[[dict[str, Any]], dict[str, Any]], dict[str, Action]]] = {
    "shop": (shop_state, {"add": shop_add, "remove": shop_remove, "order": shop_order}),
    "mail": (mail_state, {"send": mail_send, "archive": mail_archive}),
    "booking": (booking_state, {"book": booking_book}),
    "calendar": (calendar_state, {"save": calendar_save, "delete": calendar_delete}),
    "bank": (bank_state, {"transfer": bank_transfer}),
}


# -- the server ------------------------------------------------------------------------------


class App:
    """One app's seed and state; every change is made whole before it is answered (and saved
    to ``state_path``, when given, for the development tools that read it)."""

    def __init__(self, name: str, seed: dict[str, Any], state_path: Path | None = None) -> None:
        self.name, self.seed, self.state_path = name, seed, state_path
        initial, self.actions = APP_DEFS[name]
        self.state = initial(seed)
        self.lock = threading.Lock()
        if state_path is not None:
            write_atomic(state_path, self.state)

    def data(self) -> dict[str, Any]:
        with self.lock:
            return {"app": self.name, "seed": self.seed, "state": copy.deepcopy(self.state)}

    def snapshot(self) -> dict[str, Any]:
        """The app's state now (what ``page_state`` checks)."""
        with self.lock:
            return copy.deepcopy(self.state)

    def act(self, action: str, body: dict[str, Any]) -> dict[str, Any]:
        if action not in self.actions:
            raise ActionError(f"unknown action {action!r} (known: {', '.join(self.actions)})")
        with self.lock:
            new = copy.deepcopy(self.state)
            self.actions[action](new, self.seed, body)
            if self.state_path is not None:
                write_atomic(self.state_path, new)
            self.state = new
        return self.data()

    def get(self, route: str) -> Reply:
        """The answer to ``GET route`` (no query)."""
        if route == "/health":
            return 200, b"ok\n", "text/plain"
        if route == "/api/data":
            return json_reply(200, self.data())
        if route in ("/", "/index.html"):
            file = HERE / self.name / "index.html"
        elif route.startswith("/static/") and "/" not in route[len("/static/") :]:
            file = HERE / "static" / route[len("/static/") :]
        else:
            return NOT_FOUND
        if not file.is_file():
            return NOT_FOUND
        return 200, file.read_bytes(), TYPES.get(file.suffix, "application/octet-stream")

    def post(self, route: str, body: bytes) -> Reply:
        """The answer to ``POST route`` with a JSON object ``body``."""
        if not route.startswith("/api/"):
            return NOT_FOUND
        try:
            return json_reply(200, self.act(route[len("/api/") :], parse_object(body)))
        except ValueError as e:  # ActionError too
            return json_reply(400, {"error": str(e)})


def make_handler(app: App) -> type[JsonHandler]:
    class Handler(JsonHandler):
        def do_GET(self) -> None:
            self.send(*app.get(self.route))

        def do_POST(self) -> None:
            try:
                body = self.read_body()
            except ValueError as e:
                return self.send_json(400, {"error": str(e)})
            self.send(*app.post(self.route, body))

    return Handler


def load_seed(name: str, seed: str | None) -> dict[str, Any]:
    path = Path(seed) if seed else HERE / "seeds" / f"{name}.json"
    with open(path) as f:
        data = json.load(f)
    if not isinstance(data, dict):
        raise SystemExit(f"seed {path}: not a JSON object")
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("app", choices=APPS)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--state", default=".app/state.json", help="state file (JSON) to write")
    parser.add_argument("--seed", default=None, help="JSON file of the app's content")
    args = parser.parse_args(argv)
    app = App(args.app, load_seed(args.app, args.seed), Path(args.state))
    server = ThreadingHTTPServer((args.host, args.port), make_handler(app))
    return serve_until_stopped(server, f"{args.app} on http://{args.host}:{args.port}/")


if __name__ == "__main__":
    sys.exit(main())

"""The web apps' state server, over real HTTP: pages and API, validation, the state file."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SERVER = Path(__file__).resolve().parents[3] / "tasks" / "webapps" / "server.py"


class App:
    def __init__(self, url: str, state: Path) -> None:
        self.url, self.state_path = url, state

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def post(self, action: str, body: Any) -> tuple[int, dict[str, Any]]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url + "api/" + action, data, {"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def state(self) -> dict[str, Any]:
        return json.loads(self.state_path.read_text())


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Any]:
    procs: list[subprocess.Popen[bytes]] = []

    def _start(app: str, *extra: str) -> App:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        argv = [sys.executable, str(SERVER), app, "--port", str(port), *extra]
        proc = subprocess.Popen(argv, cwd=tmp_path, stderr=subprocess.DEVNULL)
        procs.append(proc)
        running = App(f"http://127.0.0.1:{port}/", tmp_path / ".app" / "state.json")
        end = time.monotonic() + 15
        while True:
            try:
                if running.get("health")[0] == 200:
                    return running
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < end, "server did not start"
            time.sleep(0.05)

    yield _start
    for p in procs:
        p.terminate()
        p.wait(timeout=5)


def test_pages_and_static_files(start) -> None:
    app = start("shop")
    code, page = app.get("")
    assert code == 200 and b"ForgeShop" in page
    assert app.get("static/common.css")[0] == 200
    assert app.get("static/../server.py")[0] == 404
    assert app.get("static/%2e%2e/server.py")[0] == 404
    assert app.get("nope")[0] == 404
    data = json.loads(app.get("api/data")[1])
    assert data["app"] == "shop" and len(data["seed"]["products"]) == 9


def test_shop_orders_are_recorded(start) -> None:
    app = start("shop")
    assert app.state() == {"cart": [], "orders": []}  # written at start
    assert app.post("order", {}) == (400, {"error": "the cart is empty"})
    for pid in (2, 2, 7):
        assert app.post("add", {"id": pid})[0] == 200
    assert app.post("add", {"id": 99}) == (400, {"error": "no product 99"})
    code, data = app.post("order", {})
    assert code == 200 and data["state"]["cart"] == []
    order = app.state()["orders"][0]
    assert [(i["name"], i["qty"]) for i in order["items"]] == [("Red mug", 2), ("Notebook A5", 1)]
    assert order["total"] == 21.4 and order["number"] == 1
    assert not list(app.state_path.parent.glob(".state-*"))  # no temporary file left


def test_bad_requests_say_why(start) -> None:
    app = start("mail")
    assert app.post("fly", {}) == (400, {"error": "unknown action 'fly' (known: send, archive)"})
    assert app.post("send", {"to": "  "}) == (400, {"error": "to is required"})
    assert app.post("send", b"[1]") == (400, {"error": "the body is a JSON object"})
    assert app.post("send", b"{not json")[0] == 400
    assert app.post("archive", {"id": "m99"}) == (400, {"error": "no mail 'm99'"})
    assert app.state() == {"sent": [], "archived": []}  # nothing refused was recorded


def test_booking_refuses_taken_slots(start) -> None:
    app = start("booking")
    assert app.post("book", {"name": "Ana", "day": "Mon", "time": "09:00"})[1] == {
        "error": "Mon 09:00 is taken"
    }
    assert app.post("book", {"name": "Ana", "day": "Mon", "time": "11:00"})[0] == 200
    assert app.post("book", {"name": "Bo", "day": "Mon", "time": "11:00"})[0] == 400
    assert app.state()["bookings"] == [{"name": "Ana", "day": "Mon", "time": "11:00"}]


def test_calendar_edits(start) -> None:
    app = start("calendar")
    assert app.post("save", {"id": 2, "title": "Dentist", "day": "Thu", "start": "9:05"})[0] == 200
    assert app.post("save", {"id": 2, "title": "Dentist", "day": "Sun", "start": "10:00"})[0] == 400
    assert app.post("save", {"id": 2, "title": "Dentist", "day": "Thu", "start": "25:00"})[0] == 400
    assert app.post("save", {"title": "Call", "day": "Wed", "start": "14:00"})[0] == 200
    assert app.post("delete", {"id": 7})[0] == 200
    state = app.state()
    assert state["events"][1] == {"id": 2, "title": "Dentist", "day": "Thu", "start": "09:05"}
    assert state["events"][-1] == {"id": 8, "title": "Call", "day": "Wed", "start": "14:00"}
    assert state["deleted"] == ["Team lunch"] and len(state["events"]) == 7


def test_bank_transfers(start) -> None:
    app = start("bank")
    base = {"from": "Checking", "to": "Savings"}
    assert app.post("transfer", {**base, "amount": "2,000"})[1] == {
        "error": "not enough money in Checking"
    }
    assert app.post("transfer", {**base, "amount": "1.234"})[0] == 400
    assert app.post("transfer", {**base, "amount": "-5"})[0] == 400
    assert app.post("transfer", {**base, "to": "Checking", "amount": "5"})[0] == 400
    assert app.post("transfer", {**base, "to": "Mallory", "amount": "5"})[0] == 400
    assert app.post("transfer", {**base, "amount": "$250.50", "reference": " r "})[0] == 200
    state = app.state()
    assert state["balances"] == {"Checking": 989.5, "Savings": 5550.5}
    assert state["transfers"] == [
        {"from": "Checking", "to": "Savings", "amount": 250.5, "reference": "r"}
    ]


def test_seed_from_the_workspace(start, tmp_path: Path) -> None:
    seed = {"products": [{"id": 1, "name": "Chair", "price": 10.0}]}
    (tmp_path / "seed.json").write_text(json.dumps(seed))
    app = start("shop", "--seed", "seed.json", "--state", "out/s.json")
    app.state_path = tmp_path / "out" / "s.json"
    assert json.loads(app.get("api/data")[1])["seed"] == seed
    app.post("add", {"id": 1})
    assert app.state()["cart"] == [{"id": 1, "name": "Chair", "qty": 1}]

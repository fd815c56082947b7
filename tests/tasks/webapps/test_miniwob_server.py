"""The MiniWoB state server over HTTP (no browser): the hooked page, the files it serves and
refuses, and the report endpoint (secret, validation, first report final, atomic state)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tasks.webapps import miniwob_server as ms

try:
    from forge.sandboxes.services import miniwob_html

    HTML = Path(miniwob_html())
except FileNotFoundError:  # pragma: no cover - the package is a project dependency
    pytest.skip("the miniwob package is not installed", allow_module_level=True)


class Live:
    def __init__(self, episode: ms.Episode) -> None:
        self.episode = episode
        self.server = ms.serve(episode)
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.base + path, timeout=5) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def post(self, path: str, body: Any, raw: bytes | None = None) -> tuple[int, Any]:
        data = raw if raw is not None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.base + path, data=data, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, e.read()


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    episode = ms.Episode("click-button", 3, HTML, tmp_path / ".app" / "state.json", zoom=2.0)
    served = Live(episode)
    yield served
    served.server.shutdown()
    served.server.server_close()


def state(live: Live) -> dict[str, Any]:
    return json.loads(live.episode.state_path.read_text())


def test_initial_state_written_at_start(live: Live) -> None:
    assert state(live) == {
        "task": "click-button",
        "seed": 3,
        "done": False,
        "raw_reward": None,
        "reward": None,
        "reason": None,
        "utterance": None,
        "reports": 0,
        "pages": 0,
    }


def test_page_is_the_package_task_with_the_hook_before_its_end(live: Live) -> None:
    code, body = live.get("/")
    page = body.decode()
    original = (HTML / "miniwob" / "click-button.html").read_text()
    assert code == 200
    assert page.startswith(original[: original.lower().rfind("</html>")])
    assert page.rstrip().endswith("</html>")
    hook = page[len(original) - len("</html>\n") :]
    assert json.dumps(live.episode.token) in hook
    assert "Math.seedrandom(seed)" in hook and "seed = 3," in hook and "zoom = 2.0" in hook
    assert f"core.EPISODE_MAX_TIME = {ms.EPISODE_MS};" in hook
    assert ms.EPISODE_MS < 2**31 - 1  # setTimeout fires at once beyond that


def test_seed_numbers_stay_numbers() -> None:
    assert ms.parse_seed("7") == 7 and ms.parse_seed("-2") == -2 and ms.parse_seed("x1") == "x1"
    assert "seed = 7," in ms.hooked_page("<html></html>", "t", 7, 1.0)
    assert 'seed = "x1",' in ms.hooked_page("<html></html>", "t", "x1", 1.0)


def test_serves_assets_but_not_other_tasks_or_outside(live: Live) -> None:
    assert live.get("/health") == (200, b"ok\n")
    code, body = live.get("/core/core.js")
    assert code == 200 and body == (HTML / "core" / "core.js").read_bytes()
    assert live.get("/common/ui_utils.js")[0] == 200
    assert live.get("/miniwob/click-test.html")[0] == 404  # an easier task's page
    assert live.get("/miniwob/click-button.html")[0] == 404  # unhooked: only at /
    assert live.get("/core/../../miniwob_server.py")[0] == 404
    assert live.get("/%2e%2e/__init__.py")[0] == 404
    assert live.get("/report")[0] == 404  # a goto cannot report


def test_report_needs_the_token(live: Live) -> None:
    good = {"raw_reward": 1, "reward": 0.9, "reason": None, "utterance": "Click."}
    assert live.post("/report", {**good, "token": "guess"})[0] == 403
    assert live.post("/report", good)[0] == 403
    assert state(live)["done"] is False and state(live)["reports"] == 0


@pytest.mark.parametrize(
    "change",
    [{"raw_reward": "1"}, {"raw_reward": True}, {"reward": 2}, {"raw_reward": None}],
)
def test_report_values_checked(live: Live, change: dict[str, Any]) -> None:
    body = {"token": live.episode.token, "raw_reward": 1, "reward": 1, **change}
    assert live.post("/report", body)[0] == 400
    assert state(live)["done"] is False


def test_malformed_bodies_refused(live: Live) -> None:
    assert live.post("/report", None, raw=b"[1, 2]")[0] == 400
    assert live.post("/report", None, raw=b"{not json")[0] == 400
    assert live.post("/other", {"token": live.episode.token})[0] == 404


def test_first_report_is_final(live: Live, tmp_path: Path) -> None:
    token = live.episode.token
    first = {"token": token, "raw_reward": -1, "reward": -1, "reason": '"wrong"', "utterance": "U"}
    assert live.post("/report", first) == (200, {"recorded": True})
    retry = {**first, "raw_reward": 1, "reward": 1}
    assert live.post("/report", retry) == (200, {"recorded": False})
    got = state(live)
    assert got["done"] is True and got["raw_reward"] == -1.0 and got["reward"] == -1.0
    assert got["reason"] == '"wrong"' and got["utterance"] == "U" and got["reports"] == 2
    assert not list((tmp_path / ".app").glob(".state-*"))


def test_bad_task_names_and_missing_tasks(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="bad task name"):
        ms.Episode("../core/core", 0, HTML, tmp_path / "s.json")
    with pytest.raises(FileNotFoundError, match="no MiniWoB task"):
        ms.Episode("no-such-task", 0, HTML, tmp_path / "s.json")
    with pytest.raises(SystemExit, match="no MiniWoB task"):
        ms.main(["no-such-task", "--html", str(HTML), "--state", str(tmp_path / "s.json")])

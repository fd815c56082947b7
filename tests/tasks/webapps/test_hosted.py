"""The page applications the HarnessPod keeps (``tasks.webapps.hosted``): which services they
are, what the sandbox runs instead, the attempt's page route and its key, and MiniWoB's secret
served once."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import httpx
import pytest

from actors.harness_pod import HarnessPod
from tasks.loader import load_suite
from tasks.webapps import hosted
from tasks.webapps import miniwob_server as ms

WEB = {t.id: t for t in load_suite("web")}
TOKEN = re.compile(r"var token = (\"[^\"]*\"|null)")
try:
    HTML: Path | None = Path(hosted.miniwob_html())
except FileNotFoundError:
    HTML = None
needs_html = pytest.mark.skipif(HTML is None, reason="the miniwob package is not installed")


def test_parse_knows_the_state_servers_only() -> None:
    kind, options = hosted.parse(
        "python3 /opt/forge/webapps/server.py shop --port 8765 --state .app/state.json"
    )  # type: ignore[misc]
    assert (kind, options.name, options.port) == ("web", "shop", 8765)
    assert hosted.parse("python3 server.py shop --port 8765") is None  # the task's own
    assert hosted.parse("sh -c 'python3 /opt/forge/webapps/server.py shop'") is None
    with pytest.raises(ValueError, match="--port"):
        hosted.parse("python3 /opt/forge/webapps/server.py shop")


def test_the_sandbox_runs_a_relay_and_a_bad_server_fails_to_start() -> None:
    task = WEB["shop_cheapest_office_chair"]  # its seed is one of the task's files
    pages = hosted.Hosted(task, armed=False)
    assert list(pages.pages) == [8765] and not pages.errors
    assert pages.state()["page"] == {"cart": [], "orders": []}
    (service,) = pages.relayed(task, "http://h:1/episodes/e/attempts/0").services
    assert "relay.py --port 8765 --to http://h:1/episodes/e/attempts/0/page/8765" in service.command
    command = "python3 /opt/forge/webapps/server.py nope --port 8765"
    bad = task.model_copy(update={"services": [service.model_copy(update={"command": command})]})
    pages = hosted.Hosted(bad, armed=False)
    assert not pages.pages and "no web app 'nope'" in pages.errors[0]
    (service,) = pages.relayed(bad, "http://h:1").services
    assert service.command.endswith("exit 2") and "relay" not in service.command


def test_the_page_route_needs_the_attempts_key() -> None:
    """The relay reaches the app with the attempt's key; another attempt's key, or none, gets
    401, and the state changes only through the app's own actions."""
    task = WEB["shop_cheapest_mug"]

    async def run() -> None:
        pod = HarnessPod(None, pod_id="pages")
        await pod.start()
        try:
            pages = hosted.Hosted(task, armed=False)
            a = pod.open_attempt("e-page", 0, pages=pages.pages)
            b = pod.open_attempt("e-page", 1)
            url = a["base_url"].removesuffix("/v1") + "/page/8765"
            mine = {"Authorization": f"Bearer {a['api_key']}"}
            async with httpx.AsyncClient() as client:
                assert (await client.get(f"{url}/health", headers=mine)).status_code == 200
                other = {"Authorization": f"Bearer {b['api_key']}"}
                assert (await client.get(f"{url}/health", headers=other)).status_code == 401
                assert (await client.get(f"{url}/health")).status_code == 401
                gone = a["base_url"].removesuffix("/v1") + "/page/9999/health"
                assert (await client.get(gone, headers=mine)).status_code == 404
                add = await client.post(f"{url}/api/add", json={"id": 2}, headers=mine)
                assert add.status_code == 200
                forged = await client.post(f"{url}/api/state", json={"orders": [1]}, headers=mine)
                assert forged.status_code == 400
                deep = "[" * 100_000
                bad = await client.post(f"{url}/api/add", content=deep, headers=mine)
                assert bad.status_code == 400
            assert pages.state()["page"]["cart"] == [{"id": 2, "name": "Red mug", "qty": 1}]
        finally:
            await pod.stop()

    asyncio.run(run())


@needs_html
def test_miniwob_secret_is_served_once_and_only_when_armed() -> None:
    assert HTML is not None
    armed = ms.Episode("click-button", 3, HTML, armed=True)
    first, second = (TOKEN.search(armed.page().decode()) for _ in range(2))
    assert first and json.loads(first.group(1)) == armed.token
    assert second and second.group(1) == "null"
    assert armed.snapshot()["pages"] == 2
    unarmed = ms.Episode("click-button", 3, HTML, armed=False)
    found = TOKEN.search(unarmed.page().decode())
    assert found and found.group(1) == "null"
    code, _, _ = unarmed.post("/report", json.dumps({"token": None, "raw_reward": 1}).encode())
    assert code == 403 and unarmed.snapshot()["done"] is False

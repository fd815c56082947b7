"""The state server of a MiniWoB++ task: serves one task page of the ``miniwob`` package's HTML,
seeded and started, and records MiniWoB's own reward for the ``page_state`` verifier.

A task names it as its service (``tasks/miniwob.py`` builds the tasks); in an episode the
HarnessPod builds :class:`Episode` for the attempt, outside the sandbox, which reaches it through
a relay on the port (:mod:`tasks.webapps.hosted`). Run as a program (standard library only: the
development tools, the suite tests) it serves it itself and writes ``--state``::

    python3 /opt/forge/webapps/miniwob_server.py click-button --seed 3 --port 8790 \\
        --state .app/state.json [--html /opt/forge/miniwob] [--zoom 2]

``GET /`` is ``miniwob/TASK.html`` with a script added at its end that, once the page has
loaded, does what MiniWoB's own Python environment does to start an episode
(``Math.seedrandom(seed)``, ``core.setDataMode('train')``, ``core.startEpisodeReal()``), with
the episode timer set to :data:`EPISODE_MS` (MiniWoB's default of 10 s would cut a slow model
short), and the page zoomed by ``--zoom`` so the 160x210 task area is legible in a screenshot.
It wraps ``core.endEpisode``: when MiniWoB's own reward function ends the episode, the page
posts the raw reward (``WOB_RAW_REWARD_GLOBAL``, 1 for success, -1 or a fraction otherwise) to
``POST /report``. Only the first report counts (an episode ends once; a reloaded page is a retry
MiniWoB would not grant), and only with the secret this server minted at start and put into the
script of the first page it serves, and no other (a screenshot shows no trace of it; a ``GET``
cannot report; an episode built not ``armed`` never serves it). ``body[data-busy]`` is 1 while
a report is in flight, so GUI tools that wait for it see the state written.

Other files are served from the HTML folder (``core/``, ``common/``...) except other tasks'
pages. The state file (written atomically at start and on the report) holds ``task``, ``seed``,
``done``, ``raw_reward``, ``reward`` (MiniWoB's time-scaled reward), ``reason``, ``utterance``,
``reports`` (how many reports with the secret arrived, the ignored ones included) and ``pages``
(how many times the page was served).
"""

from __future__ import annotations

import argparse
import hmac
import json
import math
import re
import secrets
import sys
import threading
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

HTML = "/opt/forge/miniwob"  # where the sandbox sees the miniwob package's html/ folder
EPISODE_MS = 6 * 3600 * 1000  # under setTimeout's 2**31-1 ms, beyond which it fires at once
TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css",
    ".js": "text/javascript",
    ".json": "application/json",
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".gif": "image/gif",
    ".svg": "image/svg+xml",
}
TASK_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
MAX_BODY = 65536

HOOK = """<script>
(function () {
  var token = %(token)s, seed = %(seed)s, zoom = %(zoom)s, reported = false;
  if (document.currentScript) { document.currentScript.remove(); }
  function report() {
    if (reported) { return; }
    reported = true;
    var reason = WOB_REWARD_REASON;
    try { reason = reason == null ? null : JSON.stringify(reason); } catch (e) { reason = '?'; }
    var body = JSON.stringify({token: token, raw_reward: WOB_RAW_REWARD_GLOBAL,
      reward: WOB_REWARD_GLOBAL, reason: reason, utterance: core.getUtterance()});
    document.body.dataset.busy = '1';
    var req = new XMLHttpRequest();
    req.open('POST', '/report', true);
    req.setRequestHeader('Content-Type', 'application/json');
    req.onloadend = function () { document.body.dataset.busy = '0'; };
    req.send(body);
  }
  var endEpisode = core.endEpisode;
  core.endEpisode = function () {
    var out = endEpisode.apply(this, arguments);
    if (WOB_DONE_GLOBAL) { report(); }
    return out;
  };
  window.addEventListener('load', function () {
    setTimeout(function () {
      if (zoom !== 1) { document.documentElement.style.zoom = String(zoom); }
      Math.seedrandom(seed);
      core.setDataMode('train');
      core.EPISODE_MAX_TIME = %(episode_ms)d;
      core.startEpisodeReal();
      document.body.dataset.episode = 'started';
    }, 0);
  });
})();
</script>
"""


def hooked_page(text: str, token: str | None, seed: int | str, zoom: float) -> str:
    """The task page with the starting and reporting script added at its end."""
    script = HOOK % {
        "token": json.dumps(token),
        "seed": json.dumps(seed),
        "zoom": json.dumps(zoom),
        "episode_ms": EPISODE_MS,
    }
    at = text.lower().rfind("</html>")
    return text + script if at < 0 else text[:at] + script + text[at:]


class Episode:
    """One task instance: its page, its one-time secret and the recorded outcome.

    ``armed``: whether the first page served carries the secret. An episode that is not armed
    never records a report (a harness that opens no browser of its own: the first to fetch the
    page would be the agent itself)."""

    def __init__(
        self,
        task: str,
        seed: int | str,
        html: Path,
        state_path: Path | None = None,
        zoom: float = 1.0,
        armed: bool = True,
    ) -> None:
        if not TASK_NAME.match(task):
            raise ValueError(f"bad task name {task!r}")
        self.task, self.seed, self.html, self.zoom = task, seed, html.resolve(), zoom
        self.page_file = self.html / "miniwob" / f"{task}.html"
        if not self.page_file.is_file():
            raise FileNotFoundError(f"no MiniWoB task {task!r} ({self.page_file} is missing)")
        self.token = secrets.token_urlsafe(24)
        self.unissued = armed  # the secret goes into the first page served, and no other
        self.state_path = state_path
        self.lock = threading.Lock()
        self.state: dict[str, Any] = {
            "task": task,
            "seed": seed,
            "done": False,
            "raw_reward": None,
            "reward": None,
            "reason": None,
            "utterance": None,
            "reports": 0,
            "pages": 0,
        }
        self._save(self.state)

    def _save(self, state: dict[str, Any]) -> None:
        if self.state_path is not None:
            write_atomic(self.state_path, state)

    def snapshot(self) -> dict[str, Any]:
        """The recorded outcome now (what ``page_state`` checks)."""
        with self.lock:
            return dict(self.state)

    def page(self) -> bytes:
        """The hooked task page; only the first carries the secret (a reload, or anyone else
        fetching the page, gets a page whose report is refused)."""
        with self.lock:
            token, self.unissued = (self.token if self.unissued else None), False
            self.state = dict(self.state, pages=self.state["pages"] + 1)
            self._save(self.state)
        text = self.page_file.read_text(encoding="utf-8")
        return hooked_page(text, token, self.seed, self.zoom).encode()

    def asset(self, url_path: str) -> Path | None:
        """The file a GET of ``url_path`` serves, or None (outside the folder, another task's
        page, or missing)."""
        rel = url_path.lstrip("/")
        if not rel or "\\" in rel or any(p in ("", ".", "..") for p in rel.split("/")):
            return None
        file = (self.html / rel).resolve()
        if not file.is_relative_to(self.html) or not file.is_file():
            return None
        if file.suffix == ".html":
            return None  # task pages are served only at /, hooked
        return file

    def report(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Record the first report with the right token; (HTTP status, answer)."""
        token = body.get("token")
        if not isinstance(token, str) or not hmac.compare_digest(token, self.token):
            return 403, {"error": "bad token"}
        raw, reward = body.get("raw_reward"), body.get("reward")
        for value in (raw, reward):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return 400, {"error": "raw_reward and reward are numbers"}
            if not math.isfinite(value) or not -1.0 <= value <= 1.0:
                return 400, {"error": "rewards lie in [-1, 1]"}
        with self.lock:
            new = dict(self.state, reports=self.state["reports"] + 1)
            first = not new["done"]
            if first:
                reason, utterance = body.get("reason"), body.get("utterance")
                new.update(
                    done=True,
                    raw_reward=float(raw),
                    reward=float(reward),
                    reason=str(reason)[:500] if reason is not None else None,
                    utterance=str(utterance)[:500] if utterance is not None else None,
                )
            self._save(new)
            self.state = new
        return 200, {"recorded": first}

    def get(self, route: str) -> Reply:
        """The answer to ``GET route`` (no query)."""
        if route == "/health":
            return 200, b"ok\n", "text/plain"
        if route in ("/", "/index.html"):
            return 200, self.page(), TYPES[".html"]
        file = self.asset(route)
        if file is None:
            return NOT_FOUND
        return 200, file.read_bytes(), TYPES.get(file.suffix, "application/octet-stream")

    def post(self, route: str, body: bytes) -> Reply:
        """The answer to ``POST route``: only ``/report`` is one."""
        if route != "/report":
            return NOT_FOUND
        if len(body) > MAX_BODY:
            return json_reply(400, {"error": f"the body is at most {MAX_BODY} bytes"})
        try:
            parsed = parse_object(body)
        except ValueError:
            return json_reply(400, {"error": "the body is a JSON object"})
        return json_reply(*self.report(parsed))


def make_handler(episode: Episode) -> type[JsonHandler]:
    class Handler(JsonHandler):
        def do_GET(self) -> None:
            self.send(*episode.get(self.route))

        def do_POST(self) -> None:
            try:
                body = self.read_body(MAX_BODY)
            except ValueError:
                return self.send_json(400, {"error": "the body is a JSON object"})
            self.send(*episode.post(self.route, body))

    return Handler


def parse_seed(text: str) -> int | str:
    """MiniWoB seeds numbers as numbers (``Math.seedrandom(3)`` differs from ``('3')``)."""
    return int(text) if re.fullmatch(r"-?\d+", text) else text


def serve(episode: Episode, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """A server for ``episode`` bound to ``host:port`` (0: any free port), not yet serving."""
    server = ThreadingHTTPServer((host, port), make_handler(episode))
    server.daemon_threads = True
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("task", help="a MiniWoB task name (click-button)")
    parser.add_argument("--seed", default="0", help="the episode's seed (an integer)")
    parser.add_argument("--port", type=int, default=8790)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--state", default=".app/state.json", help="state file (JSON)")
    parser.add_argument("--html", default=HTML, help="the miniwob package's html/ folder")
    parser.add_argument("--zoom", type=float, default=1.0, help="CSS zoom of the page")
    args = parser.parse_args(argv)
    try:
        episode = Episode(
            args.task, parse_seed(args.seed), Path(args.html), Path(args.state), args.zoom
        )
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"miniwob_server: {e}") from None
    server = serve(episode, args.host, args.port)
    return serve_until_stopped(server, f"miniwob {args.task} on http://{args.host}:{args.port}/")


if __name__ == "__main__":
    sys.exit(main())

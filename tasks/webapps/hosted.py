"""The project's page applications kept by the HarnessPod, outside the agent's sandbox.

A task names its web application as a service, the state server run as a program::

    python3 /opt/forge/webapps/server.py shop --port 8765 [--seed .app/seed.json]
    python3 /opt/forge/webapps/miniwob_server.py click-button --seed 3 --port 8790 --zoom 2 ...

In an episode that server does not run inside the sandbox, where the agent could write its
state, replace it, or read its secret: :func:`hosted_pages` builds it in the HarnessPod
(:mod:`actors.service_routes` serves it under the attempt's URL, with the attempt's key), and
:func:`relayed` replaces the service's command with :mod:`tasks.webapps.relay`, which listens on
the task's port inside the sandbox and passes each request on to it. The browser sees the same
page at the same address; the agent can only do what the page's own requests do (through the
app's validated actions), and ``page_state`` reads the state the HarnessPod kept.

A ``--seed`` file is read from the task's ``files`` (it is relative to the workspace); the
``--state`` and ``--html`` options of the programs are for running them on their own and are
ignored here (MiniWoB's HTML is the installed package's).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tasks.webapps import miniwob_server, server
from tasks.webapps.httpstate import Reply

if TYPE_CHECKING:
    from tasks.schema import Task

WEBAPPS = "/opt/forge/webapps"  # where the sandbox sees tasks/webapps
PROGRAMS = {f"{WEBAPPS}/server.py": "web", f"{WEBAPPS}/miniwob_server.py": "miniwob"}
RELAY = f"{WEBAPPS}/relay.py"
PAGE_KEY_ENV = "FORGE_PAGE_KEY"  # the relay's key to the attempt's URL (relay.KEY_ENV)
PAGE = "page"
"""The key of the page application's state in the state handed to the verifier (``apps``)."""


class PageApp(Protocol):
    """A page application as the HarnessPod serves it."""

    def get(self, route: str) -> Reply: ...

    def post(self, route: str, body: bytes) -> Reply: ...

    def snapshot(self) -> dict[str, Any]: ...


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise ValueError(message)


def _parser(kind: str) -> argparse.ArgumentParser:
    parser = _Parser(add_help=False)
    parser.add_argument("name")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--seed", default=None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--state", default=None)
    if kind == "miniwob":
        parser.add_argument("--html", default=None)
        parser.add_argument("--zoom", type=float, default=1.0)
    return parser


def parse(command: str) -> tuple[str, argparse.Namespace] | None:
    """``(kind, options)`` when ``command`` runs one of the project's state servers
    (``python3 WEBAPPS/server.py ...`` or ``.../miniwob_server.py ...``), else None.
    ValueError when it runs one with options it does not take."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return None
    if len(argv) < 2 or Path(argv[0]).name not in ("python3", "python") or argv[1] not in PROGRAMS:
        return None
    kind = PROGRAMS[argv[1]]
    try:
        options = _parser(kind).parse_args(argv[2:])
    except ValueError as e:
        raise ValueError(f"service {command!r}: {e}") from None
    return kind, options


def miniwob_html() -> str:
    """The installed ``miniwob`` package's HTML folder (found without importing the package,
    whose import needs selenium and gymnasium)."""
    spec = importlib.util.find_spec("miniwob")
    html = Path(next(iter(spec.submodule_search_locations or []), "")) / "html" if spec else None
    if html is None or not (html / "core" / "core.js").is_file():
        raise FileNotFoundError(
            "MiniWoB++ tasks need the miniwob package's HTML: pip install --no-deps miniwob==1.1.0"
        )
    return str(html)


def build(kind: str, options: argparse.Namespace, files: dict[str, str], armed: bool) -> PageApp:
    """The application a parsed service command names (ValueError or FileNotFoundError when it
    cannot be built)."""
    if kind == "web":
        if options.name not in server.APPS:
            raise ValueError(f"no web app {options.name!r} (known: {', '.join(server.APPS)})")
        if options.seed is None:
            seed = server.load_seed(options.name, None)
        elif options.seed in files:
            seed = json.loads(files[options.seed])
        else:
            raise ValueError(f"--seed {options.seed}: not one of the task's files")
        return server.App(options.name, seed)
    seed = miniwob_server.parse_seed(options.seed or "0")
    html = Path(miniwob_html())
    return miniwob_server.Episode(options.name, seed, html, zoom=options.zoom, armed=armed)


class Hosted:
    """A task's page application, built for one attempt: ``pages`` by port. A state server
    that cannot be built (a bad option, an unknown app, MiniWoB's HTML missing) has its error
    in ``errors`` (by the service's index): its sandbox command then fails to start, so the
    attempt is ``service_failed``, as the server itself would have been. ``armed``: the
    harness opens the start page in its own browser before the agent acts (a MiniWoB page
    carries its reporting secret only then)."""

    def __init__(self, task: Task, armed: bool) -> None:
        self.pages: dict[int, PageApp] = {}
        self.ports: dict[int, int] = {}  # service index -> port, for each hosted one
        self.errors: dict[int, str] = {}
        for i, service in enumerate(task.services):
            try:
                parsed = parse(service.command)
                if parsed is None:
                    continue
                kind, options = parsed
                if self.pages:
                    raise ValueError("a task has one page application")
                self.pages[options.port] = build(kind, options, task.files, armed)
                self.ports[i] = options.port
            except (ValueError, OSError) as e:
                self.errors[i] = str(e)

    def relayed(self, task: Task, base: str) -> Task:
        """``task`` with each state server's command replaced by a relay to its application
        under ``base`` (the attempt's URL, ``http://HOST:PORT/episodes/E/attempts/N``)."""
        changed = []
        for i, service in enumerate(task.services):
            if i in self.errors:
                service = service.model_copy(update={"command": fail_command(self.errors[i])})
            elif i in self.ports:
                port = self.ports[i]
                command = relay_command(port, f"{base}/page/{port}")
                service = service.model_copy(update={"command": command})
            changed.append(service)
        return task.model_copy(update={"services": changed})

    def state(self) -> dict[str, Any]:
        """What the verifier gets (``apps[PAGE]``): the page application's state."""
        apps = list(self.pages.values())
        return {PAGE: apps[0].snapshot()} if apps else {}


def relay_command(port: int, upstream: str) -> str:
    """The sandbox command that serves ``127.0.0.1:port`` from ``upstream`` (a URL)."""
    return shlex.join(["python3", RELAY, "--port", str(port), "--to", upstream])


def fail_command(message: str) -> str:
    """A service command that says ``message`` and exits 2 (its start fails)."""
    return f"echo {shlex.quote('page application: ' + message)} >&2; exit 2"

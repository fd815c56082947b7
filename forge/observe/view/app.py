"""The Starlette application of ``forge view`` and how it is served (127.0.0.1 by default)."""

from __future__ import annotations

import functools
from pathlib import Path

import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from forge.observe.view import pages
from forge.observe.view.index import RunIndex


def _decoder(run_dir: Path) -> pages.Decode:
    """Token id -> text with the run's model's tokenizer (ids as ``<id>`` without one)."""
    try:
        config = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
        from serve.models import load_tokenizer

        tok = load_tokenizer(config["policy"]["engine"]["model"])
    except Exception:  # no config, or a model not here: the ids still show
        return lambda i: f"<{i}>"

    @functools.lru_cache(maxsize=65536)
    def decode(token: int) -> str:
        return tok.decode([token])

    return decode


def build_app(run_dir: Path) -> Starlette:
    index = RunIndex(run_dir)
    name = run_dir.resolve().name
    decode = _decoder(run_dir)

    def fresh() -> RunIndex:
        index.refresh()  # what the run appended since the last page
        return index

    def html(text: str, status: int = 200) -> HTMLResponse:
        return HTMLResponse(text, status_code=status)

    def number(request: Request, key: str, default: int | None = None) -> int | None:
        value = request.query_params.get(key)
        try:
            return default if value is None else int(value)
        except ValueError:
            return default

    async def run(request: Request) -> Response:
        return html(pages.run_page(fresh(), name))

    async def version(request: Request) -> Response:
        return html(pages.version_page(fresh(), name, int(request.path_params["version"])))

    async def episodes(request: Request) -> Response:
        page_no = max(0, number(request, "page", 0) or 0)
        return html(pages.episodes_page(fresh(), name, page_no, request.query_params.get("task")))

    async def episode(request: Request) -> Response:
        row = fresh().find(request.path_params["episode_id"], request.path_params["attempt"])
        if row is None:
            return html(pages.page("Not found", "<p>no such episode in this run</p>", name), 404)
        return html(pages.episode_page(index, name, row, decode))

    async def screen(request: Request) -> Response:
        """A GUI turn's screenshot with the model's action drawn on it (forge.observe.gui_marks)."""
        from forge.observe.gui_marks import draw_actions, folder_images

        row = fresh().find(request.path_params["episode_id"], request.path_params["attempt"])
        turns = (index.load(row).get("turns") or []) if row else []
        turn = next((t for t in turns if t.get("index") == request.path_params["turn"]), None)
        if turn is None or not turn.get("images"):
            return Response(status_code=404)
        try:
            png = folder_images(index.episodes_path.parent)(turn["images"][-1])
        except FileNotFoundError:
            return Response(status_code=404)
        return Response(draw_actions(png, turn.get("tool_calls") or []), media_type="image/png")

    async def compare(request: Request) -> Response:
        task = request.query_params.get("task")
        a, b = number(request, "a"), number(request, "b")
        return html(pages.compare_page(fresh(), name, task, a, b))

    return Starlette(
        routes=[
            Route("/", run),
            Route("/version/{version:int}", version),
            Route("/episodes", episodes),
            Route("/episode/{episode_id}/{attempt:int}", episode),
            Route("/episode/{episode_id}/{attempt:int}/screen/{turn:int}.png", screen),
            Route("/compare", compare),
        ]
    )


def serve(run_dir: Path, host: str = "127.0.0.1", port: int = 8300) -> None:
    import uvicorn

    app = build_app(run_dir)
    print(f"[forge] view of {run_dir}: http://{host}:{port}/", flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")

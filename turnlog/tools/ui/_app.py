"""The ASGI app of ``turnlog ui``: routes, error pages, the store's lifetime.

``create_app(UIConfig(...))`` returns a Starlette app; ``turnlog ui`` serves it with uvicorn.
"""

from __future__ import annotations

import contextlib
import secrets
import urllib.parse
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from turnlog.eventstore import StoreError, open_store
from turnlog.projections import ProjectionError, catalogue_upcasters

from . import _pages as pages
from ._data import UIData, parse_int
from ._html import h, layout, seg
from ._http_status import BadRequest, Forbidden, PageError
from ._pages_branch import branch_body, conversation_fragment, diff_body, forks_body
from ._pages_trace import trace_section
from ._readonly import ReadOnlyStore, WriteRefused
from ._search import SearchIndex
from ._security import Guard

__all__ = ["UIConfig", "create_app", "display_url"]

STATIC = Path(__file__).parent / "static"


@dataclass(frozen=True, slots=True)
class UIConfig:
    """How the app runs.

    Attributes:
        store_url: The store (``sqlite:///...``, ``postgresql://...``).
        allow_writes: Open the store for writing and offer the actions (fork, recover).
        token: The token every request must present (None: none needed).
        loopback: The app is bound to a loopback address (only loopback Host names answer).
        analytics_db: Where to keep the analytics tables (None: see ``UIData``).
        persist_dir: Where ``recover`` looks for stream buffers (None: its default).
    """

    store_url: str
    allow_writes: bool = False
    token: str | None = None
    loopback: bool = True
    analytics_db: str | None = None
    persist_dir: str | None = None


def display_url(url: str) -> str:
    """The store URL without its password or query (a URL may carry credentials)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.startswith("sqlite") or parts.scheme == "memory":
        return url.partition("?")[0]
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    user = f"{parts.username}@" if parts.username else ""
    return urllib.parse.urlunsplit((parts.scheme, user + host, parts.path, "", ""))


class _App:
    def __init__(self, config: UIConfig) -> None:
        self.config = config
        self.csrf = secrets.token_urlsafe(24)
        self.store_label = display_url(config.store_url)
        self._data: UIData | None = None
        self.searcher = SearchIndex()

    @property
    def data(self) -> UIData:
        assert self._data is not None, "the app is not started"
        return self._data

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        async with open_store(self.config.store_url, upcasters=catalogue_upcasters()) as store:
            served = store if self.config.allow_writes else ReadOnlyStore(store)
            self._data = UIData(
                served, allow_writes=self.config.allow_writes, analytics_db=self.config.analytics_db
            )
            try:
                yield
            finally:
                self._data.close()

    def page(self, title: str, body: str, status: int = 200, name: str = "") -> HTMLResponse:
        return HTMLResponse(
            layout(title, body, store=self.store_label, writes=self.config.allow_writes, page=name),
            status_code=status,
        )

    def error_html(self, status: int, title: str, message: str) -> str:
        if len(message) > 600:  # an error may quote a very long input
            message = message[:597] + "..."
        body = f'<div class="error-page"><h1>{h(status)} · {h(title)}</h1><p class="error-message">{h(message)}</p><p><a href="/">all branches</a></p></div>'
        return layout(title, body, store=self.store_label, writes=self.config.allow_writes, page="error")

    # ----------------------------------------------------------------------------------- errors

    async def on_page_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, PageError)
        return HTMLResponse(self.error_html(exc.status, exc.title, exc.message), status_code=exc.status)

    async def on_http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        message = "no such page" if exc.status_code == 404 else str(exc.detail)
        return HTMLResponse(
            self.error_html(exc.status_code, "Not found" if exc.status_code == 404 else "Error", message),
            status_code=exc.status_code,
        )

    async def on_write_refused(self, request: Request, exc: Exception) -> Response:
        return HTMLResponse(self.error_html(403, "Read-only", str(exc)), status_code=403)

    async def on_store_error(self, request: Request, exc: Exception) -> Response:
        return HTMLResponse(self.error_html(500, "The store could not be read", str(exc)), status_code=500)

    async def on_crash(self, request: Request, exc: Exception) -> Response:
        return HTMLResponse(
            self.error_html(
                500,
                "Internal error",
                f"{type(exc).__name__}: the page could not be built (see the server's log)",
            ),
            status_code=500,
        )

    # ----------------------------------------------------------------------------------- routes

    async def branches(self, request: Request) -> Response:
        query = request.query_params.get("q", "")
        page = parse_int(request.query_params.get("page"), "page", default=1)
        assert page is not None
        return self.page("Branches", await pages.branches_body(self.data, query, page), name="branches")

    async def _branch_id(self, request: Request) -> str:
        return await self.data.resolve(request.path_params["ref"])

    async def branch(self, request: Request) -> Response:
        ref = request.path_params["ref"]
        branch_id = await self.data.resolve(ref)
        if branch_id != ref:
            query = f"?{request.url.query}" if request.url.query else ""
            return RedirectResponse(f"/branches/{seg(branch_id)}{query}", status_code=307)
        params = request.query_params
        at = parse_int(params.get("at"), "at")
        tpage = parse_int(params.get("tpage"), "tpage")
        body = await branch_body(self.data, branch_id, at, tpage, params.get("all") == "1", self.csrf)
        return self.page(f"branch {branch_id}", body, name="branch")

    async def conversation(self, request: Request) -> Response:
        branch_id = await self._branch_id(request)
        at = parse_int(request.query_params.get("at"), "at") or await self.data.head(branch_id)
        fragment = await conversation_fragment(
            self.data, branch_id, at, request.query_params.get("all") == "1"
        )
        return HTMLResponse(fragment)

    async def diff(self, request: Request) -> Response:
        branch_id = await self._branch_id(request)
        head = await self.data.head(branch_id)
        a = parse_int(request.query_params.get("a"), "a", default=max(1, head - 1))
        b = parse_int(request.query_params.get("b"), "b", default=head)
        assert a is not None and b is not None
        d = await self.data.diff(branch_id, a, b)
        damage = await self.data.damage(branch_id, max(a, b))
        return self.page(f"diff {branch_id}", diff_body(branch_id, a, b, d, damage), name="diff")

    async def replay(self, request: Request) -> Response:
        branch_id = await self._branch_id(request)
        audit, executed = await self.data.replay(branch_id, request.query_params.get("execute") == "1")
        return self.page(f"replay {branch_id}", pages.replay_body(branch_id, audit, executed), name="replay")

    async def _form(self, request: Request) -> dict[str, str]:
        # the forms are urlencoded; parsing them here keeps python-multipart out of the extra
        if len(body := await request.body()) > 65536:
            raise BadRequest("the form is too large")
        form = dict(urllib.parse.parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
        if not secrets.compare_digest(form.get("csrf", "").encode(), self.csrf.encode()):
            raise Forbidden("this form is not one this app served (reload the page and try again)")
        return form

    async def fork(self, request: Request) -> Response:
        self.data.require_writes()
        branch_id = await self._branch_id(request)
        form = await self._form(request)
        at = parse_int(str(form.get("at", "")), "at")
        if at is None:
            raise BadRequest("give the version to fork at")
        child = await self.data.fork(branch_id, at, str(form.get("name", "")).strip() or None)
        return RedirectResponse(f"/branches/{seg(child)}", status_code=303)

    async def recover(self, request: Request) -> Response:
        self.data.require_writes()
        await self._form(request)
        report = await self.data.recover(self.config.persist_dir)
        closed = sum(1 for r in report.runs if r.closed)
        body = (
            f'<h1>Recover</h1><div class="banner ok">{closed} crashed run(s) closed, {report.imported} chunk '
            f"event(s) imported, {len(report.removed)} buffer(s) removed</div>"
        )
        if report.live:
            # The same lease check as `turnlog recover`: a run whose writer is alive stays open.
            items = "".join(f"<li>{h(str(run))}</li>" for run in report.live)
            body += f"<h2>Live runs left open ({len(report.live)})</h2><ul>{items}</ul>"
        return self.page("recover", body, name="recover")

    async def forks(self, request: Request) -> Response:
        return self.page("Forks", await forks_body(self.data), name="forks")

    async def run(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        detail = await self.data.run(run_id)
        names = {b: row.name for b, row in self.data.index.branches.items() if row.name}
        spans, span_damage = await trace_section(
            self.data.store, detail.branch_id, run_id, self.data.damaged_events, names=names
        )
        # one banner on top names every damaged event the page stands on, chunks and spans alike
        damaged = {p.position: p for p in await self.data.damaged_events(detail.chunks)}
        damaged.update((p.position, p) for p in span_damage)
        body = pages.run_body(
            run_id,
            detail,
            sorted(damaged.values(), key=lambda p: p.position or 0),
            branch_name=names.get(detail.branch_id),
        )
        body += spans
        if self.config.allow_writes and detail.info is not None and detail.info.status == "running":
            body += (
                '<form class="action" method="post" action="/recover">'
                f'<input type="hidden" name="csrf" value="{h(self.csrf)}">'
                '<button type="submit">recover crashed runs</button></form>'
            )
        return self.page(f"run {run_id}", body, name="run")

    async def run_live(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        detail = await self.data.run(run_id)
        after = parse_int(request.query_params.get("after"), "after", default=detail.position, low=0)
        assert after is not None
        start = detail.chunks[0].recorded_at.timestamp() if detail.chunks else None
        stream, branch = f"run-{run_id}", f"branch-{detail.branch_id}"

        async def events() -> AsyncIterator[bytes]:
            nonlocal start
            yield b": live\n\n"
            async with _closing(self.data.store.subscribe(after + 1)) as feed:
                async for e in feed:
                    if e.stream == stream and e.type == "stream.chunk":
                        start = start if start is not None else e.recorded_at.timestamp()
                        # a live chunk is checked as it comes, like the ones the page showed
                        altered = bool(await self.data.damaged_events([e]))
                        yield _sse("chunk", pages.chunk_view(e, start) | {"tampered": altered})
                    elif (
                        e.stream == branch
                        and e.data.get("run_id") == run_id
                        and e.type in ("run.ended", "run.failed")
                    ):
                        state = await self.data.state(detail.branch_id)
                        info = state.runs.get(run_id)
                        status = info.status if info else e.type
                        if info is not None and info.reason:
                            status = f"{status} ({info.reason}: {info.error_type})"
                        yield _sse("status", {"status": status})
                        return

        return StreamingResponse(events(), media_type="text/event-stream")

    async def search(self, request: Request) -> Response:
        text = request.query_params.get("q", "")
        return self.page("Search", await self.searcher.body(self.data.store, text), name="search")

    async def verify(self, request: Request) -> Response:
        page = parse_int(request.query_params.get("page"), "page", default=1)
        assert page is not None
        report, streams = await self.data.verify()
        return self.page("Verify", pages.verify_body(report, streams, page), name="verify")

    async def analytics(self, request: Request) -> Response:
        by = request.query_params.get("by", "model")
        result = await self.data.analytics(by)
        return self.page("Analytics", pages.analytics_body(result), name="analytics")

    async def tail(self, request: Request) -> Response:
        head = await self.data.store.head()
        events = [e async for e in self.data.store.read_all(1, head, backwards=True, limit=50)]
        damaged = await self.data.damaged_events(events)
        return self.page("Live tail", pages.tail_body(events, head, damaged), name="tail")

    async def tail_live(self, request: Request) -> Response:
        after = parse_int(request.query_params.get("after"), "after", default=0, low=0)
        assert after is not None

        async def events() -> AsyncIterator[bytes]:
            yield b": live\n\n"
            async with _closing(self.data.store.subscribe(after + 1)) as feed:
                async for e in feed:
                    altered = bool(await self.data.damaged_events([e]))
                    yield _sse("event", pages.event_view(e) | {"tampered": altered})

        return StreamingResponse(events(), media_type="text/event-stream")


_T = TypeVar("_T")


@contextlib.asynccontextmanager
async def _closing(feed: AsyncIterator[_T]) -> AsyncIterator[AsyncIterator[_T]]:
    """Close a subscription when the page's stream ends (the port types it as a plain iterator)."""
    try:
        yield feed
    finally:
        if isinstance(feed, AsyncGenerator):
            await feed.aclose()


def _sse(kind: str, payload: Any) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(payload, default=str) + b"\n\n"


def create_app(config: UIConfig) -> Guard:
    """The ASGI app over ``config.store_url``, wrapped in the security guard.

    Example:
        >>> app = create_app(UIConfig("sqlite:///turnlog.db"))  # doctest: +SKIP
        >>> uvicorn.run(app, host="127.0.0.1", port=8765)  # doctest: +SKIP
    """
    ui = _App(config)
    routes = [
        Route("/", ui.branches),
        Route("/branches/{ref}", ui.branch),
        Route("/branches/{ref}/conversation", ui.conversation),
        Route("/branches/{ref}/diff", ui.diff),
        Route("/branches/{ref}/replay", ui.replay),
        Route("/branches/{ref}/fork", ui.fork, methods=["POST"]),
        Route("/forks", ui.forks),
        Route("/runs/{run_id}", ui.run),
        Route("/runs/{run_id}/live", ui.run_live),
        Route("/search", ui.search),
        Route("/verify", ui.verify),
        Route("/analytics", ui.analytics),
        Route("/tail", ui.tail),
        Route("/tail/live", ui.tail_live),
        Route("/recover", ui.recover, methods=["POST"]),
        Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
    ]
    app = Starlette(
        routes=routes,
        lifespan=ui.lifespan,
        exception_handlers={
            PageError: ui.on_page_error,
            HTTPException: ui.on_http_error,
            WriteRefused: ui.on_write_refused,
            StoreError: ui.on_store_error,
            ProjectionError: ui.on_store_error,
            Exception: ui.on_crash,
        },
    )

    def refuse(status: int, message: str) -> bytes:
        title = {401: "Token needed", 421: "Wrong host"}.get(status, "Refused")
        return ui.error_html(status, title, message).encode()

    return Guard(app, token=config.token, loopback=config.loopback, refuse=refuse)

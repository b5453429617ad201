"""The web monitor: FastAPI pages, a live overview and live panes over websockets.

Every request and every websocket must carry the token (``?token=``, the cookie the first
page sets, or the ``X-Poli-Token`` header); anything else gets 401 and no data. Actions
(approve, deny, answer, gate, abort) exist only when the monitor was started with
``allow_actions``; each names the exact question it answers (see :mod:`politerm.ui.actions`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import pathlib
import secrets
import typing as t

from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from pydantic import BaseModel

from politerm.errors import PolitermError, StaleAction
from politerm.ui import actions
from politerm.ui.web.assets import node_modules

if t.TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from politerm.ui.live import LiveState

log = logging.getLogger(__name__)

STATIC = pathlib.Path(__file__).with_name("static")
COOKIE = "poli_token"
_PAGES = {"overview": "overview.html", "agent": "agent.html", "events": "events.html"}
# A browser that cannot keep up gets dropped rather than buffering without bound.
_MAX_QUEUE = 4096


class ApproveBody(BaseModel):
    """An approve/deny click: the question as the page showed it."""

    agent: str
    asked: float
    command: str
    deny: bool = False


class AnswerBody(BaseModel):
    """An answer to the question a task waits on."""

    task: str
    question: str
    text: str


class GateBody(BaseModel):
    """An answer to a pipeline run's gate."""

    run_id: str
    seq: int
    answer: str


class AbortBody(BaseModel):
    """Abort a task."""

    task: str


def new_token() -> str:
    """A random token for one run of the monitor."""
    return secrets.token_urlsafe(24)


class WebMonitor:
    """The FastAPI application over a :class:`politerm.ui.live.LiveState`.

    Parameters
    ----------
    live
        The shared live state (started by the app's lifespan).
    token
        Required on every request and websocket.
    allow_actions
        Whether approve/deny/answer/gate/abort are served.
    """

    def __init__(self, live: LiveState, *, token: str, allow_actions: bool = False) -> None:
        self.live = live
        self.token = token
        self.allow_actions = allow_actions
        self.modules = node_modules()
        self.app = FastAPI(lifespan=self._lifespan, docs_url=None, redoc_url=None, openapi_url=None)
        self._routes()

    @contextlib.asynccontextmanager
    async def _lifespan(self, _app: FastAPI) -> t.AsyncIterator[None]:
        await self.live.start()
        try:
            yield
        finally:
            await self.live.close()

    # --- the token ------------------------------------------------------------------------

    def _authorized(self, query: str | None, cookie: str | None, header: str | None) -> bool:
        return any(
            given is not None and secrets.compare_digest(given.encode(), self.token.encode())
            for given in (query, cookie, header)
        )

    def _http_ok(self, request: Request) -> bool:
        return self._authorized(
            request.query_params.get("token"),
            request.cookies.get(COOKIE),
            request.headers.get("x-poli-token"),
        )

    # --- routes ---------------------------------------------------------------------------

    def _routes(self) -> None:
        app = self.app

        @app.middleware("http")
        async def require_token(
            request: Request, call_next: Callable[[Request], Awaitable[Response]]
        ) -> Response:
            if not self._http_ok(request):
                return JSONResponse({"error": "a valid token is required"}, status_code=401)
            response = await call_next(request)
            if request.query_params.get("token"):
                response.set_cookie(COOKIE, self.token, httponly=True, samesite="strict")
            response.headers["Cache-Control"] = "no-store"
            return response

        @app.get("/", response_class=HTMLResponse)
        async def overview_page() -> HTMLResponse:
            return self._page("overview", title="politerm")

        @app.get("/events", response_class=HTMLResponse)
        async def events_page() -> HTMLResponse:
            return self._page("events", title="events")

        @app.get("/agent/{name}", response_class=HTMLResponse)
        async def agent_page(name: str) -> HTMLResponse:
            return self._page("agent", title=name, agent=name)

        @app.get("/static/{name}")
        async def static(name: str) -> FileResponse:
            return self._file(STATIC, name)

        @app.get("/xterm/{path:path}")
        async def xterm(path: str) -> FileResponse:
            return self._file(self.modules, path)

        @app.get("/api/overview")
        async def overview() -> JSONResponse:
            return JSONResponse(self.live.overview)

        @app.post("/api/approve")
        async def approve(body: ApproveBody) -> JSONResponse:
            ref = actions.ApprovalRef(body.agent, body.asked, body.command)
            return self._act(
                lambda: actions.approve(self.live.store, ref, deny=body.deny, by="web")
            )

        @app.post("/api/answer")
        async def answer(body: AnswerBody) -> JSONResponse:
            return self._act(
                lambda: actions.answer(
                    self.live.store, self.live.config, body.task, body.question, body.text
                )
            )

        @app.post("/api/gate")
        async def gate(body: GateBody) -> JSONResponse:
            project = self.live.project or pathlib.Path.cwd()
            return self._act(
                lambda: actions.gate(project, body.run_id, body.seq, body.answer, by="web")
            )

        @app.post("/api/abort")
        async def abort(body: AbortBody) -> JSONResponse:
            if not self.allow_actions:
                return _read_only()
            try:
                said = await actions.abort(self.live.store, self.live.config, body.task)
            except PolitermError as exc:
                return _refused(exc)
            self.live.poke()
            return JSONResponse({"ok": True, "message": said})

        @app.websocket("/ws/overview")
        async def ws_overview(ws: WebSocket) -> None:
            if not await self._ws_accept(ws):
                return
            queue: asyncio.Queue[dict[str, t.Any]] = asyncio.Queue(maxsize=64)
            undo = self.live.listen(lambda data: _latest(queue, data))

            async def send() -> None:
                await ws.send_text(json.dumps(self.live.overview))
                while True:
                    await ws.send_text(json.dumps(await queue.get()))

            try:
                await _until_closed(ws, send())
            finally:
                undo()

        @app.websocket("/ws/pane/{name}")
        async def ws_pane(ws: WebSocket, name: str) -> None:
            if not await self._ws_accept(ws):
                return
            await self._stream_pane(ws, name)

    # --- helpers --------------------------------------------------------------------------

    def _page(self, kind: str, *, title: str, agent: str = "") -> HTMLResponse:
        html = (STATIC / _PAGES[kind]).read_text(encoding="utf-8")
        config = {"token": self.token, "actions": self.allow_actions, "agent": agent}
        html = html.replace("{{TITLE}}", _escape(title)).replace(
            "{{CONFIG}}", _escape(json.dumps(config))
        )
        return HTMLResponse(html)

    @staticmethod
    def _file(base: pathlib.Path, rel: str) -> FileResponse:
        path = (base / rel).resolve()
        if not path.is_file() or not path.is_relative_to(base.resolve()):
            return t.cast("FileResponse", JSONResponse({"error": "not found"}, status_code=404))
        return FileResponse(path)

    def _act(self, run: Callable[[], str]) -> JSONResponse:
        if not self.allow_actions:
            return _read_only()
        try:
            said = run()
        except PolitermError as exc:
            return _refused(exc)
        self.live.poke()
        return JSONResponse({"ok": True, "message": said})

    async def _ws_accept(self, ws: WebSocket) -> bool:
        if not self._authorized(
            ws.query_params.get("token"), ws.cookies.get(COOKIE), ws.headers.get("x-poli-token")
        ):
            await ws.close(code=1008, reason="a valid token is required")
            return False
        await ws.accept()
        return True

    async def _stream_pane(self, ws: WebSocket, name: str) -> None:
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()

        def sink(data: bytes) -> None:
            # A browser this far behind is told to start over (the page reconnects and gets
            # a fresh screen); dropping bytes would leave its screen wrong.
            if queue.qsize() >= _MAX_QUEUE:
                return
            queue.put_nowait(data if queue.qsize() < _MAX_QUEUE - 1 else None)

        try:
            mirror = await self.live.mirror(name, sink)
        except PolitermError as exc:
            await ws.send_text(json.dumps({"type": "error", "message": str(exc)}))
            await ws.close()
            return

        async def send() -> None:
            head = {"type": "init", "pane": mirror.pane_id, "cols": mirror.width}
            head["rows"] = mirror.height
            await ws.send_text(json.dumps(head))
            await ws.send_bytes(mirror.initial)
            while True:
                data = await queue.get()
                if data is None:
                    await ws.close()
                    return
                # Coalesce what piled up while the last frame was being sent.
                while not queue.empty():
                    more = queue.get_nowait()
                    if more is None:
                        break
                    data += more
                await ws.send_bytes(data)

        try:
            await _until_closed(ws, send())
        finally:
            mirror.stop()


async def _until_closed(ws: WebSocket, sending: t.Coroutine[t.Any, t.Any, None]) -> None:
    """Run ``sending`` until it ends or the browser goes away, whichever comes first."""

    async def receive() -> None:
        # The pages send nothing; this only notices the close (then the sender stops).
        while (await ws.receive())["type"] != "websocket.disconnect":
            pass

    tasks = {asyncio.create_task(sending), asyncio.create_task(receive())}
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, RuntimeError):
                await task


def _latest(queue: asyncio.Queue[t.Any], item: t.Any) -> None:
    # Each overview replaces the last: a slow browser skips to the newest, never an old one.
    if queue.full():
        queue.get_nowait()
    queue.put_nowait(item)


def _read_only() -> JSONResponse:
    return JSONResponse(
        {"ok": False, "error": "read-only: start `poli web --allow-actions` to act"},
        status_code=403,
    )


def _refused(exc: PolitermError) -> JSONResponse:
    code = 409 if isinstance(exc, StaleAction) else 400
    return JSONResponse({"ok": False, "error": str(exc)}, status_code=code)


def _escape(text: str) -> str:
    """HTML-escape ``text`` for an attribute or element body.

    Examples
    --------
    >>> _escape('<a href="x">&</a>')
    '&lt;a href=&quot;x&quot;&gt;&amp;&lt;/a&gt;'
    """
    import html

    return html.escape(text, quote=True)

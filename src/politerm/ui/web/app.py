"""The web monitor: FastAPI pages, a live overview and live panes over websockets.

Every request and every websocket must carry a token (``?token=``, the cookie the first
page sets, or the ``X-Poli-Token`` header): the run's own on loopback, a paired device's
(:mod:`politerm.ui.web.devices`) when remote. Anything else gets 401 and no data, is logged,
and a client that keeps guessing gets 429 for a while (:mod:`politerm.ui.web.guard`).
A request that changes something must also come from the page's own origin
(:func:`~politerm.ui.web.guard.same_origin`). Actions (approve, deny, answer, gate, abort)
exist only when the monitor was started with ``allow_actions``; each names the exact question
it answers (see :mod:`politerm.ui.actions`) and is logged with who gave it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import pathlib
import secrets
import time
import typing as t

from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from pydantic import BaseModel

from politerm._internal.sanitize import escape_controls
from politerm.errors import PolitermError, StaleAction
from politerm.ui import actions
from politerm.ui.web.assets import node_modules
from politerm.ui.web.delta import overview_delta
from politerm.ui.web.guard import SAFE_METHODS, FailedAttempts, same_origin

if t.TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from politerm.ui.live import LiveState
    from politerm.ui.web.devices import Devices

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
    project: str | None = None
    node: str | None = None
    """The fleet's node the agent runs on (the answer goes there)."""


class AnswerBody(BaseModel):
    """An answer to the question a task waits on."""

    task: str
    question: str
    text: str
    project: str | None = None
    node: str | None = None
    """The fleet's node whose router runs the task, when the page showed one."""


class GateBody(BaseModel):
    """An answer to a pipeline run's gate."""

    run_id: str
    seq: int
    answer: str
    project: str | None = None


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
        The run's token, accepted on every request and websocket (None: devices only).
    allow_actions
        Whether approve/deny/answer/gate/abort are served.
    devices
        The paired devices whose tokens are accepted (``poli web --remote``).
    origins
        The origins the pages are served from; a request that changes something must come
        from one of them.
    remote
        Served beyond this machine: a changing request must name its origin, the cookie is
        TLS-only, and a token in the address is moved to the cookie at once.
    attempts
        The bad-token counter (by default 10 failures in 5 minutes remotely; 30 on loopback,
        where every client shares one address and a guesser is a local process anyway).
    """

    def __init__(
        self,
        live: LiveState,
        *,
        token: str | None,
        allow_actions: bool = False,
        devices: Devices | None = None,
        origins: t.Sequence[str] = (),
        remote: bool = False,
        attempts: FailedAttempts | None = None,
    ) -> None:
        if token is None and devices is None:
            msg = "the web monitor needs a token or paired devices"
            raise ValueError(msg)
        self.live = live
        self.token = token
        self.allow_actions = allow_actions
        self.devices = devices
        self.origins = tuple(origins)
        self.remote = remote
        self.attempts = attempts or FailedAttempts(limit=10 if remote else 30)
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

    def _identify(self, tokens: Mapping[str, str]) -> tuple[str, str] | None:
        """``(who, token)`` for the first token given that opens the monitor, else None.

        ``who`` goes into the action log: ``web`` for the run's token, ``web:NAME`` for a
        paired device's.
        """
        for source in ("query", "header", "cookie"):
            given = tokens.get(source)
            if not given:
                continue
            if self.token is not None and secrets.compare_digest(
                given.encode(), self.token.encode()
            ):
                return "web", given
            device = self.devices.check(given) if self.devices is not None else None
            if device is not None:
                return f"web:{device}", given
        return None

    @staticmethod
    def _tokens(conn: Request | WebSocket) -> dict[str, str]:
        found = {
            "query": conn.query_params.get("token"),
            "header": conn.headers.get("x-poli-token"),
            "cookie": conn.cookies.get(COOKIE),
        }
        return {k: v for k, v in found.items() if v}

    def _refuse(self, client: str, path: str) -> tuple[int, str]:
        """Count and log a bad token from ``client``; the status and message to answer."""
        now = time.monotonic()
        failures = self.attempts.fail(client, now=now)
        # The path is the guesser's text: shown, never obeyed by a terminal, and short.
        path = escape_controls(path)[:200]
        detail = f"bad or missing token from {client} for {path} ({failures} recently)"
        log.warning("poli web: %s", detail)
        self.live.store.add_event(
            "web-auth-refused", detail=detail, data={"client": client, "path": path}
        )
        if failures >= self.attempts.limit:
            wait = self.attempts.retry_after(client, now=now)
            self.live.store.add_event(
                "web-auth-blocked",
                detail=f"{client} refused for {wait}s after {failures} bad tokens",
                data={"client": client, "seconds": wait},
            )
        return 401, "a valid token is required"

    # --- routes ---------------------------------------------------------------------------

    def _routes(self) -> None:
        app = self.app

        @app.middleware("http")
        async def require_token(
            request: Request, call_next: Callable[[Request], Awaitable[Response]]
        ) -> Response:
            client = request.client.host if request.client else "?"
            if self.attempts.blocked(client, now=time.monotonic()):
                wait = self.attempts.retry_after(client, now=time.monotonic())
                return JSONResponse(
                    {"error": "too many bad tokens: try again later"},
                    status_code=429,
                    headers={"Retry-After": str(wait)},
                )
            found = self._identify(self._tokens(request))
            if found is None:
                code, said = self._refuse(client, request.url.path)
                return JSONResponse({"error": said}, status_code=code)
            who, token = found
            if request.method not in SAFE_METHODS and not same_origin(
                request.headers.get("origin"),
                request.headers.get("referer"),
                self.origins,
                required=self.remote,
            ):
                log.warning(
                    "poli web: cross-origin %s %s refused", request.method, request.url.path
                )
                return JSONResponse(
                    {"ok": False, "error": "refused: not from this monitor's own page"},
                    status_code=403,
                )
            request.state.who, request.state.token = who, token
            if self.remote and request.query_params.get("token"):
                # Out of the address bar and the history at once; the cookie carries it on.
                response: Response = RedirectResponse(request.url.path, status_code=303)
            else:
                response = await call_next(request)
            if request.query_params.get("token"):
                response.set_cookie(
                    COOKIE, token, httponly=True, samesite="strict", secure=self.remote
                )
            response.headers["Cache-Control"] = "no-store"
            response.headers["Referrer-Policy"] = "same-origin"
            return response

        @app.get("/", response_class=HTMLResponse)
        async def overview_page(request: Request) -> HTMLResponse:
            return self._page(request, "overview", title="politerm")

        @app.get("/events", response_class=HTMLResponse)
        async def events_page(request: Request) -> HTMLResponse:
            return self._page(request, "events", title="events")

        @app.get("/agent/{name}", response_class=HTMLResponse)
        async def agent_page(request: Request, name: str) -> HTMLResponse:
            return self._page(request, "agent", title=name, agent=name)

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
        async def approve(request: Request, body: ApproveBody) -> JSONResponse:
            ref = actions.ApprovalRef(body.agent, body.asked, body.command, body.node)
            by = request.state.who
            if self.live.remote_node(body.node):
                # Its node presses the keys; waiting for its word must not hold the loop.
                there = self.live.approve_remote
                return await self._act(lambda: asyncio.to_thread(there, ref, deny=body.deny, by=by))

            def run() -> str:
                store, _ = self.live.project_of(body.project)
                return actions.approve(store, ref, deny=body.deny, by=by)

            return await self._act(run)

        @app.post("/api/answer")
        async def answer(request: Request, body: AnswerBody) -> JSONResponse:
            live, by = self.live, request.state.who
            home = body.project is None or body.project == live.home.key
            if home and live.config.fleet is not None and live.store.get_task(body.task) is None:
                # Another node's router runs it: waiting for its word must not hold the loop.
                there = functools.partial(
                    live.answer_remote, body.task, body.question, body.text, by=by
                )
                return await self._act(lambda: asyncio.to_thread(there))

            def run() -> str:
                store, _ = live.project_of(body.project)
                config = live.config_of(body.project)
                return actions.answer(store, config, body.task, body.question, body.text, by=by)

            return await self._act(run)

        @app.post("/api/gate")
        async def gate(request: Request, body: GateBody) -> JSONResponse:
            by = request.state.who

            def run() -> str:
                _, ref = self.live.project_of(body.project)
                project = ref.root or self.live.project or pathlib.Path.cwd()
                return actions.gate(project, body.run_id, body.seq, body.answer, by=by)

            return await self._act(run)

        @app.post("/api/abort")
        async def abort(request: Request, body: AbortBody) -> JSONResponse:
            live, by = self.live, request.state.who
            return await self._act(lambda: actions.abort(live.store, live.config, body.task, by=by))

        @app.websocket("/ws/overview")
        async def ws_overview(ws: WebSocket) -> None:
            if not await self._ws_accept(ws):
                return
            queue: asyncio.Queue[dict[str, t.Any]] = asyncio.Queue(maxsize=64)
            undo = self.live.listen(lambda data: _latest(queue, data))

            async def send() -> None:
                sent = self.live.overview
                await ws.send_text(json.dumps(sent))
                while True:
                    new = await queue.get()
                    # Only what changed since the last frame (ui/web/delta.py).
                    frame = overview_delta(sent, new)
                    if frame is not None:
                        await ws.send_text(json.dumps(frame))
                    sent = new

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

    def _page(self, request: Request, kind: str, *, title: str, agent: str = "") -> HTMLResponse:
        html = (STATIC / _PAGES[kind]).read_text(encoding="utf-8")
        # The page's own calls carry the token that opened it; remotely the HttpOnly cookie
        # alone carries it, so no script on the page can read it.
        token = "" if self.remote else request.state.token
        config = {"token": token, "actions": self.allow_actions, "agent": agent}
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

    async def _act(self, run: Callable[[], str | Awaitable[str]]) -> JSONResponse:
        """Run an action (when actions are allowed) and answer with what it said."""
        if not self.allow_actions:
            return _read_only()
        try:
            said = run()
            if not isinstance(said, str):
                said = await said
        except PolitermError as exc:
            return _refused(exc)
        self.live.poke()
        return JSONResponse({"ok": True, "message": said})

    async def _ws_accept(self, ws: WebSocket) -> bool:
        client = ws.client.host if ws.client else "?"
        if self.attempts.blocked(client, now=time.monotonic()):
            await ws.close(code=1008, reason="too many bad tokens: try again later")
            return False
        if self._identify(self._tokens(ws)) is None:
            self._refuse(client, ws.url.path)
            await ws.close(code=1008, reason="a valid token is required")
            return False
        # A browser always names the page that opens a websocket; another site's page is refused.
        if not same_origin(ws.headers.get("origin"), None, self.origins, required=False):
            await ws.close(code=1008, reason="not from this monitor's own page")
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

"""The loopback model server: aiohttp on 127.0.0.1 in a background thread.

It checks the API key the clients send (``x-api-key``, ``Authorization: Bearer``,
``x-goog-api-key`` or ``?key=``), answers main requests from a :class:`Script`, side requests
(titles, Gemini's router, token counts) with canned answers, and records every request.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import secrets
import socket
import threading
import time
import typing as t

from aiohttp import web

from politerm.testing.mockllm import apis
from politerm.testing.mockllm.limits import limit_answer
from politerm.testing.mockllm.script import Answer, Rule, Script

if t.TYPE_CHECKING:
    from collections.abc import Callable, Iterator

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Request:
    """One request the server saw.

    Attributes
    ----------
    api
        ``anthropic``, ``responses``, ``chat``, ``gemini``, ``count_tokens``, ``models``,
        ``probe`` or ``unknown``.
    path
        The URL path and query.
    side
        A side request (title, router, token count) answered with a canned reply.
    user_text
        The last user message's text.
    tool_result
        The newest message was the result of a tool call.
    rule
        The rule that answered ("" when none did).
    command
        The shell command the answer asked the client to run.
    body
        The request's JSON body.
    at
        ``time.monotonic()`` when it arrived.
    """

    api: str
    path: str
    side: bool
    user_text: str
    tool_result: bool
    rule: str
    command: str | None
    body: dict[str, t.Any]
    at: float


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MockLLM:
    """A scripted model server speaking the Anthropic, OpenAI and Gemini APIs.

    Parameters
    ----------
    rules
        The initial script (more can be added with :meth:`add` while it runs).
    token
        The API key clients must send (default: a random one).
    sides
        Tell side requests (titles, routers, JSON-mode calls) apart and answer them with
        canned text; ``False`` makes every request a main one, answered by the rules (what a
        program calling the SDKs directly, like the manager's brain, needs).

    Examples
    --------
    >>> with MockLLM([Rule("hello", "Hi there.")]) as llm:
    ...     llm.url.startswith("http://127.0.0.1:")
    True
    """

    def __init__(
        self, rules: t.Iterable[Rule] = (), *, token: str | None = None, sides: bool = True
    ) -> None:
        self.script = Script(rules)
        self.sides = sides
        self.token = token or f"sk-mock-{secrets.token_hex(16)}"
        self.port = 0
        self._requests: list[Request] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None

    # --- public ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (no path)."""
        return f"http://127.0.0.1:{self.port}"

    def add(self, *rules: Rule) -> None:
        """Append rules to the script."""
        with self._lock:
            self.script.add(*rules)

    def lift_limits(self) -> None:
        """The API's limits reset: rules with ``limit`` stop answering from now on."""
        with self._lock:
            self.script.lifted = True

    def requests(self, *, side: bool | None = False, api: str | None = None) -> list[Request]:
        """The requests seen so far (main ones by default; ``side=None`` for all)."""
        with self._lock:
            return [
                r
                for r in self._requests
                if (side is None or r.side == side) and (api is None or r.api == api)
            ]

    def start(self, timeout: float = 20.0) -> t.Self:
        """Start serving in a background thread; return once it listens."""
        self._thread = threading.Thread(target=self._serve, name="mockllm", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout):
            msg = f"mock model server did not start within {timeout:g}s"
            raise RuntimeError(msg)
        if self._error is not None:
            msg = f"mock model server failed to start: {self._error}"
            raise RuntimeError(msg)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving and join the thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop already stopped
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        self._loop = self._thread = None

    def __enter__(self) -> t.Self:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # --- the thread -----------------------------------------------------------------------

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._bind())
        except BaseException as exc:  # noqa: BLE001  # reported by start()
            self._error = exc
            self._started.set()
            loop.close()
            return
        self._started.set()
        try:
            loop.run_forever()
        finally:
            if self._runner is not None:
                loop.run_until_complete(self._runner.cleanup())
            loop.close()

    async def _bind(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/messages", self._anthropic)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1beta/models/{spec}", self._gemini)
        # Claude Code probes the base URL before its first request.
        app.router.add_route("HEAD", "/", self._probe)
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0
        )
        await runner.setup()
        for _ in range(20):
            port = free_port()
            site = web.TCPSite(runner, "127.0.0.1", port)
            try:
                await site.start()
            except OSError:
                continue  # taken between free_port() and bind: try another
            self.port = port
            self._runner = runner
            return
        msg = "no free port on 127.0.0.1"
        raise OSError(msg)

    # --- handlers -------------------------------------------------------------------------

    def _authorized(self, request: web.Request) -> bool:
        bearer = request.headers.get("Authorization", "")
        keys = {
            request.headers.get("x-api-key"),
            request.headers.get("x-goog-api-key"),
            request.query.get("key"),
            bearer.removeprefix("Bearer ").strip() if bearer.startswith("Bearer ") else None,
        }
        return self.token in keys

    async def _body(self, request: web.Request) -> dict[str, t.Any] | web.Response:
        if not self._authorized(request):
            return web.json_response(
                {"error": {"type": "authentication_error", "message": "bad mock API key"}},
                status=401,
            )
        try:
            data = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return web.json_response({"error": {"message": "body is not JSON"}}, status=400)
        if not isinstance(data, dict):
            return web.json_response({"error": {"message": "body is not an object"}}, status=400)
        return data

    def _decide(self, api: str, path: str, body: dict[str, t.Any], turn: apis.Turn) -> Answer:
        if not self.sides:
            turn = dataclasses.replace(turn, side=False)
        if turn.side:
            answer = Answer(apis.side_text(turn))
        else:
            with self._lock:
                answer = self.script.answer(turn.user_text, tool_result=turn.tool_result)
            if api == "chat" and not turn.tools and answer.command is not None:
                # aider has no tools: with ``--edit-format diff`` a bash block makes it ask
                # "Run shell command?".
                fenced = f"{answer.text}\n\n```bash\n{answer.command}\n```\n".lstrip()
                answer = dataclasses.replace(
                    answer, text=fenced, command=None, shown=answer.command
                )
        record = Request(
            api=api,
            path=path,
            side=turn.side,
            user_text=turn.user_text,
            tool_result=turn.tool_result,
            rule=answer.rule,
            command=answer.command or answer.shown,
            body=body,
            at=time.monotonic(),
        )
        with self._lock:
            self._requests.append(record)
        log.debug("mockllm %s side=%s rule=%r", api, turn.side, answer.rule)
        return answer

    async def _stream(
        self, request: web.Request, events: Iterator[apis.Event], delay: float
    ) -> web.StreamResponse:
        if delay:
            await asyncio.sleep(delay)
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        for name, data in events:
            head = f"event: {name}\n" if name else ""
            await resp.write(f"{head}data: {data}\n\n".encode())
        await resp.write_eof()
        return resp

    async def _json(self, payload: dict[str, t.Any], delay: float) -> web.Response:
        if delay:
            await asyncio.sleep(delay)
        return web.json_response(payload)

    async def _handle(
        self,
        request: web.Request,
        api: str,
        read: Callable[[dict[str, t.Any]], apis.Turn],
        events: Callable[[Answer, str], Iterator[apis.Event]],
        whole: Callable[[Answer, str], dict[str, t.Any]],
        *,
        stream: bool | None = None,
    ) -> web.StreamResponse:
        body = await self._body(request)
        if isinstance(body, web.Response):
            return body
        turn = read(body)
        answer = self._decide(api, request.path_qs, body, turn)
        if answer.limit is not None:
            limit = limit_answer(api, answer.limit, answer.limit_kind)
            return web.json_response(limit.body, status=limit.status, headers=limit.headers)
        if answer.status or answer.raw is not None:
            return await self._fault(answer)
        model = str(body.get("model") or "mock-model")
        streaming = bool(body.get("stream")) if stream is None else stream
        if streaming:
            return await self._stream(request, events(answer, model), answer.delay)
        return await self._json(whole(answer, model), answer.delay)

    async def _fault(self, answer: Answer) -> web.Response:
        if answer.delay:
            await asyncio.sleep(answer.delay)
        if answer.raw is not None:
            return web.Response(text=answer.raw, content_type="application/json")
        # Retry-After 0: the clients' own backoff is what a test wants to see, not a wait.
        error = {"type": "mock_error", "code": answer.status, "message": f"mock {answer.status}"}
        return web.json_response(
            {"error": error}, status=answer.status, headers={"Retry-After": "0"}
        )

    async def _anthropic(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(
            request, "anthropic", apis.read_anthropic, apis.anthropic_events, apis.anthropic_json
        )

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(
            request, "responses", apis.read_responses, apis.responses_events, apis.responses_json
        )

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, "chat", apis.read_chat, apis.chat_events, apis.chat_json)

    async def _gemini(self, request: web.Request) -> web.StreamResponse:
        spec = request.match_info["spec"]
        model, _, method = spec.partition(":")
        if method == "countTokens":
            body = await self._body(request)
            if isinstance(body, web.Response):
                return body
            self._record_side("count_tokens", request, body)
            return web.json_response({"totalTokens": 10})
        streaming = method == "streamGenerateContent"
        if method not in ("generateContent", "streamGenerateContent"):
            return await self._unknown(request)
        return await self._handle(
            request,
            "gemini",
            lambda b: apis.read_gemini(b, streaming=streaming),
            lambda a, _m: apis.gemini_events(a, model),
            lambda a, _m: apis.gemini_json(a, model),
            stream=streaming,
        )

    async def _count_tokens(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        if isinstance(body, web.Response):
            return body
        self._record_side("count_tokens", request, body)
        return web.json_response({"input_tokens": 10})

    async def _models(self, request: web.Request) -> web.Response:
        self._record_side("models", request, {})
        model = {"id": "mock-model", "object": "model", "created": 0, "owned_by": "mock"}
        return web.json_response({"object": "list", "data": [model]})

    async def _probe(self, request: web.Request) -> web.Response:
        self._record_side("probe", request, {})
        return web.Response()

    async def _unknown(self, request: web.Request) -> web.Response:
        self._record_side("unknown", request, {})
        log.warning("mockllm: unexpected %s %s", request.method, request.path_qs)
        return web.json_response({"error": {"message": "not mocked"}}, status=404)

    def _record_side(self, api: str, request: web.Request, body: dict[str, t.Any]) -> None:
        with self._lock:
            self._requests.append(
                Request(api, request.path_qs, True, "", False, "", None, body, time.monotonic())
            )

"""In-process mock upstreams for the built-in protocols: a scripted FIFO of replies, and a record of
every request received. With an empty queue each endpoint answers with the demo reply."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass

from aiohttp import web

from . import demo, output_ceilings, render_anthropic, render_chat, render_gemini, render_interactions, render_responses
from .interactions_routes import PREFIX as INTERACTIONS_PATH, InteractionsEndpoints
from .anthropic_thinking import ThinkingLedger
from . import anthropic_system
from .replies import ANTHROPIC, CHAT, GEMINI, INTERACTIONS, NATIVE, RESPONSES, Error, Hang, Json, Stream, encode_event, native_error_body
from .turn import Turn

PATHS = {"/v1/chat/completions": CHAT, "/v1/responses": RESPONSES, "/v1/messages": ANTHROPIC}
# Token counting: with an empty queue the answer counts one token per 4 bytes of the body.
COUNT_PATHS = {"/v1/messages/count_tokens": ANTHROPIC, "/v1/responses/input_tokens": RESPONSES}
# Responses compaction (responses.compact): with an empty queue, the input's user messages and one compaction item.
COMPACT_PATH = "/v1/responses/compact"
RENDERERS = {CHAT: render_chat, RESPONSES: render_responses, ANTHROPIC: render_anthropic, GEMINI: render_gemini,
             INTERACTIONS: render_interactions}
# Gemini names the model and the method in the path: /v1beta/models/{model}:{method}.
GEMINI_PATH = re.compile(r"^/v1(?:beta)?/models/([^/:]+):(generateContent|streamGenerateContent|countTokens)$")
SSE_TYPE = "text/event-stream; charset=utf-8"


@dataclass
class Recorded:
    protocol: str
    path: str
    headers: dict  # lower-cased names
    body: dict | None  # None when the body is not a JSON object
    raw: bytes
    method: str = "POST"
    query: str = ""  # the raw query string
    raw_path: str = ""  # the path as it came on the request line, still escaped


def _compacted(body: dict) -> dict:
    items = body.get("input") if isinstance(body.get("input"), list) else [{"role": "user", "content": body.get("input")}]
    kept = [i for i in items if isinstance(i, dict) and i.get("role") == "user"]
    return {"id": "cmp_mock", "object": "response.compaction", "created_at": int(time.time()),
            "output": [*kept, {"id": "cmp_item_mock", "type": "compaction", "encrypted_content": "provider-opaque"}],
            "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
                      "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}}


def protocol_for_path(path: str) -> str:
    """The protocol whose error shape an unknown path answers in."""
    if path in PATHS:
        return PATHS[path]
    if path in COUNT_PATHS:
        return COUNT_PATHS[path]
    if INTERACTIONS_PATH.match(path):
        return INTERACTIONS
    if path.startswith(("/v1beta/", "/v1/models/")):
        return GEMINI
    if path.rstrip("/").endswith("messages"):
        return ANTHROPIC
    if "responses" in path:
        return RESPONSES
    return CHAT


def render(protocol: str, turn: Turn, request: dict):
    """A Turn as `protocol` renders it for `request`: the JSON body, or the list of
    (event name, data) pairs when the request asks for a stream."""
    renderer = RENDERERS[protocol]
    return renderer.events(turn, request) if request.get("stream") else renderer.body(turn, request)


def gemini_request(path: str, body: dict | None) -> tuple[str, dict] | None:
    """(method, the body as the renderers and demo replies read it: model and stream
    from the path) for a Gemini path, else None."""
    match = GEMINI_PATH.match(path)
    if match is None:
        return None
    model, method = match.groups()
    return method, {**(body or {}), "model": model, "stream": method == "streamGenerateContent"}


# Protocols whose requests name the model and the method in the path.
MODEL_IN_PATH = {GEMINI: gemini_request}


class MockUpstream:
    """Serves POST /v1/chat/completions, /v1/responses, /v1/messages and Gemini's
    /v1beta/models/{model}:generateContent | :streamGenerateContent | :countTokens, and the
    Interactions API's /v1beta/interactions (and /v1) with GET, DELETE and cancel, on `app`.

    `enqueue` scripts replies (Json, Error, Stream, Hang, or a Turn rendered in the protocol of
    the path hit, streaming when the request's "stream" is true); `responder`, when set, answers
    whatever the queue does not (a callable like a queued one: an agent's whole conversation);
    `requests` records everything received, unknown paths included."""

    def __init__(self, *, system_in_place: bool = False) -> None:
        """`system_in_place`: every Anthropic model here takes a system message in `messages`
        (the demo's models stand for current Claude models, to which Claude Code sends one);
        otherwise only the models rules/tables/model_features.yaml names do, as the API says."""
        self.system_in_place = system_in_place
        self.requests: list[Recorded] = []
        self.cut_short = 0  # streams the client (the proxy) went away from before their end
        self._queue: deque = deque()
        self.responder = None
        # Anthropic's thinking rule in tool loops: what was sent is what must come back.
        self.thinking = ThinkingLedger()
        # The rules a real API enforces across requests, by the protocol whose API it is.
        self.enforcers = {ANTHROPIC: self.thinking}
        # The Interactions API's resources (create, get, delete, cancel) and what it served.
        self.interactions = InteractionsEndpoints(self)
        self.resources = {INTERACTIONS: self.interactions}
        self._closing = False
        self.url: str | None = None
        self._server = None
        self._runner: web.AppRunner | None = None
        self.app = web.Application()
        self.app.router.add_route("*", "/{tail:.*}", self._handle)
        self.app.on_shutdown.append(self._on_shutdown)

    def enqueue(self, *replies) -> None:
        """Replies are served first in, first out. A reply may also be a callable taking the
        Recorded request and returning a reply."""
        self._queue.extend(replies)

    def reset(self) -> None:
        self._queue.clear()
        self.responder = None
        self.requests.clear()
        self.cut_short = 0
        self.thinking.clear()
        self.interactions.ledger.clear()

    @property
    def pending(self) -> int:
        return len(self._queue)

    # --- serving in a background thread (tests, demo mode in a sync program) ---

    def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self._server = _ThreadedServer(self.app, host, port)
        self.url = self._server.start()
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    @contextmanager
    def serve(self, host: str = "127.0.0.1", port: int = 0):
        """Run on host:port (0 = any free port) in a thread; yields the base URL (no /v1)."""
        url = self.start(host, port)
        try:
            yield url
        finally:
            self.stop()

    async def astart(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on the running event loop (e.g. next to the proxy in demo mode); returns the base URL."""
        self._runner = web.AppRunner(self.app, handle_signals=False, shutdown_timeout=2.0, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()
        self.url = f"http://{host}:{self._runner.addresses[0][1]}"
        return self.url

    async def astop(self) -> None:
        await self._runner.cleanup()

    # --- request handling ---

    async def _on_shutdown(self, app) -> None:
        self._closing = True

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        # relative to where the app is mounted, so it also works as a sub-application
        path = "/" + request.match_info.get("tail", request.path.lstrip("/"))
        protocol = protocol_for_path(path)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        record = Recorded(
            protocol=protocol,
            path=path,
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body if isinstance(body, dict) else None,
            raw=raw,
            method=request.method,
            query=request.rel_url.raw_query_string,
            raw_path=request.rel_url.raw_path,
        )
        self.requests.append(record)
        resources = self.resources.get(protocol)
        if resources is not None:
            return await resources.handle(request, record)
        in_path = MODEL_IN_PATH.get(protocol)  # the model and the method in the URL (Gemini)
        gemini = in_path(path, record.body) if in_path is not None else None
        if gemini is not None and request.method == "POST":
            method, shaped = gemini
            refused = output_ceilings.refusal(protocol, shaped) if method != "countTokens" else None
            if refused:
                return _refuse(protocol, *refused)
            if method == "countTokens":
                reply = self._queue.popleft() if self._queue else Json({"totalTokens": max(1, len(raw) // 4)})
            else:
                reply = self.next_reply(protocol, shaped, record)
            if shaped["stream"] and "alt=sse" not in record.query.split("&") and isinstance(reply, Turn):
                # Without alt=sse Gemini streams one JSON array of the chunks.
                return _json(200, [chunk for _, chunk in render_gemini.events(reply, shaped)])
            return await self._answer(request, protocol, shaped, reply)
        if path in COUNT_PATHS and request.method == "POST":
            reply = self._queue.popleft() if self._queue else Json(demo.token_count(protocol, raw))
            if callable(reply):
                reply = reply(record)
            return await self._answer(request, protocol, record.body or {}, reply)
        if path == COMPACT_PATH and request.method == "POST":
            reply = self._queue.popleft() if self._queue else Json(_compacted(record.body or {}))
            return await self._answer(request, protocol, record.body or {}, reply(record) if callable(reply) else reply)
        if path not in PATHS:
            return _json(404, native_error_body(protocol, 404, f"no route for {path}"))
        if request.method != "POST":
            return _json(405, native_error_body(protocol, 405, f"method {request.method} not allowed"))
        enforcer = self.enforcers.get(protocol)
        refused = enforcer.check(record.body or {}, record.headers) if enforcer is not None else None
        if refused:
            return _json(400, native_error_body(protocol, 400, refused))
        refused_limit = output_ceilings.refusal(protocol, record.body or {})
        if refused_limit:
            return _refuse(protocol, *refused_limit)
        misplaced = anthropic_system.refusal(protocol, record.body or {}, any_model=self.system_in_place)
        if misplaced:
            return _json(400, native_error_body(protocol, 400, misplaced))
        return await self._answer(request, protocol, record.body or {}, self.next_reply(protocol, record.body or {}, record))

    def next_reply(self, protocol: str, body: dict, record: Recorded):
        """The scripted reply next in the queue, else the responder's, else the demo reply
        to `body`; a callable reply is called with the request's record."""
        if self._queue:
            reply = self._queue.popleft()
        elif self.responder is not None:
            reply = self.responder
        else:
            reply = demo.demo_reply(protocol, body)
        return reply(record) if callable(reply) else reply

    async def _answer(self, request, protocol: str, body: dict, reply) -> web.StreamResponse:
        if isinstance(reply, Turn):
            enforcer = self.enforcers.get(protocol)
            if enforcer is not None:
                enforcer.record(reply, body)
            self.interactions.rendered(protocol, reply)
            renderer = RENDERERS[protocol]
            if body.get("stream"):
                reply = Stream(
                    events=renderer.events(reply, body),
                    split_bytes=reply.split_bytes,
                    crlf=reply.crlf,
                    cut_after=reply.cut_after,
                    stall_after=reply.stall_after,
                    stall_secs=reply.stall_secs,
                    delay_secs=reply.delay_secs,
                    headers=reply.headers,
                )
            else:
                if reply.delay_secs:  # as long as the stream would take
                    await self._sleep(request, reply.delay_secs * len(renderer.events(reply, {**body, "stream": True})))
                reply = Json(renderer.body(reply, body), headers=reply.headers)
        if isinstance(reply, Json):
            return _json(reply.status, reply.body, reply.headers)
        if isinstance(reply, Error):
            return _error(protocol, reply)
        if isinstance(reply, Stream):
            return await self._stream(request, reply)
        if isinstance(reply, Hang):
            return await self._hang(request, body, reply)
        raise TypeError(f"not a mock reply: {reply!r}")

    async def _stream(self, request: web.Request, s: Stream) -> web.StreamResponse:
        resp = web.StreamResponse(status=s.status)
        resp.content_type = "text/event-stream"
        resp.charset = "utf-8"
        resp.headers["Cache-Control"] = "no-cache"
        for k, v in (s.headers or {}).items():
            resp.headers[k] = v
        await resp.prepare(request)
        if s.raw is not None:
            blobs = list(s.raw)
        else:
            blobs = [encode_event(e, d, s.crlf) for e, d in (s.events or [])]
        cut = s.cut_after is not None and s.cut_after < len(blobs)
        if s.cut_after is not None:
            blobs = blobs[: s.cut_after]
        pending = b""
        try:
            for i, blob in enumerate(blobs):
                wait = (s.delay_secs if i > 0 else 0.0) + (s.stall_secs if s.stall_after == i else 0.0)
                if wait:
                    if pending:
                        await resp.write(pending)
                        pending = b""
                    if not await self._sleep(request, wait):
                        self.cut_short += 1
                        return resp
                if s.split_bytes:
                    pending += blob
                    while len(pending) >= s.split_bytes:
                        await resp.write(pending[: s.split_bytes])
                        pending = pending[s.split_bytes :]
                else:
                    await resp.write(blob)
            if pending:
                await resp.write(pending)
            if s.stall_after is not None and s.stall_after >= len(blobs) and s.stall_secs:
                # a stall after the last event: silence before the end of the body
                if not await self._sleep(request, s.stall_secs):
                    return resp
            if cut and s.abort and request.transport is not None:
                request.transport.abort()
                return resp
            await resp.write_eof()
        except (ConnectionResetError, ConnectionError):
            self.cut_short += 1
        return resp

    async def _hang(self, request: web.Request, body: dict, h: Hang) -> web.StreamResponse:
        if h.after_headers:
            resp = web.StreamResponse(status=200)
            resp.content_type = "text/event-stream" if body.get("stream") else "application/json"
            await resp.prepare(request)
            await self._sleep(request, h.secs)
            if request.transport is not None:
                request.transport.close()
            return resp
        await self._sleep(request, h.secs)
        # the client has normally given up by now; end without an answer
        if request.transport is not None:
            request.transport.close()
        return web.Response(status=504)

    async def _sleep(self, request: web.Request, secs: float) -> bool:
        """Sleep, cut short when the client goes away or the server shuts down. True if not cut short."""
        end = time.monotonic() + secs
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return True
            transport = request.transport
            if self._closing or transport is None or transport.is_closing():
                return False
            await asyncio.sleep(min(left, 0.02))


def _refuse(protocol: str, message: str, param: str | None, code: str | None) -> web.Response:
    """A 400 in the protocol's shape, naming the field where the protocol's errors do."""
    body = native_error_body(protocol, 400, message)
    for key, value in (("param", param), ("code", code)):
        if value is not None:
            body["error"][key] = value
    return _json(400, body)


def _json(status: int, body, headers: dict | None = None) -> web.Response:
    data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    resp = web.Response(status=status, body=data, content_type="application/json")
    for k, v in (headers or {}).items():
        resp.headers[k] = v
    return resp


def _error(protocol: str, e: Error) -> web.Response:
    body = e.body
    if body is NATIVE:
        body = native_error_body(protocol, e.status, e.message)
    if isinstance(body, dict):
        data = json.dumps(body, ensure_ascii=False).encode()
        ctype = e.content_type or "application/json"
    elif isinstance(body, str):
        data = body.encode()
        ctype = e.content_type or "text/plain"
    elif body is None:
        data = b""
        ctype = e.content_type
    else:
        data = bytes(body)
        ctype = e.content_type or "application/octet-stream"
    resp = web.Response(status=e.status, body=data)
    if ctype:
        resp.headers["Content-Type"] = ctype
    for k, v in (e.headers or {}).items():
        resp.headers[k] = v
    return resp


class _ThreadedServer:
    """An aiohttp app on its own event loop in a daemon thread."""

    def __init__(self, app: web.Application, host: str, port: int) -> None:
        self.app, self.host, self.port = app, host, port
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="mock-upstream")
        self.runner: web.AppRunner | None = None

    def start(self) -> str:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return f"http://{self.host}:{self.port}"

    async def _start(self) -> None:
        self.runner = web.AppRunner(self.app, handle_signals=False, shutdown_timeout=2.0, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, self.host, self.port)
        await site.start()
        self.port = self.runner.addresses[0][1]

    def stop(self) -> None:
        if self.runner is not None:
            asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(15)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@contextmanager
def serve_in_thread(app: web.Application, host: str = "127.0.0.1", port: int = 0):
    """Run any aiohttp app in a background thread; yields its base URL."""
    server = _ThreadedServer(app, host, port)
    url = server.start()
    try:
        yield url
    finally:
        server.stop()

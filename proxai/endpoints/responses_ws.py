"""The Responses API over a WebSocket: `GET /v1/responses` upgraded, as the openai SDK's
`client.responses.connect()` and Codex (a provider with `supports_websockets = true`) use it.

Each `response.create` message is one turn through the pipeline of `POST /v1/responses`
with `stream: true` (routing, translation or pass-through, pools, limits, captures), its
SSE events sent as text messages, one log line and one metrics observation per turn.
Turns on a socket run one at a time, in the order sent. The socket remembers its last
response: a `previous_response_id` naming it is expanded on the socket (that turn's
input and output before the new input), so it works with `store: false` and after a
`generate: false` warm-up, toward every provider. A client that closes the socket, or
drops the connection, cancels the turn in flight and its provider call. Errors are
`error` events in OpenAI's shape carrying the HTTP status they would have had.
"""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
import uuid
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from proxai.http import errors as E
from proxai.http import ingress, paths, requestid
from proxai.operations import reload
from proxai.routing import turn_state
from proxai.observability.logs import add_earlier_usage, log_request
from proxai.endpoints import responses_state
from proxai.http.detached import DetachedRequest, Writer
from proxai.http.streaming import Outcome
from proxai.http.surface import CAPTURE_KEY, INFO_KEY, PROXY_KEY, dump_json
from proxai.endpoints import state_spec

log = logging.getLogger("proxai")

FEATURE = "websocket"  # the descriptor feature of the protocols served over a socket
CREATE = "response.create"
# Client messages that need no answer: Codex acknowledges each finished response.
IGNORED = frozenset({"response.processed"})
# Fields of the socket's envelope, not of the request body.
ENVELOPE = ("type", "stream_id", "generate")
CLOSE_GOING_AWAY = 1001
SOCKETS_KEY: web.AppKey[set] = web.AppKey("proxai.responses_sockets", set)


# --- one turn's response, written as socket messages ------------------------------------


class _Events(Writer):
    """The payload writer of a turn's response: the SSE frames the pipeline writes become
    one text message each (the event's data, `stream_id` added when the turn named one)."""

    def __init__(self, ws: web.WebSocketResponse, stream_id: str | None, spec: state_spec.StateSpec):
        self.ws = ws
        self.stream_id = stream_id
        # The protocol's terminal stream events (its descriptor's `state.stream`): the last response.
        self._terminal = frozenset(name.decode() for name in spec.terminal_events)
        self._field = spec.snapshot_field
        self.final: dict | None = None  # the Response of the terminal event
        self.sent = 0
        self._pending = b""

    async def write(self, data, *args, **kwargs) -> None:
        self._pending += bytes(data)
        *frames, self._pending = self._pending.replace(b"\r\n", b"\n").split(b"\n\n")
        for frame in frames:
            await self._frame(frame)

    async def _frame(self, frame: bytes) -> None:
        data = b"\n".join(line[5:].lstrip(b" ") for line in frame.split(b"\n") if line.startswith(b"data:"))
        if not data:
            return  # a comment (heartbeat) or an empty frame
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            event = None
        if isinstance(event, dict):
            if event.get("type") in self._terminal and isinstance(event.get(self._field), dict):
                self.final = event[self._field]
            if self.stream_id is not None:
                event["stream_id"] = self.stream_id
                data = orjson.dumps(event)
        await self.send(data.decode())

    async def send(self, text: str) -> None:
        await self.ws.send_str(text)
        self.sent += 1

    async def event(self, event: dict) -> None:
        if self.stream_id is not None:
            event = {**event, "stream_id": self.stream_id}
        if event.get("type") in self._terminal:
            self.final = event[self._field]
        await self.send(dump_json(event).decode())

    async def write_eof(self, data: bytes = b"") -> None:
        if data:
            await self.write(data)



# --- the socket's memory: its last response -----------------------------------------------


@dataclass
class _Last:
    id: str
    input: list  # the turn's input as the pipeline got it (earlier local turns expanded)
    output: list
    previous_response_id: str | None  # what the pipeline resolved beyond the socket (the store)
    local: bool  # not stored (store: false) or not generated (a warm-up): only this socket has it


def _items(value: Any) -> list:
    if value is None:
        return []
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return list(value) if isinstance(value, list) else [value]


def expand(body: dict, last: _Last | None) -> dict:
    """`previous_response_id` naming the socket's last response, when only the socket has
    it: that turn's input and output go before the new input."""
    if last is None or not last.local or body.get("previous_response_id") != last.id:
        return body
    out = dict(body)
    out["input"] = [*last.input, *last.output, *_items(body.get("input"))]
    if last.previous_response_id is None:
        out.pop("previous_response_id")
    else:
        out["previous_response_id"] = last.previous_response_id
    return out


# --- the endpoint ---------------------------------------------------------------------------


class Socket:
    def __init__(self, proxy, request: web.Request, protocol: str, ws: web.WebSocketResponse):
        self.proxy = proxy
        self.request = request
        self.protocol = protocol
        self.ws = ws
        self.client = request[INFO_KEY].get("_client")
        self.last: _Last | None = None
        self.turns: asyncio.Queue = asyncio.Queue()
        self.busy = False
        self.closing = False
        self.turn_state: str | None = None  # the handshake's turn-state token (routing/turn_state.py)

    async def serve(self) -> None:
        worker = asyncio.get_running_loop().create_task(self._work())
        try:
            async for message in self.ws:
                if message.type != aiohttp.WSMsgType.TEXT:
                    if message.type == aiohttp.WSMsgType.BINARY:
                        await self._refuse("messages are JSON text frames; a binary frame was sent", "type")
                    continue
                try:
                    event = orjson.loads(message.data)
                except orjson.JSONDecodeError:
                    await self._refuse("the message is not valid JSON", None)
                    continue
                kind = event.get("type") if isinstance(event, dict) else None
                if kind == CREATE:
                    self.turns.put_nowait(event)
                elif kind not in IGNORED:
                    await self._refuse(f"unsupported message type {kind!r}; send {CREATE!r}", "type")
        finally:
            worker.cancel()  # a turn in flight: its provider call is cancelled with it
            with _suppressed():
                await worker

    async def close_when_idle(self) -> None:
        self.closing = True
        if not self.busy:
            await self.ws.close(code=CLOSE_GOING_AWAY, message=b"the proxy is shutting down")

    async def _work(self) -> None:
        while True:
            event = await self.turns.get()
            self.busy = True
            try:
                await self._turn(event)
            finally:
                self.busy = False
            if self.closing and self.turns.empty():
                await self.ws.close(code=CLOSE_GOING_AWAY, message=b"the proxy is shutting down")
                return

    def _spec(self) -> state_spec.StateSpec:
        return state_spec.of(self.proxy.engine.wire, self.protocol) or state_spec.NONE

    async def _refuse(self, message: str, param: str | None) -> None:
        error = error_event(self.proxy, self.protocol, E.InvalidRequest(message, param=param))
        await _Events(self.ws, None, self._spec()).event(error)

    async def _turn(self, event: dict) -> None:
        proxy = self.proxy
        started = time.monotonic()
        info: dict[str, Any] = {"request_id": requestid.mint(), "method": "WEBSOCKET", "path": self.request.path,
                                "_started": started, "client_protocol": self.protocol}
        if self.turn_state is not None:
            info["_turn_state"] = self.turn_state
        if self.client is not None:
            info["_client"] = self.client
        stream_id = event.get("stream_id") if isinstance(event.get("stream_id"), str) else None
        events = _Events(self.ws, stream_id, self._spec())
        turn = DetachedRequest(self.request, events, {INFO_KEY: info})
        token = requestid.current.set(info["request_id"])
        pinned = reload.pin(proxy)  # each turn starts on the live generation, as a request would
        body: dict | None = None
        try:
            body = expand({k: v for k, v in event.items() if k not in ENVELOPE}, self.last)
            if body.get("background") is not None:
                raise E.InvalidRequest("background is not supported over a WebSocket; use POST /v1/responses",
                                       param="background")
            body["stream"] = True  # a socket is always a stream
            raw = dump_json(body)
            self._open_capture(turn, info, raw)
            if self.client is not None and self.client.limited:
                await proxy.limits.admit(self.client)
            if event.get("generate") is False:
                await self._warm_up(turn, body, raw, info, events)
            else:
                await self._generate(turn, body, raw, info)
        except E.ProxyError as err:
            info.update(status=err.status, error=err.kind)
            await _quietly(events.event(error_event(proxy, self.protocol, err, events.sent)))
        except asyncio.CancelledError:
            info.setdefault("outcome", Outcome.CLIENT_DISCONNECTED.value)
            info["status"] = 499 if info.get("status") in (None, 200) and events.final is None else info["status"]
            raise
        except Exception as exc:
            tb = "".join(traceback.format_tb(exc.__traceback__))
            log.error("internal error %s in request %s\n%s", type(exc).__name__, info["request_id"], tb)
            info.update(status=500, error=type(exc).__name__)
            await _quietly(events.event(error_event(proxy, self.protocol, E.InternalError("internal error in the proxy"), events.sent)))
        finally:
            _account(proxy, turn, info, started)
            reload.unpin(pinned)
            requestid.current.reset(token)
        if body is not None and events.final is not None and isinstance(events.final.get("id"), str):
            final = events.final
            self.last = _Last(final["id"], _items(body.get("input")), list(final.get("output") or []),
                              body.get("previous_response_id"),
                              local=body.get("store") is False or event.get("generate") is False)

    def _open_capture(self, turn: DetachedRequest, info: dict, raw: bytes) -> None:
        proxy = self.proxy
        if proxy.recorder is not None:
            turn[CAPTURE_KEY] = proxy.recorder.open(info["request_id"])
        if proxy.inspector is not None:
            turn[CAPTURE_KEY] = proxy.inspector.open(info, turn.get(CAPTURE_KEY))
        cap = turn.get(CAPTURE_KEY)
        if cap is not None:
            version = f"HTTP/{self.request.version.major}.{self.request.version.minor}"
            cap.whole("inbound_request", f"{self.request.method} {self.request.path_qs} {version} (WebSocket message)",
                      self.request.headers.items(), raw)

    async def _generate(self, turn: DetachedRequest, body: dict, raw: bytes, info: dict) -> None:
        proxy = self.proxy
        with proxy.slot(), proxy.tracing.request(self.request.headers, "POST", self.request.path, info):
            body = ingress.parse(self.protocol, raw)
            info.update(model=body["model"], stream=True)
            match = proxy.route(body["model"], self.protocol, info)
            async with proxy.limits.stream_slot(info, True):
                response = await proxy.serve(turn, self.protocol, match, body, raw, True, info)
        if isinstance(response, web.Response) and response.status >= 400:
            # an answer the pipeline wrote whole (not a stream): its error body as the event
            err = E.ProxyError(_error_message(response.body), status=response.status)
            await turn._payload_writer.event(error_event(proxy, self.protocol, err))

    async def _warm_up(self, turn: DetachedRequest, body: dict, raw: bytes, info: dict, events: _Events) -> None:
        """`generate: false`: no provider call; a completed, empty Response the next turn
        can name as its previous_response_id (kept on the socket)."""
        proxy = self.proxy
        body = ingress.parse(self.protocol, raw)
        info.update(model=body["model"], stream=True)
        proxy.route(body["model"], self.protocol, info)  # an unknown model is this turn's error
        for key in ("provider", "provider_protocol", "upstream_model", "route"):
            info.pop(key, None)  # no provider was called
        response = empty_response(proxy, self.protocol, body)
        await events.event({"type": "response.created", "sequence_number": 0, "response": {**response, "status": "in_progress"}})
        await events.event({"type": "response.completed", "sequence_number": 1, "response": response})
        info.update(status=200, outcome=Outcome.COMPLETE.value)


def empty_response(proxy, protocol: str, body: dict) -> dict:
    """A completed Response with no output, its echoed settings by the protocol's own rules."""
    response = responses_state.empty_resource(proxy, protocol, body, "resp_" + uuid.uuid4().hex,
                                              usage={"input_tokens": 0, "output_tokens": 0})
    response.update(store=body.get("store") is not False, previous_response_id=body.get("previous_response_id"))
    return response


def error_event(proxy, protocol: str, err: E.ProxyError, sequence_number: int | None = None) -> dict:
    """The socket's `error` event: the HTTP error body the request would have had, its status
    and headers (Retry-After), as the SDK's ResponseWsError and Codex read it."""
    status, headers, data = E.render_http(protocol, err, proxy.engine)
    error = orjson.loads(data).get("error")
    event: dict[str, Any] = {"type": "error", "status": status, "error": error}
    extra = {k: v for k, v in headers.items() if k.lower() != "content-type"}
    if extra:
        event["error"] = {**error, "headers": extra}
    if sequence_number is not None:
        event["sequence_number"] = sequence_number
    return event


def _error_message(data: Any) -> str:
    try:
        return str(orjson.loads(data)["error"]["message"])
    except Exception:
        return "the provider refused the request"


def _account(proxy, turn: DetachedRequest, info: dict, started: float) -> None:
    """The turn's log line, metrics, capture summary and token spend, as any request's."""
    info["duration_ms"] = round((time.monotonic() - started) * 1000, 1)
    info.setdefault("status", 200)
    cap = turn.get(CAPTURE_KEY)
    if cap is not None:
        cap.summary(info)
        cap.close()
    notes = info.get("_traces")
    if notes:
        info["translation_notes"] = len(notes)
    add_earlier_usage(info)
    log_request(**info)
    client = info.get("_client")
    if client is not None and client.tokens_per_minute is not None:
        proxy.limits.spend_later(client, (info.get("input_tokens") or 0) + (info.get("output_tokens") or 0))
    proxy.metrics.observe(info)
    if proxy.inspector is not None:
        proxy.inspector.finish(info)


async def _quietly(send) -> None:
    with _suppressed():
        await send


class _suppressed:
    """The socket may be gone by the time an answer is ready."""

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb) -> bool:
        return kind is not None and issubclass(kind, (ConnectionError, aiohttp.ClientError, RuntimeError, asyncio.CancelledError))


async def handle(request: web.Request) -> web.StreamResponse:
    proxy = request.app[PROXY_KEY]
    protocol = proxy.paths.generate[paths.canonical(request.path)]
    # the same client key as over HTTP, checked before the upgrade: a refusal is an HTTP 401
    proxy.authorize(request, proxy.engine.wire.client_key(protocol, request.headers, request.rel_url.query))
    ws = web.WebSocketResponse(max_msg_size=proxy.config.server.max_request_body_bytes, autoping=True)
    if not ws.can_prepare(request).ok:
        raise E.InvalidRequest(f"GET {request.path} is the Responses WebSocket endpoint: it needs a WebSocket "
                               "upgrade; create a response with POST")
    header = proxy.engine.wire.turn_state_header(protocol)
    token = turn_state.token(request.headers.get(header)) if header else None
    if token is not None:  # Codex reads a socket's turn-state token off the handshake
        ws.headers[header] = token
    await ws.prepare(request)
    request[INFO_KEY]["_socket"] = True  # its turns are logged one by one, not the socket
    socket = Socket(proxy, request, protocol, ws)
    socket.turn_state = token
    sockets = request.app[SOCKETS_KEY]
    sockets.add(socket)
    try:
        await socket.serve()
    finally:
        sockets.discard(socket)
    return ws


async def _close_sockets(app: web.Application) -> None:
    """On shutdown an idle socket closes at once (1001), a busy one after its turn."""
    for socket in list(app[SOCKETS_KEY]):
        with _suppressed():
            await socket.close_when_idle()


def add_routes(app: web.Application, proxy) -> None:
    app[SOCKETS_KEY] = set()
    for path, protocol in proxy.paths.generate.items():
        if proxy.engine.wire.has(protocol, FEATURE):
            app.router.add_get(path, handle)
            app.router.add_get(paths.unprefixed(path), handle)
    app.on_shutdown.append(_close_sockets)

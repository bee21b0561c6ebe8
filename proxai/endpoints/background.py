"""Background responses (`background: true`) toward every provider (docs/responses-api.md "Background").

`POST /v1/responses` with `background: true` answers at once with the Response in status
`queued` and runs the provider call in a task of its own: the same pipeline as any other
request (translation or pass-through, pools, limits), always streamed toward the provider,
its events written into a sink instead of a client connection. The run's events and its
latest Response snapshot go to the state store as they come, so

* `GET /v1/responses/{id}` polls the status and the output items finished so far;
* `GET /v1/responses/{id}?stream=true&starting_after=N` replays the events after sequence
  number N and follows the run live while it goes on, on any instance sharing the store;
* `POST /v1/responses/{id}/cancel` stops the provider call (the owning instance notices a
  cancel asked on another within a fraction of a second) and ends the run `cancelled`.

The run belongs to the process that started it; that process keeps a short-lived liveness
key in the store while it has runs. A run found unfinished whose owner's key has expired (the
process was killed or restarted) is marked `failed`, saying so, by whoever looks at it: a
run is never lost silently.

Runs are local toward an OpenAI Responses provider too: the provider gets a plain streamed
request (no `background`), so every provider behaves the same and a cancel stops a
connection the proxy holds. The run's id is then the provider's own, so
`previous_response_id` keeps working at the provider; toward other protocols the proxy
mints it and answers before the provider is called.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
import uuid
from typing import Any

import orjson
from aiohttp import web

from proxai.http import errors as E
from proxai.http import requestid
from proxai.observability.logs import add_earlier_usage, log_request
from proxai.endpoints import replay, state_spec
from proxai.endpoints.responses_state import StateUnavailable, _frame, empty_resource
from proxai.http.detached import DetachedRequest, Writer
from proxai.protocols import RESPONSES
from proxai.routing import clients
from proxai.state import StateError
from proxai.http.streaming import HEARTBEAT

log = logging.getLogger("proxai.background")

_RUN = "background:"  # background:<tenant>:<id>: the run's status, latest snapshot, owner, chunk count
_EVENTS = "background-events:"  # background-events:<tenant>:<id>:<n>: the n-th batch of its SSE frames
_CANCEL = "background-cancel:"  # background-cancel:<tenant>:<id>: a cancel asked on any instance
_ALIVE = "background-alive:"  # background-alive:<owner>: refreshed while the owner process has runs

ALIVE_TTL_SECS = 5.0  # how long after its owner died a run is still reported as running
_ALIVE_EVERY_SECS = 1.0
_FLUSH_SECS = 0.05  # events are written in batches at most this far apart
_CANCEL_CHECK_SECS = 0.25
_FOLLOW_POLL_SECS = 0.1
_CANCEL_WAIT_SECS = 10.0

_FINAL_STATUSES = frozenset({"completed", "incomplete", "failed", "cancelled"})
RESTARTED = "the proxy stopped or restarted while this background response was running; it did not finish"
SHUT_DOWN = "the proxy shut down while this background response was running; it did not finish"


def requested(body: dict) -> bool:
    return body.get("background") is True


def _mint(spec) -> str:
    return spec.background.get("id_prefix", "") + uuid.uuid4().hex + secrets.token_hex(8)


def _run_key(tenant: str, response_id: str) -> str:
    return f"{_RUN}{tenant}:{response_id}"


def _events_key(tenant: str, response_id: str, n: int) -> str:
    return f"{_EVENTS}{tenant}:{response_id}:{n}"


def _unavailable(exc: StateError) -> StateUnavailable:
    return StateUnavailable(f"the state store is unavailable: {exc}")


# --- the run's request, detached from the client's connection ------------------------------


class _Sink(Writer):
    """The payload writer of a run's response: what the pipeline writes goes to the run."""

    def __init__(self, run: "Run"):
        self._run = run

    async def write(self, data, *args, **kwargs) -> None:
        self._run.feed(bytes(data))

    async def write_eof(self, data: bytes = b"") -> None:
        if data:
            self._run.feed(bytes(data))



def failure_frame(spec, snapshot: dict | None, code: str, message: str, seq: int) -> bytes:
    """The event a failed run ends with, without its blank line: the protocol's failed snapshot
    (response.failed), or, for a protocol whose failed stream ends on an error event
    (`background.error_event`), that event by its `errors.stream` rule."""
    if spec.background.get("error_event"):
        return E.render_stream(spec.protocol, E.ProxyError(message, code=code), sequence_number=seq - 1)[:-2]
    failed = E.failed_snapshot(snapshot, code, message)
    failed["background"] = True
    name = spec.background.get("failed_event", "response.failed")
    return f"event: {name}\ndata: ".encode() + orjson.dumps({"type": name, "sequence_number": seq, "response": failed})


# --- one run ------------------------------------------------------------------------------


class Run:
    def __init__(self, runs: "Runs", state, tenant: str, response_id: str | None, snapshot: dict | None, spec=None):
        self.runs = runs
        self.spec = spec = spec or state_spec.builtin(RESPONSES)
        self._sequence = spec.background.get("sequence")  # the events' own sequence-number field, if any
        self._terminal = frozenset(name.decode() for name in spec.terminal_events)
        self._steps = replay.Steps(spec.steps) if spec.steps else None  # output items when no event carries them whole
        self.state = state
        self.tenant = tenant
        self.id = response_id
        self.snapshot = snapshot  # the latest Response, as GET answers it
        self.status = spec.background.get("queued_status", "queued")
        self.frames: list[tuple[int, bytes]] = []  # every frame so far: (sequence_number, bytes)
        self.items: dict[int, dict] = {}  # finished output items by output_index
        self.flushed_frames = 0
        self.chunks = 0
        self.last_seq = -1
        self.error: dict | None = None  # the last in-stream error event
        self.terminal = False
        self.cancelling = False
        self.task: asyncio.Task | None = None
        self.writer_task: asyncio.Task | None = None
        self.opened: asyncio.Future = asyncio.get_running_loop().create_future()  # the id is known
        self.changed = asyncio.Event()
        self._wake = asyncio.Event()
        self._buffer = b""
        if response_id is not None:
            self.opened.set_result(None)

    # --- frames from the pipeline ---

    def feed(self, data: bytes) -> None:
        self._buffer += data
        *frames, self._buffer = self._buffer.split(b"\n\n")
        for frame in frames:
            if frame.strip() and not frame.startswith(b":"):  # SSE comments are the connection's, not the run's
                self._take(frame)

    def _take(self, frame: bytes) -> None:
        name, payload = _frame(frame)
        if name is None or payload is None:
            return
        event = name.decode()
        spec = self.spec
        if self._sequence:
            seq = payload.get(self._sequence)
            if not isinstance(seq, int) or seq <= self.last_seq:
                seq = payload[self._sequence] = self.last_seq + 1
        else:  # the events carry none: the run numbers them for itself
            seq = self.last_seq + 1
        self.last_seq = seq
        snapshot = payload.get(spec.snapshot_field)
        if isinstance(snapshot, dict):
            if self.id is None and isinstance(snapshot.get("id"), str):
                self.id = snapshot["id"]  # a provider's own id (pass-through)
            snapshot["id"] = self.id
            if "background" in spec.echo:
                snapshot["background"] = True
            self.snapshot = snapshot
            status = snapshot.get("status")
            if isinstance(status, str):
                self.status = status
            if event in self._terminal:
                self.terminal = True
        if spec.id_field and self.id is not None and isinstance(payload.get(spec.id_field), str):
            payload[spec.id_field] = self.id
        if self._steps is not None:
            self._steps.feed(name, payload)
        if event == spec.background.get("item_done") and isinstance(payload.get("output_index"), int):
            self.items[payload["output_index"]] = payload.get("item")
        if event == "error":
            self.error = payload
        self._append(seq, b"event: " + name + b"\ndata: " + orjson.dumps(payload) + b"\n\n")
        if self.id is not None and not self.opened.done():
            self.opened.set_result(None)

    def _append(self, seq: int, frame: bytes) -> None:
        self.frames.append((seq, frame))
        self._wake.set()
        self.changed.set()
        self.changed = asyncio.Event()

    def current(self) -> dict:
        """The Response as a poll sees it now: the latest snapshot with the items finished so far."""
        response = dict(self.snapshot or {})
        output = self.spec.output
        if self._steps is not None and (not self.terminal or not isinstance(response.get(output), list)):
            response[output] = self._steps.items()
        elif not self.terminal:
            response[output] = [self.items[i] for i in sorted(self.items)]
        if not self.terminal:
            response["status"] = self.status
        return response

    def fail(self, message: str, code: str = "server_error") -> None:
        """End the run failed with a `response.failed` of the proxy's making (none came from the pipeline)."""
        if self.terminal:
            return
        failed = failure_frame(self.spec, self.current(), code, message, self.last_seq + 1)
        error_event = self.spec.background.get("error_event")
        self._take(failed)
        if error_event:  # the protocol ends a failed stream with an error event, and no snapshot
            self.snapshot = dict(self.current(), status="failed")
            self.status = "failed"
            self.terminal = True

    def end_cancelled(self) -> None:
        self.status = "cancelled"
        snapshot = self.current()
        snapshot["status"] = "cancelled"
        self.snapshot = snapshot
        self.terminal = True
        self.changed.set()

    # --- the store ---

    def doc(self) -> dict:
        return {"id": self.id, "protocol": self.spec.protocol, "owner": self.runs.owner, "status": self.status,
                "response": self.current(),
                "chunks": self.chunks, "last_seq": self.last_seq, "terminal": self.terminal}

    async def flush(self) -> None:
        if self.id is None:
            return
        store = self.state.store
        ttl = store.ttl_secs
        try:
            pending = self.frames[self.flushed_frames:]
            if pending:
                data = orjson.dumps([[seq, frame.decode()] for seq, frame in pending])
                await store.kv_set(_events_key(self.tenant, self.id, self.chunks), data, ttl_secs=ttl)
                self.chunks += 1
                self.flushed_frames += len(pending)
            await store.kv_set(_run_key(self.tenant, self.id), orjson.dumps(self.doc()), ttl_secs=ttl)
        except StateError as exc:
            log.warning("background response %s: its progress could not be stored: %s", self.id, exc)

    async def writer(self) -> None:
        """Write the run's events in batches while it runs; notice a cancel asked elsewhere."""
        cancel_key = None
        next_check = 0.0
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), _CANCEL_CHECK_SECS)
                self._wake.clear()
                await asyncio.sleep(_FLUSH_SECS)
            except asyncio.TimeoutError:
                pass
            await self.flush()
            if self.id is None:
                continue
            cancel_key = cancel_key or f"{_CANCEL}{self.tenant}:{self.id}"
            now = time.monotonic()
            if now >= next_check:
                next_check = now + _CANCEL_CHECK_SECS
                try:
                    if await self.state.store.kv_get(cancel_key) is not None:
                        self.cancel()
                except StateError:
                    pass

    def cancel(self) -> None:
        if self.task is not None and not self.task.done() and not self.terminal:
            self.cancelling = True
            self.task.cancel()


class Runs:
    """The background runs this process owns, and its liveness key while it has any."""

    def __init__(self) -> None:
        self.owner = uuid.uuid4().hex
        self.local: dict[tuple[str, str], Run] = {}
        self._alive: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()

    async def keep_alive(self, state) -> None:
        if self._alive is None or self._alive.done():
            await state.store.kv_set(_ALIVE + self.owner, b"1", ttl_secs=ALIVE_TTL_SECS)
            self._alive = asyncio.get_running_loop().create_task(self._refresh(state))

    async def _refresh(self, state) -> None:
        while self._tasks:
            await asyncio.sleep(_ALIVE_EVERY_SECS)
            try:
                await state.store.kv_set(_ALIVE + self.owner, b"1", ttl_secs=ALIVE_TTL_SECS)
            except StateError as exc:
                log.warning("background runs: the liveness key could not be renewed: %s", exc)
        # Not deleted: it expires by itself, and a run started meanwhile must not find it gone.

    async def stop(self, timeout: float) -> None:
        """Shutdown: what has not finished by now ends failed, saying the proxy shut down."""
        pending = [task for task in self._tasks if not task.done()]
        for run in list(self.local.values()):
            if not run.terminal:
                run.fail(SHUT_DOWN)
                if run.task is not None:
                    run.task.cancel()
        if pending:
            log.warning("shutting down: %d background responses still running end failed", len(pending))
            await asyncio.wait(pending, timeout=timeout)


# --- POST /v1/responses with background: true ----------------------------------------------


async def start(proxy, request: web.Request, protocol: str, match, body: dict, info: dict) -> web.StreamResponse:
    spec = state_spec.of(proxy.engine.wire, protocol)
    if body.get(spec.store) is False:
        raise E.InvalidRequest(f"background {spec.noun}s are stored: background: true needs {spec.store} true (or left out)",
                               param="background")
    state = proxy.state
    if state is None:
        raise E.InvalidRequest(f"background {spec.noun}s need the state store, and state.backend is none",
                               param="background")
    tenant = state.tenant(request)
    passthrough = match.provider.protocol == protocol
    run_body = {key: value for key, value in body.items() if key != "background"}
    run_body["stream"] = True  # the run reads the provider's stream, whatever the client asked for
    response_id = None if passthrough else _mint(spec)
    runs: Runs = proxy.background
    run = Run(runs, state, tenant, response_id, None if passthrough else _queued(proxy, protocol, body, response_id, spec),
              spec)
    run_info = {key: value for key, value in info.items() if not key.startswith("_") or key in ("_client", "_started")}
    run_info.update(method="BACKGROUND", stream=True, _started=time.monotonic())
    from proxai.http.surface import INFO_KEY, dump_json

    detached = DetachedRequest(request, _Sink(run), {INFO_KEY: run_info,
                                                     clients.PRESENTED_KEY: request.get(clients.PRESENTED_KEY)})
    detached.fixed_response_id = response_id  # the id the stored response takes (responses_state.Turn)
    slot = proxy.limits.stream_slot(run_info, True)
    await slot.__aenter__()  # the client's concurrent_streams: refused now, in its own shape
    try:
        await runs.keep_alive(state)
    except StateError as exc:
        await slot.__aexit__(None, None, None)
        raise _unavailable(exc) from None
    raw = dump_json(run_body)
    task = asyncio.get_running_loop().create_task(_execute(proxy, run, detached, protocol, match, run_body, raw, run_info, slot))
    run.task = task
    runs._tasks.add(task)
    task.add_done_callback(runs._tasks.discard)
    run.writer_task = asyncio.get_running_loop().create_task(run.writer())
    if passthrough:
        # The provider's own id names the run: wait for its response.created (its error, if
        # it refuses the request, is this request's answer).
        await asyncio.wait({run.opened, task}, return_when=asyncio.FIRST_COMPLETED)
        if run.id is None:
            error = task.exception() if task.done() and not task.cancelled() else None
            raise error if isinstance(error, E.ProxyError) else E.UpstreamProtocolError(
                "the provider ended the background response before it started")
    runs.local[(tenant, run.id)] = run
    await run.flush()  # pollable before the id reaches the client
    if body.get("stream"):
        return await _stream_out(proxy, request, follow_local(run, -1), info)
    return _json(200, run.current())


def _queued(proxy, protocol: str, body: dict, response_id: str, spec) -> dict:
    """The queued resource: an empty answer by the protocol's own response rules, in the
    queued status, with the state fields the protocol echoes (its descriptor's state: echo)."""
    response = empty_resource(proxy, protocol, body, response_id)
    response["status"] = spec.background.get("queued_status", "queued")
    previous = body.get(spec.previous)
    if "previous" in spec.echo or ("previous_when_set" in spec.echo and previous is not None):
        response[spec.previous] = previous
    if "store" in spec.echo:
        response[spec.store] = True  # a background run is stored (start refused store: false)
    if "background" not in spec.echo:  # (Interactions) a queued interaction has no steps yet
        response.pop(spec.output, None)
        return response
    response.update(background=True, completed_at=None)  # (Responses) not completed yet
    if isinstance(body.get("conversation"), (str, dict)):
        conversation = body["conversation"]
        response["conversation"] = {"id": conversation if isinstance(conversation, str) else conversation.get("id")}
    return response


async def _execute(proxy, run: Run, request, protocol: str, match, body: dict, raw: bytes, info: dict, slot) -> None:
    proxy.active += 1  # the creating request's slot, passed on: it was admitted already
    shared = proxy.metrics.shared_in_flight
    if shared is not None:
        shared.inc()
    try:
        await proxy.serve(request, protocol, match, body, raw, True, info)
        if not run.terminal:
            message = (run.error or {}).get("message") or "the provider's stream ended before the response was complete"
            run.fail(message)
    except asyncio.CancelledError:
        if run.cancelling:
            run.end_cancelled()
            info.update(status=200, outcome="cancelled")
        else:
            run.fail(SHUT_DOWN)
        if not run.opened.done():
            run.opened.cancel()
    except E.ProxyError as err:
        info.update(status=err.status, error=err.kind)
        if not run.opened.done():
            raise  # pass-through before the provider's first event: the creating request answers it
        try:
            code = proxy.engine.failure(protocol, err)["code"]
        except Exception:  # a protocol without an errors.failure rule (its failed runs end with an error event)
            code = err.code or err.kind
        run.fail(err.message, code)
    except Exception as exc:
        log.error("internal error %s in background response %s", type(exc).__name__, run.id)
        info.update(status=500, error=type(exc).__name__)
        if not run.opened.done():
            raise E.InternalError("internal error in the proxy") from None
        run.fail("internal error in the proxy")
    finally:
        proxy.active -= 1
        if shared is not None:
            shared.dec()
        await slot.__aexit__(None, None, None)
        if run.writer_task is not None:
            run.writer_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await run.writer_task
        await run.flush()
        proxy.background.local.pop((run.tenant, run.id), None)
        if run.id is not None:  # else the creating request answered with the error, and logged it
            _account(proxy, run, info)


def _account(proxy, run: Run, info: dict) -> None:
    """The run's own log line and metrics, as any request's (method BACKGROUND)."""
    info["duration_ms"] = round((time.monotonic() - info["_started"]) * 1000, 1)
    info.setdefault("status", 200)
    retrieve = run.spec.paths.get("retrieve") or ()
    if run.id is not None and retrieve:
        info["path"] = retrieve[0].replace("{id}", run.id)
    add_earlier_usage(info)
    log_request(**info)
    client = info.get("_client")
    if client is not None and client.tokens_per_minute is not None:
        proxy.limits.spend_later(client, (info.get("input_tokens") or 0) + (info.get("output_tokens") or 0))
    proxy.metrics.observe(info)


# --- reading a run: poll, follow, cancel ---------------------------------------------------


async def _load(state, tenant: str, response_id: str) -> tuple[bytes, dict] | None:
    try:
        raw = await state.store.kv_get(_run_key(tenant, response_id))
    except StateError as exc:
        raise _unavailable(exc) from None
    return None if raw is None else (raw, orjson.loads(raw))


async def _settled(state, tenant: str, response_id: str) -> dict | None:
    """The run's stored doc; one whose owner is gone is marked failed first (once, by compare-and-set)."""
    found = await _load(state, tenant, response_id)
    if found is None:
        return None
    raw, doc = found
    if doc.get("terminal"):
        return doc
    try:
        alive = await state.store.kv_get(_ALIVE + doc["owner"])
    except StateError as exc:
        raise _unavailable(exc) from None
    if alive is not None:
        return doc
    spec = state_spec.builtin(doc.get("protocol") or RESPONSES)
    seq = doc.get("last_seq", -1) + 1
    frame = (failure_frame(spec, doc.get("response"), "server_error", RESTARTED, seq) + b"\n\n").decode()
    if spec.background.get("error_event"):
        failed = dict(doc.get("response") or {}, status="failed")
    else:
        failed = _frame(frame.encode())[1]["response"]
    marked = dict(doc, status="failed", response=failed, terminal=True, last_seq=seq, chunks=doc.get("chunks", 0) + 1)
    try:
        await state.store.kv_set(_events_key(tenant, response_id, doc.get("chunks", 0)), orjson.dumps([[seq, frame]]),
                                 ttl_secs=state.store.ttl_secs)
        if not await state.store.kv_cas(_run_key(tenant, response_id), raw, orjson.dumps(marked),
                                        ttl_secs=state.store.ttl_secs):
            again = await _load(state, tenant, response_id)
            return again[1] if again is not None else None
    except StateError as exc:
        raise _unavailable(exc) from None
    log.warning("background response %s was running on a proxy process that is gone: marked failed", response_id)
    return marked


class _After:
    """Which frames a GET stream shows: those after sequence number N (`starting_after`), or
    after the event of a given id (`last_event_id`, as the protocol's spec names it)."""

    def __init__(self, after: int | str, spec):
        self._after = after
        self._field = spec.event_id
        self._passed = not isinstance(after, str)

    def __call__(self, seq: int, frame: bytes) -> bool:
        if not isinstance(self._after, str):
            return seq > self._after
        if self._passed:
            return True
        payload = _frame(frame.rstrip(b"\n"))[1] or {}
        self._passed = payload.get(self._field) == self._after
        return False


async def follow_local(run: Run, after):
    """This process's own run: its frames after `after`, live."""
    shows = after if callable(after) else _After(after, run.spec)
    i = 0
    while True:
        while i < len(run.frames):
            seq, frame = run.frames[i]
            i += 1
            if shows(seq, frame):
                yield frame
        if run.terminal and i >= len(run.frames):
            return
        await run.changed.wait()


async def follow_stored(state, tenant: str, response_id: str, after):
    """A run in the store (any instance's): its stored frames after `after`, then the new ones
    as the owner writes them, until the run is over."""
    shows = after if callable(after) else (lambda seq, frame: seq > after)
    n = 0
    while True:
        doc = await _settled(state, tenant, response_id)
        if doc is None:
            return
        while n < doc.get("chunks", 0):
            try:
                data = await state.store.kv_get(_events_key(tenant, response_id, n))
            except StateError as exc:
                raise _unavailable(exc) from None
            if data is None:
                break  # written after the doc counted it: read again
            n += 1
            for seq, frame in orjson.loads(data):
                if shows(seq, frame.encode()):
                    yield frame.encode()
        else:
            if doc.get("terminal"):
                return
        await asyncio.sleep(_FOLLOW_POLL_SECS)


async def _stream_out(proxy, request: web.Request, frames, info: dict) -> web.StreamResponse:
    response = web.StreamResponse(status=200)
    response.headers["Content-Type"] = "text/event-stream; charset=utf-8"
    response.headers["Cache-Control"] = "no-cache"
    requestid.stamp(response.headers, info.get("request_id") or requestid.current.get())
    info["status"] = 200
    await response.prepare(request)
    # A run may be quiet for long (a model thinking): comments keep the connection alive, as in any stream.
    protocol = proxy.paths.protocol_for(request.path, request.headers)
    beat = proxy.config.server.stream_heartbeat_secs if proxy.engine.wire.comments_allowed(protocol) else 0
    iterator = frames.__aiter__()
    pending: asyncio.Future | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(iterator.__anext__())
            done, _ = await asyncio.wait({pending}, timeout=beat or None)
            if not done:
                await response.write(HEARTBEAT)
                continue
            try:
                frame = pending.result()
            except StopAsyncIteration:
                break
            pending = None
            await response.write(frame)
    finally:
        if pending is not None and not pending.done():
            pending.cancel()
    await response.write_eof()
    return response


def _after(request: web.Request, spec=None):
    name = spec.background.get("after", "starting_after") if spec is not None else "starting_after"
    value = request.query.get(name)
    if value is None:
        return -1
    if spec is not None and spec.event_id and name != "starting_after":
        return _After(value, spec)  # an event id
    try:
        return int(value)
    except ValueError:
        raise E.InvalidRequest(f"starting_after must be an integer (got {value!r})", param="starting_after") from None


def _json(status: int, body: Any) -> web.Response:
    response = web.Response(status=status, body=orjson.dumps(body))
    response.headers["Content-Type"] = "application/json"
    return response


async def answer(proxy, request: web.Request, endpoint: str, spec=None) -> web.StreamResponse | None:
    """GET /v1/responses/{id} (polled, or streamed with stream=true) and DELETE for a
    background run; None when the id is not one (the stored responses answer it)."""
    state = proxy.state
    response_id = request.match_info["response_id"]
    tenant = state.tenant(request)
    if endpoint == "delete":
        found = await _load(state, tenant, response_id)
        if found is not None:
            with contextlib.suppress(StateError):
                for n in range(found[1].get("chunks", 0) + 1):
                    await state.store.kv_delete(_events_key(tenant, response_id, n))
                await state.store.kv_delete(_run_key(tenant, response_id))
        return None if found is None else _DELETED
    if endpoint != "retrieve":
        return None
    stream = request.query.get("stream", "false").lower() == "true"
    after = _after(request, spec) if stream else -1
    local = proxy.background.local.get((tenant, response_id))
    if local is not None:
        if stream:
            return await _stream_out(proxy, request, follow_local(local, after), {})
        return _json(200, local.current())
    doc = await _settled(state, tenant, response_id)
    if doc is None:
        return None
    if stream:
        return await _stream_out(proxy, request, follow_stored(state, tenant, response_id, after), {})
    return _json(200, doc["response"])


_DELETED = object()  # the run's own keys are gone; the stored response (if any) goes next


async def cancel(proxy, request: web.Request, spec=None) -> web.Response:
    """POST {resource}/cancel (/v1/responses/{id}/cancel)."""
    spec = spec or state_spec.builtin(RESPONSES)
    proxy.authorize(request, proxy.engine.wire.client_key(spec.protocol, request.headers, request.rel_url.query))
    state = proxy.state
    response_id = request.match_info["response_id"]
    if state is None:
        raise spec.not_found(response_id)
    tenant = state.tenant(request)
    doc = await _settled(state, tenant, response_id)
    if doc is None:
        try:
            stored = await state.store.get(tenant, response_id)
        except StateError as exc:
            raise _unavailable(exc) from None
        if stored is not None:
            raise E.InvalidRequest(f"Cannot cancel a synchronous {spec.noun}: only a {spec.noun} created with background: "
                                   "true can be cancelled", param=spec.background.get("id_param", "id"))
        raise spec.not_found(response_id)
    if doc.get("terminal"):
        return _stamped(_json(200, doc["response"]))
    local = proxy.background.local.get((tenant, response_id))
    if local is not None:
        local.cancel()
    else:
        try:
            await state.store.kv_set(f"{_CANCEL}{tenant}:{response_id}", b"1", ttl_secs=state.store.ttl_secs)
        except StateError as exc:
            raise _unavailable(exc) from None
    deadline = time.monotonic() + _CANCEL_WAIT_SECS
    while time.monotonic() < deadline:
        if local is not None and local.task is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(local.task), deadline - time.monotonic())
        doc = await _settled(state, tenant, response_id)
        if doc is None or doc.get("terminal"):
            break
        await asyncio.sleep(_FOLLOW_POLL_SECS)
    if doc is None:
        raise spec.not_found(response_id)
    return _stamped(_json(200, doc["response"]))


def _stamped(response: web.Response) -> web.Response:
    requestid.stamp(response.headers, requestid.current.get())
    return response


def add_routes(app: web.Application, proxy) -> None:
    """POST {resource}/cancel of each protocol with background runs (its state.paths.cancel)."""
    def handler(protocol: str):
        async def handle(request: web.Request) -> web.Response:
            return await cancel(proxy, request, state_spec.of(proxy.engine.wire, protocol))

        return handle

    for protocol in proxy.engine.wire.names:
        spec = state_spec.of(proxy.engine.wire, protocol)
        for path in (spec.paths.get("cancel") or ()) if spec is not None and spec.background else ():
            app.router.add_post(path.replace("{id}", "{response_id}"), handler(protocol))

"""Responses API state for providers of other protocols (docs/responses-state.md "Responses state").

A Responses client routed to a Chat or Anthropic provider gets OpenAI's stateful
semantics from the proxy's store:

* `previous_response_id`: the conversation is rebuilt (every ancestor's input items
  and output items, oldest first, then the new input) and the request goes on as if
  the client had sent the whole history; `instructions` and `tools` come only from
  the new request. An unknown, expired or foreign id is OpenAI's 400
  `previous_response_not_found`, and the provider is not called.
* `store` (default true): the turn is written as a delta (its own input items, its
  rendered response, a parent link) BEFORE the response, or the stream's terminal
  event, reaches the client, so a quick next turn can never miss it.
* `GET /v1/responses/{id}`, `DELETE /v1/responses/{id}`,
  `GET /v1/responses/{id}/input_items`.

History travels in the Responses wire form the client saw, reasoning items included:
their `encrypted_content` is the continuation envelope carrying the provider's
signature or encrypted reasoning, so it reaches the provider byte-identical.

Records are scoped by tenant, a keyed hash of the client's API key.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import hmac
import logging
import re
import secrets
import time
import uuid
from typing import Any
from urllib.parse import quote

import orjson
from aiohttp import web
from prometheus_client import Counter, Gauge, Histogram

import engine
from proxai.http import errors as E
from proxai.routing import clients
from proxai.http import requestid
from proxai.endpoints import replay, state_spec
from proxai.endpoints.state_spec import StateSpec
from proxai.protocols import RESPONSES
from proxai.state import ChainTooDeep, RecordTooLarge, ResponseRecord, StateError, StateStore, create

log = logging.getLogger("proxai.state")

_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)
_TENANT_KEY = "state:tenant-key"
_SWEEP_EVERY_SECS = 60.0
PROBE_EVERY_SECS = 2.0  # how soon a store that went down shows in /readyz, the gauge and the log
RECONNECT_MIN_SECS = 0.5
RECONNECT_MAX_SECS = 30.0


StateUnavailable = E.StateUnavailable


def build(config, metrics) -> "ResponsesState | None":
    store = create(config.state)
    if store is None:
        return None
    return ResponsesState(store, metrics.registry, secret=config.continuation_secret)


class ResponsesState:
    def __init__(self, store: StateStore, registry, *, secret: str | None = None):
        self.store = store
        self._secret = secret.encode() if secret else None
        self._key: bytes | None = None
        self._sweeper: asyncio.Task | None = None
        self._supervisor: asyncio.Task | None = None
        self._opened = False
        self._wake = asyncio.Event()
        self.up: bool | None = None  # None until the first connect attempt ends
        self.reason: str | None = "not connected yet"  # why the store is not up
        self._down_since = 0.0
        self._sleep = asyncio.sleep  # the reconnect backoff's wait; a test steps through it
        backend = store.name
        ops = Counter("proxai_state_ops", "State store operations by backend, operation and outcome",
                      ("backend", "op", "outcome"), registry=registry)
        latency = Histogram("proxai_state_op_duration_seconds", "State store operation latency",
                            ("backend", "op"), buckets=_BUCKETS, registry=registry)
        # Workers: 0 when any live worker cannot reach the store.
        self._up_gauge = Gauge("proxai_state_store_up", "1 while the state store answers, 0 while it is down",
                               ("backend",), registry=registry, multiprocess_mode="livemin").labels(backend)

        def observe(op: str, outcome: str, seconds: float) -> None:
            ops.labels(backend, op, outcome).inc()
            latency.labels(backend, op).observe(seconds)
            if outcome == "error":
                self._wake.set()  # probe now rather than at the next tick

        store.observer = observe

    # --- lifecycle ---

    async def start(self) -> None:
        """Connect; a remote store (Redis) that cannot be reached does not stop startup: the
        proxy serves what needs no store and reconnects in the background."""
        try:
            await self._connect()
        except StateError as exc:
            if not self.store.remote:
                raise  # a local file that cannot open will not heal by waiting
            self._went_down(str(exc))
        else:
            self._came_up()
            await self._sweep()
        loop = asyncio.get_running_loop()
        self._supervisor = loop.create_task(self._supervise())
        self._sweeper = loop.create_task(self._sweep_forever())

    async def ready(self) -> str | None:
        """The `/readyz` check: None while the store is up, else why not. No I/O: the
        supervisor's last probe answers, so a slow store cannot slow the probe down."""
        return None if self.up else self.reason

    async def stop(self) -> None:
        for task in (self._supervisor, self._sweeper):
            if task is None:
                continue
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        await self.store.close()

    async def _connect(self) -> None:
        if not self._opened:
            await self.store.open()
            self._opened = True
        else:
            await self.store.ping()
        self.store.outage = None  # the backend answers: let the tenant key through
        await self._resolve_key()

    async def _resolve_key(self) -> None:
        if self._secret is not None:
            self._key = self._secret
            return
        # One random key per store, shared by every worker and instance that uses it. A
        # process that has one offers it: a store that lost it (Redis restarted without
        # persistence) gets the same key back, so instances keep agreeing on tenants.
        offered = self._key or secrets.token_bytes(32)
        await self.store.kv_set(_TENANT_KEY, offered, only_if_absent=True)
        key = await self.store.kv_get(_TENANT_KEY)
        if not key:
            raise StateError("the tenant key could not be read back from the state store")
        self._key = key

    async def _supervise(self) -> None:
        """While up, probe; while down, reconnect with a doubling backoff, capped."""
        delay = RECONNECT_MIN_SECS
        while True:
            if self.up:
                await self._watch()
                delay = RECONNECT_MIN_SECS
            else:
                await self._sleep(delay)
                delay = min(delay * 2, RECONNECT_MAX_SECS)
                await self._reconnect()

    async def _watch(self) -> None:
        """One probe, PROBE_EVERY_SECS after the last or at once after a failed operation."""
        try:
            await asyncio.wait_for(self._wake.wait(), PROBE_EVERY_SECS)
        except asyncio.TimeoutError:
            pass
        self._wake.clear()
        try:
            await self.store.ping()
        except StateError as exc:
            self._went_down(str(exc))

    async def _reconnect(self) -> None:
        try:
            await self._connect()
        except StateError as exc:
            self.reason = self.store.outage = str(exc)  # no log line: one per change, not per attempt
        else:
            self._came_up()

    def _went_down(self, reason: str) -> None:
        self.reason = reason
        self.store.outage = reason
        self._up_gauge.set(0)
        if self.up is not False:
            self._down_since = time.monotonic()
            log.warning("state store %s (%s) is down: %s; stateful Responses requests get 503 until it is back, "
                        "reconnecting in the background", self.store.name, self.store.location, reason)
        self.up = False

    def _came_up(self) -> None:
        was_down = self.up is False
        self.up, self.reason = True, None
        self.store.outage = None
        self._up_gauge.set(1)
        if was_down:
            log.info("state store %s (%s) is back after %.1fs", self.store.name, self.store.location,
                     time.monotonic() - self._down_since)

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(_SWEEP_EVERY_SECS)
            await self._sweep()

    async def _sweep(self) -> None:
        if not self.up:
            return  # nothing to sweep in a store that is not there
        try:
            removed = await self.store.sweep()
        except StateError as exc:
            log.warning("state sweep failed: %s", exc)
            return
        if removed:
            log.info("state sweep removed %d expired entries", removed)

    # --- tenancy ---

    def tenant(self, request: web.Request) -> str:
        own = request.get(clients.PRESENTED_KEY) if hasattr(request, "get") else None
        presented = own or clients.presented(request.headers)
        if not self.up or self._key is None:  # no I/O to learn what the supervisor knows already
            raise StateUnavailable(f"the state store is unavailable: {self.reason}")
        try:
            material = (presented or "").encode()
        except UnicodeEncodeError:  # bytes that are not UTF-8 (aiohttp hands them over as surrogates)
            raise E.Unauthorized("invalid API key: it is not UTF-8 text") from None
        return hmac.new(self._key, material, hashlib.sha256).hexdigest()[:32]

    # --- POST /v1/responses toward another protocol ---

    async def begin(self, request: web.Request, body: dict, provider: str, spec: StateSpec | None = None) -> "Turn":
        """Resolve the previous id (previous_response_id) into the input (in place) and open the
        turn; `spec` is the client protocol's state section (default: the Responses API's)."""
        spec = spec or state_spec.builtin(RESPONSES)
        new_items = spec.input_items(body.get(spec.input))
        parent_id = body.get(spec.previous)
        if parent_id is not None and (not isinstance(parent_id, str) or not parent_id):
            raise E.InvalidRequest(f"{spec.previous} must be a non-empty string", param=spec.previous)
        store = body.get(spec.store) is not False
        # A turn that neither continues nor is stored needs no tenant, so no store: it is
        # served while the store is down. One that does fails here, before the provider is called.
        tenant = self.tenant(request) if parent_id is not None or store else ""
        chain_ids: set = set()
        if parent_id is not None:
            chain = await self._chain(tenant, parent_id, spec)
            history: list = []
            for record in chain:
                chain_ids.add(record.id)
                history.extend(record.input_items)
                output = record.response.get(spec.output)
                history.extend(output if isinstance(output, list) else [])
            body[spec.input] = history + copy.deepcopy(new_items)
            del body[spec.previous]
        turn = Turn(self, tenant, parent_id, provider, body.get("model"), new_items, store, chain_ids, spec)
        turn.fixed_id = getattr(request, "fixed_response_id", None)  # a background run's request has one
        if store:
            size = len(orjson.dumps(new_items))
            if size > self.store.max_record_bytes:
                raise E.InvalidRequest(
                    f"this turn's input is {size} bytes, over the stored-response limit state.max_record_bytes "
                    f"({self.store.max_record_bytes}); send it with {spec.store}: false, or raise the limit", param=spec.input)
        return turn

    async def resolve_held(self, request: web.Request, body: dict, provider: str, spec: StateSpec) -> bool:
        """Toward a provider of the client's own protocol (passed through): when the previous
        id names a turn this proxy stored, resolve it into the input, as for any other
        provider (True); an id it did not store is the provider's, left as sent (False)."""
        parent_id = body.get(spec.previous)
        if not isinstance(parent_id, str) or not parent_id:
            return False
        try:
            record = await self.store.get(self.tenant(request), parent_id)
        except (StateError, StateUnavailable) as exc:
            # The provider may hold the id: passed through as sent, as while the store is up and knows it not.
            log.warning("state: could not look up %s before passing it through: %s", spec.previous, exc)
            return False
        if record is None or record.client_protocol != spec.protocol:
            return False
        await self.begin(request, body, provider, spec)
        return True

    async def _chain(self, tenant: str, response_id: str, spec: StateSpec) -> list[ResponseRecord]:
        try:
            chain = await self.store.chain(tenant, response_id)
        except ChainTooDeep as exc:
            raise E.InvalidRequest(f"{exc}; start a new conversation with the history in {spec.input}",
                                   param=spec.previous) from None
        except StateError as exc:
            raise StateUnavailable(f"the state store is unavailable: {exc}") from None
        if chain is None or chain[-1].client_protocol != spec.protocol:  # another protocol's record is not this one's
            raise spec.not_found_previous(response_id)
        return chain

    # --- GET / DELETE of the resource ({paths} of the state section), its input items ---

    async def retrieve(self, request: web.Request, spec: StateSpec) -> web.StreamResponse:
        record = await self._record(request, spec)
        if request.query.get("stream", "false").lower() == "true" and spec.event_id:
            return await replay.stream(self, request, spec, record)
        if spec.include_input and request.query.get(spec.include_input, "false").lower() == "true":
            return _json(200, {**record.response, spec.input: record.input_items})
        return _json(200, record.response)

    async def delete(self, request: web.Request, spec: StateSpec) -> web.Response:
        response_id, _ = await self._stored(request, self.store.delete, spec)
        try:
            await self.store.kv_delete(replay.events_key(self.tenant(request), response_id))
        except StateError as exc:  # the record is gone; its events expire with the TTL
            log.warning("state: could not drop the stream events of %s: %s", response_id, exc)
        return _json(200, {"id": response_id, "object": spec.object, "deleted": True})

    async def input_items(self, request: web.Request, spec: StateSpec) -> web.Response:
        _, items = await self._stored(request, self.store.list_items, spec)
        return _json(200, page(items, request.query, "input item", f"this {spec.noun}"))

    async def _record(self, request: web.Request, spec: StateSpec) -> ResponseRecord:
        return (await self._stored(request, self.store.get, spec))[1]

    async def _stored(self, request: web.Request, read, spec: StateSpec) -> tuple[str, Any]:
        """`read(tenant, response_id)` for the path's id: a store failure is a 503, a missing
        (None or False) result, or another protocol's record, a 404."""
        response_id = request.match_info["response_id"]
        tenant = self.tenant(request)
        try:
            if read != self.store.get:  # a record of another protocol is not this one's to change
                record = await self.store.get(tenant, response_id)
                if record is not None and record.client_protocol != spec.protocol:
                    raise spec.not_found(response_id)
            found = await read(tenant, response_id)
        except StateError as exc:
            raise StateUnavailable(f"the state store is unavailable: {exc}") from None
        if found is None or found is False or (isinstance(found, ResponseRecord) and found.client_protocol != spec.protocol):
            raise spec.not_found(response_id)
        return response_id, found


class Turn:
    """One stateful POST: patches the client's response and writes the record before it goes out."""

    def __init__(self, state: ResponsesState, tenant: str, parent_id: str | None, provider: str,
                 model: Any, input_items: list, store: bool, chain_ids: set, spec: StateSpec):
        self.state = state
        self.tenant = tenant
        self.parent_id = parent_id
        self.provider = provider
        self.model = model if isinstance(model, str) else ""
        self.input_items = input_items
        self.store = store
        self.chain_ids = chain_ids
        self.spec = spec
        self.committed = False
        self.fixed_id: str | None = None  # a background run's: minted before the provider answered

    def patch(self, response: dict) -> dict:
        """The echo fields the protocol's resource carries for state (previous_response_id, store)."""
        if "previous" in self.spec.echo or ("previous_when_set" in self.spec.echo and self.parent_id is not None):
            response[self.spec.previous] = self.parent_id
        if "store" in self.spec.echo:
            response[self.spec.store] = self.store
        return response

    async def claim_id(self, response_id: str) -> str:
        """The id a streamed response will be stored under, decided before the client sees it:
        the derived one unless a stored record (or this conversation) already has it; a
        fresh one for a response that is not stored."""
        if self.fixed_id:
            return self.fixed_id
        if not self.store:
            return _remint(response_id)
        if response_id == self.parent_id or response_id in self.chain_ids:
            return _remint(response_id)
        try:
            taken = await self.state.store.get(self.tenant, response_id) is not None
        except StateError as exc:
            raise StateUnavailable(f"the state store is unavailable: {exc}") from None
        return _remint(response_id) if taken else response_id

    async def commit(self, response: dict, *, claimed: bool = False, events: list | None = None) -> None:
        """Write the record (a no-op with store false, or for a response that did not complete),
        and a stream's `events` (SSE frames) for GET ?stream=true. An id that is taken already
        gets a suffix (some providers repeat ids), unless the stream already `claimed` it."""
        if not self.store or self.committed or response.get("status") not in self.spec.stored_statuses:
            return
        if not claimed and (response["id"] == self.parent_id or response["id"] in self.chain_ids):
            response["id"] = _remint(response["id"])
        record = ResponseRecord(
            id=response["id"], tenant=self.tenant, parent_id=self.parent_id, client_protocol=self.spec.protocol,
            provider=self.provider, model=self.model, input_items=self.input_items, response=response,
        )
        store = self.state.store
        try:
            if not await store.put(record, only_if_absent=not claimed):
                record.id = response["id"] = _remint(response["id"])
                await store.put(record, only_if_absent=True)
            if events:
                await store.kv_set(replay.events_key(self.tenant, record.id), orjson.dumps(events), ttl_secs=store.ttl_secs)
        except RecordTooLarge as exc:
            raise E.ProxyError(f"the response could not be stored: {exc}; resend with {self.spec.store}: false, or raise "
                               "the limit", status=500, code="server_error") from None
        except StateError as exc:
            raise StateUnavailable(f"the response could not be stored: {exc}") from None
        self.committed = True

    async def finish_body(self, response: dict) -> dict:
        if not self.store:
            # Providers may repeat ids: an unstored answer must never carry a stored one's id.
            response["id"] = _remint(response["id"])
        await self.commit(self.patch(response))
        return response

    def tee(self, client):
        return _StreamTee(client, self)


class _StreamTee:
    """Wraps the client's stream writer: patches lifecycle snapshots (and the events naming
    the resource by id) and commits the record before the terminal event is written. The
    translator writes whole `event:`/`data:` frames, so frames split cleanly at blank lines.
    A protocol whose events carry resumable ids (`stream.event_id`) has its frames kept for
    GET ?stream=true; one whose terminal snapshot may leave its output out (`stream.steps`)
    has the output rebuilt from the item events for the stored copy."""

    def __init__(self, inner, turn: Turn):
        self._inner = inner
        self._turn = turn
        spec = self._spec = turn.spec
        self._seq = -1
        self._snapshot: dict | None = None
        self._id: str | None = None  # the claimed response id, once the first snapshot went by
        self._dead = False  # the stream ended with a state error: nothing more goes out
        # Responses: only the lifecycle events need reading; the rest go by untouched.
        names = [name.decode() for name in spec.snapshot_events]
        prefix = names[0][:names[0].rfind(".") + 1] if names else ""
        self._marker = b"event: " + prefix.encode() if prefix and all(n.startswith(prefix) for n in names) else b""
        self._every = bool(spec.id_field or spec.event_id or spec.steps) or not self._marker
        self._frames: list | None = [] if spec.event_id and turn.store else None
        self._steps = replay.Steps(spec.steps) if spec.steps else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def _fail(self, out: list, err: E.ProxyError, snapshot: dict | None) -> None:
        await self._inner.write(b"".join(out) + E.render_stream(self._spec.protocol, err, sequence_number=self._seq,
                                                                 response=snapshot))
        self._dead = True

    async def write(self, data: bytes) -> None:
        if self._dead:
            return
        if not self._every and self._marker not in data:
            self._track(data)
            await self._inner.write(data)
            return
        spec = self._spec
        out: list[bytes] = []
        for frame in data.split(b"\n\n"):
            if not frame:
                continue
            name, payload = _frame(frame)
            if payload is None:
                out.append(frame + b"\n\n")
                continue
            if isinstance(payload.get("sequence_number"), int):
                self._seq = max(self._seq, payload["sequence_number"])
            if self._steps is not None:
                self._steps.feed(name, payload)
            changed = False
            if spec.id_field and self._id is not None and isinstance(payload.get(spec.id_field), str):
                payload[spec.id_field] = self._id
                changed = True
            snapshot = payload.get(spec.snapshot_field)
            if name in spec.snapshot_events and isinstance(snapshot, dict):
                changed = True
                if self._id is None and isinstance(snapshot.get("id"), str):
                    try:
                        self._id = await self._turn.claim_id(snapshot["id"])
                    except E.ProxyError as err:
                        await self._fail(out, err, snapshot)
                        return
                if self._id is not None:
                    snapshot["id"] = self._id
                self._snapshot = self._turn.patch(snapshot)
                if name in spec.terminal_events:
                    if out:
                        await self._inner.write(b"".join(out))
                        out = []
                    stored = snapshot
                    if self._steps is not None and not isinstance(snapshot.get(spec.output), list):
                        stored = dict(snapshot, **{spec.output: self._steps.items()})
                    final = b"event: " + name + b"\ndata: " + orjson.dumps(payload)
                    try:
                        await self._turn.commit(stored, claimed=True,
                                                events=None if self._frames is None else self._frames + [final.decode()])
                    except E.ProxyError as err:
                        log.error("state: %s", err.message)
                        await self._fail(out, err, dict(self._snapshot))
                        return
                    snapshot["id"] = stored["id"]
            if changed:
                frame = b"event: " + name + b"\ndata: " + orjson.dumps(payload) if name is not None else \
                    b"data: " + orjson.dumps(payload)
            if self._frames is not None:
                self._frames.append(frame.decode())
            out.append(frame + b"\n\n")
        if out:
            await self._inner.write(b"".join(out))

    def _track(self, data: bytes) -> None:
        i = data.rfind(b'"sequence_number":')
        if i >= 0:
            digits = data[i + 18:i + 30].split(b",")[0].split(b"}")[0].strip()
            if digits.isdigit():
                self._seq = max(self._seq, int(digits))


def _remint(response_id: str) -> str:
    return f"{response_id}_{uuid.uuid4().hex[:16]}"


def _frame(frame: bytes) -> tuple[bytes | None, dict | None]:
    name = None
    data = None
    for line in frame.split(b"\n"):
        if line.startswith(b"event: "):
            name = line[7:].strip()
        elif line.startswith(b"data: "):
            data = line[6:]
    if data is None:
        return name, None
    try:
        payload = orjson.loads(data)
    except orjson.JSONDecodeError:
        return name, None
    return name, payload if isinstance(payload, dict) else None


# --- input items ---------------------------------------------------------------------


def _input_items(value: Any) -> list:
    """A Responses input (a conversation's items) as stored items."""
    return state_spec.builtin(RESPONSES).input_items(value)


# --- errors and responses -------------------------------------------------------------


def _json(status: int, body: Any) -> web.Response:
    response = web.Response(status=status, body=orjson.dumps(body))
    response.headers["Content-Type"] = "application/json"
    return response


def page(items: list, query, what: str, where: str) -> dict:
    """One page of a list endpoint, as OpenAI pages them: `order` (asc | desc, default
    desc), `limit` (1-100, default 20) and `after` (an item id of the list)."""
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise E.InvalidRequest(f"order must be 'asc' or 'desc' (got {order!r})", param="order")
    try:
        limit = int(query.get("limit", "20"))
    except ValueError:
        raise E.InvalidRequest("limit must be an integer between 1 and 100", param="limit") from None
    if not 1 <= limit <= 100:
        raise E.InvalidRequest("limit must be an integer between 1 and 100", param="limit")
    if order == "desc":
        items = list(reversed(items))
    after = query.get("after")
    if after:
        ids = [item.get("id") for item in items]
        if after not in ids:
            raise E.InvalidRequest(f"no {what} with id {after!r} in {where}", param="after")
        items = items[ids.index(after) + 1:]
    shown = items[:limit]
    return {"object": "list", "data": shown, "first_id": shown[0].get("id") if shown else None,
            "last_id": shown[-1].get("id") if shown else None, "has_more": len(items) > limit}


def add_routes(app: web.Application, proxy, first=None) -> None:
    """GET / DELETE of each stateful protocol's resource ({id}) and its input items, at the
    paths of its descriptor's `state.paths` (GET /v1/responses/{id} ...). An id the proxy did
    not store goes to the protocol's default provider, when there is one (the provider holds
    the state of passed-through responses) and the id may be read by this client
    (`_may_forward`); otherwise 404. `first(proxy, request, endpoint, spec)` answers before
    the stored responses do (background runs): a response, or None to go on (something
    else: the run was deleted)."""

    def handler(name: str, protocol: str):
        async def handle(request: web.Request) -> web.StreamResponse:
            proxy.authorize(request, proxy.engine.wire.client_key(protocol, request.headers, request.rel_url.query))
            state = proxy.state
            spec = state_spec.of(proxy.engine.wire, protocol)
            try:
                if state is None or spec is None:
                    raise E.NotFound(f"no endpoint at {request.path}: state.backend is none, responses are not stored")
                response = await first(proxy, request, name, spec) if first is not None else None
                if not isinstance(response, web.StreamResponse):
                    deleted_run = response is not None
                    try:
                        response = await getattr(state, name)(request, spec)
                    except E.NotFound:
                        if not deleted_run:
                            raise
                        response = _json(200, {"id": request.match_info["response_id"], "object": spec.object, "deleted": True})
            except E.NotFound as missing:
                response = await _forward(proxy, request, missing, name, protocol)
            requestid.stamp(response.headers, requestid.current.get())
            return response

        return handle

    add = {"retrieve": app.router.add_get, "delete": app.router.add_delete, "input_items": app.router.add_get}
    for protocol in proxy.engine.wire.names:
        spec = state_spec.of(proxy.engine.wire, protocol)
        for name, route in add.items():
            for path in (spec.paths.get(name) or ()) if spec is not None else ():
                route(path.replace("{id}", "{response_id}"), handler(name, protocol))


# --- provider-held responses ---------------------------------------------------------------

# The shape of the ids a provider mints (the state section's id_pattern: `resp_` and a
# token): anything else is not forwarded, so no path, query or fragment can ride along on
# the provider's key.
_PROVIDER_ID = re.compile(r"resp_[A-Za-z0-9_-]{1,200}")
# The query parameters each forwarded endpoint takes (the OpenAI API's); others are dropped.
_FORWARD_QUERY = {
    # (and the Interactions API's: last_event_id, include_input)
    "retrieve": frozenset({"include", "include[]", "include_obfuscation", "starting_after", "stream", "last_event_id",
                           "include_input"}),
    "delete": frozenset(),
    "input_items": frozenset({"after", "before", "include", "include[]", "limit", "order"}),
}
_OWNER_KEY = "passthrough-owner:"


def empty_resource(proxy, protocol: str, body: dict, resource_id: str, usage: dict | None = None) -> dict:
    """The protocol's resource for `body` with no output yet: an empty answer (IR) through the
    protocol's own response.encode rules, which echo the request's settings; its id is
    `resource_id` as given (the encoder would prefix it). Its status is the completed one:
    a caller that answers before the model did sets its own."""
    ctx = engine.Context(client_protocol=protocol, provider_protocol=protocol, client_body=body)
    ir: dict[str, Any] = {"id": resource_id, "model": body.get("model") or "", "created": int(time.time()),
                          "content": [], "stop": "end_turn"}
    if usage is not None:
        ir["usage"] = usage
    resource = proxy.engine.encode_response(ctx, ir)
    resource["id"] = resource_id
    return resource


async def remember_passthrough(proxy, request: web.Request, data: bytes | None) -> None:
    """Note which tenant a passed-through response belongs to (its id: the first `"id"` of
    the provider's shape in the body, or in the stream's first events), before the id
    reaches the client: only that tenant's reads and deletes of it are forwarded."""
    state = proxy.state
    spec = state_spec.of(proxy.engine.wire, proxy.paths.protocol_for(request.path, request.headers))
    pattern = spec.id_pattern if spec is not None and spec.id_pattern is not None else _PROVIDER_ID
    found = re.search(rb'"id"\s*:\s*"(' + pattern.pattern.encode() + rb')"', data or b"")
    response_id = found.group(1).decode() if found else None
    if state is None or response_id is None:
        return
    try:
        await state.store.kv_set(_OWNER_KEY + response_id, state.tenant(request).encode(), ttl_secs=state.store.ttl_secs)
    except (StateError, StateUnavailable) as exc:
        # The provider has answered and holds the response: it is served. Unnoted, the id is
        # forwarded later only while the proxy has at most one tenant (_may_forward).
        log.warning("state: the owner of a passed-through response could not be noted: %s", exc)


async def _may_forward(proxy, request: web.Request, response_id: str, pattern: re.Pattern) -> bool:
    """A provider-held id is forwarded for the tenant that created it through this proxy.
    An id the proxy never relayed (made at the provider directly, or before the store
    remembered owners) is forwarded only while the proxy has one tenant at most: with
    several client keys, one client could otherwise read or delete another's."""
    if not pattern.fullmatch(response_id):
        return False
    single_tenant = len(proxy.config.server.api_keys) <= 1
    state = proxy.state
    if state is None:
        return single_tenant
    try:
        owner = await state.store.kv_get(_OWNER_KEY + response_id)
    except StateError as exc:
        raise StateUnavailable(f"the state store is unavailable: {exc}") from None
    if owner is None:
        return single_tenant
    return hmac.compare_digest(owner, state.tenant(request).encode())


async def _forward(proxy, request: web.Request, missing: E.NotFound, endpoint: str, protocol: str) -> web.Response:
    from proxai.http.transport import read_body

    name = proxy.config.default_providers.get(protocol)
    provider = proxy.config.providers.get(name) if name else None
    wire = proxy.engine.wire
    spec = state_spec.of(wire, provider.protocol) if provider is not None else None
    if spec is None or provider.protocol != protocol:  # it keeps no resources of this protocol
        raise missing
    response_id = request.match_info["response_id"]
    if not await _may_forward(proxy, request, response_id, spec.id_pattern or _PROVIDER_ID):
        raise missing
    # the stored response is a resource below the generation endpoint (/responses/{id})
    path = wire.target(provider.protocol, "generate").path + "/" + quote(response_id, safe="") + ("/input_items" if endpoint == "input_items" else "")
    allowed = _FORWARD_QUERY[endpoint]
    query = [(key, value) for key, value in request.query.items() if key in allowed]
    upstream = await proxy.transport.forward(wire, provider, request.method, path, query, request.headers)
    try:
        await proxy.raise_for_status(upstream, provider)
        data = await read_body(upstream, provider, cap=proxy.config.server.max_upstream_body_bytes)
    finally:
        upstream.release()
    if request.method == "DELETE" and proxy.state is not None:
        try:
            await proxy.state.store.kv_delete(_OWNER_KEY + response_id)
        except StateError as exc:  # the response is gone at the provider; its owner note expires with the TTL
            log.warning("state: could not drop the owner of %s: %s", response_id, exc)
    response = web.Response(status=upstream.status, body=data)
    response.headers["Content-Type"] = upstream.headers.get("Content-Type", "application/json")
    response.headers.update(E.preserved_headers(upstream.headers))
    return response

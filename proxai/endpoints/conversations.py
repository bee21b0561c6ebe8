"""The Conversations API on the proxy's state store (docs/responses-api.md "Conversations").

`/v1/conversations[/{id}]` and `/v1/conversations/{id}/items[/{item_id}]` in OpenAI's
shapes, and `responses.create(conversation=...)`: the conversation's items are the
history the provider receives, and the turn's input and output items are appended
before the answer (or the stream's terminal event) reaches the client.

Conversations are the proxy's own on every provider protocol, an OpenAI Responses
provider included, so that one conversation id works whichever provider a route picks.

A conversation is one key-value entry (`conversation:<tenant>:<id>`: its metadata and
items), changed by compare-and-set, so concurrent appends from several workers or
instances sharing the store never lose an item. The tenant in the key is the keyed hash
of the client's API key that scopes stored responses: one key never sees another's.
"""

from __future__ import annotations

import copy
import logging
import re
import secrets
import time
from typing import Any, Callable

import orjson
from aiohttp import web

from proxai.http import errors as E
from proxai.http import ingress, requestid
from proxai.protocols import RESPONSES
from proxai.endpoints import state_spec
from proxai.endpoints.responses_state import StateUnavailable, _input_items, page
from proxai.http.sse import SSEParser
from proxai.state import StateError

log = logging.getLogger("proxai.state")

_KEY = "conversation:"
MAX_ITEMS_PER_CALL = 20  # OpenAI's limit on the items one create or add call takes
_METADATA_PAIRS, _METADATA_KEY_CHARS, _METADATA_VALUE_CHARS = 16, 64, 512
_CAS_ATTEMPTS = 50
# Items a client sends (never a provider's output): their ids are the proxy's, so they are
# left out toward a provider that would look them up.
_INPUT_ROLES = frozenset({"user", "system", "developer"})
_INPUT_TYPES = frozenset({"function_call_output", "custom_tool_call_output"})
_ID_SHAPE = re.compile(r"[A-Za-z0-9_-]{1,200}")


class _TooLarge(Exception):
    pass


# --- storage ---------------------------------------------------------------------------


def _key(tenant: str, conversation_id: str) -> str:
    return f"{_KEY}{tenant}:{conversation_id}"


async def _load(state, tenant: str, conversation_id: str) -> tuple[bytes, dict] | None:
    try:
        raw = await state.store.kv_get(_key(tenant, conversation_id))
    except StateError as exc:
        raise StateUnavailable(f"the state store is unavailable: {exc}") from None
    if raw is None:
        return None
    try:
        return raw, orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise StateUnavailable(f"the stored conversation {conversation_id!r} is corrupt") from None


def _encode(state, doc: dict) -> bytes:
    data = orjson.dumps(doc)
    if len(data) > state.store.max_record_bytes:
        raise _TooLarge(f"the conversation would be {len(data)} bytes, over state.max_record_bytes "
                        f"({state.store.max_record_bytes})")
    return data


async def _write_new(state, tenant: str, doc: dict) -> None:
    data = _encode(state, doc)
    try:
        await state.store.kv_set(_key(tenant, doc["id"]), data, ttl_secs=state.store.ttl_secs, only_if_absent=True)
    except StateError as exc:
        raise StateUnavailable(f"the conversation could not be stored: {exc}") from None


async def _change(state, tenant: str, conversation_id: str, change: Callable[[dict], Any]) -> tuple[dict, Any] | None:
    """Apply `change(doc)` (it edits doc in place and returns a result) by compare-and-set,
    retried while another writer got in first; None when there is no such conversation.
    Every write renews the conversation's time to live."""
    key = _key(tenant, conversation_id)
    for _ in range(_CAS_ATTEMPTS):
        found = await _load(state, tenant, conversation_id)
        if found is None:
            return None
        raw, doc = found
        result = change(doc)
        data = _encode(state, doc)
        try:
            if await state.store.kv_cas(key, raw, data, ttl_secs=state.store.ttl_secs):
                return doc, result
        except StateError as exc:
            raise StateUnavailable(f"the conversation could not be stored: {exc}") from None
    raise StateUnavailable(f"the conversation {conversation_id!r} is being changed by too many writers at once; retry")


# --- shapes and checks -------------------------------------------------------------------


def _resource(doc: dict) -> dict:
    return {"id": doc["id"], "object": "conversation", "created_at": doc["created_at"], "metadata": doc["metadata"]}


def _not_found(conversation_id: str, param: str | None = None) -> E.NotFound:
    return E.NotFound(f"Conversation with id '{conversation_id}' not found.", param=param,
                      error_type="invalid_request_error", type_family="openai")


def _item_not_found(item_id: str, conversation_id: str) -> E.NotFound:
    return E.NotFound(f"Item with id '{item_id}' not found in conversation '{conversation_id}'.",
                      error_type="invalid_request_error", type_family="openai")


def _metadata(value: Any) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise E.InvalidRequest("metadata must be an object of string keys and string values", param="metadata")
    if len(value) > _METADATA_PAIRS:
        raise E.InvalidRequest(f"metadata may have at most {_METADATA_PAIRS} keys (got {len(value)})", param="metadata")
    for key, item in value.items():
        if len(key) > _METADATA_KEY_CHARS:
            raise E.InvalidRequest(f"metadata keys are at most {_METADATA_KEY_CHARS} characters", param="metadata")
        if not isinstance(item, str):
            raise E.InvalidRequest(f"metadata.{key} must be a string", param=f"metadata.{key}")
        if len(item) > _METADATA_VALUE_CHARS:
            raise E.InvalidRequest(f"metadata.{key} is over {_METADATA_VALUE_CHARS} characters", param=f"metadata.{key}")
    return dict(value)


def _items(value: Any, *, required: bool) -> list:
    """The items a create or add call sends, as stored items (ids added)."""
    if value is None and not required:
        return []
    if not isinstance(value, list) or (required and not value):
        raise E.InvalidRequest("items must be a non-empty array of input items" if required
                               else "items must be an array of input items", param="items")
    if len(value) > MAX_ITEMS_PER_CALL:
        raise E.InvalidRequest(f"items may have at most {MAX_ITEMS_PER_CALL} items per call (got {len(value)})",
                               param="items")
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise E.InvalidRequest(f"items[{i}] must be an object", param=f"items[{i}]")
        kind = item.get("type", "message" if "role" in item else None)
        if not isinstance(kind, str):
            raise E.InvalidRequest(f"items[{i}].type is required", param=f"items[{i}].type")
        if kind == "item_reference":
            raise E.InvalidRequest(f"items[{i}]: an item_reference cannot be stored in a conversation",
                                   param=f"items[{i}].type")
        if kind == "message":
            if item.get("role") not in ("user", "assistant", "system", "developer"):
                raise E.InvalidRequest(f"items[{i}].role must be one of 'user', 'assistant', 'system', 'developer'",
                                       param=f"items[{i}].role")
            if not isinstance(item.get("content"), (str, list)):
                raise E.InvalidRequest(f"items[{i}].content must be a string or an array of content parts",
                                       param=f"items[{i}].content")
        if item.get("id") is not None and (not isinstance(item["id"], str) or not _ID_SHAPE.fullmatch(item["id"])):
            raise E.InvalidRequest(f"items[{i}].id must be a string of letters, digits, '_' and '-'",
                                   param=f"items[{i}].id")
    return _input_items(value)


def _list(items: list) -> dict:
    return {"object": "list", "data": items, "first_id": items[0].get("id") if items else None,
            "last_id": items[-1].get("id") if items else None, "has_more": False}


def _json(status: int, body: Any) -> web.Response:
    response = web.Response(status=status, body=orjson.dumps(body))
    response.headers["Content-Type"] = "application/json"
    return response


async def _body(proxy, request: web.Request) -> dict:
    server = proxy.config.server
    raw = await ingress.read(request, server.max_request_body_bytes, server.request_body_timeout_secs)
    if not raw.strip():
        return {}
    return ingress.decode(raw)


# --- the endpoints -----------------------------------------------------------------------


class Endpoints:
    def __init__(self, proxy):
        self.proxy = proxy

    @property
    def state(self):
        state = self.proxy.state
        if state is None:
            raise E.NotFound("no endpoint at /v1/conversations: state.backend is none, conversations are not stored")
        return state

    async def create(self, request: web.Request) -> web.Response:
        state = self.state
        body = await _body(self.proxy, request)
        items = _items(body.get("items"), required=False)
        metadata = _metadata(body.get("metadata"))
        tenant = state.tenant(request)
        doc = {"id": "conv_" + secrets.token_hex(24), "created_at": int(time.time()), "metadata": metadata, "items": items}
        try:
            await _write_new(state, tenant, doc)
        except _TooLarge as exc:
            raise E.InvalidRequest(f"{exc}; send fewer or smaller items", param="items") from None
        return _json(200, _resource(doc))

    async def retrieve(self, request: web.Request) -> web.Response:
        return _json(200, _resource(await self._doc(request)))

    async def update(self, request: web.Request) -> web.Response:
        body = await _body(self.proxy, request)
        if "metadata" not in body:
            raise E.InvalidRequest("metadata is required", param="metadata")
        metadata = _metadata(body["metadata"])

        def replace(doc: dict) -> None:
            doc["metadata"] = metadata

        return _json(200, _resource(await self._change(request, replace)))

    async def delete(self, request: web.Request) -> web.Response:
        state, tenant, conversation_id = self._where(request)
        try:
            deleted = await state.store.kv_delete(_key(tenant, conversation_id))
        except StateError as exc:
            raise StateUnavailable(f"the state store is unavailable: {exc}") from None
        if not deleted:
            raise _not_found(conversation_id)
        return _json(200, {"id": conversation_id, "object": "conversation.deleted", "deleted": True})

    async def list_items(self, request: web.Request) -> web.Response:
        # `include` is accepted and changes nothing: every item is kept whole (reasoning
        # items with their encrypted_content, the continuation envelope), so all it could
        # ask for is there already.
        return _json(200, page((await self._doc(request))["items"], request.query, "item", "this conversation"))

    async def add_items(self, request: web.Request) -> web.Response:
        body = await _body(self.proxy, request)
        items = _items(body.get("items"), required=True)

        def append(doc: dict) -> None:
            doc["items"].extend(items)

        await self._change(request, append, param="items")
        return _json(200, _list(items))

    async def retrieve_item(self, request: web.Request) -> web.Response:
        doc = await self._doc(request)
        item_id = request.match_info["item_id"]
        for item in doc["items"]:
            if item.get("id") == item_id:
                return _json(200, item)
        raise _item_not_found(item_id, doc["id"])

    async def delete_item(self, request: web.Request) -> web.Response:
        item_id = request.match_info["item_id"]

        def remove(doc: dict) -> bool:
            kept = [item for item in doc["items"] if item.get("id") != item_id]
            found = len(kept) != len(doc["items"])
            doc["items"] = kept
            return found

        state, tenant, conversation_id = self._where(request)
        changed = await _change(state, tenant, conversation_id, remove)
        if changed is None:
            raise _not_found(conversation_id)
        doc, found = changed
        if not found:
            raise _item_not_found(item_id, conversation_id)
        return _json(200, _resource(doc))

    def _where(self, request: web.Request) -> tuple[Any, str, str]:
        state = self.state
        return state, state.tenant(request), request.match_info["conversation_id"]

    async def _doc(self, request: web.Request) -> dict:
        state, tenant, conversation_id = self._where(request)
        found = await _load(state, tenant, conversation_id)
        if found is None:
            raise _not_found(conversation_id)
        return found[1]

    async def _change(self, request: web.Request, change, param: str | None = None) -> dict:
        state, tenant, conversation_id = self._where(request)
        try:
            changed = await _change(state, tenant, conversation_id, change)
        except _TooLarge as exc:
            raise E.InvalidRequest(f"{exc}; start a new conversation", param=param) from None
        if changed is None:
            raise _not_found(conversation_id)
        return changed[0]


ROUTES = (
    ("POST", "/v1/conversations", "create"),
    ("GET", "/v1/conversations/{conversation_id}", "retrieve"),
    ("POST", "/v1/conversations/{conversation_id}", "update"),
    ("DELETE", "/v1/conversations/{conversation_id}", "delete"),
    ("GET", "/v1/conversations/{conversation_id}/items", "list_items"),
    ("POST", "/v1/conversations/{conversation_id}/items", "add_items"),
    ("GET", "/v1/conversations/{conversation_id}/items/{item_id}", "retrieve_item"),
    ("DELETE", "/v1/conversations/{conversation_id}/items/{item_id}", "delete_item"),
)


def add_routes(app: web.Application, proxy) -> None:
    endpoints = Endpoints(proxy)

    def handler(name: str):
        method = getattr(endpoints, name)

        async def handle(request: web.Request) -> web.StreamResponse:
            proxy.authorize(request)
            response = await method(request)
            requestid.stamp(response.headers, requestid.current.get())
            return response

        return handle

    for verb, path, name in ROUTES:
        app.router.add_route(verb, path, handler(name))


# --- responses.create(conversation=...) ------------------------------------------------------


async def begin(proxy, request: web.Request, body: dict) -> "ConversationTurn | None":
    """The conversation a Responses request names, loaded (the provider is not called
    when it is unknown); None when it names none. The body is changed by `resolve`."""
    ref = body.get("conversation")
    if ref is None:
        return None
    conversation_id = ref.get("id") if isinstance(ref, dict) else ref
    if not isinstance(conversation_id, str) or not conversation_id:
        raise E.InvalidRequest("conversation must be a conversation id or an object with its id",
                               param="conversation.id" if isinstance(ref, dict) else "conversation")
    if body.get("previous_response_id") is not None:
        raise E.InvalidRequest("Mutually exclusive parameters: Ensure you are only providing one of: "
                               "'previous_response_id' or 'conversation'.", param="conversation",
                               code="mutually_exclusive_parameters")
    state = proxy.state
    tenant = state.tenant(request)
    found = await _load(state, tenant, conversation_id)
    if found is None:
        raise _not_found(conversation_id, param="conversation")
    spec = state_spec.of(proxy.engine.wire, RESPONSES) or state_spec.builtin(RESPONSES)
    return ConversationTurn(state, tenant, conversation_id, found[1]["items"], spec)


class ConversationTurn:
    """One Responses request in a conversation. Around the stored-response Turn (when the
    response is translated) it offers the same `finish_body` and `tee`."""

    def __init__(self, state, tenant: str, conversation_id: str, history: list, spec: state_spec.StateSpec):
        self.state = state
        self.spec = spec  # the Responses descriptor's `state:` section: its stream events, stored statuses
        self.tenant = tenant
        self.id = conversation_id
        self.history = history
        self.input_items: list = []
        self.inner = None  # the stored-response Turn, toward a translated provider
        self.appended = False

    def resolve(self, body: dict, input_items: list | None = None, *, provider_holds_ids: bool = False) -> None:
        """The request's input becomes the conversation's items and then its own
        (`input_items`, with the ids they are stored under; else made from the input)."""
        self.input_items = input_items if input_items is not None else _input_items(body.get("input"))
        history = copy.deepcopy(self.history) + copy.deepcopy(self.input_items)
        if provider_holds_ids:
            history = [_without_our_id(item) for item in history]
        body["input"] = history
        body.pop("conversation", None)

    def around(self, turn, body: dict) -> "ConversationTurn":
        self.inner = turn
        self.resolve(body, turn.input_items)
        return self

    def patch(self, response: dict) -> dict:
        response["conversation"] = {"id": self.id}
        return response

    async def append(self, response: dict) -> None:
        """Add the turn's input and output items, once, for a response worth continuing from."""
        if self.appended or response.get("status") not in self.spec.stored_statuses:
            return
        output = response.get("output")
        outputs = [copy.deepcopy(item) for item in output if isinstance(item, dict)] if isinstance(output, list) else []
        items = self.input_items + outputs

        def extend(doc: dict) -> None:
            doc["items"].extend(items)

        try:
            changed = await _change(self.state, self.tenant, self.id, extend)
        except _TooLarge as exc:
            raise E.ProxyError(f"the turn could not be added to conversation {self.id!r}: {exc}; start a new conversation",
                               status=500, code="server_error") from None
        except StateUnavailable as exc:
            raise StateUnavailable(f"the turn could not be added to conversation {self.id!r}: {exc.message}") from None
        if changed is None:
            # Deleted while the provider answered: there is nothing left to add the turn to.
            log.warning("state: conversation %s was deleted during a turn; the turn is not kept", self.id)
        self.appended = True

    async def finish_body(self, response: dict) -> dict:
        self.patch(response)
        if self.inner is not None:
            response = await self.inner.finish_body(response)
        await self.append(response)
        return response

    async def finish_bytes(self, data: bytes) -> bytes:
        """A passed-through answer: patched, and its items appended before it goes out."""
        try:
            response = orjson.loads(data)
        except orjson.JSONDecodeError:
            return data
        if not isinstance(response, dict):
            return data
        return orjson.dumps(await self.finish_body(response))

    def tee(self, client):
        return _ConversationTee(self.inner.tee(client) if self.inner is not None else client, self)


def _without_our_id(item: Any) -> Any:
    if isinstance(item, dict) and (item.get("type") in _INPUT_TYPES
                                   or (item.get("type") == "message" and item.get("role") in _INPUT_ROLES)):
        item.pop("id", None)
    return item


class _ConversationTee:
    """Wraps the client's stream writer: sets `conversation` on each response snapshot and
    appends the turn to the conversation before the terminal event is written."""

    def __init__(self, inner, turn: ConversationTurn):
        self._inner = inner
        self._turn = turn
        spec = turn.spec
        self._field = spec.snapshot_field
        self._snapshots = frozenset(name.decode() for name in spec.snapshot_events)
        self._terminal = frozenset(name.decode() for name in spec.terminal_events)
        self._parser = SSEParser()
        self._seq = -1
        self._snapshot: dict | None = None
        self._dead = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def write(self, data: bytes) -> None:
        if self._dead:
            return
        out: list[bytes] = []
        for raw, event in self._parser.feed_raw(data):
            payload = _payload(event)
            if payload is None:
                out.append(raw)
                continue
            if isinstance(payload.get("sequence_number"), int):
                self._seq = max(self._seq, payload["sequence_number"])
            name = payload.get("type") or event.event
            snapshot = payload.get(self._field)
            if name not in self._snapshots or not isinstance(snapshot, dict):
                out.append(raw)
                continue
            self._snapshot = self._turn.patch(snapshot)
            if name in self._terminal:  # append keeps only a stored status (not a failed run)
                try:
                    await self._turn.append(snapshot)
                except E.ProxyError as err:
                    log.error("state: %s", err.message)
                    await self._inner.write(b"".join(out) + E.render_stream(
                        RESPONSES, err, sequence_number=self._seq, response=self._snapshot))
                    self._dead = True
                    return
            out.append(b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n")
        if out:
            await self._inner.write(b"".join(out))


def _payload(event) -> dict | None:
    if event is None or not event.data.startswith("{"):
        return None
    try:
        payload = orjson.loads(event.data)
    except orjson.JSONDecodeError:
        return None
    return payload if isinstance(payload, dict) else None

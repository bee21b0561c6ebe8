"""A stored resource's stream, for protocols whose events carry resumable ids (the state
section's `stream.event_id`, `replay` and `stream.steps`; docs/responses-state.md):

* `GET {resource}?stream=true` replays the events of a streamed turn as they went out,
  after `last_event_id` when given; a turn that was not streamed is replayed as the events
  its resource makes (`replay:` names them), with ids of their position;
* `Steps` rebuilds a stream's output items from its item events, for a protocol whose
  terminal snapshot may leave them out, so the stored resource has its output.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
from aiohttp import web

from proxai.http import errors as E
from proxai.http import requestid
from proxai.state import StateError

_EVENTS = "stream-events:"  # stream-events:<tenant>:<id>: a stored turn's SSE frames


def events_key(tenant: str, resource_id: str) -> str:
    return f"{_EVENTS}{tenant}:{resource_id}"


def _get(value: Any, path: str) -> Any:
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


class Steps:
    """Output items from `start` / `delta` / `stop` item events. Each delta type names one
    operation in the descriptor: `concat <list> <path>` (the text at path joins the list's
    last text part, or starts one), `set <field> <path>`, `json <field> <path>` (partial
    JSON text, parsed at the item's stop) and `push <list>` (the delta is the part)."""

    def __init__(self, spec: dict):
        self._spec = spec
        self._items: dict[int, dict] = {}
        self._json: dict[tuple[int, str], str] = {}

    def feed(self, name: bytes | None, payload: dict) -> None:
        spec = self._spec
        event = name.decode() if name is not None else None
        index = payload.get(spec.get("index", "index"))
        if not isinstance(index, int):
            return
        if event == spec.get("start") and isinstance(payload.get(spec.get("item", "item")), dict):
            self._items[index] = copy.deepcopy(payload[spec.get("item", "item")])
        elif event == spec.get("delta") and index in self._items:
            delta = payload.get(spec.get("delta_field", "delta"))
            if isinstance(delta, dict) and isinstance(spec.get(str(delta.get("type"))), str):
                self._apply(self._items[index], index, spec[str(delta["type"])].split(), delta)
        elif event == spec.get("stop") and index in self._items:
            for (i, key), text in list(self._json.items()):
                if i == index:
                    try:
                        self._items[index][key] = orjson.loads(text) if text else {}
                    except orjson.JSONDecodeError:  # a cut stream's partial arguments: kept as sent
                        self._items[index][key] = text
                    del self._json[(i, key)]

    def _apply(self, item: dict, index: int, op: list[str], delta: dict) -> None:
        verb, target = op[0], op[1] if len(op) > 1 else ""
        value = _get(delta, op[2]) if len(op) > 2 else None
        if verb == "concat" and isinstance(value, str):
            parts = item.setdefault(target, [])
            if isinstance(parts, list):
                if parts and isinstance(parts[-1], dict) and parts[-1].get("type") == "text":
                    parts[-1]["text"] = (parts[-1].get("text") or "") + value
                else:
                    parts.append({"type": "text", "text": value})
        elif verb == "set" and value is not None:
            item[target] = value
        elif verb == "json" and isinstance(value, str):
            self._json[(index, target)] = self._json.get((index, target), "") + value
        elif verb == "push":
            parts = item.setdefault(target, [])
            if isinstance(parts, list):
                parts.append(copy.deepcopy(delta))

    def items(self) -> list:
        return [self._items[i] for i in sorted(self._items)]


def synthesized(spec, resource: dict) -> list[str]:
    """The events a resource that was not streamed makes, as SSE frames (`replay:` names them;
    `type_field` is the field naming each event)."""
    names = spec.replay
    kind = names.get("type_field", "type")
    field = spec.snapshot_field
    started = {key: value for key, value in resource.items() if key != spec.output}
    started["status"] = names.get("started_status", "in_progress")
    events: list[dict] = [{kind: names["created"], field: started}]
    output = resource.get(spec.output)
    for index, item in enumerate(output if isinstance(output, list) else []):
        events.append({kind: names["start"], "index": index, names.get("item", "item"): item})
        events.append({kind: names["stop"], "index": index})
    events.append({kind: names["completed"], field: resource})
    frames = []
    for n, event in enumerate(events):
        event[spec.event_id] = f"evt_{n}"
        frames.append(f"event: {event[kind]}\ndata: " + orjson.dumps(event).decode())
    return frames


async def stream(state, request: web.Request, spec, record) -> web.StreamResponse:
    """GET ?stream=true of a stored resource: its events after `last_event_id` (all without it)."""
    try:
        raw = await state.store.kv_get(events_key(record.tenant, record.id))
    except StateError as exc:
        raise E.StateUnavailable(f"the state store is unavailable: {exc}") from None
    frames = orjson.loads(raw) if raw is not None else synthesized(spec, record.response)
    after = request.query.get("last_event_id")
    if after:
        ids = [_event_id(frame, spec.event_id) for frame in frames]
        if after not in ids:
            raise E.InvalidRequest(f"last_event_id {after!r} is not an event of {spec.noun} {record.id!r}",
                                   param="last_event_id")
        frames = frames[ids.index(after) + 1:]
    response = web.StreamResponse(status=200)
    response.headers["Content-Type"] = "text/event-stream; charset=utf-8"
    response.headers["Cache-Control"] = "no-cache"
    requestid.stamp(response.headers, requestid.current.get())
    await response.prepare(request)
    await response.write("".join(frame + "\n\n" for frame in frames).encode())
    await response.write_eof()
    return response


def _event_id(frame: str, field: str) -> str | None:
    for line in frame.split("\n"):
        if line.startswith("data: "):
            try:
                payload = orjson.loads(line[6:])
            except orjson.JSONDecodeError:
                return None
            return payload.get(field) if isinstance(payload, dict) else None
    return None

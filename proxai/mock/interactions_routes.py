"""The Interactions API's endpoints on the mock upstream, under /v1beta and /v1:
POST /interactions (JSON, or SSE with `stream: true`), GET /interactions/{id} (`stream`,
`last_event_id`, `include_input`), DELETE /interactions/{id}, POST /interactions/{id}/cancel.

A create request is checked (interactions_ledger.check: the SDK's types strictly, signatures,
call ids, previous ids) before the queue is read, so a refused request consumes no reply."""

from __future__ import annotations

import re
from dataclasses import replace

from proxai import protocols

from . import render_interactions
from .interactions_ledger import InteractionLedger, Invalid, NotFound
from .replies import INTERACTIONS, Json, Stream
from .turn import Turn

CREATE = re.compile(r"^/v1(?:beta)?/interactions/?$")
ONE = re.compile(r"^/v1(?:beta)?/interactions/([^/:]+)$")
CANCEL = re.compile(r"^/v1(?:beta)?/interactions/([^/:]+)(?:/cancel|:cancel)$")
PREFIX = re.compile(r"^/v1(?:beta)?/interactions(?:[/:]|$)")


def _refused(e: Exception):
    if isinstance(e, NotFound):
        return Json(render_interactions.error_body(404, str(e)), status=404)
    code = e.code if isinstance(e, Invalid) else None
    return Json(render_interactions.error_body(400, str(e), code), status=400)


def _flag(query, name: str) -> bool:
    return query.get(name, "").lower() == "true"


class InteractionsEndpoints:
    def __init__(self, mock) -> None:
        self.mock = mock
        self.ledger = InteractionLedger()
        self._family: dict[str, bool] = {}

    def rendered(self, protocol: str, turn: Turn) -> None:
        """A turn another protocol of the same API family (generateContent) rendered: its
        signatures are the same models' and good on this API too, as the proxy may carry a
        history from one to the other."""
        if protocol not in self._family:
            wire = protocols.wire()
            self._family[protocol] = wire.family(protocol) is not None and wire.family(protocol) == wire.family(INTERACTIONS)
        if self._family[protocol]:
            for b in turn.blocks:
                for signature in (getattr(b, "signature", None), getattr(b, "thought_signature", None)):
                    if signature:
                        self.ledger.signatures.add(signature)

    async def handle(self, request, record):
        path, method = record.path, request.method
        if CREATE.match(path):
            if method != "POST":
                return Json(render_interactions.error_body(405, f"method {method} not allowed"), status=405)
            reply = self._create(record)
        elif (m := CANCEL.match(path)) and method == "POST":
            reply = self._guard(lambda: Json(self.ledger.cancel(m.group(1))))
        elif (m := ONE.match(path)) and method == "GET":
            reply = self._guard(lambda: self._get(m.group(1), request.rel_url.query))
        elif (m := ONE.match(path)) and method == "DELETE":
            reply = self._guard(lambda: self._delete(m.group(1)))
        else:
            reply = Json(render_interactions.error_body(404, f"no route for {method} {path}"), status=404)
        shaped = dict(record.body or {})
        if isinstance(reply, (Turn, Stream)):
            shaped["stream"] = isinstance(reply, Stream)  # a Turn comes back here only to be rendered whole
        return await self.mock._answer(request, INTERACTIONS, shaped, reply)

    @staticmethod
    def _guard(answer):
        try:
            return answer()
        except (Invalid, NotFound) as e:
            return _refused(e)

    def _delete(self, ident: str):
        self.ledger.delete(ident)
        return Json({})

    def _get(self, ident: str, query):
        served = self.ledger.finish(ident)
        if _flag(query, "stream"):
            events = served.events or render_interactions.replay(served.resource)
            after = query.get("last_event_id")
            if after is not None:
                ids = [e.get("event_id") for _, e in events]
                events = events[ids.index(after) + 1:] if after in ids else events
            return Stream(events=events)
        resource = dict(served.resource)
        if _flag(query, "include_input"):
            resource["input"] = served.input
        return Json(resource)

    def _create(self, record):
        body = record.body
        if body is None:
            return Json(render_interactions.error_body(400, "the request body must be a JSON object"), status=400)
        try:
            self.ledger.check(body)
        except (Invalid, NotFound) as e:
            return _refused(e)
        reply = self.mock.next_reply(INTERACTIONS, body, record)
        if isinstance(reply, Json) and isinstance(reply.body, dict) and reply.status == 200 and "id" in reply.body:
            self.ledger.record(body, reply.body)  # a scripted resource continues like a rendered one
        if not isinstance(reply, Turn):
            return reply
        turn = replace(reply, id=reply.id or render_interactions.interaction_id())
        resource = render_interactions.body(turn, body)
        if turn.error_after is not None:
            resource = {**resource, "status": "failed"}
        if body.get("background") is True:
            self.ledger.record(body, resource, pending=True)
            return Json(render_interactions.started(resource), headers=turn.headers)
        if not body.get("stream"):
            self.ledger.record(body, resource)
            return turn  # the mock renders it (with its delay) as for any protocol
        events = render_interactions.events(turn, body)
        self.ledger.record(body, resource, events)
        return Stream(events=events, split_bytes=turn.split_bytes, crlf=turn.crlf, cut_after=turn.cut_after,
                      stall_after=turn.stall_after, stall_secs=turn.stall_secs, delay_secs=turn.delay_secs,
                      headers=turn.headers)

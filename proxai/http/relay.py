"""Pass-through relay: the provider's stream to a client of the same protocol, byte for byte.

Every upstream event is written unchanged as soon as it is complete. The relay follows
the stream through the provider's own `stream.decode` rules, the rules a translated
stream runs, and acts on what they make of it:

* IR `message_stop`: the stream is complete (its usage and stop go to the log); at EOF,
  the decoder's `eof` rules say whether an unterminated stream still counts as complete;
* IR `error` the provider reported: the stream failed upstream (what follows is still
  relayed: it is the provider's to say);
* IR tool-call `block_start` / `block_stop`: tool arguments are streaming (the tool-call
  stall timeout applies in between).

Which events are decoded comes from the table `<protocol>.events->relay`
(rules/tables/relay.yaml): `skip` events (content deltas, the bulk of a stream) are only
checked to be JSON objects, `skip_repeats` events after the first of a run; `fragments` sub-events (Chat tool-call argument fragments) are decoded once per
`index`: the later ones of the same index, with no `id` or `name`, are held and decoded as
one, their `arguments` joined, before the next sub-event that is decoded; `end` events complete the
stream whatever the rules make of them (a pass-through client reads the provider's
stream itself, so the rules' judgement of its content, theirs to make when translating,
is only noted at DEBUG here).

A stream the proxy must end itself (EOF before the terminal event, a stall, a malformed
event, shutdown) gets the IR `error` event run through the protocol's own `stream.encode`
rules, continuing the provider's stream: its sequence numbers and response identity.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from engine.stream import StreamRun, StreamTranslator
from proxai.http.sse import SSEEvent, SSEParser, encode_event
from proxai.http.streaming import RULE_ERROR_OUTCOMES, Outcome

log = logging.getLogger("proxai.stream")

DECODE, SKIP, SKIP_REPEATS, FRAGMENTS, END = "decode", "skip", "skip_repeats", "fragments", "end"


def relay_table_name(protocol: str) -> str:
    return f"{protocol}.events->relay"


class Relay:
    """The observer of a pass-through stream (see the module docstring)."""

    raw = True  # each event's own bytes are written
    translation_failed = False  # nothing is translated
    error_rule = None

    def __init__(self, protocol: str, engine: Any, ctx: Any):
        self.protocol = protocol
        self.ctx = ctx
        self._decoder_rules = engine.streams[("stream.decode", protocol)]
        self._encoder_rules = engine.streams[("stream.encode", protocol)]
        self.decoder = StreamRun(self._decoder_rules, ctx)
        table = engine.tables.get(relay_table_name(protocol))
        # An event the table does not name is decoded (its default is documented as decode).
        self._plan: dict[str, str] = dict(table.map) if table is not None else {}
        # A decoder that cuts one payload into sub-events (Chat) is filtered per sub-event.
        self._splits = self.decoder.split is not None
        self._last: str | None = None  # the key of the last event decoded
        self._opened: set = set()  # (key, index) of the `fragments` sub-events decoded
        self._held: dict = {}  # (key, index) -> [first held sub-event, its arguments and the later ones']
        self.objections = 0  # events the rules would not have translated
        self.outcome: Outcome | None = None
        self.usage: dict | None = None
        self.stop: str | None = None
        self._tools: set = set()
        self._start: dict | None = None  # the IR message_start (the stream's identity)
        # What the error the proxy appends must continue: the highest sequence number,
        # the last response snapshot and the output items, as the provider sent them.
        self._seq = -1
        self._snapshot: dict | None = None
        self._items: dict[int, Any] = {}

    @property
    def in_tool_arguments(self) -> bool:
        return bool(self._tools)

    def feed(self, event: SSEEvent) -> list[bytes]:
        if self.outcome is not None:
            return []
        data = event.data
        if data == "[DONE]":  # as the translator reads it (engine/stream.py)
            payload: Any = {"type": "[DONE]"}
        else:
            try:
                payload = orjson.loads(data)
            except orjson.JSONDecodeError:
                payload = None
            if not isinstance(payload, dict):
                return self.fail(Outcome.MALFORMED,
                                 f"the provider sent a malformed {self.protocol} stream event (not a JSON object)")
            if event.event and "type" not in payload:
                payload["type"] = event.event
            self._continuity(payload)
        try:
            if not self._splits:
                key = payload.get("type")
                plan = self._plan.get(key, DECODE) if isinstance(key, str) else DECODE
                if plan == SKIP or (plan == SKIP_REPEATS and key == self._last):
                    return []
                self._last = key
                self._observe(self.decoder.decode(payload))
                if plan == END and self.outcome is None:
                    self._end()
            else:
                self._feed_split(payload)
        except Exception as exc:  # the rules' judgement of a stream they would not translate
            self._note(exc)
            # What the event opened or closed is unknown: no tool-call stall is assumed, so
            # the longer idle timeout applies and a misread never cuts a stream early.
            self._tools.clear()
        return []

    def _feed_split(self, payload: dict) -> None:
        decoder = self.decoder
        ended = False
        for sub in decoder.split(payload):
            key = sub["type"]
            plan = self._plan.get(key, DECODE)
            if plan == SKIP or (plan == SKIP_REPEATS and key == self._last):
                continue
            if plan == FRAGMENTS and self._hold(key, sub):
                continue
            if self._held:
                self._release()
            self._last = key
            ended = ended or plan == END
            self._observe(decoder.handle(key, sub))
            if self.outcome is not None:
                return
        if ended and self.outcome is None:
            self._end()

    def _hold(self, key: str, sub: dict) -> bool:
        """Hold a fragment of something decoded before; false when the sub-event must be decoded now."""
        at = (key, sub.get("index"))
        if at not in self._opened:
            self._opened.add(at)
            return False
        if sub.get("id") is not None or sub.get("name") or not isinstance(sub.get("arguments"), str):
            return False  # a repeated name or id, or malformed: the rules judge it
        held = self._held.get(at)
        if held is None:
            self._held[at] = [sub, sub["arguments"]]
        else:
            held.append(sub["arguments"])
        return True

    def _release(self) -> None:
        """Decode the held fragments, one sub-event per index with their arguments joined: the
        rules' state (each call's arguments, checked at the finish) as if each had been decoded."""
        held, self._held = self._held, {}
        for (key, _index), (sub, *parts) in held.items():
            self._observe(self.decoder.handle(key, {**sub, "arguments": "".join(parts)}))

    def _observe(self, events: list) -> None:
        for ev in events:
            kind = ev.get("type")
            if kind == "message_stop":
                self.usage = ev.get("usage") or self.usage
                self.stop = ev.get("stop")
                self._end()
                return
            if kind == "error":
                if ev.get("error_type") in RULE_ERROR_OUTCOMES:
                    self._note(ev.get("message"))
                    continue
                self.outcome = Outcome.UPSTREAM_ERROR
                self._tools.clear()
                return
            if kind == "block_start":
                if ev.get("kind") == "tool_call":
                    self._tools.add(ev.get("index"))
            elif kind == "block_stop":
                self._tools.discard(ev.get("index"))
            elif kind == "message_start":
                self._start = ev
                if ev.get("usage"):
                    self.usage = ev["usage"]  # until the terminal event's own

    def _end(self, outcome: Outcome = Outcome.COMPLETE) -> None:
        self.outcome = outcome
        self._tools.clear()

    def _note(self, problem: Any) -> None:
        self.objections += 1
        if log.isEnabledFor(logging.DEBUG):
            rule = getattr(problem, "rule", None)
            text = getattr(problem, "message", None) or (problem if isinstance(problem, str) else type(problem).__name__)
            log.debug("pass-through %s stream: the rules would not translate an event (%s)%s", self.protocol, text,
                      f" [rule {rule}]" if rule else "")

    def _continuity(self, payload: dict) -> None:
        seq = payload.get("sequence_number")
        if seq is not None:
            if isinstance(seq, int) and seq > self._seq:
                self._seq = seq
            response = payload.get("response")
            if isinstance(response, dict):
                self._snapshot = response
            index = payload.get("output_index")
            if isinstance(index, int) and isinstance(payload.get("item"), dict):
                self._items[index] = payload["item"]

    def eof(self) -> list[bytes]:
        if self.outcome is not None:
            return []
        try:
            if self._held:
                self._release()
            self._observe(self.decoder.handle_eof())
        except Exception as exc:
            self._note(exc)
        if self.outcome is Outcome.COMPLETE:
            self.outcome = Outcome.COMPLETE_WITHOUT_DONE
            return []
        if self.outcome is not None:
            return []
        return self.fail(Outcome.EOF, "the upstream stream ended before its terminal event")

    def fail(self, outcome: Outcome, message: str, status: int = 502) -> list[bytes]:
        if self.outcome is not None:
            return []
        self._end(outcome)
        return [self.render_error({"type": "error", "status": status, "error_type": outcome.kind, "message": message})]

    def render_error(self, error: dict) -> bytes:
        """The IR error in this protocol's stream, by its stream.encode rules, continuing the provider's stream."""
        encoder = StreamTranslator(self._decoder_rules, self._encoder_rules, self.ctx)
        if self._start is not None:
            encoder.push([self._start])  # the stream's identity; its own opening events are the provider's
        wire = b"".join(encoder.push([error]))
        if self._seq < 0 and self._snapshot is None:
            return wire
        return self._continue(wire)

    def _continue(self, wire: bytes) -> bytes:
        # The encoder numbers from its own start and knows no items: the appended events
        # take the provider's next sequence numbers, and its response snapshot's identity
        # and output, under the failed status and error the rules wrote.
        out = []
        parser = SSEParser()
        seq = self._seq
        for raw, event in parser.feed_raw(wire):
            if event is None:
                out.append(raw)
                continue
            doc = orjson.loads(event.data)
            if isinstance(doc, dict) and "sequence_number" in doc:
                seq += 1
                doc["sequence_number"] = seq
                response = doc.get("response")
                if isinstance(response, dict) and self._snapshot is not None:
                    kept = {k: v for k, v in self._snapshot.items()
                            if k not in ("status", "error", "usage", "incomplete_details")}
                    doc["response"] = {**response, **kept, "status": response.get("status"),
                                       "error": response.get("error"), "usage": None,
                                       "output": [self._items[i] for i in sorted(self._items)]}
            out.append(encode_event(orjson.dumps(doc), event.event))
        return b"".join(out)

"""The Responses stream events that conversations and the WebSocket read (snapshots,
terminal events, stored statuses) come from the descriptor's `state:` section."""
import asyncio
import dataclasses

import orjson

from proxai.endpoints import state_spec
from proxai.endpoints.conversations import ConversationTurn, _ConversationTee
from proxai.endpoints.responses_ws import _Events
from proxai.protocols import RESPONSES


class _Socket:
    def __init__(self):
        self.sent = []

    async def send_str(self, text):
        self.sent.append(text)


class _Sink:
    def __init__(self):
        self.data = b""

    async def write(self, data):
        self.data += data


def _frame(name, **payload):
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps({"type": name, **payload}) + b"\n\n"


def test_the_websocket_keeps_the_response_of_the_descriptors_terminal_events():
    spec = dataclasses.replace(state_spec.builtin(RESPONSES), terminal_events=frozenset({b"response.done"}))
    events = _Events(_Socket(), None, spec)
    asyncio.run(events.write(_frame("response.completed", response={"id": "a"})))
    assert events.final is None
    asyncio.run(events.write(_frame("response.done", response={"id": "b"})))
    assert events.final == {"id": "b"}


def test_a_conversation_turn_is_offered_the_descriptors_terminal_snapshots():
    spec = dataclasses.replace(state_spec.builtin(RESPONSES), terminal_events=frozenset({b"response.incomplete"}))
    offered = []
    turn = ConversationTurn(None, "t", "conv_1", [], spec)

    async def append(response):  # the real one keeps only a stored status
        offered.append(response["id"])
    turn.append = append
    tee = _ConversationTee(_Sink(), turn)
    for name, status in (("response.created", "in_progress"), ("response.completed", "completed"),
                         ("response.incomplete", "incomplete")):
        asyncio.run(tee.write(_frame(name, response={"id": name, "status": status})))
    assert offered == ["response.incomplete"]
    assert tee._inner.data.count(b'"conversation":{"id":"conv_1"}') == 3

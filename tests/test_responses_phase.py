"""`phase` on the assistant messages of translated answers, with the official openai SDK
through the real server toward Chat, Anthropic and Gemini mocks, streaming and not:
`commentary` for text another item (a tool call) follows in the same answer, `final_answer`
for the text that ends it (Codex tells the turn's final answer by it). Replayed in a later
request, phase reaches no provider that has no field for it; a Responses provider gets it."""

from __future__ import annotations

import json

import pytest

from gemini_helpers import gemini_config
from proxai.mock import Text, ToolCall, Turn

TRANSLATED = ["chat", "anthropic", "gemini"]
TOOLS = [{"type": "function", "name": "run", "strict": False,
          "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]


@pytest.fixture
def client(harness, start_proxy, mock):
    c = start_proxy(gemini_config(harness.mock_url)).openai()
    yield c
    c.close()


def answer(client, route: str, stream: bool):
    kw = dict(model=f"{route}/up-model", input="Run the tests", tools=TOOLS, store=False)
    if not stream:
        return client.responses.create(**kw), []
    events = list(client.responses.create(**kw, stream=True))
    return events[-1].response, events


def messages_done(events) -> list:
    return [e.item for e in events if e.type == "response.output_item.done" and e.item.type == "message"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("route", TRANSLATED)
def test_text_before_a_tool_call_is_commentary(client, mock, route, stream):
    mock.enqueue(Turn([Text("I will run the tests."), ToolCall("call_1", "run", '{"cmd": "pytest"}')]))
    response, events = answer(client, route, stream)
    assert [item.type for item in response.output] == ["message", "function_call"]
    assert response.output[0].phase == "commentary"
    if stream:
        assert [m.phase for m in messages_done(events)] == ["commentary"]
        added = [e.item for e in events if e.type == "response.output_item.added" and e.item.type == "message"]
        assert [m.phase for m in added] == [None]  # not known yet when the message opens


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("route", TRANSLATED)
def test_the_text_that_ends_the_answer_is_the_final_answer(client, mock, route, stream):
    mock.enqueue(Turn([Text("All 12 tests pass.")]))
    response, events = answer(client, route, stream)
    assert [(item.type, item.phase) for item in response.output] == [("message", "final_answer")]
    if stream:
        assert [m.phase for m in messages_done(events)] == ["final_answer"]


REPLAY = [
    {"role": "user", "content": "Run the tests"},
    {"type": "message", "role": "assistant", "phase": "commentary",
     "content": [{"type": "output_text", "text": "I will run the tests."}]},
    {"type": "function_call", "call_id": "call_1", "name": "run", "arguments": '{"cmd": "pytest"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "12 passed"},
    {"type": "message", "role": "assistant", "phase": "final_answer",
     "content": [{"type": "output_text", "text": "All 12 tests pass."}]},
    {"role": "user", "content": "Thanks"},
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("route", TRANSLATED)
def test_replayed_phase_reaches_no_provider_without_the_field(client, mock, route, stream):
    mock.enqueue(Turn([Text("You're welcome.")]))
    kw = dict(model=f"{route}/up-model", input=REPLAY, tools=TOOLS, store=False)
    if stream:
        list(client.responses.create(**kw, stream=True))
    else:
        client.responses.create(**kw)
    sent = json.dumps(mock.requests[-1].body)
    assert "I will run the tests." in sent and "All 12 tests pass." in sent
    assert "phase" not in sent and "commentary" not in sent and "final_answer" not in sent


def test_a_responses_provider_gets_phase_back(client, mock):
    mock.enqueue(Turn([Text("You're welcome.")]))
    client.responses.create(model="responses/up-model", input=REPLAY, tools=TOOLS, store=False)
    phases = [item.get("phase") for item in mock.requests[-1].body["input"] if item.get("role") == "assistant"]
    assert phases == ["commentary", "final_answer"]

"""Interactions state end to end: the official google-genai SDK as a stateful Interactions
client (`previous_interaction_id`, `store`, `interactions.get` / `delete`, a GET stream
resumed after `last_event_id`) against Chat and Anthropic providers (the mock upstreams),
whose history the proxy's store keeps, and toward an Interactions provider, which is sent
`previous_interaction_id` only for a turn it served itself. Each test checks what the
provider received."""

from __future__ import annotations

import time

import pytest
from google import genai
from google.genai import types
from google.genai._interactions_errors import APIError

from harness import CLIENT_KEY, slow_turn, wait_final
from interactions_clients import MODEL, interactions_config, sent, steps_of
from proxai.mock import Text, ToolCall, Turn, Usage

A, C = "anthropic", "chat"
WEATHER = {"type": "function", "name": "get_weather", "description": "the weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
OTHER_KEY = "client-key-2"


def model(provider: str) -> str:
    return {"chat": "chat/gpt-up", "anthropic": "anthropic/claude-up"}[provider]


@pytest.fixture
def stateful(harness, start_proxy):
    config = interactions_config(harness.mock_url)
    config["state"] = {"backend": "memory"}
    config.setdefault("server", {})["api_keys"] = [CLIENT_KEY, OTHER_KEY]
    return start_proxy(config)


def genai_client(proxy, key: str = CLIENT_KEY) -> genai.Client:
    return genai.Client(api_key=key, http_options=types.HttpOptions(base_url=proxy.url))


@pytest.fixture
def client(stateful):
    return genai_client(stateful)


def create(client, stream: bool, **kw):
    """The interaction a create makes; streamed, the events' ids too."""
    if not stream:
        return client.interactions.create(**kw), []
    events = list(client.interactions.create(stream=True, **kw))
    assert events[-1].event_type == "interaction.completed", [e.event_type for e in events]
    return events[-1].interaction, events


def chat_texts(body: dict) -> list:
    """(role, text) of every message the Chat provider received."""
    out = []
    for m in body["messages"]:
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content)
        out.append((m["role"], content))
    return out


def anthropic_texts(body: dict) -> list:
    out = []
    for m in body["messages"]:
        content = m["content"]
        if isinstance(content, str):
            out.append((m["role"], content))
        else:
            out.append((m["role"], "".join(p.get("text", "") for p in content if p.get("type") == "text")))
    return out


def texts(provider: str, body: dict) -> list:
    return chat_texts(body) if provider == C else anthropic_texts(body)


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
@pytest.mark.parametrize("provider", [C, A])
def test_previous_interaction_id_rebuilds_the_history(client, mock, provider, stream):
    mock.enqueue(Turn([Text("first answer")], usage=Usage(10, 5)))
    first, _ = create(client, stream, model=model(provider), input="hello", system_instruction="be brief")
    assert first.id and first.status == "completed"
    mock.enqueue(Turn([Text("second answer")], usage=Usage(20, 5)))
    second, _ = create(client, stream, model=model(provider), input="and again?", previous_interaction_id=first.id)
    assert second.previous_interaction_id == first.id and second.id != first.id
    body = mock.requests[-1].body
    assert texts(provider, body)[-3:] == [("user", "hello"), ("assistant", "first answer"), ("user", "and again?")]
    # The new turn's system_instruction only: the first one's is not carried over.
    assert "be brief" not in str(body)
    stored = client.interactions.get(second.id)
    assert stored.id == second.id and [s.type for s in stored.steps] == ["model_output"]
    assert stored.steps[0].content[0].text == "second answer"


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
def test_a_function_call_turn_is_continued_by_its_function_result(client, mock, stream):
    mock.enqueue(Turn([ToolCall("call_1", "get_weather", '{"city": "Paris"}')], usage=Usage(10, 5)))
    first, _ = create(client, stream, model=model(C), input="weather in Paris?", tools=[WEATHER])
    assert first.status == "requires_action"
    call = client.interactions.get(first.id).steps[-1]
    assert call.type == "function_call" and call.name == "get_weather" and call.arguments == {"city": "Paris"}
    mock.enqueue(Turn([Text("It is sunny.")]))
    create(client, stream, model=model(C), previous_interaction_id=first.id, tools=[WEATHER],
           input=[{"type": "function_result", "call_id": call.id, "name": "get_weather", "result": "sunny"}])
    messages = mock.requests[-1].body["messages"]
    assistant = next(m for m in messages if m["role"] == "assistant")
    tool = next(m for m in messages if m["role"] == "tool")
    assert assistant["tool_calls"][0]["function"]["name"] == "get_weather"
    assert tool["tool_call_id"] == assistant["tool_calls"][0]["id"] and "sunny" in str(tool["content"])


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
def test_store_false_stores_nothing(client, mock, stream):
    mock.enqueue(Turn([Text("not kept")]))
    unstored, _ = create(client, stream, model=model(C), input="hi", store=False)
    with pytest.raises(APIError) as missing:
        client.interactions.get(unstored.id)
    assert missing.value.status_code == 404
    n = len(mock.requests)
    with pytest.raises(APIError) as unknown:
        client.interactions.create(model=model(C), input="more", previous_interaction_id=unstored.id)
    assert unknown.value.status_code == 400 and "previous_interaction_id" in str(unknown.value.body)
    assert len(mock.requests) == n  # the provider is not called


def test_get_delete_and_tenants(client, stateful, mock):
    mock.enqueue(Turn([Text("mine")]))
    mine = client.interactions.create(model=model(C), input="hi")
    other = genai_client(stateful, OTHER_KEY)
    with pytest.raises(APIError) as foreign:
        other.interactions.get(mine.id)
    assert foreign.value.status_code == 404
    with pytest.raises(APIError):
        other.interactions.create(model=model(C), input="x", previous_interaction_id=mine.id)
    assert client.interactions.get(mine.id).steps[0].content[0].text == "mine"
    with_input = client.interactions.get(mine.id, include_input=True)
    assert with_input.input[0].type == "user_input" and with_input.input[0].content[0].text == "hi"
    assert client.interactions.get(mine.id).input is None
    client.interactions.delete(mine.id)
    with pytest.raises(APIError) as gone:
        client.interactions.get(mine.id)
    assert gone.value.status_code == 404


def test_a_stored_stream_replays_after_its_last_event_id(client, mock):
    mock.enqueue(Turn([Text("streamed answer")], usage=Usage(3, 2)))
    done, events = create(client, True, model=model(C), input="hi")
    replayed = list(client.interactions.get(done.id, stream=True))
    assert [e.event_id for e in replayed] == [e.event_id for e in events]
    assert [e.event_type for e in replayed] == [e.event_type for e in events]
    after = list(client.interactions.get(done.id, stream=True, last_event_id=events[1].event_id))
    assert [e.event_id for e in after] == [e.event_id for e in events[2:]]
    # A turn that was not streamed replays as the events its interaction makes.
    mock.enqueue(Turn([Text("plain answer")]))
    plain = client.interactions.create(model=model(C), input="hi")
    kinds = [e.event_type for e in client.interactions.get(plain.id, stream=True)]
    assert kinds == ["interaction.created", "step.start", "step.stop", "interaction.completed"]


def test_toward_an_interactions_provider_the_history_is_its_own_or_whole(client, mock):
    # A turn the proxy translated (Chat) and stored: continued at the Interactions provider
    # with the whole history as steps, no previous_interaction_id it would not know.
    mock.enqueue(Turn([Text("from chat")]))
    first = client.interactions.create(model=model(C), input="hello")
    mock.enqueue(Turn([Text("from interactions")]))
    second = client.interactions.create(model=MODEL, input="next", previous_interaction_id=first.id)
    body = sent(mock)
    assert "previous_interaction_id" not in body
    steps = steps_of(body)
    assert [s["type"] for s in steps] == ["user_input", "model_output", "user_input"]
    assert steps[1]["content"][0]["text"] == "from chat"
    # The provider's own turn (passed through): it holds the history, so it gets the id.
    mock.enqueue(Turn([Text("third")]))
    client.interactions.create(model=MODEL, input="more", previous_interaction_id=second.id)
    body = sent(mock)
    assert body["previous_interaction_id"] == second.id and steps_of(body)[0]["content"][0]["text"] == "more"


# --- background: true ---------------------------------------------------------------------

FINAL = ("completed", "requires_action", "incomplete", "failed", "cancelled")


@pytest.mark.parametrize("provider", [C, A])
def test_background_answers_at_once_and_polls_to_completion(client, mock, provider):
    mock.enqueue(Turn([Text("done in the background")], usage=Usage(4, 3)))
    created = client.interactions.create(model=model(provider), input="hi", background=True)
    assert created.status == "in_progress" and created.id.startswith("int_") and not created.steps
    done = wait_final(client.interactions.get, created.id, FINAL)
    assert done.status == "completed" and done.id == created.id
    assert done.steps[0].type == "model_output" and done.steps[0].content[0].text == "done in the background"
    assert mock.requests[-1].body["stream"] is True and "background" not in mock.requests[-1].body
    # The run's turn is stored: the next turn continues it.
    mock.enqueue(Turn([Text("next")]))
    client.interactions.create(model=model(provider), input="more", previous_interaction_id=created.id)
    assert texts(provider, mock.requests[-1].body)[-3:] == [
        ("user", "hi"), ("assistant", "done in the background"), ("user", "more")]
    # Its events resume after an event id.
    events = list(client.interactions.get(created.id, stream=True))
    assert events[0].event_type == "interaction.created" and events[-1].event_type == "interaction.completed"
    later = list(client.interactions.get(created.id, stream=True, last_event_id=events[0].event_id))
    assert [e.event_id for e in later] == [e.event_id for e in events[1:]]


def test_background_cancel_stops_the_provider_call(client, mock):
    mock.enqueue(slow_turn(60, 0.2))  # twelve seconds of answer
    created = client.interactions.create(model=model(C), input="Talk for a while.", background=True)
    time.sleep(0.5)
    started = time.monotonic()
    cancelled = client.interactions.cancel(created.id)
    assert cancelled.status == "cancelled" and cancelled.id == created.id
    assert time.monotonic() - started < 3
    deadline = time.monotonic() + 3
    while mock.cut_short == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mock.cut_short == 1  # the proxy closed the provider's stream
    assert client.interactions.get(created.id).status == "cancelled"


def test_background_needs_store_and_a_plain_turn_cannot_be_cancelled(client, mock):
    with pytest.raises(APIError) as refused:
        client.interactions.create(model=model(C), input="hi", background=True, store=False)
    assert refused.value.status_code == 400 and "store" in str(refused.value.body)
    assert mock.requests == []
    mock.enqueue(Turn([Text("plain")]))
    plain = client.interactions.create(model=model(C), input="hi")
    with pytest.raises(APIError) as synchronous:
        client.interactions.cancel(plain.id)
    assert synchronous.value.status_code == 400 and "synchronous" in str(synchronous.value.body)


def test_a_turn_too_large_to_store_ends_its_stream_with_an_error_event(harness, start_proxy, mock):
    config = interactions_config(harness.mock_url)
    config["state"] = {"backend": "memory", "max_record_bytes": 2048}
    c = genai_client(start_proxy(config))
    mock.enqueue(Turn([Text("x" * 3000, chunks=["x" * 1500, "x" * 1500])]))
    events = list(c.interactions.create(model=model(C), input="hi", stream=True))
    kinds = [e.event_type for e in events]
    assert kinds[0] == "interaction.created" and kinds[-1] == "error" and "interaction.completed" not in kinds
    assert "state.max_record_bytes (2048)" in events[-1].error.message
    with pytest.raises(APIError) as missing:  # never an answer whose id does not resolve
        c.interactions.get(events[0].interaction.id)
    assert missing.value.status_code == 404


def test_an_interaction_the_provider_holds_is_read_there_by_its_own_tenant_only(harness, start_proxy, mock):
    config = interactions_config(harness.mock_url)
    config["state"] = {"backend": "memory"}
    config.setdefault("server", {})["api_keys"] = [CLIENT_KEY, OTHER_KEY]
    config["routing"]["default_providers"]["gemini_interactions"] = "interactions"
    proxy = start_proxy(config)
    mine, other = genai_client(proxy), genai_client(proxy, OTHER_KEY)
    mock.enqueue(Turn([Text("held upstream")]))
    held = mine.interactions.create(model=MODEL, input="hi")  # passed through: the provider keeps it
    n = len(mock.requests)
    with pytest.raises(APIError) as foreign:
        other.interactions.get(held.id)
    assert foreign.value.status_code == 404 and len(mock.requests) == n  # not forwarded for another key
    again = mine.interactions.get(held.id)
    assert again.id == held.id and again.steps[0].content[0].text == "held upstream"
    forwarded = mock.requests[-1]
    assert (forwarded.method, forwarded.path) == ("GET", f"/v1beta/interactions/{held.id}")
    assert forwarded.headers["x-goog-api-key"] != CLIENT_KEY


def test_background_toward_an_interactions_provider_is_a_run_of_the_proxy(client, mock):
    mock.enqueue(Turn([Text("run here")]))
    created = client.interactions.create(model=MODEL, input="hi", background=True)
    assert created.id and created.status in ("in_progress", "completed")
    body = sent(mock, stream=True)  # a plain streamed request: the run is the proxy's, not the provider's
    assert "background" not in body
    done = wait_final(client.interactions.get, created.id, FINAL)
    assert done.status == "completed" and done.steps[0].content[0].text == "run here"

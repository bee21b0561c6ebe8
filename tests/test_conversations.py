"""The Conversations API end to end: the official OpenAI SDK's `client.conversations.*` and
`conversations.items.*` against the real server, and `responses.create(conversation=...)`
toward every provider protocol (Chat, Anthropic, Gemini and Responses mock upstreams),
streaming and not, checking what the provider received and what the conversation holds
afterwards; the memory, sqlite and redis backends; two instances sharing one redis-server;
one client key never sees another's conversations."""

from __future__ import annotations

import json

import openai
import pytest

from conftest import shared_state

from gemini_helpers import gemini_config
from proxai.mock import Text, ToolCall, Turn
from test_open_responses_compliance import RESOURCE, schema_errors

PROVIDERS = ["chat", "anthropic", "gemini", "responses"]
BACKENDS = ["memory", "sqlite", "redis"]
TOOLS = [{"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}, "strict": False}]


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


@pytest.fixture
def state_section(request, backend, tmp_path):
    return {"backend": "memory"} if backend == "memory" else shared_state(backend, request, tmp_path)


def config(harness, state: dict, **server) -> dict:
    doc = gemini_config(harness.mock_url)
    doc["state"] = dict(state)
    if server:
        doc["server"] = server
    return doc


@pytest.fixture
def proxy(harness, start_proxy, mock):
    return start_proxy(config(harness, {"backend": "memory"}))


@pytest.fixture
def client(proxy):
    c = proxy.openai()
    yield c
    c.close()


def create(client, stream: bool, **kw):
    if stream:
        with client.responses.stream(**kw) as s:
            list(s)
            return s.get_final_response()
    return client.responses.create(**kw)


def sent_text(mock) -> str:
    """The provider's request body as text: each protocol spells messages its own way, the
    order of the conversation's texts in it is what counts."""
    return json.dumps(mock.requests[-1].body)


def in_order(text: str, *parts: str) -> bool:
    at = -1
    for part in parts:
        at = text.find(part, at + 1)
        if at < 0:
            return False
    return True


def item_texts(items) -> list[tuple[str, str]]:
    out = []
    for item in items:
        item = item if isinstance(item, dict) else item.model_dump()
        if item["type"] == "message":
            out.append((item["role"], "".join(part.get("text", "") for part in item["content"])))
        else:
            out.append((item["type"], item.get("call_id") or ""))
    return out


# --- the resource endpoints -------------------------------------------------------------------


def test_create_retrieve_update_delete_in_openai_shapes(client):
    conv = client.conversations.create(
        items=[{"type": "message", "role": "user", "content": "My name is Ada."}], metadata={"topic": "names"})
    assert conv.object == "conversation" and conv.id.startswith("conv_") and conv.metadata == {"topic": "names"}
    assert isinstance(conv.created_at, int)
    again = client.conversations.retrieve(conv.id)
    assert again.model_dump() == conv.model_dump()

    updated = client.conversations.update(conv.id, metadata={"topic": "people", "n": "2"})
    assert updated.metadata == {"topic": "people", "n": "2"}
    assert client.conversations.retrieve(conv.id).metadata == {"topic": "people", "n": "2"}
    assert client.conversations.update(conv.id, metadata=None).metadata == {}  # null clears it

    deleted = client.conversations.delete(conv.id)
    assert (deleted.id, deleted.object, deleted.deleted) == (conv.id, "conversation.deleted", True)
    with pytest.raises(openai.NotFoundError) as missing:
        client.conversations.retrieve(conv.id)
    assert missing.value.body["message"] == f"Conversation with id '{conv.id}' not found."
    assert missing.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.NotFoundError):
        client.conversations.delete(conv.id)


def test_items_add_list_paginate_retrieve_delete(client):
    conv = client.conversations.create(items=[{"type": "message", "role": "user", "content": f"m{i}"} for i in range(3)])
    added = client.conversations.items.create(conv.id, items=[
        {"type": "message", "role": "assistant", "content": "m3"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "m4"}]},
    ])
    assert added.object == "list" and [t for _, t in item_texts(added.data)] == ["m3", "m4"]
    assert added.first_id == added.data[0].id and added.last_id == added.data[1].id

    asc = client.conversations.items.list(conv.id, order="asc")
    assert [t for _, t in item_texts(asc.data)] == ["m0", "m1", "m2", "m3", "m4"]
    assert [r for r, _ in item_texts(asc.data)] == ["user", "user", "user", "assistant", "user"]
    desc = client.conversations.items.list(conv.id)  # OpenAI's default order is desc
    assert [t for _, t in item_texts(desc.data)] == ["m4", "m3", "m2", "m1", "m0"]

    page = client.conversations.items.list(conv.id, order="asc", limit=2)
    assert [t for _, t in item_texts(page.data)] == ["m0", "m1"] and page.has_more is True
    rest = client.conversations.items.list(conv.id, order="asc", limit=2, after=page.data[-1].id)
    assert [t for _, t in item_texts(rest.data)] == ["m2", "m3"]
    every = [t for _, t in item_texts(client.conversations.items.list(conv.id, order="asc", limit=2,
                                                                      include=["reasoning.encrypted_content"]))]
    assert every == ["m0", "m1", "m2", "m3", "m4"]  # the SDK's auto-pagination follows after/has_more

    one = client.conversations.items.retrieve(asc.data[3].id, conversation_id=conv.id)
    assert item_texts([one]) == [("assistant", "m3")]
    left = client.conversations.items.delete(asc.data[3].id, conversation_id=conv.id)
    assert left.id == conv.id and left.object == "conversation"
    assert [t for _, t in item_texts(client.conversations.items.list(conv.id, order="asc"))] == ["m0", "m1", "m2", "m4"]
    with pytest.raises(openai.NotFoundError) as gone:
        client.conversations.items.retrieve(asc.data[3].id, conversation_id=conv.id)
    assert asc.data[3].id in gone.value.body["message"]
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.delete(asc.data[3].id, conversation_id=conv.id)
    with pytest.raises(openai.NotFoundError) as unknown:
        client.conversations.items.list("conv_nope")
    assert unknown.value.body["message"] == "Conversation with id 'conv_nope' not found."


@pytest.mark.parametrize("call, param", [
    (lambda c: c.conversations.create(metadata={"k": 1}), "metadata.k"),
    (lambda c: c.conversations.create(metadata={f"k{i}": "v" for i in range(17)}), "metadata"),
    (lambda c: c.conversations.create(items=[{"type": "message", "role": "robot", "content": "x"}]), "items[0].role"),
    (lambda c: c.conversations.create(items=["text"]), "items[0]"),
    (lambda c: c.conversations.create(items=[{"role": "user", "content": "x"}] * 21), "items"),
    (lambda c: c.conversations.items.create(c.conversations.create().id, items=[]), "items"),
    (lambda c: c.conversations.update(c.conversations.create().id, metadata="topic"), "metadata"),
    (lambda c: c.conversations.items.list(c.conversations.create().id, limit=101), "limit"),
    (lambda c: c.conversations.items.list(c.conversations.create().id, order="sideways"), "order"),
    (lambda c: c.conversations.items.list(c.conversations.create().id, after="msg_nope"), "after"),
])
def test_bad_input_is_a_400_naming_the_field(client, call, param):
    with pytest.raises(openai.BadRequestError) as bad:
        call(client)
    assert bad.value.body["param"] == param and bad.value.body["type"] == "invalid_request_error"


# --- responses.create(conversation=...) toward every provider ------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_conversation_is_the_history_and_grows_by_each_turn(client, mock, provider, stream):
    conv = client.conversations.create(items=[{"type": "message", "role": "user", "content": "My name is Ada."}])

    mock.enqueue(Turn([Text("Let me check the time."), ToolCall("call_1", "get_time", "{}")]))
    r1 = create(client, stream, model=f"{provider}/up-model", conversation=conv.id, input="What time is it?", tools=TOOLS)
    assert r1.conversation is not None and r1.conversation.id == conv.id
    if provider != "responses":  # a passed-through Response is the provider's own (the mock echoes its tools)
        assert schema_errors(RESOURCE, r1.model_dump(mode="json", exclude_unset=True), "response") == []
    assert in_order(sent_text(mock), "My name is Ada.", "What time is it?")

    mock.enqueue(Turn([Text("It is noon, Ada.")]))
    r2 = create(client, stream, model=f"{provider}/up-model", conversation={"id": conv.id}, tools=TOOLS,
                input=[{"type": "function_call_output", "call_id": "call_1", "output": "12:00"}])
    assert r2.output_text == "It is noon, Ada." and r2.conversation.id == conv.id
    text = sent_text(mock)
    assert in_order(text, "My name is Ada.", "What time is it?", "Let me check the time.", "call_1", "12:00")
    assert "conversation" not in mock.requests[-1].body  # resolved by the proxy, never sent on

    items = client.conversations.items.list(conv.id, order="asc", limit=100).data
    assert item_texts(items) == [
        ("user", "My name is Ada."), ("user", "What time is it?"), ("assistant", "Let me check the time."),
        ("function_call", "call_1"), ("function_call_output", "call_1"), ("assistant", "It is noon, Ada."),
    ]
    assert all(item.id for item in items)
    # Each turn is still a stored response of its own.
    if provider != "responses":
        assert client.responses.retrieve(r2.id).conversation.id == conv.id
        assert [i.type for i in client.responses.input_items.list(r2.id).data] == ["function_call_output"]


def test_toward_a_responses_provider_the_conversation_stays_local(client, mock):
    conv = client.conversations.create(items=[{"type": "message", "role": "user", "content": "My name is Ada."}])
    mock.enqueue(Turn([Text("Hello Ada.")]))
    client.responses.create(model="responses/up-model", conversation=conv.id, input="Hi")
    body = mock.requests[-1].body
    assert "conversation" not in body
    assert [(i["role"], i["content"][0]["text"]) for i in body["input"]] == [("user", "My name is Ada."), ("user", "Hi")]
    # the proxy's own ids of client items are not sent to a provider that looks ids up
    assert all("id" not in i for i in body["input"])


@pytest.mark.parametrize("provider", ["anthropic", "responses"])
def test_a_streamed_turn_is_in_the_conversation_before_response_completed(client, mock, provider):
    conv = client.conversations.create()
    mock.enqueue(Turn([Text("Quick answer.")]))
    seen = None
    with client.responses.stream(model=f"{provider}/up-model", conversation=conv.id, input="Quick?") as s:
        for event in s:
            if event.type == "response.completed":
                seen = item_texts(client.conversations.items.list(conv.id, order="asc").data)
                assert event.response.conversation.id == conv.id
    assert seen == [("user", "Quick?"), ("assistant", "Quick answer.")]


def test_previous_response_id_with_conversation_is_a_400_and_no_provider_call(client, mock):
    conv = client.conversations.create()
    mock.enqueue(Turn([Text("first")]))
    first = client.responses.create(model="chat/up-model", input="hi")
    calls = len(mock.requests)
    with pytest.raises(openai.BadRequestError) as both:
        client.responses.create(model="chat/up-model", input="again", conversation=conv.id, previous_response_id=first.id)
    assert both.value.body["param"] == "conversation"
    assert "previous_response_id" in both.value.body["message"] and "conversation" in both.value.body["message"]
    with pytest.raises(openai.NotFoundError) as unknown:
        client.responses.create(model="anthropic/up-model", input="hi", conversation="conv_missing")
    assert unknown.value.body["param"] == "conversation"
    assert unknown.value.body["message"] == "Conversation with id 'conv_missing' not found."
    assert len(mock.requests) == calls


def test_store_false_still_adds_the_turn_to_the_conversation(client, mock):
    conv = client.conversations.create()
    mock.enqueue(Turn([Text("unstored")]))
    r = client.responses.create(model="chat/up-model", input="hi", conversation=conv.id, store=False)
    assert r.store is False and r.conversation.id == conv.id
    assert item_texts(client.conversations.items.list(conv.id, order="asc")) == [("user", "hi"), ("assistant", "unstored")]


# --- tenants, backends, instances ---------------------------------------------------------------


def test_one_key_never_sees_another_keys_conversation(harness, start_proxy, mock):
    p = start_proxy(config(harness, {"backend": "memory"}, api_keys=["key-alice", "key-bob"]))
    alice, bob = p.openai(api_key="key-alice"), p.openai(api_key="key-bob")
    conv = alice.conversations.create(items=[{"type": "message", "role": "user", "content": "secret"}])
    item = alice.conversations.items.list(conv.id).data[0]
    calls = len(mock.requests)
    for call in (lambda: bob.conversations.retrieve(conv.id),
                 lambda: bob.conversations.update(conv.id, metadata={"x": "y"}),
                 lambda: bob.conversations.items.list(conv.id),
                 lambda: bob.conversations.items.create(conv.id, items=[{"role": "user", "content": "mine"}]),
                 lambda: bob.conversations.items.retrieve(item.id, conversation_id=conv.id),
                 lambda: bob.conversations.items.delete(item.id, conversation_id=conv.id),
                 lambda: bob.responses.create(model="chat/up-model", input="tell me", conversation=conv.id),
                 lambda: bob.conversations.delete(conv.id)):
        with pytest.raises(openai.NotFoundError):
            call()
    assert len(mock.requests) == calls
    assert item_texts(alice.conversations.items.list(conv.id)) == [("user", "secret")]
    assert alice.conversations.retrieve(conv.id).metadata == {}


@pytest.mark.parametrize("stream", [False, True])
def test_every_backend_keeps_the_conversation(harness, start_proxy, mock, state_section, stream):
    p = start_proxy(config(harness, state_section))
    c = p.openai()
    conv = c.conversations.create(items=[{"type": "message", "role": "user", "content": "My name is Ada."}],
                                  metadata={"k": "v"})
    mock.enqueue(Turn([Text("Hello Ada.")]))
    create(c, stream, model="gemini/up-model", conversation=conv.id, input="Who am I?")
    mock.enqueue(Turn([Text("You are Ada.")]))
    create(c, stream, model="chat/up-model", conversation=conv.id, input="Again?")
    assert in_order(sent_text(mock), "My name is Ada.", "Who am I?", "Hello Ada.", "Again?")
    assert item_texts(c.conversations.items.list(conv.id, order="asc")) == [
        ("user", "My name is Ada."), ("user", "Who am I?"), ("assistant", "Hello Ada."),
        ("user", "Again?"), ("assistant", "You are Ada.")]
    assert c.conversations.retrieve(conv.id).metadata == {"k": "v"}


def test_two_instances_over_one_redis_share_a_conversation(harness, start_proxy, mock, redis_server):
    redis_server.flush()
    state = {"backend": "redis", "url": redis_server.url}
    a = start_proxy(config(harness, state)).openai()
    b = start_proxy(config(harness, state)).openai()
    conv = a.conversations.create(items=[{"type": "message", "role": "user", "content": "My name is Ada."}])
    mock.enqueue(Turn([Text("Hello Ada.")]))
    create(b, True, model="anthropic/up-model", conversation=conv.id, input="Who am I?")
    mock.enqueue(Turn([Text("Still Ada.")]))
    create(a, False, model="responses/up-model", conversation=conv.id, input="And now?")
    assert in_order(sent_text(mock), "My name is Ada.", "Who am I?", "Hello Ada.", "And now?")
    b.conversations.items.create(conv.id, items=[{"role": "user", "content": "noted by b"}])
    assert item_texts(a.conversations.items.list(conv.id, order="asc")) == [
        ("user", "My name is Ada."), ("user", "Who am I?"), ("assistant", "Hello Ada."),
        ("user", "And now?"), ("assistant", "Still Ada."), ("user", "noted by b")]
    b.conversations.delete(conv.id)
    with pytest.raises(openai.NotFoundError):
        a.conversations.retrieve(conv.id)


def test_without_a_state_store_conversations_are_refused(harness, start_proxy, mock):
    c = start_proxy(config(harness, {"backend": "none"})).openai()
    with pytest.raises(openai.NotFoundError) as missing:
        c.conversations.create()
    assert "state.backend is none" in missing.value.body["message"]
    with pytest.raises(openai.BadRequestError) as refused:
        c.responses.create(model="anthropic/up-model", input="hi", conversation="conv_x")
    assert refused.value.body["param"] == "conversation"


@pytest.mark.slow
def test_two_server_processes_over_one_redis_share_a_conversation(harness, start_server, mock, redis_server):
    """server.py twice, each in a process of its own, over one real redis-server: a
    conversation created on one is continued on the other, streaming and not."""
    redis_server.flush()
    doc = config(harness, {"backend": "redis", "url": redis_server.url}, api_keys=["key-alice", "key-bob"])
    first, second = start_server(doc), start_server(doc)
    a = openai.OpenAI(base_url=first.url + "/v1", api_key="key-alice", max_retries=0)
    b = openai.OpenAI(base_url=second.url + "/v1", api_key="key-alice", max_retries=0)
    bob = openai.OpenAI(base_url=second.url + "/v1", api_key="key-bob", max_retries=0)
    conv = a.conversations.create(items=[{"type": "message", "role": "user", "content": "My name is Ada."}])
    mock.enqueue(Turn([Text("Hello Ada.")]))
    create(b, True, model="gemini/up-model", conversation=conv.id, input="Who am I?")
    mock.enqueue(Turn([Text("Still Ada.")]))
    create(a, False, model="chat/up-model", conversation=conv.id, input="And now?")
    assert in_order(sent_text(mock), "My name is Ada.", "Who am I?", "Hello Ada.", "And now?")
    assert item_texts(b.conversations.items.list(conv.id, order="asc")) == [
        ("user", "My name is Ada."), ("user", "Who am I?"), ("assistant", "Hello Ada."),
        ("user", "And now?"), ("assistant", "Still Ada.")]
    with pytest.raises(openai.NotFoundError):  # the tenant key is shared through the store, isolation too
        bob.conversations.retrieve(conv.id)


def test_a_store_that_is_down_is_a_503_before_the_provider_is_called(proxy, client, mock, monkeypatch):
    conv = client.conversations.create()
    state = proxy.proxy.state

    async def stay_down() -> None:
        state.reason = "redis is unreachable"

    monkeypatch.setattr(state, "_reconnect", stay_down)  # no reconnect while the test looks
    state._went_down("redis is unreachable")
    try:
        calls = len(mock.requests)
        for call in (lambda: client.conversations.create(),
                     lambda: client.conversations.items.list(conv.id),
                     lambda: client.responses.create(model="chat/up-model", input="hi", conversation=conv.id)):
            with pytest.raises(openai.InternalServerError) as down:
                call()
            assert down.value.status_code == 503 and "state store is unavailable" in down.value.body["message"]
        assert len(mock.requests) == calls
    finally:
        state._came_up()

"""Responses state end to end: the official OpenAI SDK as a stateful Responses client
(`previous_response_id`, `retrieve`, `delete`, `input_items.list`, streaming and not)
against Chat and Anthropic providers (the mock upstreams), for the memory, sqlite and
redis backends (a real redis-server). Every conversation test checks what the provider
received: the whole history, tool calls linked to their results, signatures intact."""

from __future__ import annotations

import concurrent.futures
import json
import urllib.request

import openai
import pytest

from conftest import shared_state

from harness import PROVIDER_KEYS, default_config
from proxai.mock import Reasoning, RedactedReasoning, Text, ToolCall, Turn, Usage

A, C = "anthropic", "chat"
PROVIDERS = [A, C]
BACKENDS = ["memory", "sqlite", "redis"]
TOOLS = [{"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}, "strict": None}]


def model(provider: str) -> str:
    return f"{provider}/up-model"


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


@pytest.fixture
def state_section(request, backend, tmp_path):
    return {"backend": "memory"} if backend == "memory" else shared_state(backend, request, tmp_path)


@pytest.fixture
def stateful(harness, start_proxy, state_section):
    """A proxy with the backend under test. No default Responses provider, so an id the
    proxy did not store is its own 404 (not forwarded)."""
    config = default_config(harness.mock_url)
    config["state"] = dict(state_section)
    del config["routing"]["default_providers"]["openai_responses"]
    return start_proxy(config)


@pytest.fixture
def client(stateful):
    c = stateful.openai()
    yield c
    c.close()


def stream_final(client, **kw):
    with client.responses.stream(**kw) as stream:
        events = list(stream)
        return events, stream.get_final_response()


def create(client, stream: bool, **kw):
    if stream:
        return stream_final(client, **kw)[1]
    return client.responses.create(**kw)


def sent(mock) -> dict:
    return mock.requests[-1].body


def texts(messages: list) -> list:
    """(role, text) of every text part the provider received, in order."""
    out = []
    for m in messages:
        content = m["content"]
        if isinstance(content, str):
            out.append((m["role"], content))
            continue
        for part in content or []:
            if part.get("type") == "text":
                out.append((m["role"], part["text"]))
    return out


# --- the conversation, rebuilt for the provider -------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_previous_response_id_rebuilds_history_with_tool_calls_linked(client, mock, provider, stream):
    mock.enqueue(Turn([Text("Let me check."), ToolCall("call_1", "get_time", "{}")], usage=Usage(10, 5)))
    r1 = create(client, stream, model=model(provider), instructions="Be brief.", input="What time is it?", tools=TOOLS)
    assert r1.store is True and r1.previous_response_id is None

    mock.enqueue(Turn([Text("It is noon.")]))
    r2 = create(client, stream, model=model(provider), previous_response_id=r1.id, tools=TOOLS,
                input=[{"type": "function_call_output", "call_id": "call_1", "output": "12:00"}])
    assert r2.output_text == "It is noon." and r2.previous_response_id == r1.id
    body = sent(mock)
    msgs = body["messages"]
    if provider == A:
        assert "system" not in body  # instructions are not inherited
        assert msgs == [
            {"role": "user", "content": [{"type": "text", "text": "What time is it?"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Let me check."},
                                              {"type": "tool_use", "id": "call_1", "name": "get_time", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1",
                                          "content": [{"type": "text", "text": "12:00"}]}]},
        ]
    else:
        assert [m["role"] for m in msgs] == ["user", "assistant", "tool"]  # no system: not inherited
        assert msgs[1]["tool_calls"][0]["id"] == "call_1" and msgs[1]["tool_calls"][0]["function"]["name"] == "get_time"
        assert msgs[2]["tool_call_id"] == "call_1" and msgs[2]["content"] in ("12:00", [{"type": "text", "text": "12:00"}])

    mock.enqueue(Turn([Text("You're welcome.")]))
    r3 = create(client, stream, model=model(provider), previous_response_id=r2.id, input="thanks", instructions="New.")
    history = texts(sent(mock)["messages"])
    assert [t for t in history if t[0] in ("user", "assistant")] == [
        ("user", "What time is it?"), ("assistant", "Let me check."), ("assistant", "It is noon."), ("user", "thanks")]
    if provider == A:
        assert sent(mock)["system"] in ("New.", [{"type": "text", "text": "New."}])
    assert r3.output_text == "You're welcome."


@pytest.mark.parametrize("stream", [False, True])
def test_thinking_signatures_survive_the_store_byte_identical(client, mock, stream):
    sig = "EqQBCkgIARAB+sig/==" * 3
    mock.enqueue(Turn([Reasoning("Let me think.", signature=sig), RedactedReasoning("REDACTED/data+=="),
                       ToolCall("toolu_1", "get_time", "{}")], usage=Usage(10, 5)))
    r1 = create(client, stream, model=model(A), input="time?", tools=TOOLS)
    mock.enqueue(Turn([Text("Noon.")]))
    create(client, stream, model=model(A), previous_response_id=r1.id, tools=TOOLS,
           input=[{"type": "function_call_output", "call_id": "toolu_1", "output": "12:00"}])
    assistant = sent(mock)["messages"][1]["content"]
    assert assistant == [{"type": "thinking", "thinking": "Let me think.", "signature": sig},
                         {"type": "redacted_thinking", "data": "REDACTED/data+=="},
                         {"type": "tool_use", "id": "toolu_1", "name": "get_time", "input": {}}]


# --- retrieve, delete, input_items -----------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_retrieve_delete_and_input_items(client, mock, stream):
    mock.enqueue(Turn([Text("Hi!")]))
    r1 = create(client, stream, model=model(C), input=[
        {"role": "user", "content": "first"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "second"}]},
    ])
    got = client.responses.retrieve(r1.id)
    if stream:  # the SDK's accumulated stream result adds parsed fields; the items must match
        assert [i.model_dump() for i in got.output] == [
            {**i.model_dump(), "content": [{k: v for k, v in c.model_dump().items() if k != "parsed"} for c in i.content]}
            for i in r1.output]
        assert (got.id, got.status, got.usage) == (r1.id, r1.status, r1.usage)
    else:
        assert got.model_dump() == r1.model_dump()

    items = client.responses.input_items.list(r1.id)
    assert [i.content[0].text for i in items.data] == ["second", "first"]  # newest first by default
    assert all(i.id and i.type == "message" and i.role == "user" for i in items.data)
    asc = client.responses.input_items.list(r1.id, order="asc", limit=1)
    assert [i.content[0].text for i in asc.data] == ["first"] and asc.has_more is True
    rest = client.responses.input_items.list(r1.id, order="asc", limit=1, after=asc.data[0].id)
    assert [i.content[0].text for i in rest.data] == ["second"] and rest.has_more is False

    assert client.responses.delete(r1.id) is None  # the SDK returns None on success
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.retrieve(r1.id)
    assert err.value.body["message"] == f"Response with id '{r1.id}' not found."
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(r1.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(r1.id)
    n = len(mock.requests)
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model=model(C), previous_response_id=r1.id, input="more")
    assert err.value.body["code"] == "previous_response_not_found"
    assert len(mock.requests) == n  # the provider is not called


def test_unknown_previous_id_is_openais_400(client, mock):
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model=model(A), input="hi", previous_response_id="resp_nope")
    assert err.value.status_code == 400
    assert err.value.body == {"message": "Previous response with id 'resp_nope' not found.", "type": "invalid_request_error",
                              "param": "previous_response_id", "code": "previous_response_not_found", "status": 400}
    assert mock.requests == []


def test_store_false_writes_nothing(client, mock):
    mock.enqueue(Turn([Text("ephemeral")]))
    r = client.responses.create(model=model(C), input="hi", store=False)
    assert r.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=model(C), input="again", previous_response_id=r.id)


def test_store_false_turn_may_still_continue_a_stored_one(client, mock):
    mock.enqueue(Turn([Text("one")]), Turn([Text("two")]))
    r1 = client.responses.create(model=model(C), input="1")
    r2 = client.responses.create(model=model(C), input="2", previous_response_id=r1.id, store=False)
    assert texts(sent(mock)["messages"]) == [("user", "1"), ("assistant", "one"), ("user", "2")]
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r2.id)


def test_record_is_stored_before_the_terminal_event_reaches_the_client(client, stateful, mock):
    mock.enqueue(Turn([Text("streamed", chunks=["str", "eamed"])]))
    other = stateful.openai()
    seen = None
    with client.responses.create(model=model(A), input="hi", stream=True) as events:
        for event in events:
            if event.type == "response.completed":
                # The stream is still open, yet the response is already retrievable.
                seen = other.responses.retrieve(event.response.id)
                assert event.response.previous_response_id is None and event.response.store is True
    assert seen is not None and seen.output_text == "streamed"


# --- tenants and limits ---------------------------------------------------------------------


def test_one_key_never_reads_another_keys_responses(harness, start_proxy, state_section, mock):
    config = default_config(harness.mock_url)
    config["state"] = dict(state_section)
    config["server"] = {"api_keys": ["key-alice", "key-bob"]}
    p = start_proxy(config)
    alice, bob = p.openai(api_key="key-alice"), p.openai(api_key="key-bob")
    mock.enqueue(Turn([Text("secret")]))
    r = alice.responses.create(model=model(C), input="hi")
    with pytest.raises(openai.NotFoundError):
        bob.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        bob.responses.delete(r.id)
    with pytest.raises(openai.BadRequestError) as err:
        bob.responses.create(model=model(C), input="x", previous_response_id=r.id)
    assert err.value.body["code"] == "previous_response_not_found"
    assert alice.responses.retrieve(r.id).output_text == "secret"


def test_chain_depth_limit_is_a_clear_400(harness, start_proxy, mock, tmp_path):
    config = default_config(harness.mock_url)
    config["state"] = {"backend": "sqlite", "url": str(tmp_path / "s.db"), "max_chain_depth": 2}
    c = start_proxy(config).openai()
    mock.enqueue(Turn([Text("a")]), Turn([Text("b")]), Turn([Text("c")]))
    r1 = c.responses.create(model=model(C), input="1")
    r2 = c.responses.create(model=model(C), input="2", previous_response_id=r1.id)  # 1 response behind it
    r3 = c.responses.create(model=model(C), input="3", previous_response_id=r2.id)  # 2 behind it: the limit
    n = len(mock.requests)
    with pytest.raises(openai.BadRequestError) as err:
        c.responses.create(model=model(C), input="4", previous_response_id=r3.id)
    assert err.value.body["param"] == "previous_response_id"
    assert "state.max_chain_depth (2" in err.value.body["message"]
    assert len(mock.requests) == n


def test_record_size_limit_is_a_clear_400_before_the_provider(harness, start_proxy, mock):
    config = default_config(harness.mock_url)
    config["state"] = {"backend": "memory", "max_record_bytes": 2048}
    c = start_proxy(config).openai()
    with pytest.raises(openai.BadRequestError) as err:
        c.responses.create(model=model(C), input="x" * 5000)
    assert err.value.body["param"] == "input" and "state.max_record_bytes (2048)" in err.value.body["message"]
    assert mock.requests == []
    mock.enqueue(Turn([Text("fine")]))
    assert c.responses.create(model=model(C), input="x" * 5000, store=False).output_text == "fine"


def test_expired_records_are_gone(harness, start_proxy, mock, tmp_path):
    import time

    config = default_config(harness.mock_url)
    config["state"] = {"backend": "sqlite", "url": str(tmp_path / "s.db"), "ttl_secs": 0.3}
    p = start_proxy(config)
    c = p.openai()
    mock.enqueue(Turn([Text("short-lived")]))
    r = c.responses.create(model=model(C), input="hi")
    time.sleep(0.5)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(r.id)
    with pytest.raises(openai.BadRequestError):
        c.responses.create(model=model(C), input="x", previous_response_id=r.id)
    store = p.proxy.state.store
    assert harness.loop.run(store.sweep()) == 1  # the sweep removes it from the file


def test_backend_none_keeps_the_stateless_400_and_stores_nothing(harness, start_proxy, mock):
    config = default_config(harness.mock_url)
    config["state"] = {"backend": "none"}
    p = start_proxy(config)
    c = p.openai()
    with pytest.raises(openai.BadRequestError) as err:
        c.responses.create(model=model(A), input="hi", previous_response_id="resp_1")
    assert err.value.body["param"] == "previous_response_id" and "stateless" in err.value.body["message"]
    assert mock.requests == []
    with pytest.raises(openai.NotFoundError):  # nothing stored: only the Responses provider could know it
        c.responses.retrieve("resp_1")
    assert [(r.method, r.path) for r in mock.requests] == [("GET", "/v1/responses/resp_1")]


def test_passthrough_to_a_responses_provider_forwards_state_untouched(harness, start_proxy, state_section, mock):
    config = default_config(harness.mock_url)  # openai_responses defaults to the Responses provider
    config["state"] = dict(state_section)
    client = start_proxy(config).openai()
    mock.enqueue(Turn([Text("from upstream")]))
    r = client.responses.create(model="responses/up-model", input="hi", previous_response_id="resp_upstream_1", store=True)
    assert r.output_text == "from upstream"
    body = sent(mock)
    assert body["previous_response_id"] == "resp_upstream_1" and body["store"] is True
    assert body["input"] == "hi"
    # The provider holds that state, not the proxy: reads of ids it did not store go there.
    with pytest.raises(openai.NotFoundError):  # (the mock stores nothing and answers 404)
        client.responses.retrieve(r.id, include=["reasoning.encrypted_content"])
    got = mock.requests[-1]
    assert (got.method, got.path) == ("GET", f"/v1/responses/{r.id}")
    assert got.headers["authorization"] == "Bearer " + PROVIDER_KEYS["responses"]  # never the client's key
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(r.id)
    assert (mock.requests[-1].method, mock.requests[-1].path) == ("DELETE", f"/v1/responses/{r.id}")
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(r.id, limit=5)
    assert mock.requests[-1].path == f"/v1/responses/{r.id}/input_items"
    # A stored (translated) response is answered by the proxy, the provider not asked.
    mock.enqueue(Turn([Text("local")]))
    local = client.responses.create(model=model(C), input="hi")
    n = len(mock.requests)
    assert client.responses.retrieve(local.id).output_text == "local" and len(mock.requests) == n


def test_state_metrics(client, stateful, mock, backend):
    mock.enqueue(Turn([Text("x")]))
    r = client.responses.create(model=model(C), input="hi")
    client.responses.retrieve(r.id)
    with urllib.request.urlopen(stateful.url + "/metrics") as resp:
        text = resp.read().decode()
    assert f'proxai_state_ops_total{{backend="{backend}",op="put",outcome="ok"}} 1.0' in text
    assert f'proxai_state_ops_total{{backend="{backend}",op="get",outcome="ok"}} 1.0' in text
    assert f'proxai_state_op_duration_seconds_count{{backend="{backend}",op="put"}} 1.0' in text


# --- many conversations at once ------------------------------------------------------------


def echo_reply(recorded):
    """A reply naming the conversation and turn the provider was asked about."""
    body = recorded.body
    last = texts(body["messages"])[-1][1]
    return Turn([Text(f"re:{last}")])


def test_many_concurrent_conversations_no_cross_talk_no_lost_turn(client, mock):
    conversations, turns = 12, 4
    mock.enqueue(*[echo_reply] * (conversations * turns))

    def converse(n: int):
        previous = None
        for t in range(turns):
            kw = {"previous_response_id": previous} if previous else {}
            r = create(client, t % 2 == 1, model=model(A if n % 2 else C), input=f"c{n}t{t}", **kw)
            assert r.output_text == f"re:c{n}t{t}"
            previous = r.id
        return previous

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        last_ids = list(pool.map(converse, range(conversations)))
    assert len(set(last_ids)) == conversations
    finals = {}
    for rec in mock.requests:
        history = texts(rec.body["messages"])
        finals.setdefault(history[0][1].split("t")[0], []).append(history)
    for n in range(conversations):
        longest = max(finals[f"c{n}"], key=len)
        expected = []
        for t in range(turns):
            expected += [("user", f"c{n}t{t}"), ("assistant", f"re:c{n}t{t}")]
        assert longest == expected[:-1]  # the last turn's input holds every earlier turn, in order


def test_input_items_are_the_turns_own_items(client, mock):
    mock.enqueue(Turn([Text("a")]), Turn([Text("b")]))
    r1 = client.responses.create(model=model(C), input="one")
    r2 = client.responses.create(model=model(C), input="two", previous_response_id=r1.id)
    page = client.responses.input_items.list(r2.id)
    assert [i.content[0].text for i in page.data] == ["two"]
    raw = json.loads(client.responses.with_raw_response.retrieve(r2.id).text)
    assert raw["previous_response_id"] == r1.id and raw["id"] == r2.id


@pytest.mark.parametrize("stream", [False, True])
def test_a_provider_that_repeats_ids_still_gets_distinct_stored_responses(client, mock, stream):
    mock.enqueue(Turn([Text("one")], id="msg_same"), Turn([Text("two")], id="msg_same"), Turn([Text("three")], id="msg_same"))
    r1 = create(client, stream, model=model(A), input="1")
    r2 = create(client, stream, model=model(A), input="2", previous_response_id=r1.id)
    r3 = create(client, stream, model=model(A), input="3", previous_response_id=r2.id)
    assert r1.id == "resp_msg_same"  # derived from the upstream id while it is free
    assert len({r1.id, r2.id, r3.id}) == 3 and r2.id.startswith("resp_msg_same_")
    mock.enqueue(Turn([Text("four")]))
    create(client, stream, model=model(A), input="4", previous_response_id=r3.id)
    assert [t for t in texts(sent(mock)["messages"])] == [
        ("user", "1"), ("assistant", "one"), ("user", "2"), ("assistant", "two"), ("user", "3"), ("assistant", "three"), ("user", "4")]
    assert client.responses.retrieve(r2.id).output_text == "two"


def test_stateful_turns_log_no_prompt_or_answer_text(client, mock):
    import logging

    from test_observability import LogCapture

    prompt, answer = "PROMPT-state-zanzibar-1187", "ANSWER-state-quokka-5521"
    with LogCapture("json", level=logging.DEBUG) as cap:
        mock.enqueue(Turn([Text(answer)]), Turn([Text(answer)]))
        r1 = client.responses.create(model=model(A), input=prompt)
        r2 = create(client, True, model=model(C), input=prompt, previous_response_id=r1.id)
        client.responses.retrieve(r2.id)
        client.responses.input_items.list(r2.id)
        with pytest.raises(openai.BadRequestError):
            client.responses.create(model=model(C), input=prompt, previous_response_id="resp_" + prompt)
    assert "/v1/responses" in cap.text  # the requests were logged
    assert answer not in cap.text
    assert cap.text.count(prompt) == 0


def test_a_response_too_large_to_store_is_an_error_not_an_unresolvable_answer(harness, start_proxy, mock):
    config = default_config(harness.mock_url)
    config["state"] = {"backend": "memory", "max_record_bytes": 2048}
    c = start_proxy(config).openai()
    mock.enqueue(Turn([Text("x" * 3000)]))
    with pytest.raises(openai.InternalServerError) as err:
        c.responses.create(model=model(C), input="hi")
    assert "state.max_record_bytes (2048)" in err.value.body["message"]
    mock.enqueue(Turn([Text("x" * 3000, chunks=["x" * 1500, "x" * 1500])]))
    with c.responses.create(model=model(A), input="hi", stream=True) as events:
        kinds = []
        try:
            for event in events:
                kinds.append(event.type)
        except openai.APIError as exc:  # the SDK raises on the `error` event
            kinds.append("error")
            assert "state.max_record_bytes (2048)" in str(exc)
    assert "response.completed" not in kinds and kinds[-1] in ("error", "response.failed")
    assert kinds[0] == "response.created"


def test_redis_going_away_is_a_clear_503(harness, start_proxy, mock, tmp_path, redis_server):
    from bench.redis_server import RedisServer

    own = RedisServer(tmp_path / "redis").start()
    config = default_config(harness.mock_url)
    config["state"] = {"backend": "redis", "url": own.url}
    c = start_proxy(config).openai()
    mock.enqueue(Turn([Text("stored")]))
    r = c.responses.create(model=model(C), input="hi")
    own.stop()
    n = len(mock.requests)
    with pytest.raises(openai.APIStatusError) as err:
        c.responses.create(model=model(C), input="more", previous_response_id=r.id)
    assert err.value.status_code == 503 and "state store is unavailable" in err.value.body["message"]
    assert len(mock.requests) == n
    with pytest.raises(openai.APIStatusError) as err:
        c.responses.retrieve(r.id)
    assert err.value.status_code == 503


def test_demo_mode_keeps_state_in_memory(harness):
    p = harness.start_demo()
    try:
        c = p.openai()
        r1 = c.responses.create(model="chat/demo", input="hello")
        r2 = c.responses.create(model="anthropic/demo", input="again", previous_response_id=r1.id)
        assert c.responses.retrieve(r2.id).previous_response_id == r1.id
        assert p.proxy.state.store.name == "memory"
    finally:
        p.stop()

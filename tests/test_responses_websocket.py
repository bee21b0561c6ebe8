"""The Responses WebSocket mode end to end: the official openai SDK's `client.responses.connect()`
against the real server, toward Chat, Anthropic, Gemini and Responses mock upstreams.

Several turns over one socket; `previous_response_id` naming the socket's last response with
`store: false` (and after a `generate: false` warm-up) expanded on the socket; stored turns
retrievable over HTTP; the events equal the SSE stream's; errors as `error` events in OpenAI's
shape naming the field; one log line per turn; a client that leaves mid-turn cancels the
provider call."""

from __future__ import annotations

import json
import logging
import time

import pytest
import websockets.sync.client

from gemini_helpers import gemini_config
from harness import CLIENT_KEY
from proxai.mock import Text, ToolCall, Turn
from test_open_responses_compliance import EVENTS, RESOURCE, schema_errors

MODELS = {"chat": "chat/gpt-x", "anthropic": "anthropic/claude-x", "gemini": "gemini/gemini-3-pro-preview",
          "responses": "responses/gpt-x"}
TOOLS = [{"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}, "strict": False}]


@pytest.fixture
def proxy(harness, start_proxy, mock):
    return start_proxy(gemini_config(harness.mock_url))


@pytest.fixture
def client(proxy):
    c = proxy.openai()
    yield c
    c.close()


def turn(conn) -> list[dict]:
    """One turn's events as sent (dicts), up to its terminal event or an error."""
    out = []
    while True:
        event = json.loads(conn.recv_bytes())
        out.append(event)
        if event["type"] in ("response.completed", "response.incomplete", "response.failed", "error"):
            return out


def sent(mock) -> str:
    return json.dumps(mock.requests[-1].body)


def in_order(text: str, *parts: str) -> bool:
    at = -1
    for part in parts:
        at = text.find(part, at + 1)
        if at < 0:
            return False
    return True


@pytest.mark.parametrize("provider", list(MODELS))
def test_several_turns_over_one_socket_with_store_false(client, mock, provider):
    """store: false toward every provider: the second and third turns name the socket's last
    response, and the provider gets the whole history each time."""
    mock.enqueue(Turn([Text("alpha-answer")]), Turn([ToolCall("call_1", "get_time", "{}")]), Turn([Text("beta-answer")]))
    model = MODELS[provider]
    with client.responses.connect() as conn:
        conn.response.create(model=model, input="alpha-question", store=False)
        first = turn(conn)
        assert [e["type"] for e in first][0] == "response.created" and first[-1]["type"] == "response.completed"
        r1 = first[-1]["response"]
        assert schema_errors(RESOURCE, r1, "response") == []
        conn.response.create(model=model, input="beta-question", store=False, previous_response_id=r1["id"], tools=TOOLS)
        second = turn(conn)[-1]["response"]
        assert in_order(sent(mock), "alpha-question", "alpha-answer", "beta-question")
        call = next(item for item in second["output"] if item["type"] == "function_call")
        conn.response.create(model=model, store=False, previous_response_id=second["id"], tools=TOOLS,
                             input=[{"type": "function_call_output", "call_id": call["call_id"], "output": "12:00"}])
        third = turn(conn)[-1]["response"]
    assert third["output"][-1]["content"][0]["text"] == "beta-answer"
    assert len(mock.requests) == 3
    assert in_order(sent(mock), "alpha-question", "alpha-answer", "beta-question", "get_time", "12:00")
    assert all(r.body.get("previous_response_id") is None for r in mock.requests)  # expanded on the socket


@pytest.mark.parametrize("provider", list(MODELS))
def test_stored_turns_chain_through_the_store_and_are_retrievable(client, mock, provider):
    mock.enqueue(Turn([Text("stored-one")]), Turn([Text("stored-two")]))
    model = MODELS[provider]
    with client.responses.connect() as conn:
        conn.response.create(model=model, input="first-stored")
        r1 = turn(conn)[-1]["response"]
        conn.response.create(model=model, input="second-stored", previous_response_id=r1["id"])
        r2 = turn(conn)[-1]["response"]
    if provider == "responses":  # the provider keeps its own responses: the id goes to it (pass-through)
        assert mock.requests[-1].body["previous_response_id"] == r1["id"]
    else:
        assert in_order(sent(mock), "first-stored", "stored-one", "second-stored")
    if provider == "responses":
        return  # retrieving it is the provider's (the mock keeps no responses)
    again = client.responses.retrieve(r2["id"])
    assert again.output_text == "stored-two" and again.previous_response_id == r1["id"]


def normalised(events: list[dict]) -> list[dict]:
    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ("id", "item_id", "created_at", "completed_at")}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value
    return [strip(e) for e in events]


@pytest.mark.parametrize("provider", ["chat", "anthropic"])
def test_the_events_are_the_sse_streams_events(proxy, client, mock, provider):
    reply = Turn([Text("same words here", chunks=["same ", "words ", "here"])])
    mock.enqueue(reply, reply)
    model = MODELS[provider]
    with client.responses.with_streaming_response.create(model=model, input="q", stream=True, store=False) as raw:
        http_events = [json.loads(line[6:]) for line in raw.iter_lines() if line.startswith("data: ")]
    with client.responses.connect() as conn:
        conn.response.create(model=model, input="q", store=False)
        ws_events = turn(conn)
    assert normalised(ws_events) == normalised(http_events)
    for event in ws_events:
        validator = EVENTS.get(event["type"])
        if validator is not None:
            assert schema_errors(validator, event, event["type"]) == []


@pytest.mark.parametrize("provider", ["chat", "responses"])
def test_a_warm_up_calls_no_provider_and_the_next_turn_chains_from_it(client, mock, provider):
    mock.enqueue(Turn([Text("warm-answer")]))
    model = MODELS[provider]
    with client.responses.connect() as conn:
        conn.response.create(model=model, input="warm-context", instructions="be brief", generate=False)
        warm = turn(conn)
        assert [e["type"] for e in warm] == ["response.created", "response.completed"]
        assert warm[-1]["response"]["output"] == [] and schema_errors(RESOURCE, warm[-1]["response"], "response") == []
        assert mock.requests == []
        conn.response.create(model=model, input="warm-question", instructions="be brief",
                             previous_response_id=warm[-1]["response"]["id"])
        answer = turn(conn)[-1]["response"]
    assert answer["output"][0]["content"][0]["text"] == "warm-answer"
    assert len(mock.requests) == 1 and in_order(sent(mock), "warm-context", "warm-question") and "be brief" in sent(mock)


def test_stream_id_is_echoed_on_every_event(client, mock):
    mock.enqueue(Turn([Text("lane")]))
    with client.responses.connect() as conn:
        conn.response.create(model=MODELS["chat"], input="x", stream_id="lane-7")
        events = turn(conn)
    assert events and all(e.get("stream_id") == "lane-7" for e in events)


def test_errors_are_error_events_naming_the_field_and_the_socket_stays_open(client, mock):
    mock.enqueue(Turn([Text("after errors")]))
    with client.responses.connect() as conn:
        conn.response.create(model=MODELS["chat"], input="x", background=True)
        (error,) = turn(conn)
        assert error["type"] == "error" and error["status"] == 400 and error["error"]["param"] == "background"
        assert error["error"]["type"] == "invalid_request_error"
        conn.response.create(model=MODELS["chat"], input=123)
        error = turn(conn)[-1]
        assert error["status"] == 400 and error["error"]["param"] == "input"
        conn.send({"type": "response.bogus"})
        error = turn(conn)[-1]
        assert error["status"] == 400 and error["error"]["param"] == "type"
        conn.response.create(model=MODELS["chat"], input="x", store=False, previous_response_id="resp_unknown")
        error = turn(conn)[-1]
        assert error["status"] == 400 and error["error"]["param"] == "previous_response_id"  # as over HTTP
        conn.send({"type": "response.processed", "response_id": "resp_x"})  # Codex's acknowledgement: no answer
        conn.response.create(model=MODELS["chat"], input="fine")
        last = turn(conn)[-1]
    assert last["type"] == "response.completed" and len(mock.requests) == 1


def test_a_provider_error_is_an_error_event_with_its_status(client, mock):
    from proxai.mock import Error
    mock.enqueue(Error(429, message="slow down", headers={"Retry-After": "7"}))
    with client.responses.connect() as conn:
        conn.response.create(model=MODELS["anthropic"], input="x")
        events = turn(conn)
    assert events[-1]["type"] == "error" and events[-1]["status"] == 429
    assert {k.lower(): v for k, v in events[-1]["error"]["headers"].items()}.get("retry-after") == "7"


def test_a_wrong_key_is_refused_at_the_handshake(harness, start_proxy, mock):
    cfg = gemini_config(harness.mock_url)
    cfg["server"] = {"api_keys": ["proxy-key"]}
    keyed = start_proxy(cfg)
    mock.enqueue(Turn([Text("keyed")]))
    with keyed.openai(api_key="proxy-key").responses.connect() as conn:
        conn.response.create(model=MODELS["chat"], input="x")
        assert turn(conn)[-1]["type"] == "response.completed"
    bad = keyed.openai(api_key="not-a-key")
    with pytest.raises(Exception) as caught:
        with bad.responses.connect() as conn:
            conn.response.create(model=MODELS["chat"], input="x")
            turn(conn)
    assert "401" in str(caught.value)


def test_a_plain_get_is_told_to_upgrade(proxy):
    import urllib.error
    import urllib.request
    plain = urllib.request.Request(proxy.url + "/v1/responses", headers={"Authorization": f"Bearer {CLIENT_KEY}"})
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(plain, timeout=5)
    assert caught.value.code == 400 and "WebSocket" in json.loads(caught.value.read())["error"]["message"]


def test_one_log_line_per_turn_and_none_for_the_socket(client, mock, caplog):
    caplog.set_level(logging.INFO, logger="proxai.request")
    mock.enqueue(Turn([Text("one")]), Turn([Text("two")]))
    with client.responses.connect() as conn:
        for text in ("a", "b"):
            conn.response.create(model=MODELS["anthropic"], input=text, store=False)
            turn(conn)
    time.sleep(0.2)
    lines = [r.fields for r in caplog.records if getattr(r, "fields", None) and r.fields.get("path") == "/v1/responses"]
    assert [(f["method"], f["status"], f["provider"]) for f in lines] == [("WEBSOCKET", 200, "anthropic")] * 2
    assert len({f["request_id"] for f in lines}) == 2 and all(f["output_tokens"] for f in lines)


def test_leaving_mid_turn_cancels_the_provider_call(proxy, mock):
    mock.enqueue(Turn([Text("abcdefgh", chunks=list("abcdefgh"))], stall_after=4, stall_secs=20))
    url = proxy.url.replace("http://", "ws://") + "/v1/responses"
    with websockets.sync.client.connect(url, additional_headers={"Authorization": f"Bearer {CLIENT_KEY}"}) as ws:
        ws.send(json.dumps({"type": "response.create", "model": MODELS["anthropic"], "input": "x"}))
        while json.loads(ws.recv())["type"] != "response.output_text.delta":
            pass
        assert proxy.proxy.active == 1
    deadline = time.monotonic() + 5
    while (mock.cut_short == 0 or proxy.proxy.active) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert mock.cut_short == 1, "the provider's stream stayed open after the client left"
    assert proxy.proxy.active == 0, "the concurrency slot was not freed"

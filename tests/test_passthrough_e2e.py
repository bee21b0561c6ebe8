"""The three same-protocol pairs end to end: official SDK -> proxy -> mock upstream."""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import socket
import threading
import time
from urllib.parse import urlsplit

import anthropic
import openai
import pytest

from harness import CLIENT_KEY, PROVIDER_KEYS
from proxai.mock import Stream, Text, ToolCall, Turn

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def assert_provider_auth(rec, provider: str) -> None:
    """The provider's key went upstream; the client's key did not, in any header or the body."""
    headers = rec.headers
    if provider == "anthropic":
        assert headers["x-api-key"] == PROVIDER_KEYS["anthropic"]
        assert "authorization" not in headers
        assert headers["anthropic-version"]
    else:
        assert headers["authorization"] == f"Bearer {PROVIDER_KEYS[provider]}"
        assert "x-api-key" not in headers
    assert CLIENT_KEY not in json.dumps(headers)
    assert CLIENT_KEY.encode() not in rec.raw


# --- Chat Completions -----------------------------------------------------------------


def test_chat_create(openai_client, mock):
    mock.enqueue(Turn([Text("Paris.")]))
    completion = openai_client.chat.completions.create(model="chat/gpt-test", messages=MESSAGES, temperature=0.2)
    assert completion.choices[0].message.content == "Paris."
    assert completion.choices[0].finish_reason == "stop"
    rec = mock.requests[-1]
    assert rec.path == "/v1/chat/completions"
    assert rec.body["model"] == "gpt-test"  # route chat/(.+) -> $1
    assert rec.body["messages"] == MESSAGES and rec.body["temperature"] == 0.2
    assert_provider_auth(rec, "chat")


def test_chat_create_stream(openai_client, mock):
    mock.enqueue(Turn([Text("Paris is the capital.", chunks=["Paris ", "is the ", "capital."])]))
    stream = openai_client.chat.completions.create(model="chat/gpt-test", messages=MESSAGES, stream=True)
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Paris is the capital."
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert mock.requests[-1].body["stream"] is True
    assert_provider_auth(mock.requests[-1], "chat")


def test_chat_stream_helper_with_tool_call(openai_client, mock):
    mock.enqueue(Turn([ToolCall("call_1", "get_weather", '{"city": "Paris"}', chunks=['{"city"', ': "Paris"}'])]))
    with openai_client.chat.completions.stream(model="chat/gpt-test", messages=MESSAGES) as stream:
        final = stream.get_final_completion()
    call = final.choices[0].message.tool_calls[0]
    assert (call.id, call.function.name, call.function.arguments) == ("call_1", "get_weather", '{"city": "Paris"}')
    assert final.choices[0].finish_reason == "tool_calls"


def test_chat_model_not_rewritten_goes_byte_identical(openai_client, mock):
    # default route, no rewrite: the client's exact bytes are forwarded
    openai_client.chat.completions.create(model="plain-model", messages=MESSAGES, max_tokens=7)
    rec = mock.requests[-1]
    assert rec.body["model"] == "plain-model"
    assert rec.body["max_tokens"] == 7


def test_chat_eof_after_finish_reason_without_done_is_complete(openai_client, mock, caplog):
    caplog.set_level(logging.INFO, logger="proxai.request")
    mock.enqueue(Turn([Text("Paris.")], omit_done=True))
    chunks = list(openai_client.chat.completions.create(model="chat/m", messages=MESSAGES, stream=True))
    assert chunks[-1].choices[0].finish_reason == "stop"
    deadline = time.monotonic() + 3  # the summary line follows the stream's last byte
    while "outcome=" not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "outcome=complete_without_done" in caplog.text


# --- Responses ------------------------------------------------------------------------


def test_responses_create(openai_client, mock):
    mock.enqueue(Turn([Text("Paris.")]))
    response = openai_client.responses.create(model="responses/gpt-5", input="What is the capital of France?")
    assert response.output_text == "Paris."
    assert response.status == "completed"
    rec = mock.requests[-1]
    assert rec.path == "/v1/responses" and rec.body["model"] == "gpt-5"
    assert rec.body["input"] == "What is the capital of France?"
    assert_provider_auth(rec, "responses")


def test_responses_stream(openai_client, mock):
    mock.enqueue(Turn([Text("Paris is the capital.")]))
    with openai_client.responses.stream(model="responses/gpt-5", input="capital?") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == "Paris is the capital."
    assert final.output_text == "Paris is the capital." and final.status == "completed"
    assert mock.requests[-1].body["model"] == "gpt-5"
    assert_provider_auth(mock.requests[-1], "responses")


def test_responses_create_stream_raw_events(openai_client, mock):
    mock.enqueue(Turn([Text("ok")]))
    events = list(openai_client.responses.create(model="m", input="x", stream=True))
    assert events[0].type == "response.created"
    assert events[-1].type == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))


# --- Anthropic Messages ------------------------------------------------------------------


def test_messages_create(anthropic_client, mock):
    mock.enqueue(Turn([Text("Paris.")]))
    message = anthropic_client.messages.create(
        model="anthropic/claude-test", max_tokens=100, messages=MESSAGES, extra_headers={"anthropic-beta": "beta-1"}
    )
    assert message.content[0].text == "Paris."
    assert message.stop_reason == "end_turn"
    rec = mock.requests[-1]
    assert rec.path == "/v1/messages" and rec.body["model"] == "claude-test"
    assert rec.body["max_tokens"] == 100
    assert rec.headers["anthropic-beta"] == "beta-1"
    assert_provider_auth(rec, "anthropic")


def test_messages_stream(anthropic_client, mock):
    mock.enqueue(Turn([Text("Paris is the capital.")]))
    with anthropic_client.messages.stream(model="anthropic/claude-test", max_tokens=100, messages=MESSAGES) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Paris is the capital."
    assert final.stop_reason == "end_turn"
    assert_provider_auth(mock.requests[-1], "anthropic")


def test_messages_create_stream_with_tool_use(anthropic_client, mock):
    mock.enqueue(Turn([Text("Let me check."), ToolCall("toolu_1", "get_weather", '{"city":"Paris"}')]))
    events = list(anthropic_client.messages.create(model="claude", max_tokens=50, messages=MESSAGES, stream=True))
    assert events[0].type == "message_start" and events[-1].type == "message_stop"
    starts = [e.content_block for e in events if e.type == "content_block_start"]
    assert [b.type for b in starts] == ["text", "tool_use"]


def test_anthropic_version_defaults_to_provider_setting_when_client_sends_none(proxy, mock):
    status, _, _ = raw_post(proxy.url, "/v1/messages", {"model": "claude", "max_tokens": 5, "messages": MESSAGES})
    assert status == 200
    assert mock.requests[-1].headers["anthropic-version"] == "2023-06-01"


def test_anthropic_bearer_auth_option(start_proxy, harness, mock):
    cfg = harness.default_config()
    cfg["providers"]["anthropic"]["auth"] = "bearer"
    cfg["providers"]["anthropic"]["anthropic_version"] = "2099-01-01"
    p = start_proxy(cfg)
    status, _, _ = raw_post(p.url, "/v1/messages", {"model": "claude", "max_tokens": 5, "messages": MESSAGES},
                            headers={"x-api-key": CLIENT_KEY})
    assert status == 200
    rec = mock.requests[-1]
    assert rec.headers["authorization"] == f"Bearer {PROVIDER_KEYS['anthropic']}"
    assert "x-api-key" not in rec.headers
    assert rec.headers["anthropic-version"] == "2099-01-01"


# --- byte-for-byte relay -------------------------------------------------------------------


def raw_post(base_url: str, path: str, body, headers=None, method="POST"):
    """(status, headers, body bytes) without any SDK in between."""
    u = urlsplit(base_url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn.request(method, path, body=data if method != "GET" else None,
                 headers={"Content-Type": "application/json", **(headers or {})})
    resp = conn.getresponse()
    out = resp.read()
    hdrs = {k.lower(): v for k, v in resp.getheaders()}
    conn.close()
    return resp.status, hdrs, out


def test_stream_bytes_are_relayed_unchanged(proxy, mock):
    # comments, CRLF, an id: line, odd spacing and a split UTF-8 character: none of it is normalised
    upstream = [
        b": hello\r\n\r\n",
        b"event: message_start\r\nid: 1\r\n",
        'data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}}\r\n\r\n'.encode(),
        b'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n',
        'event: content_block_delta\ndata:{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"caf\u00e9"}}\n\n'.encode()[:-8],
        'event: content_block_delta\ndata:{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"caf\u00e9"}}\n\n'.encode()[-8:],
        b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
        b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2}}\n\n',
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
    ]
    mock.enqueue(Stream(raw=upstream))
    status, headers, body = raw_post(proxy.url, "/v1/messages",
                                     {"model": "claude", "max_tokens": 5, "stream": True, "messages": MESSAGES})
    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    assert body == b"".join(upstream)


def test_stream_is_relayed_as_it_arrives_not_buffered(proxy, mock):
    mock.enqueue(Turn([Text("one two three")], stall_after=3, stall_secs=1.0))
    u = urlsplit(proxy.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    started = time.monotonic()
    conn.request("POST", "/v1/chat/completions",
                  body=json.dumps({"model": "m", "messages": MESSAGES, "stream": True}),
                  headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    first = resp.read1(65536)
    first_at = time.monotonic() - started
    rest = resp.read()
    total = time.monotonic() - started
    conn.close()
    assert first.startswith(b"data: ")
    assert first_at < 0.7, first_at  # before the upstream's 1s pause ended
    assert total >= 0.9
    assert rest.rstrip().endswith(b"data: [DONE]")


# --- streams that end early ------------------------------------------------------------------


def test_chat_stream_cut_before_done_raises(openai_client, mock):
    mock.enqueue(Turn([Text("Paris is the capital.")], cut_after=3))
    with pytest.raises(openai.APIError) as exc_info:
        list(openai_client.chat.completions.create(model="m", messages=MESSAGES, stream=True))
    assert "terminal" in exc_info.value.message
    assert exc_info.value.body["status"] == 502


def test_responses_stream_cut_before_terminal_fails(openai_client, mock):
    mock.enqueue(Turn([Text("Paris is the capital.")], cut_after=5))
    with openai_client.responses.stream(model="m", input="capital?") as stream:
        events = list(stream)
        types = [e.type for e in events]
        assert "error" in types and types[-1] == "response.failed"
        assert "response.completed" not in types
        failed = events[-1].response
        assert failed.status == "failed" and failed.error.code == "server_error"
        assert failed.id == events[0].response.id  # the snapshot keeps the stream's response id
        seqs = [e.sequence_number for e in events]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        with pytest.raises(RuntimeError):
            stream.get_final_response()


def test_anthropic_stream_cut_before_message_stop_raises(anthropic_client, mock):
    mock.enqueue(Turn([Text("Paris is the capital.")], cut_after=4))
    with pytest.raises(anthropic.APIStatusError) as exc_info:
        with anthropic_client.messages.stream(model="claude", max_tokens=50, messages=MESSAGES) as stream:
            for _ in stream:
                pass
    assert exc_info.value.body["error"]["type"] == "api_error"


def test_anthropic_connection_drop_mid_stream_is_an_error(anthropic_client, mock):
    # the upstream drops the connection after three events instead of ending the body
    turn = Turn([Text("Paris is the capital.")])
    from proxai.mock import render_anthropic

    events = render_anthropic.events(turn, {"model": "claude"})
    mock.enqueue(Stream(events=events, cut_after=3, abort=True))
    with pytest.raises(anthropic.APIStatusError) as exc_info:
        list(anthropic_client.messages.create(model="claude", max_tokens=50, messages=MESSAGES, stream=True))
    assert exc_info.value.body["type"] == "error"


def test_upstream_error_event_is_forwarded_once(anthropic_client, mock):
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    mock.enqueue(Stream(events=[
        ("message_start", {"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [], "stop_reason": None,
            "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}}}),
        ("error", error),
    ]))
    with pytest.raises(anthropic.APIStatusError) as exc_info:
        list(anthropic_client.messages.create(model="claude", max_tokens=50, messages=MESSAGES, stream=True))
    assert exc_info.value.body == error  # the upstream's own error, not one appended by the proxy


def test_idle_timeout_mid_stream_is_an_in_stream_error(start_proxy, harness, mock):
    cfg = harness.default_config()
    cfg["providers"]["chat"]["read_idle_timeout_secs"] = 0.3
    p = start_proxy(cfg)
    mock.enqueue(Turn([Text("one two three")], stall_after=2, stall_secs=3.0))
    client = p.openai()
    started = time.monotonic()
    with pytest.raises(openai.APIError) as exc_info:
        list(client.chat.completions.create(model="m", messages=MESSAGES, stream=True))
    assert time.monotonic() - started < 2.5
    assert "sent nothing" in exc_info.value.message


def test_idle_timeout_is_not_a_total_cap(start_proxy, harness, mock):
    cfg = harness.default_config()
    cfg["providers"]["chat"]["read_idle_timeout_secs"] = 0.4
    p = start_proxy(cfg)
    # eight pauses of 0.15s: 1.2s in total, never 0.4s of silence
    mock.enqueue(Turn([Text("abcdefgh", chunks=list("abcdefgh"))], delay_secs=0.15))
    chunks = list(p.openai().chat.completions.create(model="m", messages=MESSAGES, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "abcdefgh"


def test_tool_call_argument_stall_ends_the_stream(start_proxy, harness, mock):
    cfg = harness.default_config()
    cfg["tool_calls"] = {"timeout_secs": 0.3}
    p = start_proxy(cfg)
    events = [
        ("message_start", {"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [], "stop_reason": None,
            "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "input_json_delta", "partial_json": '{"a":'}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "input_json_delta", "partial_json": "1}"}}),
    ]
    mock.enqueue(Stream(events=events, stall_after=3, stall_secs=3.0))
    started = time.monotonic()
    with pytest.raises(anthropic.APIStatusError) as exc_info:
        list(p.anthropic().messages.create(model="claude", max_tokens=50, messages=MESSAGES, stream=True))
    assert time.monotonic() - started < 2.5
    assert "tool call" in str(exc_info.value.body["error"]["message"])


def test_client_disconnect_cancels_the_upstream_request(harness, start_proxy):
    from aiohttp import web

    gone = threading.Event()

    async def slow_stream(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null}]}\n\n')
        for _ in range(500):
            if request.transport is None or request.transport.is_closing():
                gone.set()
                break
            await asyncio.sleep(0.01)
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", slow_stream)
    from harness import _serve

    served = harness.loop.run(_serve(web.AppRunner(app, handle_signals=False)))
    try:
        cfg = harness.default_config()
        cfg["providers"]["chat"]["base_url"] = served.url + "/v1"
        p = start_proxy(cfg)
        u = urlsplit(p.url)
        sock = socket.create_connection((u.hostname, u.port), timeout=5)
        body = json.dumps({"model": "m", "messages": MESSAGES, "stream": True}).encode()
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        received = b""
        while b"data: " not in received:
            chunk = sock.recv(65536)
            assert chunk, "the proxy closed before the first event"
            received += chunk
        sock.close()
        assert gone.wait(3), "the upstream connection stayed open after the client left"
    finally:
        harness.loop.run(served.runner.cleanup())


# --- demo mode and logs ---------------------------------------------------------------------


def test_demo_mode_answers_all_three_sdks(harness):
    p = harness.start_demo()
    try:
        oa, an = p.openai(), p.anthropic()
        chat = oa.chat.completions.create(model="any-model", messages=[{"role": "user", "content": "hi"}])
        assert "demo" in chat.choices[0].message.content
        resp = oa.responses.create(model="any-model", input="hi")
        assert "demo" in resp.output_text
        msg = an.messages.create(model="any-model", max_tokens=20, messages=[{"role": "user", "content": "hi"}])
        assert "demo" in msg.content[0].text
        with an.messages.stream(model="m", max_tokens=20, messages=[{"role": "user", "content": "hi"}]) as s:
            assert "demo" in "".join(s.text_stream)
        with oa.responses.stream(model="m", input="hi") as s:
            assert s.get_final_response().status == "completed"
        chunks = list(oa.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True))
        assert chunks[-1].choices[0].finish_reason == "stop"
        assert p.proxy.demo
    finally:
        p.stop()


def test_request_log_line_has_summary_but_no_secrets_or_prompt(openai_client, anthropic_client, mock, caplog):
    caplog.set_level(logging.INFO)
    openai_client.chat.completions.create(model="chat/gpt-test", messages=[{"role": "user", "content": "SECRET-PROMPT-TEXT"}])
    list(anthropic_client.messages.create(model="anthropic/c", max_tokens=5, stream=True,
                                          messages=[{"role": "user", "content": "SECRET-PROMPT-TEXT"}]))
    deadline = time.monotonic() + 3  # a stream's summary follows its last byte, which the client may read first
    while len([r for r in caplog.records if r.name == "proxai.request"]) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    lines = [r for r in caplog.records if r.name == "proxai.request"]
    assert len(lines) == 2
    text = caplog.text
    assert "client_protocol=openai_chat_completions" in text and "route=chat" in text and "provider=chat" in text
    assert "status=200" in text and "duration_ms=" in text and "outcome=complete" in text
    for secret in ("SECRET-PROMPT-TEXT", CLIENT_KEY, *PROVIDER_KEYS.values()):
        assert secret not in text


# --- the same relay with a translating observer ------------------------------------------------
# The real translations are tested with the engine; these check the proxy's plumbing around it
# (request out, response back, stream fed event by event, early EOF) with a stand-in translator.


def _chat_chunk(delta: dict, finish=None) -> bytes:
    from proxai.http.sse import encode_event

    return encode_event(json.dumps({"id": "chatcmpl-t", "object": "chat.completion.chunk", "created": 1, "model": "m",
                                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}))


class _StandInStream:
    def __init__(self):
        self.complete = self.failed = self.in_tool_arguments = False
        self.usage = None
        self.seen = []

    def feed(self, event):
        self.seen.append(event.event)
        if event.event == "content_block_delta":
            return [_chat_chunk({"content": json.loads(event.data)["delta"]["text"]})]
        if event.event == "message_stop":
            self.complete = True
            return [_chat_chunk({}, "stop"), b"data: [DONE]\n\n"]
        return []

    def eof(self):
        return [] if self.complete else self.fail("incomplete", "the upstream stream ended before its terminal event")

    def fail(self, kind, message, status=502):
        from proxai.http.sse import encode_event

        self.failed = True
        return [encode_event(json.dumps({"error": {"message": message, "type": "server_error", "param": None,
                                                   "code": None, "status": status}}))]


class _StandInEngine:
    """Translation stood in for; what is not translation (the protocols' descriptors,
    error bodies) is the real engine's."""

    def __init__(self, real):
        from proxai.http.errors import builtin_tables

        self._real = real
        self.streams = []
        self.tables = builtin_tables()

    def __getattr__(self, name):
        return getattr(self._real, name)

    def translate_request(self, ctx, body):
        return {"model": ctx.upstream_model, "max_tokens": 16, "messages": body["messages"], "stream": bool(body.get("stream"))}

    def translate_response(self, ctx, upstream):
        return {"id": "chatcmpl-t", "object": "chat.completion", "created": 1, "model": upstream["model"],
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": upstream["content"][0]["text"]}}]}

    def open_stream(self, ctx):
        self.streams.append(_StandInStream())
        return self.streams[-1]


def test_translation_plumbing_non_streaming_and_streaming(start_proxy, mock):
    p = start_proxy()
    p.proxy.engine = _StandInEngine(p.proxy.engine)
    client = p.openai()
    mock.enqueue(Turn([Text("Bonjour.")]))
    out = client.chat.completions.create(model="anthropic/claude-x", messages=MESSAGES)
    assert out.choices[0].message.content == "Bonjour."
    rec = mock.requests[-1]
    assert rec.path == "/v1/messages" and rec.body["model"] == "claude-x"
    assert_provider_auth(rec, "anthropic")

    mock.enqueue(Turn([Text("Bonjour tout le monde.")]))
    chunks = list(client.chat.completions.create(model="anthropic/claude-x", messages=MESSAGES, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Bonjour tout le monde."
    assert p.proxy.engine.streams[-1].seen[-1] == "message_stop"

    mock.enqueue(Turn([Text("Bonjour tout le monde.")], cut_after=4))
    with pytest.raises(openai.APIError) as exc_info:
        list(client.chat.completions.create(model="anthropic/claude-x", messages=MESSAGES, stream=True))
    assert "terminal" in exc_info.value.message


def test_provider_cookies_are_not_replayed_to_other_requests(harness, start_proxy, mock):
    from proxai.mock import Json

    config = harness.default_config()
    # A host name, not an IP: a cookie jar would keep cookies for it.
    config["providers"]["chat"]["base_url"] = config["providers"]["chat"]["base_url"].replace("127.0.0.1", "localhost")
    client = start_proxy(config).openai()
    completion = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "stop"}]}
    mock.enqueue(Json(completion, headers={"Set-Cookie": "__cf_bm=tenant-a; Path=/"}))
    mock.enqueue(Json(completion))
    client.chat.completions.create(model="m", messages=MESSAGES)
    client.chat.completions.create(model="m", messages=MESSAGES)
    assert len(mock.requests) == 2 and "cookie" not in mock.requests[1].headers

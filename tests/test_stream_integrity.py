"""Stream integrity on every pair, pass-through and translated.

A stream is complete only when the source's terminal event arrives. EOF, a reset
(even in the middle of an event), a malformed event, an idle upstream or stalled
tool-call arguments give the client its own protocol's in-stream error, never
`[DONE]`, `response.completed` or `message_stop`. Long but active streams are not
cut, and a client that leaves cancels the upstream request and frees its slot.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from urllib.parse import urlsplit

import pytest
from aiohttp import web

from harness import _serve
from proxai.mock import Stream, Text, ToolCall, Turn, encode_event, render
from proxai.http.sse import SSEParser
from test_passthrough_e2e import raw_post

CHAT, RESPONSES, ANTHROPIC = "openai_chat_completions", "openai_responses", "anthropic_messages"
SHORT = {CHAT: "chat", RESPONSES: "responses", ANTHROPIC: "anthropic"}  # provider names in the test config
PATH = {CHAT: "/v1/chat/completions", RESPONSES: "/v1/responses", ANTHROPIC: "/v1/messages"}
PROTOCOLS = (CHAT, RESPONSES, ANTHROPIC)
PAIRS = [pytest.param(c, p, id=f"{SHORT[c]}<-{SHORT[p]}") for c in PROTOCOLS for p in PROTOCOLS]
TERMINAL = {CHAT: "[DONE]", RESPONSES: "response.completed", ANTHROPIC: "message_stop"}


def request_body(client: str, provider: str, stream: bool = True, **extra) -> dict:
    """A minimal valid request of `client`'s protocol routed to `provider` (model prefix)."""
    body: dict = {"model": f"{SHORT[provider]}/m", "stream": stream}
    if client == RESPONSES:
        body["input"] = "hello"
    else:
        body["messages"] = [{"role": "user", "content": "hello"}]
    if client == ANTHROPIC:
        body["max_tokens"] = 64
    body.update(extra)
    return body


def parse_stream(raw: bytes) -> list[tuple[str | None, str]]:
    parser = SSEParser()
    events = [(e.event, e.data) for e in parser.feed(raw)]
    assert parser.close().strip() == b"", "the client stream ends inside an event"
    return events


def outcome(client: str, raw: bytes) -> str:
    """'complete' or 'error' for a client stream; fails if the stream is neither, protocol-correctly."""
    events = parse_stream(raw)
    assert events, "empty stream"
    if client == CHAT:
        datas = [d for _, d in events]
        if datas[-1] == "[DONE]":
            assert not any('"error"' in d and "error" in json.loads(d) for d in datas[:-1])
            return "complete"
        assert "[DONE]" not in datas
        last = json.loads(datas[-1])
        err = last["error"]
        assert isinstance(err["message"], str) and err["message"]
        assert isinstance(err.get("status", 0), int)  # the proxy adds it; a relayed upstream error may lack it
        return "error"
    names = [name or json.loads(data).get("type") for name, data in events]
    for name, (_, data) in zip(names, events):
        assert json.loads(data)["type"] == name  # the SDKs dispatch on both
    if client == RESPONSES:
        seqs = [json.loads(d)["sequence_number"] for _, d in events]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), seqs
        if names[-1] in ("response.completed", "response.incomplete"):
            assert "error" not in names and "response.failed" not in names
            return "complete"
        assert "response.completed" not in names and "response.incomplete" not in names
        assert names[-1] == "response.failed", names
        failed = json.loads(events[-1][1])["response"]
        assert failed["status"] == "failed" and failed["error"]["message"]
        return "error"
    if names[-1] == "message_stop":
        assert "error" not in names
        return "complete"
    assert "message_stop" not in names
    assert names[-1] == "error", names
    body = json.loads(events[-1][1])
    assert body["type"] == "error" and body["error"]["type"] and body["error"]["message"]
    return "error"


def error_message(client: str, raw: bytes) -> str:
    last = json.loads(parse_stream(raw)[-1][1])
    if client == CHAT:
        return last["error"]["message"]
    if client == RESPONSES:
        return last["response"]["error"]["message"]
    return last["error"]["message"]


def stream_once(url: str, client: str, provider: str, **extra) -> tuple[int, bytes, float]:
    started = time.monotonic()
    status, _, raw = raw_post(url, PATH[client], request_body(client, provider, **extra))
    return status, raw, time.monotonic() - started


def config(harness, idle: float = 10, tool_timeout: float | None = None) -> dict:
    cfg = harness.default_config()
    for provider in cfg["providers"].values():
        provider["read_idle_timeout_secs"] = idle
    if tool_timeout is not None:
        cfg["tool_calls"] = {"timeout_secs": tool_timeout}
    return cfg


def wire(rec, turn: Turn) -> list[tuple[str | None, object]]:
    """The events a real `rec.protocol` upstream would send for `turn`."""
    return render(rec.protocol, turn, rec.body or {})


TURN = Turn([Text("The quick brown fox jumps.", chunks=["The ", "quick ", "brown ", "fox ", "jumps."])])


# --- completion and early EOF ------------------------------------------------------------------


@pytest.mark.parametrize("client, provider", PAIRS)
def test_complete_stream_ends_with_the_terminal_event(proxy, mock, client, provider):
    mock.enqueue(TURN)
    status, raw, _ = stream_once(proxy.url, client, provider)
    assert status == 200
    assert outcome(client, raw) == "complete"


@pytest.mark.parametrize("client, provider", PAIRS)
def test_eof_before_terminal_is_an_in_stream_error(proxy, mock, client, provider):
    mock.enqueue(Turn(TURN.blocks, cut_after=4))
    status, raw, _ = stream_once(proxy.url, client, provider)
    assert status == 200
    assert outcome(client, raw) == "error"
    assert "terminal" in error_message(client, raw)


@pytest.mark.parametrize("client, provider", PAIRS)
def test_reset_in_the_middle_of_an_event_is_an_in_stream_error(proxy, mock, client, provider):
    def reply(rec):
        blobs = [encode_event(name, data) for name, data in wire(rec, TURN)]
        half = len(blobs[4]) // 2
        # the connection drops half-way through the fifth event
        return Stream(raw=[*blobs[:4], blobs[4][:half], blobs[4][half:]], cut_after=5, abort=True)

    mock.enqueue(reply)
    status, raw, _ = stream_once(proxy.url, client, provider)
    assert status == 200
    assert outcome(client, raw) == "error"  # parse_stream also checks no half event reached the client


_MALFORMED = {
    CHAT: (None, '{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":"x"'),
    RESPONSES: ("response.output_text.delta", "not json at all"),
    ANTHROPIC: ("content_block_delta", '["a", "list"]'),
}


@pytest.mark.parametrize("client, provider", PAIRS)
def test_malformed_event_is_an_in_stream_error(proxy, mock, client, provider):
    def reply(rec):
        events = wire(rec, TURN)
        name, data = _MALFORMED[rec.protocol]
        return Stream(events=[*events[:3], (name, data), *events[3:]])

    mock.enqueue(reply)
    status, raw, _ = stream_once(proxy.url, client, provider)
    assert status == 200
    assert outcome(client, raw) == "error"
    assert b"not json at all" not in raw and b'"list"' not in raw  # the bad event is not relayed


@pytest.mark.parametrize("client, provider", PAIRS)
def test_upstream_error_event_mid_stream_reaches_the_client_as_an_error(proxy, mock, client, provider):
    def reply(rec):
        events = wire(rec, TURN)[:3]
        if rec.protocol == CHAT:
            events.append((None, {"error": {"message": "Overloaded", "type": "server_error", "param": None, "code": None}}))
        elif rec.protocol == RESPONSES:
            events.append(("error", {"type": "error", "code": "server_error", "message": "Overloaded", "param": None,
                                     "sequence_number": 3}))
            snapshot = {**json.loads(json.dumps(events[0][1]))["response"], "status": "failed",
                        "error": {"code": "server_error", "message": "Overloaded"}}
            events.append(("response.failed", {"type": "response.failed", "response": snapshot, "sequence_number": 4}))
        else:
            events.append(("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}))
        return Stream(events=events)

    mock.enqueue(reply)
    status, raw, _ = stream_once(proxy.url, client, provider)
    assert status == 200
    assert outcome(client, raw) == "error"
    if client == provider:
        assert raw.count(b"Overloaded") == (2 if client == RESPONSES else 1)  # relayed as sent, nothing added
    assert "Overloaded" in error_message(client, raw)


def test_responses_error_event_then_eof_in_pass_through_gets_no_second_error(proxy, mock):
    def reply(rec):
        events = wire(rec, TURN)[:3]
        events.append(("error", {"type": "error", "code": "server_error", "message": "Overloaded", "param": None,
                                 "sequence_number": 3}))
        return Stream(events=events)

    mock.enqueue(reply)
    status, raw, _ = stream_once(proxy.url, RESPONSES, RESPONSES)
    assert status == 200
    names = [name for name, _ in parse_stream(raw)]
    assert names[-1] == "error" and names.count("error") == 1 and "response.completed" not in names


# --- stalls and idle timeouts ------------------------------------------------------------------


def _first_argument_fragment(protocol: str, events) -> int:
    for i, (name, data) in enumerate(events):
        doc = data if isinstance(data, dict) else json.loads(data) if data != "[DONE]" else {}
        if protocol == ANTHROPIC and doc.get("delta", {}).get("type") == "input_json_delta":
            return i
        if protocol == RESPONSES and doc.get("type") == "response.function_call_arguments.delta":
            return i
        if protocol == CHAT:
            for choice in doc.get("choices", []):
                for call in choice.get("delta", {}).get("tool_calls") or []:
                    if call.get("function", {}).get("arguments"):
                        return i
    raise AssertionError("no argument fragment in the rendered stream")


TOOL_TURN = Turn([ToolCall("call_1", "get_weather", '{"city": "Paris"}', chunks=['{"city"', ': "Pa', 'ris"}'])])


@pytest.mark.parametrize("client, provider", PAIRS)
def test_stalled_tool_call_arguments_end_the_stream_within_the_timeout(start_proxy, harness, mock, client, provider):
    p = start_proxy(config(harness, idle=10, tool_timeout=0.3))

    def reply(rec):
        events = wire(rec, TOOL_TURN)
        return Stream(events=events, stall_after=_first_argument_fragment(rec.protocol, events) + 1, stall_secs=20)

    mock.enqueue(reply)
    status, raw, elapsed = stream_once(p.url, client, provider, tools=_tools(client))
    assert status == 200
    assert outcome(client, raw) == "error"
    assert "stalled" in error_message(client, raw)
    # Ended by the 0.3 s tool-argument timeout, not by the 10 s idle timeout or the 20 s stall
    # (bounds far apart, so a loaded machine cannot blur them).
    assert 0.3 <= elapsed < 8, elapsed


def _tools(client: str) -> list:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    if client == CHAT:
        return [{"type": "function", "function": {"name": "get_weather", "parameters": schema}}]
    if client == RESPONSES:
        return [{"type": "function", "name": "get_weather", "parameters": schema}]
    return [{"name": "get_weather", "input_schema": schema}]


@pytest.mark.parametrize("client, provider", PAIRS)
def test_idle_upstream_mid_stream_is_an_in_stream_error(start_proxy, harness, mock, client, provider):
    p = start_proxy(config(harness, idle=0.3))
    mock.enqueue(Turn(TURN.blocks, stall_after=4, stall_secs=20))
    status, raw, elapsed = stream_once(p.url, client, provider)
    assert status == 200
    assert outcome(client, raw) == "error"
    assert elapsed < 8  # the 0.3 s idle timeout ended it, not the 20 s stall


@pytest.mark.parametrize("client, provider", PAIRS)
def test_long_but_active_stream_is_never_cut(start_proxy, harness, mock, client, provider):
    p = start_proxy(config(harness, idle=0.4, tool_timeout=0.4))
    # a pause of 0.1s before every event: longer in total than either timeout, never 0.4s of silence
    mock.enqueue(Turn([Text("abcd", chunks=list("abcd"))], delay_secs=0.1))
    status, raw, elapsed = stream_once(p.url, client, provider)
    assert status == 200
    assert elapsed > 0.5
    assert outcome(client, raw) == "complete"


# --- client disconnect ---------------------------------------------------------------------------


@pytest.mark.parametrize("client, provider", PAIRS)
def test_client_disconnect_cancels_the_upstream_and_frees_the_slot(harness, start_proxy, client, provider):
    gone = threading.Event()

    async def slow(request: web.Request) -> web.StreamResponse:
        protocol = {v: k for k, v in PATH.items()}[request.path]
        events = render(protocol, TURN, {**await request.json(), "stream": True})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for name, data in events[:2]:
            await resp.write(encode_event(name, data))
        for _ in range(500):
            if request.transport is None or request.transport.is_closing():
                gone.set()
                break
            await asyncio.sleep(0.01)
        return resp

    app = web.Application()
    for path in PATH.values():
        app.router.add_post(path, slow)
    served = harness.loop.run(_serve(web.AppRunner(app, handle_signals=False)))
    try:
        cfg = harness.default_config()
        for name, provider_cfg in cfg["providers"].items():
            provider_cfg["base_url"] = served.url + ("/v1" if name != "anthropic" else "")
        p = start_proxy(cfg)
        u = urlsplit(p.url)
        sock = socket.create_connection((u.hostname, u.port), timeout=5)
        body = json.dumps(request_body(client, provider)).encode()
        sock.sendall(f"POST {PATH[client]} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n".encode()
                     + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        received = b""
        while b"data: " not in received:
            chunk = sock.recv(65536)
            assert chunk, "the proxy closed before the first event"
            received += chunk
        assert p.proxy.active == 1
        sock.close()
        assert gone.wait(3), "the upstream connection stayed open after the client left"
        deadline = time.monotonic() + 3
        while p.proxy.active and time.monotonic() < deadline:
            time.sleep(0.01)
        assert p.proxy.active == 0, "the concurrency slot was not freed"
    finally:
        harness.loop.run(served.runner.cleanup())

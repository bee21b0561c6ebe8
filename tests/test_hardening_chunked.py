"""A provider whose chunked body breaks mid-stream: `zz\\r\\n` where a chunk-size line belongs.

aiohttp's C parser drops the connection on it and cancels its own read timer, but tells
nothing to the reader of the body: unguarded, a stream waiting for its next bytes would
wait forever. The real server runs against a raw socket upstream that writes a chunked
`text/event-stream` 200, two valid events, then the bad line, and either closes or keeps
the socket open. Every client must get its protocol's error at once (the provider's idle
timeout is a minute; the clients give up after a few seconds), and the request log says
`incomplete:malformed`. Then the same before the first event (an HTTP 502), a non-streamed
body, and the idle timeout when aiohttp's timer is gone.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid

import aiohttp
import anthropic
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

import engine
from server_process import ServerProcess
from proxai.http.relay import Relay
from proxai.http.streaming import Outcome, StreamLoop

CLIENT_TIMEOUT = 5.0  # seconds a client waits; the provider's idle timeout is far longer
IDLE = 60

CHAT_EVENTS = [
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n',
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}\n\n',
]
ANTHROPIC_EVENTS = [
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message",'
    b'"role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,'
    b'"usage":{"input_tokens":3,"output_tokens":1}}}\n\n',
    b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
    b'"content_block":{"type":"text","text":""}}\n\n',
]
GEMINI_EVENTS = [
    b'data: {"candidates":[{"content":{"role":"model","parts":[{"text":"Hel"}]},"index":0}],'
    b'"modelVersion":"m","responseId":"r1"}\n\n',
    b'data: {"candidates":[{"content":{"role":"model","parts":[{"text":"lo"}]},"index":0}],'
    b'"modelVersion":"m","responseId":"r1"}\n\n',
]
JSON_BODY = b'{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":['


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class BrokenChunkUpstream:
    """A raw HTTP/1.1 upstream on 127.0.0.1. The upstream model names the behaviour:
    `<when>-<end>`: `when` is `after2` (two events, a pause, then the bad line), `burst` (the
    two events and the bad line in one write) or `first` (the bad line before any event);
    `end` is `close` or `keep` (the socket stays open until the proxy closes it)."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.ready.wait(10)
        self.url = f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            body = await reader.readexactly(length)
            path = head.split(b" ", 2)[1].decode()
            if await self._answer(path, body, writer):
                await asyncio.wait_for(reader.read(), 30)  # until the proxy closes its side
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError):
            pass
        finally:
            writer.close()

    async def _answer(self, path: str, body: bytes, writer: asyncio.StreamWriter) -> bool:
        if path.startswith("/v1beta/models/"):
            model, _, method = path[len("/v1beta/models/"):].partition("?")[0].rpartition(":")
            events, stream = GEMINI_EVENTS, method == "streamGenerateContent"
        else:
            doc = json.loads(body)
            model, stream = doc["model"], doc.get("stream", False)
            events = ANTHROPIC_EVENTS if path == "/v1/messages" else CHAT_EVENTS
        when, _, end = model.partition("-")
        kind = b"text/event-stream" if stream else b"application/json"
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: " + kind + b"\r\nTransfer-Encoding: chunked\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.05)  # the head on its own: the proxy has the 200 before the body breaks
        chunks = [_chunk(event) for event in (events if stream else [JSON_BODY])] if when != "first" else []
        if when == "burst":
            writer.write(b"".join(chunks) + b"zz\r\n")
        else:
            writer.write(b"".join(chunks))
            await writer.drain()
            await asyncio.sleep(0.3)  # the proxy has relayed what came and waits for more
            writer.write(b"zz\r\n")
        await writer.drain()
        return end == "keep"


@pytest.fixture(scope="module")
def upstream():
    up = BrokenChunkUpstream()
    yield up
    up.stop()


@pytest.fixture(scope="module")
def server(upstream, tmp_path_factory):
    config = {
        # A heartbeat a second: a translated stream that used to wait out one beat then failed as internal.
        "server": {"stream_heartbeat_secs": 1},
        "providers": {
            "chat": {"protocol": "openai_chat_completions", "base_url": upstream.url + "/v1", "api_key": "sk-chat",
                     "read_idle_timeout_secs": IDLE},
            "anthropic": {"protocol": "anthropic_messages", "base_url": upstream.url, "api_key": "sk-ant",
                          "read_idle_timeout_secs": IDLE},
            "gemini": {"protocol": "gemini_generate_content", "base_url": upstream.url, "api_key": "g-key",
                       "read_idle_timeout_secs": IDLE},
        },
        "routing": {
            "default_providers": {"openai_chat_completions": "chat", "anthropic_messages": "anthropic",
                                  "gemini_generate_content": "gemini"},
            "routes": [{"name": name, "model_pattern": f"^{name}/(.+)$", "provider": name, "upstream_model": "$1"}
                       for name in ("chat", "anthropic", "gemini")],
        },
    }
    proc = ServerProcess(tmp_path_factory.mktemp("chunked"), config)
    yield proc
    proc.stop()


def _request_record(server: ServerProcess, rid: str) -> dict:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for record in server.request_records():
            if record.get("request_id") == rid:
                return record
        time.sleep(0.05)
    raise AssertionError(f"no request log line for {rid}")


def _assert_logged_malformed(server: ServerProcess, rid: str, status: int = 200) -> None:
    record = _request_record(server, rid)
    assert record["status"] == status, record
    if status == 200:
        assert record["outcome"] == Outcome.MALFORMED.value, record
    assert not any("internal error" in str(r.get("msg", "")) for r in server.records())


def _timed(call):
    """Run `call()`; its exception and how long it took."""
    start = time.monotonic()
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the caller checks which
        return exc, time.monotonic() - start
    return None, time.monotonic() - start


ENDS = ["after2-close", "after2-keep", "burst-close"]  # after the first events
FIRST = ["first-close", "first-keep"]  # before any event


@pytest.mark.parametrize("end", ENDS)
def test_chat_pass_through_ends_with_the_chat_error_chunk(server, end):
    rid = f"chunk-chat-{end}-{uuid.uuid4().hex[:6]}"
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="k", timeout=CLIENT_TIMEOUT, max_retries=0)
    got: list = []

    def call():
        stream = client.chat.completions.create(model=f"chat/{end}", stream=True,
                                                messages=[{"role": "user", "content": "hi"}],
                                                extra_headers={"x-request-id": rid})
        got.extend(c.choices[0].delta.content for c in stream if c.choices)

    exc, took = _timed(call)
    assert isinstance(exc, openai.APIError) and not isinstance(exc, openai.APIConnectionError), repr(exc)
    assert "malformed" in exc.message and "internal error" not in exc.message
    assert got == ["", "Hel"]  # both events were relayed before the error
    assert took < CLIENT_TIMEOUT
    _assert_logged_malformed(server, rid)


@pytest.mark.parametrize("end", ENDS)
def test_anthropic_pass_through_ends_with_an_error_event(server, end):
    rid = f"chunk-ant-{end}-{uuid.uuid4().hex[:6]}"
    client = anthropic.Anthropic(base_url=server.url, api_key="k", timeout=CLIENT_TIMEOUT, max_retries=0)
    seen: list = []

    def call():
        stream = client.messages.create(model=f"anthropic/{end}", max_tokens=16, stream=True,
                                        messages=[{"role": "user", "content": "hi"}],
                                        extra_headers={"x-request-id": rid})
        seen.extend(event.type for event in stream)

    exc, took = _timed(call)
    assert isinstance(exc, anthropic.APIStatusError), repr(exc)
    assert exc.body["type"] == "error" and "malformed" in exc.body["error"]["message"]
    assert seen == ["message_start", "content_block_start"]
    assert took < CLIENT_TIMEOUT
    _assert_logged_malformed(server, rid)


@pytest.mark.parametrize("end", ENDS)
def test_translated_stream_ends_with_the_clients_error_not_an_internal_one(server, end):
    rid = f"chunk-tr-{end}-{uuid.uuid4().hex[:6]}"
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="k", timeout=CLIENT_TIMEOUT, max_retries=0)

    def call():
        stream = client.chat.completions.create(model=f"anthropic/{end}", stream=True,
                                                messages=[{"role": "user", "content": "hi"}],
                                                extra_headers={"x-request-id": rid})
        for _ in stream:
            pass

    exc, took = _timed(call)
    assert isinstance(exc, openai.APIError) and not isinstance(exc, openai.APIConnectionError), repr(exc)
    assert "malformed" in exc.message and "internal error" not in exc.message
    assert took < 1.0 + CLIENT_TIMEOUT / 2  # not after a heartbeat or more
    _assert_logged_malformed(server, rid)


def _gemini(server: ServerProcess, rid: str) -> genai.Client:
    return genai.Client(api_key="k", http_options=types.HttpOptions(
        base_url=server.url, timeout=int(CLIENT_TIMEOUT * 1000), headers={"x-request-id": rid}))


@pytest.mark.parametrize("provider", ["gemini", "anthropic"])
@pytest.mark.parametrize("end", ENDS)
def test_gemini_client_stream_ends_with_the_gemini_error_chunk(server, provider, end):
    rid = f"chunk-gem-{provider}-{end}-{uuid.uuid4().hex[:6]}"
    client = _gemini(server, rid)
    texts: list = []

    def call():
        for chunk in client.models.generate_content_stream(model=f"{provider}/{end}", contents="hi"):
            texts.append(chunk.text)

    exc, took = _timed(call)
    assert isinstance(exc, genai_errors.APIError), repr(exc)
    assert "malformed" in (exc.message or "") and "internal error" not in (exc.message or "")
    if provider == "gemini":
        assert texts == ["Hel", "lo"]  # both chunks relayed unchanged before the error
    assert took < CLIENT_TIMEOUT
    _assert_logged_malformed(server, rid)


# --- before the first event: still an HTTP error ------------------------------------------------------


@pytest.mark.parametrize("end", FIRST)
def test_bad_chunk_before_the_first_event_is_a_502_in_the_clients_shape(server, end):
    rid = f"chunk-first-{end}-{uuid.uuid4().hex[:6]}"
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="k", timeout=CLIENT_TIMEOUT, max_retries=0)

    def call():
        client.chat.completions.create(model=f"chat/{end}", stream=True,
                                       messages=[{"role": "user", "content": "hi"}],
                                       extra_headers={"x-request-id": rid})

    exc, took = _timed(call)
    assert isinstance(exc, openai.APIStatusError) and exc.status_code == 502, repr(exc)
    assert "malformed" in exc.message
    assert took < CLIENT_TIMEOUT
    _assert_logged_malformed(server, rid, status=502)


@pytest.mark.parametrize("end", FIRST)
def test_gemini_pass_through_bad_chunk_before_the_first_event_is_a_gemini_502(server, end):
    rid = f"chunk-gfirst-{end}-{uuid.uuid4().hex[:6]}"
    client = _gemini(server, rid)

    def call():
        for _ in client.models.generate_content_stream(model=f"gemini/{end}", contents="hi"):
            pass

    exc, took = _timed(call)
    assert isinstance(exc, genai_errors.APIError) and exc.code == 502, repr(exc)
    assert "malformed" in (exc.message or "")
    assert took < CLIENT_TIMEOUT
    _assert_logged_malformed(server, rid, status=502)


@pytest.mark.parametrize("end", ENDS)
def test_bad_chunk_in_a_non_streamed_body_is_a_502(server, end):
    rid = f"chunk-json-{end}-{uuid.uuid4().hex[:6]}"
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="k", timeout=CLIENT_TIMEOUT, max_retries=0)

    def call():
        client.chat.completions.create(model=f"chat/{end}", messages=[{"role": "user", "content": "hi"}],
                                       extra_headers={"x-request-id": rid})

    exc, took = _timed(call)
    assert isinstance(exc, openai.APIStatusError) and exc.status_code == 502, repr(exc)
    assert "malformed" in exc.message
    assert took < CLIENT_TIMEOUT
    _assert_logged_malformed(server, rid, status=502)


# --- the idle timeout without aiohttp's timer -----------------------------------------------------------

ANTHROPIC = "anthropic_messages"


class _SilentContent:
    """A body reader whose next bytes never come, and which no timer of aiohttp's bounds."""

    def __init__(self, ready: bytes):
        self.ready = ready
        self.error: BaseException | None = None
        self.wake = asyncio.Event()

    def read_nowait(self, n: int = -1) -> bytes:
        if self.error is not None:
            raise self.error
        data, self.ready = self.ready, b""
        return data

    async def readany(self) -> bytes:
        if self.error is None:
            await self.wake.wait()
        raise self.error

    def is_eof(self) -> bool:
        return False

    def exception(self) -> BaseException | None:
        return self.error

    def set_exception(self, exc: BaseException) -> None:
        self.error = exc
        self.wake.set()


class _Protocol:
    """An aiohttp connection whose sock_read timer was cancelled (as its parser does on failure)."""

    _read_timeout_handle = None
    connected = True

    def __init__(self):
        self.closed = asyncio.get_running_loop().create_future()
        self.failure: BaseException | None = None

    def exception(self) -> BaseException | None:
        return self.failure


class _Upstream:
    def __init__(self, content, protocol=None):
        self.content = content
        self.connection = type("Connection", (), {"protocol": protocol})() if protocol is not None else None

    def close(self):
        pass

    def release(self):
        pass


class _Client:
    def __init__(self):
        self.out = b""

    async def write(self, data: bytes) -> None:
        self.out += data


def _stream_loop(upstream, idle: float) -> StreamLoop:
    eng = engine.Engine.load()
    ctx = engine.Context(client_protocol=ANTHROPIC, provider_protocol=ANTHROPIC, provider_name="p",
                         upstream_model="m", client_body={})
    return StreamLoop(upstream, Relay(ANTHROPIC, eng, ctx), idle_timeout=idle, tool_call_timeout=idle,
                      provider_name="p", idle_guarded=True)


@pytest.mark.parametrize("with_protocol", [True, False], ids=["timer-cancelled", "no-connection"])
def test_the_idle_timeout_holds_when_aiohttps_timer_is_gone(with_protocol):
    async def go():
        protocol = _Protocol() if with_protocol else None
        loop = _stream_loop(_Upstream(_SilentContent(ANTHROPIC_EVENTS[0]), protocol), idle=0.2)
        client = _Client()
        await loop.prime()
        return await asyncio.wait_for(loop.run(client), 5), client

    outcome, client = asyncio.run(go())
    assert outcome is Outcome.IDLE_TIMEOUT
    assert b"event: error" in client.out and b"sent nothing for 0.2s" in client.out


def test_a_wait_aiohttps_timer_bounds_takes_no_timer_of_its_own(monkeypatch):
    """The common path: while aiohttp's sock_read timer is armed, a read waits on it alone."""
    timers: list = []
    real = asyncio.timeout
    monkeypatch.setattr(asyncio, "timeout", lambda delay: timers.append(delay) or real(delay))

    class Armed(_Protocol):
        _read_timeout_handle = object()

    class Content(_SilentContent):
        async def readany(self) -> bytes:
            await asyncio.sleep(0)
            return b""  # EOF

    async def go():
        loop = _stream_loop(_Upstream(Content(ANTHROPIC_EVENTS[0]), Armed()), idle=60)
        await loop.prime()
        return await loop.run(_Client())

    assert asyncio.run(go()) is Outcome.EOF
    assert timers == []


def test_a_parser_failure_the_reader_never_heard_of_ends_the_wait_as_malformed():
    """aiohttp's parser failed and dropped the connection, and the body's reader was told nothing."""
    async def go():
        protocol = _Protocol()
        content = _SilentContent(ANTHROPIC_EVENTS[0])
        loop = _stream_loop(_Upstream(content, protocol), idle=60)
        client = _Client()
        await loop.prime()
        run = asyncio.create_task(loop.run(client))
        await asyncio.sleep(0.05)  # the loop waits for the next bytes
        protocol.failure = aiohttp.http_exceptions.TransferEncodingError("Invalid character in chunk size")
        protocol.closed.set_result(None)  # connection_lost
        return await asyncio.wait_for(run, 5), client

    outcome, client = asyncio.run(go())
    assert outcome is Outcome.MALFORMED
    assert b"event: error" in client.out and b"malformed" in client.out


def test_a_lost_connection_the_reader_never_heard_of_is_a_reset():
    async def go():
        protocol = _Protocol()
        loop = _stream_loop(_Upstream(_SilentContent(ANTHROPIC_EVENTS[0]), protocol), idle=60)
        await loop.prime()
        run = asyncio.create_task(loop.run(_Client()))
        await asyncio.sleep(0.05)
        protocol.failure = aiohttp.ServerDisconnectedError()
        protocol.closed.set_result(None)
        return await asyncio.wait_for(run, 5)

    assert asyncio.run(go()) is Outcome.UPSTREAM_RESET

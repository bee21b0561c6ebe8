"""How a stream is read: the SSE parser's LF-only path, reads of what already arrived
(read_nowait, also captured), and the idle timeout left to the transport's sock_read."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

import engine
from proxai.observability import capture
from proxai.http.relay import Relay
from proxai.http.sse import SSEParser, _parse_block
from proxai.http.streaming import Outcome, StreamLoop, TranslatedStream

BLOCKS = [
    b'data: {"a":1}\n\n',
    b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\"}\n\n",
    b"event: \ndata: x\n\n",  # an empty name is no name
    b"event:tight\ndata:no space\n\n",
    b"data: line1\ndata: line2\n\n",
    b": keep-alive\n\n",
    b"id: 7\nretry: 100\n\n",
    b"event: a\ndata: 1\nid: 3\n\n",
    b"data: caf\xc3\xa9 \xe2\x98\x83\n\n",
    b"data: \xff broken utf-8\n\n",
    b"event: ping\n\n",
    b"data: [DONE]\n\n",
]


def test_lf_only_blocks_read_as_the_general_block_parser_reads_them():
    raw = b"".join(BLOCKS)
    blocks = SSEParser().feed_raw(raw)
    assert [block for block, _ in blocks] == BLOCKS
    assert [event for _, event in blocks] == [_parse_block(b[:-2]) for b in BLOCKS]


def test_lf_only_stream_split_anywhere_gives_the_same_blocks():
    raw = b"".join(BLOCKS)
    whole = SSEParser().feed_raw(raw)
    for cut in range(1, len(raw)):
        parser = SSEParser()
        got = parser.feed_raw(raw[:cut]) + parser.feed_raw(raw[cut:])
        assert got == whole, cut
        assert parser.close() == b""


def test_a_cr_held_from_an_earlier_chunk_still_ends_a_block():
    parser = SSEParser()
    assert parser.feed_raw(b"data: 1\r") == []
    # CR LF CR LF: the blank line straddles the chunks; the LF-only path must not take it.
    assert [e.data for _, e in parser.feed_raw(b"\n\r\ndata: 2\n\n")] == ["1", "2"]


class _Inner:
    def __init__(self, ready: bytes):
        self.ready = ready

    def read_nowait(self, n: int = -1) -> bytes:
        data, self.ready = self.ready, b""
        return data


def test_capture_records_what_a_stream_takes_without_waiting(tmp_path):
    cap = capture.RequestCapture(tmp_path, "req_1", frozenset({"upstream_response"}))
    cap.start("upstream_response", "HTTP/1.1 200 OK", [])
    content = capture.TeeUpstream(type("R", (), {"content": _Inner(b"data: 1\n\n")})(), cap).content
    assert content.read_nowait() == b"data: 1\n\n"
    assert content.read_nowait() == b""
    cap.close()
    path = capture.file_path(tmp_path, "req_1", "upstream_response")
    assert path.read_bytes().endswith(b"data: 1\n\n")


ANTHROPIC = "anthropic_messages"
START = (b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message",'
         b'"role":"assistant","model":"m","content":[],"stop_reason":null,"usage":{"input_tokens":3,"output_tokens":0}}}\n\n')
REST = (b'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}\n\n'
        b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
        b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1}}\n\n'
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n')


class _Content:
    """aiohttp's StreamReader as the loop uses it: `ready` is what already arrived; then each
    readany() waits for the next of `later` (an exception is raised, as sock_read's is)."""

    def __init__(self, ready: bytes, later: list):
        self.ready, self.later = ready, list(later)
        self.waits = 0

    def read_nowait(self, n: int = -1) -> bytes:
        data, self.ready = self.ready, b""
        return data

    async def readany(self) -> bytes:
        self.waits += 1
        await asyncio.sleep(0)
        item = self.later.pop(0) if self.later else b""
        if isinstance(item, BaseException):
            raise item
        return item


class _Upstream:
    def __init__(self, content):
        self.content = content
        self.closed = self.released = False

    def close(self):
        self.closed = True

    def release(self):
        self.released = True


class _Client:
    def __init__(self):
        self.out = b""

    async def write(self, data: bytes) -> None:
        self.out += data


def _loop(content, idle_timeout=60.0) -> StreamLoop:
    eng = engine.Engine.load()
    ctx = engine.Context(client_protocol=ANTHROPIC, provider_protocol=ANTHROPIC, provider_name="p",
                         upstream_model="m", client_body={})
    return StreamLoop(_Upstream(content), Relay(ANTHROPIC, eng, ctx), idle_timeout=idle_timeout,
                      tool_call_timeout=idle_timeout, provider_name="p", idle_guarded=True)


def test_what_already_arrived_is_relayed_without_a_wait():
    content = _Content(START, [REST])
    loop = _loop(content)

    async def go():
        await loop.prime()
        return await loop.run(_Client())

    assert asyncio.run(go()) is Outcome.COMPLETE
    assert content.waits == 2  # the second part, then EOF; START was taken as it was
    assert loop.observer.usage["input_tokens"] == 3


class _Writes(_Client):
    def __init__(self):
        super().__init__()
        self.writes: list[bytes] = []

    async def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        await super().write(data)


@pytest.mark.parametrize("translated", [False, True])
def test_an_opening_burst_goes_out_from_its_first_event(translated):
    """A first read holding the whole stream: prime() takes its first event only (what the
    client's first write carries), run() the rest at once, in one write, before any wait."""
    content = _Content(START + REST, [])
    eng = engine.Engine.load()
    client_protocol = "openai_chat_completions" if translated else ANTHROPIC
    ctx = engine.Context(client_protocol=client_protocol, provider_protocol=ANTHROPIC, provider_name="p",
                         upstream_model="m", client_body={})
    observer = TranslatedStream(eng.open_stream(ctx)) if translated else Relay(ANTHROPIC, eng, ctx)
    loop = StreamLoop(_Upstream(content), observer, idle_timeout=60.0, tool_call_timeout=60.0, provider_name="p",
                      idle_guarded=True)
    client = _Writes()

    async def go():
        await loop.prime()
        primed = loop.primed
        return primed, await loop.run(client)

    primed, outcome = asyncio.run(go())
    assert outcome in (Outcome.COMPLETE, Outcome.COMPLETE_WITHOUT_DONE)
    if translated:
        assert primed.startswith(b"data: ") and primed.count(b"\n\n") == 1  # message_start: the role chunk
        assert b'"content":"hi"' in client.writes[1] and client.out.endswith(b"data: [DONE]\n\n")
    else:
        assert primed == START
        assert client.writes[:2] == [START, REST]
    assert content.waits == 1  # only the EOF was waited for
    assert loop.observer.usage["input_tokens"] == 3


def test_a_cr_in_the_first_read_is_taken_whole():
    burst = (START + REST).replace(b"\n", b"\r\n")
    loop = _loop(_Content(burst, []))
    client = _Writes()

    async def go():
        await loop.prime()
        return loop.primed, await loop.run(client)

    primed, outcome = asyncio.run(go())
    assert outcome is Outcome.COMPLETE and primed == burst


def test_a_comment_before_the_first_event_is_relayed_with_it():
    loop = _loop(_Content(b": hello\n\n" + START + REST, []))

    async def go():
        await loop.prime()
        return loop.primed, await loop.run(_Client())

    primed, outcome = asyncio.run(go())
    assert outcome is Outcome.COMPLETE and primed == b": hello\n\n" + START


def test_the_transports_read_timeout_ends_a_guarded_stream_as_idle():
    content = _Content(START, [aiohttp.SocketTimeoutError("Timeout on reading data from socket")])
    loop = _loop(content, idle_timeout=0.01)
    client = _Client()

    async def go():
        await loop.prime()
        return await loop.run(client)

    assert asyncio.run(go()) is Outcome.IDLE_TIMEOUT
    assert client.out.startswith(START)
    assert b"event: error" in client.out[len(START):]


class _PacedContent:
    """Each readany() waits its item's delay, as a provider between two events does; the
    upstream's close() fails the pending read, as closing aiohttp's connection does."""

    def __init__(self, ready: bytes, later: list):
        self.ready, self.later = ready, list(later)
        self.due = None
        self.closed = asyncio.Event()

    def read_nowait(self, n: int = -1) -> bytes:
        data, self.ready = self.ready, b""
        return data

    async def readany(self) -> bytes:
        if not self.later:
            return b""
        delay, data = self.later[0]
        now = asyncio.get_running_loop().time()
        if self.due is None:  # else the rest of a wait that a timeout cut short
            self.due = now + delay
        delay = self.due - now
        closed = asyncio.ensure_future(self.closed.wait())
        try:
            done, _ = await asyncio.wait([closed], timeout=max(0.0, delay))
        finally:
            closed.cancel()
        if done:
            raise aiohttp.ClientConnectionError("Connection closed")
        self.later.pop(0)
        self.due = None
        return data


class _PacedUpstream(_Upstream):
    def close(self):
        self.closed = True
        self.content.closed.set()


def _beating_loop(content, monkeypatch, beat: float) -> tuple[StreamLoop, list]:
    """A translated-or-not stream loop with a heartbeat, whose waits aiohttp's sock_read bounds;
    the asyncio.timeout contexts it enters are counted."""
    from proxai.http.body_guard import BodyGuard

    monkeypatch.setattr(BodyGuard, "timer_bounds_wait", lambda self: True)
    timeouts = []
    real = asyncio.timeout
    monkeypatch.setattr(asyncio, "timeout", lambda delay: timeouts.append(delay) or real(delay))
    eng = engine.Engine.load()
    ctx = engine.Context(client_protocol=ANTHROPIC, provider_protocol=ANTHROPIC, provider_name="p",
                         upstream_model="m", client_body={})
    loop = StreamLoop(_PacedUpstream(content), Relay(ANTHROPIC, eng, ctx), idle_timeout=60.0,
                      tool_call_timeout=60.0, provider_name="p", idle_guarded=True, heartbeat=beat)
    return loop, timeouts


def test_heartbeats_go_out_on_one_timer_not_a_timeout_per_waiting_read(monkeypatch):
    events = REST.split(b"\n\n")[:-1]
    # five reads that wait a little, then one quiet for about three beats, then the rest
    later = [(0.01, e + b"\n\n") for e in events[:2]] + [(0.01, b": a comment\n\n")] * 3
    later += [(0.33, events[2] + b"\n\n")] + [(0.0, e + b"\n\n") for e in events[3:]]
    content = _PacedContent(START, later)
    loop, timeouts = _beating_loop(content, monkeypatch, beat=0.1)
    client = _Client()

    async def go():
        await loop.prime()
        return await loop.run(client)

    assert asyncio.run(go()) is Outcome.COMPLETE
    quiet = client.out.split(events[1] + b"\n\n", 1)[1].split(events[2], 1)[0]
    assert quiet.count(b": keep-alive\n\n") in (2, 3), quiet
    assert client.out.count(b": keep-alive\n\n") == quiet.count(b": keep-alive\n\n")  # none while events flow
    assert timeouts == []  # sock_read bounds every wait; the heartbeat is one timer, re-armed


def test_a_client_gone_at_a_heartbeat_ends_the_stream_as_disconnected(monkeypatch):
    content = _PacedContent(START, [(5.0, REST)])
    loop, _ = _beating_loop(content, monkeypatch, beat=0.05)

    class _Gone(_Client):
        async def write(self, data: bytes) -> None:
            if data.startswith(b": keep-alive"):
                raise ConnectionResetError("Cannot write to closing transport")
            self.out += data

    async def go():
        await loop.prime()
        return await asyncio.wait_for(loop.run(_Gone()), 2)

    assert asyncio.run(go()) is Outcome.CLIENT_DISCONNECTED
    assert loop.upstream.closed  # the provider's connection does not wait out the model

"""Property tests: recorded streams re-chunked at random byte boundaries give identical client output.

Recorded upstream streams of each protocol (text with multi-byte characters and a
streamed tool call) are re-encoded with LF, CRLF or CR line endings, comment and
`retry:`/`id:` lines, and JSON spread over several `data:` lines, then cut at
arbitrary byte positions (inside UTF-8 sequences, inside CRLF, between `data:`
lines). Checked at three levels: the parser, the relay (exact chunk boundaries,
pass-through and translated), and a few examples end to end through the proxy.
"""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine
from proxai.mock import Stream, Text, ToolCall, Turn, render
from proxai.http.errors import ProxyError
from proxai.http.relay import Relay
from proxai.http.streaming import StreamLoop, TranslatedStream
from proxai.http.sse import SSEParser
from test_stream_integrity import PATH, PROTOCOLS, SHORT, outcome, request_body
from test_passthrough_e2e import raw_post

TURN = Turn([
    Text("h\u00e9llo w\u00f6rld \u4e16\u754c \U0001f600!", chunks=["h\u00e9l", "lo w\u00f6rld ", "\u4e16\u754c ", "\U0001f600!"]),
    ToolCall("call_7", "lookup", '{"q": "caf\u00e9 \u2603"}', chunks=['{"q": ', '"caf\u00e9', ' \u2603"}']),
])

PAIRS = [(c, p) for c in PROTOCOLS for p in PROTOCOLS]


def recorded(provider: str, ending: str, comments: bool, multiline: bool) -> bytes:
    """One upstream stream of `provider`'s protocol, in the requested SSE dialect."""
    events = render(provider, TURN, {"model": "m", "stream": True})
    out = []
    if comments:
        out.append(f": keep-alive{ending}retry: 3000{ending}{ending}")
    for i, (name, data) in enumerate(events):
        text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        lines = [text]
        if multiline and text.startswith("{"):
            # JSON allows a newline between tokens, and data lines are joined with one
            lines = text.replace(',"', ',\n"').split("\n")
        block = f"event: {name}{ending}" if name else ""
        if comments and i % 3 == 1:
            block = f": ping{ending}id: {i}{ending}" + block
        block += "".join(f"data: {line}{ending}" for line in lines) + ending
        out.append(block)
    return "".join(out).encode()


def chunked(raw: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(raw) + 1) for c in cuts})
    return [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)]) if raw[a:b]]


_TIMES = re.compile(rb'"(created|created_at|completed_at)":\d+(\.\d+)?')


# The suffix an unstored or repeated Responses id gets (docs/responses-state.md "Responses state").
_MINTED = re.compile(rb'"(resp_[A-Za-z0-9_-]+?)_[0-9a-f]{16}"')


def normalized(out: bytes) -> bytes:
    return _MINTED.sub(rb'"\1"', _TIMES.sub(rb'"\1":0', out))


dialects = dict(
    ending=st.sampled_from(["\n", "\r\n", "\r"]),
    comments=st.booleans(),
    multiline=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=20000), max_size=40),
)


# --- parser ----------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(provider=st.sampled_from(PROTOCOLS), **dialects)
def test_parser_output_does_not_depend_on_chunk_boundaries(provider, ending, comments, multiline, cuts):
    raw = recorded(provider, ending, comments, multiline)
    whole = SSEParser()
    expected = whole.feed_raw(raw)
    assert whole.close() == b""
    parser = SSEParser()
    blocks = []
    for chunk in chunked(raw, cuts):
        blocks.extend(parser.feed_raw(chunk))
    rest = parser.close()
    assert [e for _, e in blocks if e] == [e for _, e in expected if e]
    assert b"".join(b for b, _ in blocks) + rest == raw  # every byte is accounted for, unchanged
    for _, event in expected:
        if event and event.data != "[DONE]":
            json.loads(event.data)  # complete events only, decoded as whole UTF-8


# --- relay --------------------------------------------------------------------------------------


class _Content:
    def __init__(self, chunks: list[bytes]):
        self._chunks = list(chunks)

    async def readany(self) -> bytes:
        return self._chunks.pop(0) if self._chunks else b""


class _Upstream:
    def __init__(self, chunks: list[bytes]):
        self.content = _Content(chunks)

    def release(self) -> None:
        pass

    def close(self) -> None:
        pass


class _Client:
    def __init__(self):
        self.out = bytearray()

    async def write(self, data: bytes) -> None:
        self.out += data


_ENGINE = None


def _observer(client: str, provider: str):
    global _ENGINE
    if _ENGINE is None:
        _ENGINE = engine.Engine.load()
    ctx = engine.Context(client_protocol=client, provider_protocol=provider, provider_name=SHORT[provider],
                         upstream_model="m", client_body=request_body(client, provider))
    if client == provider:
        return Relay(client, _ENGINE, ctx)
    return TranslatedStream(_ENGINE.open_stream(ctx))


def relay(client: str, provider: str, chunks: list[bytes]) -> tuple[bytes, str]:
    async def go():
        r = StreamLoop(_Upstream(chunks), _observer(client, provider), idle_timeout=5, tool_call_timeout=5,
                       provider_name="p")
        c = _Client()
        try:
            await r.prime()
        except ProxyError:
            return b"", "http_error"  # before the first event: still an ordinary HTTP error
        result = await r.run(c)
        return bytes(c.out), result

    return asyncio.run(go())


@settings(max_examples=120, deadline=None)
@given(pair=st.sampled_from(PAIRS), **dialects)
def test_relay_output_does_not_depend_on_chunk_boundaries(pair, ending, comments, multiline, cuts):
    client, provider = pair
    raw = recorded(provider, ending, comments, multiline)
    expected, result = relay(client, provider, [raw])
    assert result == "complete"
    if client == provider:
        assert expected == raw  # pass-through: byte for byte
    got, result = relay(client, provider, chunked(raw, cuts))
    assert result == "complete"
    assert normalized(got) == normalized(expected)
    assert outcome(client, got) == "complete"


@settings(max_examples=60, deadline=None)
@given(pair=st.sampled_from(PAIRS), ending=st.sampled_from(["\n", "\r\n"]),
       cut=st.integers(min_value=1, max_value=20000), inner=st.integers(min_value=0, max_value=20000))
def test_relay_cut_anywhere_is_an_error_never_a_completion(pair, ending, cut, inner):
    client, provider = pair
    raw = recorded(provider, ending, False, False)
    # the terminal event's data line; for Chat the finish chunk, since EOF after it counts as complete
    end = raw.find(b'"finish_reason":"') if provider == PROTOCOLS[0] else len(raw)
    terminal_start = raw.rfind(b"data:", 0, end)
    head = raw[: cut % terminal_start or 1]
    got, result = relay(client, provider, chunked(head, [inner]))
    if result == "http_error":
        assert SSEParser().feed(head) == []
        return
    assert result.startswith("incomplete")
    assert outcome(client, got) == "error"


# --- end to end ------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pair=st.sampled_from(PAIRS), ending=st.sampled_from(["\n", "\r\n", "\r"]),
       cuts=st.lists(st.integers(min_value=0, max_value=20000), min_size=1, max_size=30))
def test_proxy_output_does_not_depend_on_upstream_chunking(proxy, mock, pair, ending, cuts):
    client, provider = pair
    raw = recorded(provider, ending, True, True)
    outputs = []
    # Both replies carry the same upstream id; the Responses ids minted from it are compared
    # without their random suffix (normalized), and these turns are not stored.
    extra = {"store": False} if client == PROTOCOLS[1] else {}
    for chunks in ([raw], chunked(raw, cuts)):
        mock.enqueue(Stream(raw=chunks))
        status, _, out = raw_post(proxy.url, PATH[client], request_body(client, provider, **extra))
        assert status == 200
        outputs.append(out)
    if client == provider:
        # Relayed byte for byte, but for the model's value: the route renames the client's
        # model, and answers carry the client's name (response_model: client, docs/routing.md).
        model = json.dumps(request_body(client, provider)["model"]).encode()
        assert outputs[0] == re.sub(rb'"(model|modelVersion)":"m"', lambda m: b'"' + m.group(1) + b'":' + model, raw)
    assert normalized(outputs[1]) == normalized(outputs[0])
    assert outcome(client, outputs[1]) == "complete"


@pytest.mark.parametrize("client, provider", PAIRS)
def test_tool_arguments_with_split_characters_arrive_whole(proxy, mock, client, provider):
    raw = recorded(provider, "\r\n", False, False)
    mock.enqueue(Stream(raw=[raw[i:i + 3] for i in range(0, len(raw), 3)]))
    status, _, out = raw_post(proxy.url, PATH[client], request_body(client, provider))
    assert status == 200 and outcome(client, out) == "complete"
    text = out.decode("utf-8")  # never a broken character
    assert "\ufffd" not in text
    assert "\u2603" in text and "\U0001f600" in text

"""Compressed request bodies, as Codex sends them (`Content-Encoding: zstd`; gzip, deflate
and br too), against the real server process with raw aiohttp requests: decoded before
parsing toward every provider protocol, streaming and not (the provider receives the plain
JSON, without the client's Content-Encoding); the limit is the decoded size (a zip bomb is
a 413 that costs the server no more than the limit); a body that does not decode is a 400
and an unknown encoding a 415, each in the client's protocol's error shape naming the
Content-Encoding header, the provider never called."""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib

import aiohttp
import brotli
import pytest
from backports import zstd

from gemini_helpers import gemini_config
from harness import CLIENT_KEY
from proxai.mock import Text, Turn

MB = 1024 * 1024
LIMIT = 4 * MB
ROUTES = ["chat", "anthropic", "gemini", "responses"]
ENCODE = {"zstd": zstd.compress, "gzip": gzip.compress, "deflate": zlib.compress, "br": brotli.compress}
HEADERS = {"Content-Type": "application/json", "Authorization": f"Bearer {CLIENT_KEY}"}


@pytest.fixture
def server(harness, start_server, mock):
    doc = gemini_config(harness.mock_url)
    doc["server"] = {"max_request_body_bytes": LIMIT}
    return start_server(doc)


def post(server, path: str, data: bytes, encoding: str | None, extra: dict | None = None) -> tuple[int, dict | str]:
    async def go():
        headers = {**HEADERS, **(extra or {})}
        if encoding is not None:
            headers["Content-Encoding"] = encoding
        async with aiohttp.ClientSession() as session:
            async with session.post(server.url + path, data=data, headers=headers) as response:
                text = await response.text()
                try:
                    return response.status, json.loads(text)
                except ValueError:
                    return response.status, text

    return asyncio.run(go())


def codex_body(route: str, stream: bool) -> bytes:
    return json.dumps({"model": f"{route}/up-model", "stream": stream, "store": False,
                       "input": [{"type": "message", "role": "user",
                                  "content": [{"type": "input_text", "text": "List the files ünïcode"}]}]}).encode()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("route", ROUTES)
def test_a_zstd_body_is_decoded_toward_every_provider(server, mock, route, stream):
    mock.enqueue(Turn([Text("README.md")]))
    status, answer = post(server, "/v1/responses", zstd.compress(codex_body(route, stream)), "zstd")
    assert status == 200, answer
    assert "README.md" in (answer if stream else json.dumps(answer))
    [received] = mock.requests
    assert "List the files ünïcode" in received.raw.decode()  # plain JSON upstream
    assert "content-encoding" not in received.headers


@pytest.mark.parametrize("encoding", sorted(ENCODE))
def test_every_supported_encoding_is_decoded(server, mock, encoding):
    mock.enqueue(Turn([Text("README.md")]))
    status, answer = post(server, "/v1/responses", ENCODE[encoding](codex_body("anthropic", False)), encoding)
    assert status == 200 and answer["output"][0]["content"][0]["text"] == "README.md"
    assert "List the files" in json.dumps(mock.requests[0].body)


def test_other_endpoints_decode_too(server, mock):
    body = json.dumps({"model": "anthropic/up-model", "max_tokens": 50,
                       "messages": [{"role": "user", "content": "hello there"}]}).encode()
    mock.enqueue(Turn([Text("hi")]))
    status, answer = post(server, "/v1/messages", zstd.compress(body), "zstd")
    assert status == 200 and answer["content"][0]["text"] == "hi"
    status, counted = post(server, "/v1/responses/input_tokens", zstd.compress(codex_body("gemini", False)), "zstd")
    assert status == 200 and counted["input_tokens"] > 0


@pytest.mark.parametrize("encoding", sorted(ENCODE))
def test_a_body_that_does_not_decode_is_a_400_naming_the_header(server, mock, encoding):
    garbage = {"zstd": b"\x28\xb5\x2f\xfd" + b"\x00garbage" * 8, "gzip": b"\x1f\x8b\x08\x00garbage" * 8,
               "deflate": b"\x78\x9cgarbage" * 8, "br": b"\xff\xfe garbage" * 8}[encoding]
    status, answer = post(server, "/v1/responses", garbage, encoding)
    assert status == 400, answer
    assert answer["error"]["param"] == "Content-Encoding" and answer["error"]["type"] == "invalid_request_error"
    assert f"not valid {encoding} data" in answer["error"]["message"]
    assert mock.requests == []
    assert server.get("/healthz")  # the server goes on


def test_the_error_is_in_the_clients_own_shape(server, mock):
    status, answer = post(server, "/v1/messages", b"\x28\xb5\x2f\xfd-not-zstd", "zstd")
    assert status == 400 and answer["type"] == "error" and answer["error"]["type"] == "invalid_request_error"
    assert "not valid zstd data" in answer["error"]["message"]
    status, answer = post(server, "/v1/chat/completions", b"\x28\xb5\x2f\xfd-not-zstd", "zstd")
    assert status == 400 and answer["error"]["param"] == "Content-Encoding"
    assert mock.requests == []


def test_an_unknown_encoding_is_a_415(server, mock):
    status, answer = post(server, "/v1/responses", codex_body("chat", False), "lz4")
    assert status == 415 and answer["error"]["param"] == "Content-Encoding", answer
    status, answer = post(server, "/v1/responses", codex_body("chat", False), "identity")
    assert status != 415  # identity is no encoding
    assert len(mock.requests) == 1


@pytest.mark.parametrize("encoding", ["zstd", "gzip", "br"])
def test_a_zip_bomb_is_a_413_at_the_decoded_limit(server, mock, encoding):
    # 1 GB of one JSON string, a few hundred KB to a few MB compressed (under the limit)
    inflated = 1024 * MB
    head, tail = b'{"model": "chat/up-model", "input": "', b'"}'
    if encoding == "zstd":
        compressor = zstd.ZstdCompressor(level=3)
        bomb = compressor.compress(head) + b"".join(compressor.compress(b"a" * MB) for _ in range(inflated // MB))
        bomb += compressor.compress(tail) + compressor.flush()
    elif encoding == "gzip":
        compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
        bomb = compressor.compress(head) + b"".join(compressor.compress(b"a" * MB) for _ in range(inflated // MB))
        bomb += compressor.compress(tail) + compressor.flush()
    else:
        bomb = brotli.compress(head + b"a" * (inflated // 8) + tail, quality=5)
    assert len(bomb) < LIMIT
    before = server.status("VmHWM")
    status, answer = post(server, "/v1/responses", bomb, encoding)
    assert status == 413, answer
    assert f"larger than the limit of {LIMIT} bytes once decoded (Content-Encoding: {encoding})" in answer["error"]["message"]
    grown = server.status("VmHWM") - before
    assert grown < 64 * MB, f"peak RSS grew by {grown / MB:.0f} MB"
    assert mock.requests == []
    assert server.get("/healthz")

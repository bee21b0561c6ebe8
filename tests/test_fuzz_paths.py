"""Fuzz: request paths and model names built from the pieces that try to leave a path segment
(percent-escapes of `/ ? # % NUL CR LF`, `..`, raw `? #`, unicode, routing prefixes), sent to
every client endpoint. The provider only ever receives one of the paths the routing chooses
(a model or a response id stays one segment, the key never goes to another path or query),
and no input gets a 5xx from the proxy.

Requests go over a raw socket, so the request line is written byte for byte (raw UTF-8
included). The budget is bounded; under CI the examples are derandomized.
"""

from __future__ import annotations

import json
import os
import re
import socket
from urllib.parse import unquote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gemini_helpers import GEMINI_KEY, gemini_config

pytestmark = pytest.mark.fuzz

BUDGET = settings(
    max_examples=int(os.environ.get("PROXAI_FUZZ_EXAMPLES", "150")),
    deadline=None,
    derandomize=bool(os.environ.get("CI")),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

PIECES = [
    "%2F", "%2f", "/", "..", "%2E%2E", ".", "%3F", "?", "%23", "#", "%00", "%0D%0A", "%0a", "%20", "%25", "%",
    "%C3%A9", "%E2%98%83", "%F0%9F%98%80", "%FF", "\u00e9", "\u2603", ":", ";", "&", "=", "\\", "key=x", "alt=sse",
    "models/", "resp_", "chat/", "gemini/", "anthropic/", "responses/", "tunedModels/", "files/", "v1beta", "v1",
]
fragment = st.lists(st.sampled_from(PIECES) | st.text(alphabet="abcXYZ019-_.~", min_size=1, max_size=4),
                    min_size=1, max_size=8).map("".join)

GEMINI_METHODS = ("generateContent", "streamGenerateContent", "countTokens")
BODY_ENDPOINTS = {
    "/v1/chat/completions": lambda m: {"model": m, "messages": [{"role": "user", "content": "hi"}]},
    "/v1/responses": lambda m: {"model": m, "input": "hi"},
    "/v1/messages": lambda m: {"model": m, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]},
    "/v1/messages/count_tokens": lambda m: {"model": m, "messages": [{"role": "user", "content": "hi"}]},
    "/v1/responses/input_tokens": lambda m: {"model": m, "input": "hi"},
}
GEMINI_BODY = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}

# What the provider may be asked for: each protocol's own endpoints; a response id or a
# Gemini model as one segment (no `/`, `?`, `#` left unescaped in it).
ALLOWED = re.compile(
    r"/v1/chat/completions|/v1/responses|/v1/messages|/v1/messages/count_tokens|/v1/responses/input_tokens"
    r"|/v1/responses/resp_[A-Za-z0-9_-]+(/input_items)?"
    r"|/v1beta/models/[A-Za-z0-9\-._~@%]+:(generateContent|streamGenerateContent|countTokens)"
)


def config(mock_url: str) -> dict:
    cfg = gemini_config(mock_url)
    cfg["routing"]["default_providers"]["gemini_generate_content"] = "gemini"
    return cfg


@pytest.fixture(scope="module")
def served(harness):
    p = harness.start_proxy(config(harness.mock_url))
    yield p
    p.stop()


def send(url: str, method: str, path: bytes, body: bytes | None) -> tuple[int, bytes]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    head = [method.encode() + b" " + path + b" HTTP/1.1", b"Host: 127.0.0.1", b"Connection: close",
            b"Authorization: Bearer sk-client"]
    if body is not None:
        head += [b"Content-Type: application/json", b"Content-Length: " + str(len(body)).encode()]
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"\r\n".join(head) + b"\r\n\r\n" + (body or b""))
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    status_line = answer.split(b"\r\n", 1)[0]
    return int(status_line.split()[1]), answer


def requests_for(kind: str, text: str, tail: str) -> list[tuple[str, bytes, bytes | None]]:
    raw = (text + tail).encode("utf-8")
    if kind == "body":
        model = unquote(text)
        return [("POST", path.encode(), json.dumps(build(model)).encode()) for path, build in BODY_ENDPOINTS.items()]
    if kind == "gemini":
        body = json.dumps(GEMINI_BODY).encode()
        out = [("POST", f"/{v}/models/".encode() + raw + b":" + m.encode(), body)
               for v in ("v1beta", "v1") for m in GEMINI_METHODS]
        return out + [("GET", b"/v1beta/models/" + raw, None)]
    return [(method, b"/v1/responses/" + raw + suffix, None)
            for method, suffix in (("GET", b""), ("DELETE", b""), ("GET", b"/input_items"))]


@BUDGET
@given(kind=st.sampled_from(["body", "gemini", "responses_id"]),
       prefix=st.sampled_from(["", "chat/", "responses/", "anthropic/", "gemini/", "models/", "resp_"]),
       text=fragment, tail=st.sampled_from(["", "?key=stolen", "#frag", "/..", "%2F..%2Ffiles", "?alt=sse&key=x"]))
def test_the_provider_only_gets_paths_the_routing_chose(served, mock, kind, prefix, text, tail):
    start = len(mock.requests)
    for method, path, body in requests_for(kind, prefix + text, tail):
        status, answer = send(served.url, method, path, body)
        assert status < 500, (path, answer[:300])
    for got in mock.requests[start:]:
        assert ALLOWED.fullmatch(got.raw_path), got.raw_path
        if got.raw_path.startswith("/v1beta/"):
            assert got.query in ("", "alt=sse"), got.raw_path
            assert got.headers["x-goog-api-key"] == GEMINI_KEY
        assert "sk-client" not in json.dumps(got.headers)  # the client's key never goes upstream


def test_the_checks_see_what_reaches_the_provider(served, mock):
    """The fuzz's harness itself: a traversal attempt does reach the provider, escaped into the
    one segment it is, and a provider-shaped response id is forwarded as is."""
    for method, path, body in requests_for("gemini", "gemini/g%2F..%2Ffiles", "") + requests_for("responses_id", "resp_ok1", ""):
        assert send(served.url, method, path, body)[0] < 500
    paths = [(got.raw_path, got.query) for got in mock.requests]
    assert ("/v1beta/models/g%2F..%2Ffiles:generateContent", "") in paths
    assert ("/v1beta/models/g%2F..%2Ffiles:streamGenerateContent", "alt=sse") in paths
    assert ("/v1/responses/resp_ok1/input_items", "") in paths
    assert all(ALLOWED.fullmatch(path) for path, _ in paths)

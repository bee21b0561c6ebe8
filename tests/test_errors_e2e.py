"""Errors reach each client in its own protocol's shape, with the right status and headers."""

from __future__ import annotations

import threading
import time

import anthropic
import openai
import pytest

from harness import CLIENT_KEY, PROVIDER_KEYS
from proxai.mock import Error, Hang, Json, Text, Turn
from test_passthrough_e2e import MESSAGES, raw_post

RATE_HEADERS = {
    "retry-after": "7",
    "retry-after-ms": "7000",
    "x-request-id": "req_upstream_1",
    "x-ratelimit-remaining-requests": "0",
    "anthropic-ratelimit-requests-remaining": "0",
    "request-id": "req_anthropic_1",
    "set-cookie": "session=abc",
    "x-internal-trace": "node-17",
    "server": "upstream-secret-server",
}
KEPT = ("retry-after", "retry-after-ms", "x-ratelimit-remaining-requests",
        "anthropic-ratelimit-requests-remaining", "request-id")


def assert_filtered(headers) -> None:
    lower = {k.lower(): v for k, v in headers.items()}
    for name in KEPT:
        assert lower[name] == RATE_HEADERS[name], name
    # The provider's ids keep their names (each SDK reads its own); the proxy's id rides beside them.
    assert lower["x-request-id"] == RATE_HEADERS["x-request-id"]
    assert lower["x-proxai-request-id"].startswith("req_")
    assert lower["x-proxai-request-id"] not in (RATE_HEADERS["x-request-id"], RATE_HEADERS["request-id"])
    assert "set-cookie" not in lower and "x-internal-trace" not in lower
    assert lower.get("server", "") != "upstream-secret-server"
    assert lower["content-type"].startswith("application/json")


# --- upstream errors ----------------------------------------------------------------------


def test_chat_upstream_429_keeps_status_message_and_rate_headers(openai_client, mock):
    mock.enqueue(Error(429, {"error": {"message": "Slow down", "type": "requests", "param": None, "code": "rate_limit_exceeded"}},
                       headers=RATE_HEADERS))
    with pytest.raises(openai.RateLimitError) as exc_info:
        openai_client.chat.completions.create(model="m", messages=MESSAGES)
    err = exc_info.value
    assert err.status_code == 429
    assert err.body["message"] == "Slow down" and err.body["code"] == "rate_limit_exceeded"
    assert err.body["type"] == "requests"  # same protocol family: the upstream's own type is kept
    assert err.body["status"] == 429
    assert_filtered(err.response.headers)


def test_anthropic_upstream_429_and_529(anthropic_client, mock):
    mock.enqueue(Error(429, headers=RATE_HEADERS, message="Number of request tokens has exceeded your rate limit"))
    with pytest.raises(anthropic.RateLimitError) as exc_info:
        anthropic_client.messages.create(model="claude", max_tokens=5, messages=MESSAGES)
    err = exc_info.value
    assert err.body["error"] == {"type": "rate_limit_error", "message": "Number of request tokens has exceeded your rate limit"}
    assert err.body["status"] == 429
    assert_filtered(err.response.headers)

    mock.enqueue(Error(529, message="Overloaded"))
    with pytest.raises(anthropic.APIStatusError) as exc_info:
        anthropic_client.messages.create(model="claude", max_tokens=5, messages=MESSAGES)
    assert exc_info.value.status_code == 529
    assert exc_info.value.body["error"]["type"] == "overloaded_error"


def test_responses_upstream_400_keeps_param_and_code(openai_client, mock):
    mock.enqueue(Error(400, {"error": {"message": "Unsupported parameter: 'temperature'", "type": "invalid_request_error",
                                       "param": "temperature", "code": "unsupported_parameter"}}))
    with pytest.raises(openai.BadRequestError) as exc_info:
        openai_client.responses.create(model="m", input="x", temperature=0.5)
    body = exc_info.value.body
    assert (body["param"], body["code"], body["status"]) == ("temperature", "unsupported_parameter", 400)


def test_upstream_error_without_code_never_gets_one_invented(openai_client, mock):
    mock.enqueue(Error(503, {"error": {"message": "busy"}}))
    with pytest.raises(openai.InternalServerError) as exc_info:
        openai_client.chat.completions.create(model="m", messages=MESSAGES)
    body = exc_info.value.body
    assert body["code"] is None and body["param"] is None and body["message"] == "busy"
    assert exc_info.value.status_code == 503


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("<html><body>502 Bad Gateway</body></html>", "non-JSON body"),
        ("", "empty body"),
        ("upstream exploded", "upstream exploded"),
        ({"weird": "shape"}, '{"weird": "shape"}'),
    ],
)
def test_upstream_error_with_unusable_body_is_still_a_native_error(anthropic_client, mock, raw, expected):
    mock.enqueue(Error(502, raw if raw != "" else None, content_type="text/html" if isinstance(raw, str) else None))
    with pytest.raises(anthropic.APIStatusError) as exc_info:
        anthropic_client.messages.create(model="claude", max_tokens=5, messages=MESSAGES)
    err = exc_info.value
    assert err.status_code == 502
    assert err.body["type"] == "error" and err.body["error"]["type"] == "api_error"
    assert expected in err.body["error"]["message"]
    assert err.response.headers["content-type"].startswith("application/json")


def test_upstream_4xx_during_stream_request_is_an_http_error(openai_client, mock):
    mock.enqueue(Error(401, headers={"x-request-id": "req_9"}))
    with pytest.raises(openai.AuthenticationError) as exc_info:
        list(openai_client.chat.completions.create(model="m", messages=MESSAGES, stream=True))
    assert exc_info.value.request_id == "req_9"
    assert exc_info.value.response.headers["x-proxai-request-id"].startswith("req_")


def test_upstream_unreachable_is_502(start_proxy, harness):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    cfg = harness.default_config()
    cfg["providers"]["anthropic"]["base_url"] = f"http://127.0.0.1:{port}"
    p = start_proxy(cfg)
    with pytest.raises(anthropic.APIStatusError) as exc_info:
        p.anthropic().messages.create(model="claude", max_tokens=5, messages=MESSAGES)
    assert exc_info.value.status_code == 502
    assert "cannot reach provider 'anthropic'" in exc_info.value.body["error"]["message"]


def test_upstream_silent_before_first_byte_is_504(start_proxy, harness, mock):
    cfg = harness.default_config()
    cfg["providers"]["chat"]["read_idle_timeout_secs"] = 0.3
    p = start_proxy(cfg)
    for stream in (False, True):
        mock.enqueue(Hang(3))
        started = time.monotonic()
        with pytest.raises(openai.APIStatusError) as exc_info:
            r = p.openai().chat.completions.create(model="m", messages=MESSAGES, stream=stream)
            if stream:
                list(r)
        assert exc_info.value.status_code == 504
        assert time.monotonic() - started < 2.5


def test_stream_request_answered_with_json_is_an_error(openai_client, mock):
    mock.enqueue(Json({"id": "x", "object": "chat.completion"}))
    with pytest.raises(openai.APIStatusError) as exc_info:
        list(openai_client.chat.completions.create(model="m", messages=MESSAGES, stream=True))
    assert exc_info.value.status_code == 502


# --- ingress errors -------------------------------------------------------------------------


def test_oversized_body_is_413_in_each_shape(start_proxy, harness, mock):
    cfg = harness.default_config()
    cfg["server"] = {"max_request_body_bytes": 2000}
    p = start_proxy(cfg)
    big = [{"role": "user", "content": "x" * 5000}]
    with pytest.raises(anthropic.APIStatusError) as exc_info:
        p.anthropic().messages.create(model="claude", max_tokens=5, messages=big)
    assert exc_info.value.status_code == 413
    assert exc_info.value.body["error"]["type"] == "request_too_large"
    with pytest.raises(openai.APIStatusError) as exc_info:
        p.openai().chat.completions.create(model="m", messages=big)
    assert exc_info.value.status_code == 413
    assert exc_info.value.body["type"] == "invalid_request_error"
    # chunked upload without Content-Length is limited too
    import http.client
    from urllib.parse import urlsplit

    u = urlsplit(p.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    conn.request("POST", "/v1/messages", body=iter([b"{", b" " * 5000, b"}"]), encode_chunked=True,
                 headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
    assert conn.getresponse().status == 413
    conn.close()
    assert mock.requests == []  # nothing reached the upstream
    small = p.anthropic().messages.create(model="claude", max_tokens=5, messages=MESSAGES)
    assert small.content[0].type == "text"


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses", "/v1/messages"])
@pytest.mark.parametrize("payload", [b"{not json", b"[1, 2]", b"", b'{"model": 5}', b'{"model": "m", "stream": "yes"}'])
def test_malformed_request_is_400_in_the_clients_shape(proxy, mock, path, payload):
    import json

    status, headers, body = raw_post(proxy.url, path, payload)
    assert status == 400
    assert headers["content-type"].startswith("application/json")
    doc = json.loads(body)
    if path == "/v1/messages":
        assert doc["type"] == "error" and doc["error"]["type"] == "invalid_request_error" and doc["status"] == 400
    else:
        assert doc["error"]["type"] == "invalid_request_error" and doc["error"]["status"] == 400
        assert set(doc["error"]) == {"message", "type", "param", "code", "status"}
    assert mock.requests == []


def test_unknown_path_is_404_and_wrong_method_is_405(proxy):
    import json

    status, _, body = raw_post(proxy.url, "/v1/v1/messages", {"model": "m"})
    assert status == 404
    assert json.loads(body)["error"]["type"] == "not_found_error"
    status, _, body = raw_post(proxy.url, "/v1/completions", {"model": "m"})
    assert status == 404 and json.loads(body)["error"]["status"] == 404
    status, headers, body = raw_post(proxy.url, "/v1/chat/completions", b"", method="GET")
    assert status == 405 and headers["allow"] == "POST"
    assert json.loads(body)["error"]["status"] == 405
    status, _, _ = raw_post(proxy.url, "/healthz", b"", method="GET")
    assert status == 200


def test_anthropic_sdk_pointed_at_v1_gets_404(proxy):
    client = anthropic.Anthropic(base_url=proxy.url + "/v1", api_key=CLIENT_KEY, max_retries=0)
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(model="claude", max_tokens=5, messages=MESSAGES)


# --- routing errors --------------------------------------------------------------------------


def test_routing_errors_are_400_naming_model_and_protocol(start_proxy, harness, mock):
    cfg = harness.default_config()
    cfg["routing"] = {
        "default_providers": {"anthropic_messages": "anthropic"},
        "routes": [{"name": "chat-only", "model_pattern": "gpt-4o*", "request_protocol": "openai_chat_completions",
                    "provider": "chat"}],
    }
    p = start_proxy(cfg)
    client = p.openai()
    assert client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES).choices
    with pytest.raises(openai.BadRequestError) as exc_info:
        client.responses.create(model="gpt-4o-mini", input="x")
    assert "gpt-4o-mini" in exc_info.value.message and "openai_responses" in exc_info.value.message
    with pytest.raises(openai.BadRequestError) as exc_info:
        client.chat.completions.create(model="llama-3", messages=MESSAGES)
    assert "llama-3" in exc_info.value.message and "openai_chat_completions" in exc_info.value.message
    assert exc_info.value.body["param"] == "model"
    assert len(mock.requests) == 1


# --- inbound auth and admission -------------------------------------------------------------------


def test_inbound_api_keys(start_proxy, harness, mock):
    cfg = harness.default_config()
    cfg["server"] = {"api_keys": ["proxy-key-1", "proxy-key-2"]}
    p = start_proxy(cfg)
    with pytest.raises(anthropic.AuthenticationError) as exc_info:
        p.anthropic(api_key="wrong").messages.create(model="claude", max_tokens=5, messages=MESSAGES)
    assert exc_info.value.body["error"]["type"] == "authentication_error"
    with pytest.raises(openai.AuthenticationError):
        p.openai(api_key="wrong").chat.completions.create(model="m", messages=MESSAGES)
    status, _, _ = raw_post(p.url, "/v1/messages", {"model": "claude", "max_tokens": 5, "messages": MESSAGES})
    assert status == 401
    assert mock.requests == []
    # Bearer (both SDKs) and x-api-key are accepted; the proxy key never goes upstream
    p.openai(api_key="proxy-key-2").chat.completions.create(model="m", messages=MESSAGES)
    p.anthropic(api_key="proxy-key-1").messages.create(model="claude", max_tokens=5, messages=MESSAGES)
    status, _, _ = raw_post(p.url, "/v1/messages", {"model": "claude", "max_tokens": 5, "messages": MESSAGES},
                            headers={"x-api-key": "proxy-key-1"})
    assert status == 200
    for rec in mock.requests:
        assert "proxy-key" not in str(rec.headers)
    assert mock.requests[0].headers["authorization"] == f"Bearer {PROVIDER_KEYS['chat']}"
    status, _, _ = raw_post(p.url, "/healthz", b"", method="GET")
    assert status == 200


def test_max_concurrent_requests(start_proxy, harness, mock):
    cfg = harness.default_config()
    cfg["server"] = {"max_concurrent_requests": 1}
    p = start_proxy(cfg)
    mock.enqueue(Turn([Text("slow")], delay_secs=0.0, stall_after=1, stall_secs=1.0))
    done = threading.Event()

    def slow():
        list(p.openai().chat.completions.create(model="m", messages=MESSAGES, stream=True))
        done.set()

    t = threading.Thread(target=slow)
    t.start()
    deadline = time.monotonic() + 3
    while not mock.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(anthropic.APIStatusError) as exc_info:
        p.anthropic().messages.create(model="claude", max_tokens=5, messages=MESSAGES)
    assert exc_info.value.status_code == 503
    assert exc_info.value.body["error"]["type"] == "overloaded_error"
    assert exc_info.value.response.headers["retry-after"] == "1"
    t.join(5)
    assert done.is_set()
    p.anthropic().messages.create(model="claude", max_tokens=5, messages=MESSAGES)

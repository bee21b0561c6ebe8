"""Upstream faults on every client protocol, pass-through and translated: each maps per the
error rules, keeps the upstream's status and retry/rate-limit headers, and invents nothing."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time

import pytest
from aiohttp import web

from harness import CLIENT_KEY, PROVIDER_KEYS, _serve
from proxai.mock import Error, Text, Turn
from test_passthrough_e2e import raw_post
from test_stream_integrity import ANTHROPIC, CHAT, PATH, PROTOCOLS, RESPONSES, SHORT, request_body



class _RunLog(logging.Handler):
    """Every log record of the test run from collection on, at every level, for the secrets check."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    # The test's own SDK clients (HTTP and WebSocket) log whole requests, headers included,
    # at DEBUG; they are not the proxy.
    CLIENT_SIDE = ("openai", "anthropic", "httpx", "httpcore", "hypothesis", "urllib3", "websockets")

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith(self.CLIENT_SIDE):
            return
        try:
            text = record.getMessage()
        except Exception:
            text = f"{record.msg} {record.args}"
        if record.exc_info:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        fields = getattr(record, "fields", None)
        self.lines.append(f"{record.name} {text} {fields!r}" if fields else f"{record.name} {text}")


# Installed at import, i.e. at collection, before any test runs.
RUN_LOG = _RunLog()
logging.getLogger().addHandler(RUN_LOG)
logging.getLogger().setLevel(logging.DEBUG)

CLIENTS = [pytest.param(c, id=SHORT[c]) for c in PROTOCOLS]
PAIRS = [pytest.param(c, p, id=f"{SHORT[c]}<-{SHORT[p]}") for c in PROTOCOLS for p in PROTOCOLS]


def error_of(client: str, status: int, headers: dict, body: bytes) -> dict:
    """The error object of a client-protocol error answer, checked for shape."""
    assert headers["content-type"].startswith("application/json")
    doc = json.loads(body)
    if client == ANTHROPIC:
        assert doc["type"] == "error" and set(doc["error"]) == {"type", "message"}
        assert doc["status"] == status
        return doc["error"]
    assert set(doc["error"]) == {"message", "type", "param", "code", "status"}
    assert doc["error"]["status"] == status
    return doc["error"]


def post(url: str, client: str, provider: str, stream: bool = False):
    return raw_post(url, PATH[client], request_body(client, provider, stream=stream))


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _point(cfg: dict, provider: str, base: str) -> dict:
    cfg["providers"][SHORT[provider]]["base_url"] = base + ("/v1" if provider != ANTHROPIC else "")
    return cfg


# --- before any response -------------------------------------------------------------------------


@pytest.mark.parametrize("client, provider", PAIRS)
def test_connection_refused_is_502(start_proxy, harness, client, provider):
    p = start_proxy(_point(harness.default_config(), provider, f"http://127.0.0.1:{_free_port()}"))
    for stream in (False, True):
        status, headers, body = post(p.url, client, provider, stream)
        assert status == 502
        err = error_of(client, status, headers, body)
        assert f"cannot reach provider '{SHORT[provider]}'" in err["message"]
        assert "retry-after" not in headers  # never fabricated


@pytest.mark.parametrize("client", CLIENTS)
def test_dns_failure_is_502(start_proxy, harness, client):
    # .invalid never resolves (RFC 2606)
    p = start_proxy(_point(harness.default_config(), ANTHROPIC, "http://upstream.proxai-test.invalid"))
    status, headers, body = post(p.url, client, ANTHROPIC)
    assert status == 502
    message = error_of(client, status, headers, body)["message"]
    assert "cannot reach provider 'anthropic'" in message and "cannot resolve host" in message


@pytest.mark.parametrize("client", CLIENTS)
def test_tls_failure_is_502(start_proxy, harness, client):
    # an https base URL pointing at a plain-HTTP server: the TLS handshake fails
    port = harness.mock_url.rsplit(":", 1)[1]
    p = start_proxy(_point(harness.default_config(), CHAT, f"https://127.0.0.1:{port}"))
    status, headers, body = post(p.url, client, CHAT)
    assert status == 502
    message = error_of(client, status, headers, body)["message"]
    assert "cannot reach provider 'chat'" in message and "TLS handshake" in message


def _late_app(delay: float) -> web.Application:
    """An upstream that is silent for `delay` seconds before its status line, then answers normally."""
    from proxai.mock import encode_event, render

    async def late(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        protocol = {v: k for k, v in PATH.items()}[request.path]
        await asyncio.sleep(delay)
        answer = render(protocol, Turn([Text("late", chunks=["late"])]), body)
        if not body.get("stream"):
            return web.json_response(answer)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for name, data in answer:
            await resp.write(encode_event(name, data))
        return resp

    app = web.Application()
    for path in PATH.values():
        app.router.add_post(path, late)
    return app


@pytest.mark.parametrize("client, provider", [pytest.param(RESPONSES, RESPONSES, id="pass-through"),
                                              pytest.param(ANTHROPIC, RESPONSES, id="translated")])
def test_slow_first_byte_within_the_idle_timeout_is_fine_beyond_it_is_504(start_proxy, harness, client, provider):
    for delay, expected in ((0.3, 200), (1.5, 504)):
        served = harness.loop.run(_serve(web.AppRunner(_late_app(delay), handle_signals=False)))
        try:
            cfg = _point(harness.default_config(), provider, served.url)
            cfg["providers"][SHORT[provider]]["read_idle_timeout_secs"] = 0.6
            p = start_proxy(cfg)
            for stream in (False, True):
                started = time.monotonic()
                status, headers, body = post(p.url, client, provider, stream)
                assert status == expected, (delay, stream)
                if expected == 200:
                    assert b"late" in body
                else:
                    assert error_of(client, status, headers, body)["message"]
                    assert time.monotonic() - started < 1.4
        finally:
            harness.loop.run(served.runner.cleanup())


# --- reset mid-body --------------------------------------------------------------------------------


async def _truncated_json(request: web.Request) -> web.StreamResponse:
    await request.read()
    resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json", "Content-Length": "5000"})
    await resp.prepare(request)
    await resp.write(b'{"id": "x", "choices": [')
    request.transport.abort()  # reset before the promised 5000 bytes
    return resp


@pytest.mark.parametrize("client, provider", PAIRS)
def test_reset_mid_body_of_a_non_streamed_answer_is_502(harness, start_proxy, client, provider):
    app = web.Application()
    for path in PATH.values():
        app.router.add_post(path, _truncated_json)
    served = harness.loop.run(_serve(web.AppRunner(app, handle_signals=False)))
    try:
        p = start_proxy(_point(harness.default_config(), provider, served.url))
        status, headers, body = post(p.url, client, provider)
        assert status == 502
        assert error_of(client, status, headers, body)["message"]
    finally:
        harness.loop.run(served.runner.cleanup())


# --- non-2xx answers ---------------------------------------------------------------------------------


BODIES = {
    "json": ({"error": {"message": "The server had an error", "type": "server_error"}}, None, "The server had an error"),
    "empty": (None, None, "empty body"),
    "html": ("<html><head><title>502</title></head><body>Bad gateway</body></html>", "text/html", "non-JSON body"),
    "huge-html": ("<html>" + "x" * 3_000_000 + "</html>", "text/html", "non-JSON body"),
    "huge-json": ({"error": {"message": "m" * 3_000_000}}, None, "upstream returned HTTP"),
}


@pytest.mark.parametrize("kind", list(BODIES))
@pytest.mark.parametrize("status", [400, 500, 503])
@pytest.mark.parametrize("client, provider", PAIRS)
def test_non_2xx_keeps_status_and_gives_a_short_native_error(proxy, mock, client, provider, status, kind):
    raw, ctype, expected = BODIES[kind]
    mock.enqueue(Error(status, raw, content_type=ctype))
    got, headers, body = post(proxy.url, client, provider, stream=kind == "json")
    assert got == status
    err = error_of(client, status, headers, body)
    assert expected in err["message"]
    assert len(body) < 2000  # a huge upstream body is summarised, never relayed
    if kind != "json":
        assert err.get("code") is None and err.get("param") is None  # nothing invented
    assert "retry-after" not in headers


@pytest.mark.parametrize("status", [429, 529])
@pytest.mark.parametrize("client, provider", PAIRS)
def test_429_and_529_keep_retry_after_and_rate_limit_headers(proxy, mock, client, provider, status):
    upstream_headers = {"retry-after": "17", "retry-after-ms": "17000", "x-ratelimit-remaining-tokens": "0",
                        "anthropic-ratelimit-tokens-remaining": "0", "set-cookie": "a=b", "server": "upstream"}
    mock.enqueue(Error(status, headers=upstream_headers, message="slow down"))
    got, headers, body = post(proxy.url, client, provider, stream=True)
    assert got == status
    err = error_of(client, status, headers, body)
    assert err["message"] == "slow down"
    assert headers["retry-after"] == "17" and headers["retry-after-ms"] == "17000"
    assert headers["x-ratelimit-remaining-tokens"] == "0" and headers["anthropic-ratelimit-tokens-remaining"] == "0"
    assert "set-cookie" not in headers and headers.get("server") != "upstream"
    if client == ANTHROPIC:
        assert err["type"] == {429: "rate_limit_error", 529: "overloaded_error"}[status]
    elif provider != ANTHROPIC:
        assert err["type"] == {429: "rate_limit_exceeded", 529: "server_error"}[status]  # same family: kept


@pytest.mark.parametrize("client", CLIENTS)
def test_rate_limit_without_retry_after_gets_none_invented(proxy, mock, client):
    mock.enqueue(Error(429, message="slow down"))
    status, headers, body = post(proxy.url, client, CHAT)
    assert status == 429
    assert not any(name.startswith(("retry-after", "x-ratelimit", "anthropic-ratelimit")) for name in headers)


@pytest.mark.parametrize("client", CLIENTS)
def test_success_answer_that_is_not_json_is_502(proxy, mock, client):
    mock.enqueue(Error(200, "<html>ok</html>", content_type="text/html"))
    provider = ANTHROPIC if client != ANTHROPIC else CHAT  # translated: the proxy must parse it
    status, headers, body = post(proxy.url, client, provider)
    assert status == 502
    assert "not JSON" in error_of(client, status, headers, body)["message"]


# --- last: the whole run's logs ------------------------------------------------------------------


def test_no_secret_or_prompt_in_the_logs_of_the_test_run():
    """Greps every record logged by every test that ran before this one (the files before this
    one in the run, this one included) for the keys and prompt texts the suite uses."""
    from test_hostile_input import PROXY_KEYS
    from test_passthrough_e2e import MESSAGES

    secrets = [*PROVIDER_KEYS.values(), CLIENT_KEY, *PROXY_KEYS, "proxy-key-1", "proxy-key-2",
               MESSAGES[0]["content"], "SECRET-PROMPT-TEXT", "PROMPT-SECRET-6f1d"]
    assert any(line.startswith("proxai.request") for line in RUN_LOG.lines), "no request was logged: a vacuous check"
    text = "\n".join(RUN_LOG.lines)
    leaks = {secret: text.count(secret) for secret in secrets if secret in text}
    assert not leaks, (leaks, [line[:300] for line in RUN_LOG.lines if any(k in line for k in leaks)][:3])

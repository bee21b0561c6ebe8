"""A misbehaving provider, for real on loopback: redirects, slow or garbage answer heads,
pooled connections that die, non-JSON 2xx bodies, quiet translated streams."""

from __future__ import annotations

import asyncio
import http.client
import json
import time

import anthropic
import pytest
from aiohttp import web

from harness import _serve
from proxai.mock import Text, Turn
from test_passthrough_e2e import raw_post
from test_stream_integrity import ANTHROPIC, CHAT, PATH, request_body
from test_upstream_faults import _point, error_of, post


def _recording_app(seen: list) -> web.Application:
    """An upstream that records every request it gets and answers 200."""

    async def handle(request: web.Request) -> web.Response:
        seen.append({"path": request.path, "headers": dict(request.headers), "body": await request.read()})
        return web.json_response({"foreign": True})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


def _redirecting_app(status: int, target: str) -> web.Application:
    async def handle(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=status, headers={"Location": target + request.path})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


def _served(harness, app):
    return harness.loop.run(_serve(web.AppRunner(app, handle_signals=False, access_log=None)))


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("client, provider", [pytest.param(ANTHROPIC, ANTHROPIC, id="pass-through"),
                                              pytest.param(CHAT, ANTHROPIC, id="translated")])
def test_a_provider_redirect_is_never_followed(harness, start_proxy, status, client, provider):
    seen: list = []
    target = _served(harness, _recording_app(seen))  # the second port: must receive nothing
    redirector = _served(harness, _redirecting_app(status, target.url))
    try:
        p = start_proxy(_point(harness.default_config(), provider, redirector.url))
        for stream in (False, True):
            code, headers, body = post(p.url, client, provider, stream)
            assert code == 502
            message = error_of(client, code, headers, body)["message"]
            assert f"redirect (HTTP {status} to host 127.0.0.1)" in message and "never followed" in message
            assert b"foreign" not in body
        assert seen == []  # neither the provider's key nor the prompt reached the other host
    finally:
        harness.loop.run(redirector.runner.cleanup())
        harness.loop.run(target.runner.cleanup())


# --- answer heads that are slow or not HTTP -------------------------------------------------------------


async def _raw_server(handler):
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


def _start_raw(harness, handler):
    return harness.loop.run(_raw_server(handler))


def _stop_raw(harness, server) -> None:
    async def stop():
        server.close()
        await server.wait_closed()
    harness.loop.run(stop())


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + await reader.readexactly(length)


def test_an_answer_head_sent_a_byte_at_a_time_is_a_504(harness, start_proxy):
    async def trickle(reader, writer):
        try:
            await _read_request(reader)
            for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Slow: " + b"x" * 100:
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(0.1)  # each byte well within the idle timeout
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server, url = _start_raw(harness, trickle)
    try:
        cfg = _point(harness.default_config(), CHAT, url)
        cfg["providers"]["chat"]["read_idle_timeout_secs"] = 1
        p = start_proxy(cfg)
        code, headers, body = post(p.url, CHAT, CHAT)
        assert code == 504
        assert "no complete answer head" in error_of(CHAT, code, headers, body)["message"]
    finally:
        _stop_raw(harness, server)


def test_garbage_instead_of_http_is_a_protocol_error_not_unreachable(harness, start_proxy):
    async def garbage(reader, writer):
        try:
            await _read_request(reader)
            writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server, url = _start_raw(harness, garbage)
    try:
        p = start_proxy(_point(harness.default_config(), CHAT, url))
        code, headers, body = post(p.url, CHAT, CHAT)
        assert code == 502
        message = error_of(CHAT, code, headers, body)["message"]
        assert "cannot reach provider" not in message
        assert "malformed HTTP answer" in message
    finally:
        _stop_raw(harness, server)


# --- pooled connections ------------------------------------------------------------------------------------


def _chat_answer(text: str) -> bytes:
    body = json.dumps({"id": "c1", "object": "chat.completion", "created": 1, "model": "m", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}).encode()
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)) + body


def test_a_pooled_connection_the_provider_closed_is_retried_once_on_a_fresh_one(harness, start_proxy):
    """The provider answers the first request on each connection and silently closes it when a
    second one arrives (an idle timeout racing the reuse): no client may see a 502 for that."""
    connections = []

    async def once_per_connection(reader, writer):
        connections.append(writer)
        try:
            await _read_request(reader)
            writer.write(_chat_answer(f"answer {len(connections)}"))
            await writer.drain()
            await _read_request(reader)  # the reuse: close without a byte of answer
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server, url = _start_raw(harness, once_per_connection)
    try:
        p = start_proxy(_point(harness.default_config(), CHAT, url))
        for _ in range(4):
            code, _headers, body = post(p.url, CHAT, CHAT)
            assert code == 200, body
            assert json.loads(body)["choices"][0]["message"]["content"].startswith("answer ")
        assert len(connections) >= 4
    finally:
        _stop_raw(harness, server)


def test_a_failure_on_a_fresh_connection_is_not_retried(harness, start_proxy):
    attempts = []

    async def slam(reader, writer):
        attempts.append(1)
        try:
            await _read_request(reader)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        writer.close()

    server, url = _start_raw(harness, slam)
    try:
        p = start_proxy(_point(harness.default_config(), CHAT, url))
        code, headers, body = post(p.url, CHAT, CHAT)
        assert code == 502
        assert "closed the connection before answering" in error_of(CHAT, code, headers, body)["message"]
        assert len(attempts) == 1  # a POST is retried only when a reused connection failed
    finally:
        _stop_raw(harness, server)


def test_a_stream_the_client_cut_never_leaves_its_connection_in_the_pool(harness, start_proxy, mock):
    """A client drops a long stream; the next requests must get clean answers of their own,
    never the rest of the cut stream read as their response."""
    p = start_proxy()
    for round_ in range(3):
        mock.enqueue(Turn([Text("tick " * 400, chunks=["tick "] * 400)], delay_secs=0.01))
        conn = http.client.HTTPConnection("127.0.0.1", int(p.url.rsplit(":", 1)[1]), timeout=10)
        conn.request("POST", PATH[CHAT], body=json.dumps(request_body(CHAT, CHAT, stream=True)),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200
        resp.read(200)
        conn.sock.close()  # cut mid-stream
        conn.close()
        for n in range(3):
            mock.enqueue(Turn([Text(f"clean {round_}.{n}")]))
            code, _headers, body = post(p.url, CHAT, CHAT)
            assert code == 200, body
            assert json.loads(body)["choices"][0]["message"]["content"] == f"clean {round_}.{n}"


# --- bodies and headers --------------------------------------------------------------------------------------


def test_pass_through_relays_a_non_json_2xx_with_the_upstream_content_type(proxy, mock):
    from proxai.mock import Error

    mock.enqueue(Error(200, "plain words", content_type="text/plain"))
    code, headers, body = post(proxy.url, CHAT, CHAT)
    assert code == 200
    assert headers["content-type"].startswith("text/plain")
    assert body == b"plain words"


def test_an_unusable_anthropic_version_header_is_replaced_by_the_default(proxy, mock):
    import socket

    host, port = proxy.url.rsplit("//", 1)[1].split(":")
    body = json.dumps(request_body(ANTHROPIC, ANTHROPIC, stream=False)).encode()
    request = (b"POST /v1/messages HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
               b"anthropic-version: \xff\xfe\r\nanthropic-beta: ok-beta-1\r\nanthropic-beta: caf\xc3\xa9\r\n"
               b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(request)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    sent = mock.requests[-1].headers
    assert sent["anthropic-version"] == "2023-06-01"
    assert sent["anthropic-beta"] == "ok-beta-1"


def test_quiet_translated_streams_get_heartbeat_comments_and_still_parse(harness, start_proxy, mock):
    cfg = harness.default_config()
    cfg["server"] = {"stream_heartbeat_secs": 0.2}
    p = start_proxy(cfg)
    mock.enqueue(Turn([Text("after a long think")], stall_after=1, stall_secs=1.0))
    code, _headers, body = raw_post(p.url, PATH[ANTHROPIC], request_body(ANTHROPIC, CHAT, stream=True))
    assert code == 200
    assert body.count(b": keep-alive\n\n") >= 2
    assert b"event: message_stop" in body
    # the official SDK reads past the comments
    mock.enqueue(Turn([Text("after a long think")], stall_after=1, stall_secs=1.0))
    client = anthropic.Anthropic(base_url=p.url, api_key="k", max_retries=0)
    with client.messages.stream(model="chat/m", max_tokens=64, messages=[{"role": "user", "content": "hi"}]) as s:
        assert s.get_final_text() == "after a long think"
    # pass-through relays the provider's own keep-alives and adds none
    mock.enqueue(Turn([Text("quiet")], stall_after=1, stall_secs=1.0))
    code, _headers, body = raw_post(p.url, PATH[ANTHROPIC], request_body(ANTHROPIC, ANTHROPIC, stream=True))
    assert code == 200 and b": keep-alive" not in body


def test_metrics_loopback_only_accepts_an_ipv4_mapped_loopback_client():
    from proxai.http.app import _is_loopback

    assert _is_loopback("::ffff:127.0.0.1")
    assert _is_loopback("127.0.0.1") and _is_loopback("::1")
    assert not _is_loopback("::ffff:10.0.0.1") and not _is_loopback("10.0.0.1") and not _is_loopback(None)


def test_metrics_loopback_only_on_a_dual_stack_socket(harness):
    import socket

    from proxai.http.app import build_app, make_runner
    from proxai.routing.config import load_dict

    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    cfg = harness.default_config()
    cfg["server"] = {"metrics": {"loopback_only": True}}
    app = build_app(load_dict(cfg, {}))
    runner = make_runner(app)

    try:  # one socket for IPv6 and IPv4: an IPv4 client shows up as ::ffff:127.0.0.1
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(("::", 0))
    except OSError:
        pytest.skip("no dual-stack socket here")
    port = sock.getsockname()[1]

    async def start():
        await runner.setup()
        await web.SockSite(runner, sock).start()

    harness.loop.run(start())
    try:
        code, _headers, body = raw_post(f"http://127.0.0.1:{port}", "/metrics", b"", method="GET")
        assert code == 200 and b"proxai_" in body
    finally:
        harness.loop.run(runner.cleanup())

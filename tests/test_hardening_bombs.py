"""Upstream size attacks against the real server process: a gzip bomb, a long gzip stream,
one enormous SSE line. Memory is the process's peak RSS; the event loop must keep serving."""

from __future__ import annotations

import http.client
import json
import threading
import time
import zlib

import pytest
from aiohttp import web

from harness import _serve, default_config
from server_process import ServerProcess
from test_stream_integrity import CHAT, PATH, request_body

MB = 1024 * 1024


def _gzip_of_zeros(size: int) -> bytes:
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"\0" * MB
    return b"".join(comp.compress(block) for _ in range(size // MB)) + comp.flush()


def _gzip_stream(events: int) -> tuple[bytes, int]:
    event = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":'
             b'[{"index":0,"delta":{"content":"' + b"z" * 900 + b'"},"finish_reason":null}]}\n\n')
    done = b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [comp.compress(event * 1000) for _ in range(events // 1000)]
    parts += [comp.compress(done), comp.flush()]
    return b"".join(parts), len(event) * (events // 1000 * 1000) + len(done)


@pytest.fixture(scope="module")
def bomb_upstream(harness):
    bomb = _gzip_of_zeros(300 * MB)
    stream, stream_size = _gzip_stream(60_000)  # about 60 MB once inflated

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        doc = json.loads(body)
        if doc.get("stream"):
            if doc.get("user") == "long-line":  # pass-through forwards the field unchanged
                resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await resp.prepare(request)
                await resp.write(b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
                                 b'"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n')
                await resp.write(b"data: ")
                chunk = b"x" * (64 * 1024)
                try:
                    for _ in range(1600):  # 100 MB in one line
                        await resp.write(chunk)
                except (ConnectionError, RuntimeError):
                    pass
                return resp
            return web.Response(body=stream, headers={"Content-Type": "text/event-stream", "Content-Encoding": "gzip"})
        return web.Response(body=bomb, headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})

    app = web.Application(client_max_size=10 * MB)
    app.router.add_post("/v1/chat/completions", handle)
    served = harness.loop.run(_serve(web.AppRunner(app, handle_signals=False, access_log=None)))
    yield served.url, len(bomb), stream_size
    harness.loop.run(served.runner.cleanup())


@pytest.fixture
def server(harness, bomb_upstream, tmp_path):
    cfg = default_config(harness.mock_url)
    cfg["providers"]["chat"]["base_url"] = bomb_upstream[0] + "/v1"
    proc = ServerProcess(tmp_path, cfg)
    # warm up (imports, the pool) so the peak measured is the attack's
    conn = http.client.HTTPConnection("127.0.0.1", proc.port, timeout=30)
    conn.request("POST", "/v1/responses", body=json.dumps({"model": "x", "input": "hi"}),
                 headers={"Content-Type": "application/json"})
    conn.getresponse().read()
    yield proc
    proc.stop()


def _post(server: ServerProcess, stream: bool, **extra) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    conn.request("POST", PATH[CHAT], body=json.dumps(request_body(CHAT, CHAT, stream=stream, **extra)),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, data


def test_a_gzip_bomb_is_a_502_and_costs_at_most_the_cap(server, bomb_upstream):
    assert bomb_upstream[1] < 400 * 1024  # 300 MB once inflated
    before = server.status("VmHWM")
    status, body = _post(server, stream=False)
    assert status == 502
    assert "larger than server.max_upstream_body_bytes (67108864 bytes)" in json.loads(body)["error"]["message"]
    grown = server.status("VmHWM") - before
    assert grown < 160 * MB, f"peak RSS grew by {grown / MB:.0f} MB"


def test_a_long_gzip_stream_never_starves_the_event_loop(server, bomb_upstream):
    answered = []
    done = threading.Event()

    def probe() -> None:
        while not done.is_set():
            try:
                server.get("/healthz", timeout=30)
                answered.append(1)
            except OSError:
                pass

    result: list = []
    relay = threading.Thread(target=lambda: result.append(_post(server, stream=True)))
    before = server.status("VmHWM")
    relay.start()
    checker = threading.Thread(target=probe)
    checker.start()
    relay.join(300)
    in_flight_answers = len(answered)
    done.set()
    checker.join(30)
    status, body = result[0]
    # Every event relayed whole, with the client's model name in place of the upstream's (the
    # route renames chat/m to m; answers carry the client's name: response_model).
    renamed = body.count(b'"model":"chat/m"')
    assert status == 200 and body.endswith(b"data: [DONE]\n\n") and b'"model":"m"' not in body
    assert renamed > 60_000 and len(body) == bomb_upstream[2] + renamed * len("chat/")
    assert in_flight_answers >= 3  # /healthz kept being answered while 60 MB streamed through
    assert server.status("VmHWM") - before < 100 * MB


def test_one_100mb_sse_line_ends_the_stream_with_an_error_at_the_cap(server):
    before = server.status("VmHWM")
    status, body = _post(server, stream=True, user="long-line")
    assert status == 200
    events = [e for e in body.split(b"\n\n") if e.strip()]
    assert b'"content":"hi"' in events[0]
    error = json.loads(events[-1][len(b"data: "):])["error"]
    assert "larger than server.max_sse_event_bytes (16777216 bytes)" in error["message"]
    assert b"[DONE]" not in body
    grown = server.status("VmHWM") - before
    assert grown < 100 * MB, f"peak RSS grew by {grown / MB:.0f} MB"
    deadline = time.monotonic() + 10  # the summary line follows the stream's last byte
    while not (records := [r for r in server.request_records() if r.get("stream")]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert records[-1]["outcome"] == "incomplete:event_too_large"

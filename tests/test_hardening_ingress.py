"""A hostile client, for real on loopback: stalled uploads, slow and silent connections,
forged log lines, malformed credential headers, keys that are not UTF-8."""

from __future__ import annotations

import io
import json
import logging
import socket
import time

import pytest

from proxai.observability import logs

from proxai.http import serving
from test_passthrough_e2e import raw_post
from test_stream_integrity import ANTHROPIC, CHAT, PATH, request_body

SECRET = "sk-client-SECRET-4f1c"


def _addr(p) -> tuple[str, int]:
    host, port = p.url.rsplit("//", 1)[1].split(":")
    return host, int(port)


def _recv_all(sock: socket.socket, timeout: float = 10) -> bytes:
    sock.settimeout(timeout)
    out = b""
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except (ConnectionResetError, socket.timeout):
        pass
    return out


def _json_of(answer: bytes) -> dict:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower(), head
    return json.loads(body)


@pytest.fixture
def proxy_log():
    """The proxy's log lines in its human format, as a user's terminal would show them."""
    out = io.StringIO()
    handler = logs.make_handler("human", out)
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield out
    root.removeHandler(handler)
    root.setLevel(level)


# --- item 2: stalled uploads do not lock others out -----------------------------------------------------


def test_stalled_uploads_hold_no_concurrency_slot_and_time_out_with_408(harness, start_proxy, mock):
    cfg = harness.default_config()
    cfg["server"] = {"max_concurrent_requests": 2, "request_body_timeout_secs": 1.5}
    p = start_proxy(cfg)
    body = json.dumps(request_body(CHAT, CHAT, stream=False)).encode()
    stalled = []
    for _ in range(6):  # three times the concurrency limit
        s = socket.create_connection(_addr(p))
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body[: len(body) // 2])
        stalled.append(s)
    try:
        time.sleep(0.2)
        for _ in range(3):  # a normal client is served meanwhile
            status, _headers, answer = raw_post(p.url, PATH[CHAT], body)
            assert status == 200, answer
        for s in stalled:
            answer = _recv_all(s)
            assert answer.startswith(b"HTTP/1.1 408"), answer[:100]
            assert "request_body_timeout_secs" in _json_of(answer)["error"]["message"]
    finally:
        for s in stalled:
            s.close()


def test_headers_must_arrive_within_the_header_timeout(harness, start_proxy):
    cfg = harness.default_config()
    cfg["server"] = {"header_timeout_secs": 0.5, "keepalive_timeout_secs": 30}
    p = start_proxy(cfg)
    silent = socket.create_connection(_addr(p))
    slow = socket.create_connection(_addr(p))
    try:
        slow.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\n")
        for part in (b"X-A: 1\r\n", b"X-B: 2\r\n", b"X-C: 3\r\n", b"X-D: 4\r\n"):
            time.sleep(0.2)  # a byte now and then is not enough: the deadline is for the whole head
            try:
                slow.sendall(part)
            except OSError:
                break
        assert _recv_all(slow, 3) == b""  # closed without an answer
        assert _recv_all(silent, 3) == b""
        # a normal client is unaffected
        status, _headers, _body = raw_post(p.url, "/healthz", b"", method="GET")
        assert status == 200
    finally:
        silent.close()
        slow.close()


def test_an_idle_keep_alive_connection_is_closed_after_the_keep_alive_timeout(harness, start_proxy):
    cfg = harness.default_config()
    cfg["server"] = {"keepalive_timeout_secs": 0.5, "header_timeout_secs": 5}
    p = start_proxy(cfg)
    s = socket.create_connection(_addr(p))
    try:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        s.settimeout(5)
        first = s.recv(65536)
        assert first.startswith(b"HTTP/1.1 200")
        started = time.monotonic()
        assert _recv_all(s, 5) == b""  # then closed by the proxy, not by us
        assert time.monotonic() - started < 4.5
    finally:
        s.close()


# --- item 4: forged log lines --------------------------------------------------------------------------------


FORGED = "2026-01-01T00:00:00 INFO    proxai.request: request_id=forged status=200"


def test_control_characters_in_logged_values_cannot_forge_log_lines(proxy, mock, proxy_log):
    body = request_body(CHAT, CHAT, stream=False)
    body["model"] = "m\n" + FORGED
    raw_post(proxy.url, PATH[CHAT], body)
    raw_post(proxy.url, "/nope%0a" + FORGED.replace(" ", "%20") + "%0d%1b[31m", b"{}")  # a 404, no key needed
    lines = proxy_log.getvalue().splitlines()
    assert lines and not any(line.startswith(FORGED[:20]) for line in lines)
    assert not any("\x1b" in line or "\r" in line for line in lines)
    joined = "\n".join(lines)
    assert "\\n2026-01-01T00:00:00" in joined  # the value is there, escaped


def test_json_log_lines_stay_one_per_line(proxy, mock, proxy_log):
    out = io.StringIO()
    handler = logs.make_handler("json", out)
    logging.getLogger().addHandler(handler)
    try:
        raw_post(proxy.url, "/nope%0a" + FORGED.replace(" ", "%20"), b"{}")
    finally:
        logging.getLogger().removeHandler(handler)
    lines = out.getvalue().splitlines()
    assert lines
    for line in lines:
        json.loads(line)


# --- item 5: malformed header lines ---------------------------------------------------------------------------


MALFORMED = [
    pytest.param(b"Authorization: Bearer " + SECRET.encode() + b"\x00\r\n", id="nul-in-authorization"),
    pytest.param(b"x-api-key: " + SECRET.encode() + b"\x7f\r\n", id="del-in-x-api-key"),
    pytest.param(b"Cookie " + SECRET.encode() + b"\r\n", id="cookie-without-colon"),
    pytest.param(b"Authorization: Bearer " + SECRET.encode() * 1000 + b"\r\n", id="authorization-too-long"),
]


@pytest.mark.parametrize("line", MALFORMED)
@pytest.mark.parametrize("client", [CHAT, ANTHROPIC])
def test_a_malformed_header_line_is_a_native_400_that_echoes_and_logs_nothing(proxy, mock, caplog, client, line):
    serving._malformed_log._last = float("-inf")  # this test's first refusal is logged
    caplog.set_level(logging.DEBUG)
    answers = []
    for _ in range(3):
        with socket.create_connection(_addr(proxy)) as s:
            s.sendall(f"POST {PATH[client]} HTTP/1.1\r\nHost: x\r\n".encode() + line + b"Content-Length: 2\r\n\r\n{}")
            answers.append(_recv_all(s))
    for answer in answers:
        assert answer.startswith((b"HTTP/1.1 400", b"HTTP/1.0 400")), answer[:100]
        assert SECRET.encode() not in answer
        doc = _json_of(answer)
        if client == ANTHROPIC:
            assert doc["type"] == "error" and doc["error"]["type"] == "invalid_request_error"
        else:
            assert doc["error"]["type"] == "invalid_request_error"
        assert "malformed HTTP request" in (doc["error"]["message"])
    assert mock.requests == []
    records = [r for r in caplog.records if r.name.startswith(("proxai", "aiohttp"))]
    assert not any(r.exc_info for r in records)
    text = "\n".join(r.getMessage() for r in records)
    assert SECRET not in text
    refusals = [r for r in records if "malformed HTTP request" in r.getMessage()]
    assert len(refusals) == 1  # three refusals, one line


# --- item 6: a key that is not UTF-8 ------------------------------------------------------------------------------


@pytest.mark.parametrize("header", [b"x-api-key: caf\xff\xfe", b"Authorization: Bearer \xc3\x28\xa0\xa1"])
def test_a_client_key_that_is_not_utf8_is_a_401(harness, start_proxy, mock, caplog, header):
    cfg = harness.default_config()
    cfg["server"] = {"api_keys": ["good-key"]}
    p = start_proxy(cfg)
    body = json.dumps(request_body(ANTHROPIC, ANTHROPIC, stream=False)).encode()
    with socket.create_connection(_addr(p)) as s:
        s.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + header +
                  b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        answer = _recv_all(s)
    assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
    assert _json_of(answer)["error"]["type"] == "authentication_error"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR and r.name.startswith("proxai")]
    assert mock.requests == []


# --- many clients at once: the connection cap ----------------------------------------------------------------------


def test_past_the_connection_cap_idle_connections_make_room_for_real_clients(harness, start_proxy, mock, caplog):
    cfg = harness.default_config()
    cfg["server"] = {"max_connections": 8, "header_timeout_secs": 30}
    p = start_proxy(cfg)
    silent = [socket.create_connection(_addr(p)) for _ in range(20)]
    try:
        time.sleep(0.2)
        for _ in range(3):
            status, _headers, _body = raw_post(p.url, PATH[CHAT], request_body(CHAT, CHAT, stream=False))
            assert status == 200
        closed = sum(1 for s in silent if _recv_all(s, 0.5) == b"")
        assert closed >= 12  # the oldest idle ones were closed to stay within the cap
        assert any("server.max_connections (8) reached" in r.getMessage() for r in caplog.records)
    finally:
        for s in silent:
            s.close()


# --- item 7: a word when descriptors run out ----------------------------------------------------------------------


def test_running_out_of_file_descriptors_is_logged_once_per_interval(caplog):
    import os

    serving._fd_log._last = float("-inf")
    used = len(os.listdir("/proc/self/fd"))
    with caplog.at_level(logging.ERROR, logger="proxai"):
        assert not serving.fds_nearly_exhausted(limit=used + 1000)
        assert serving.fds_nearly_exhausted(limit=used + 2)
        assert serving.fds_nearly_exhausted(limit=used + 2)  # folded into the next line, not logged again
    lines = [r.getMessage() for r in caplog.records if "out of file descriptors" in r.getMessage()]
    assert lines == [f"out of file descriptors (open-file limit {used + 2}): new connections wait until some "
                     "close; raise `ulimit -n` or lower server.max_connections"]


def test_a_failed_accept_for_lack_of_descriptors_becomes_one_clear_line(caplog):
    import asyncio
    import errno

    serving._fd_log._last = float("-inf")
    loop = asyncio.new_event_loop()
    try:
        serving.install_fd_exhaustion_log(loop)
        with caplog.at_level(logging.ERROR):
            for _ in range(5):  # what asyncio reports on each failed accept()
                loop.call_exception_handler({"message": "socket.accept() out of system resource",
                                             "exception": OSError(errno.EMFILE, "Too many open files")})
    finally:
        loop.close()
    records = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(records) == 1 and "out of file descriptors" in records[0].getMessage()
    assert not records[0].exc_info

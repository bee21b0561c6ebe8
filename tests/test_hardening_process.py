"""The real server process under stress: SIGTERM during open streams (one and two workers),
silent connections under a low open-file limit, and a bounded soak of mixed faults."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time

from harness import default_config
from proxai.mock import Error, Text, Turn
from server_process import ServerProcess
from test_stream_integrity import ANTHROPIC, CHAT, PATH, RESPONSES, request_body


def _config(harness, **server) -> dict:
    cfg = default_config(harness.mock_url)
    cfg["server"] = server
    return cfg


def _long_turn() -> Turn:
    return Turn([Text("tick " * 200, chunks=["tick "] * 200)], delay_secs=0.1)  # about 20 s


class StreamReader(threading.Thread):
    """POSTs one streaming request and reads the answer to its end in the background."""

    def __init__(self, url: str, client: str, provider: str):
        super().__init__(daemon=True)
        host, port = url.rsplit("//", 1)[1].split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=60)
        self.body = json.dumps(request_body(client, provider, stream=True))
        self.client = client
        self.status: int | None = None
        self.data = b""
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.conn.request("POST", PATH[self.client], body=self.body, headers={"Content-Type": "application/json"})
            resp = self.conn.getresponse()
            self.status = resp.status
            while chunk := resp.read1(65536):
                self.data += chunk
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def _assert_ended_with_shutdown_error(reader: StreamReader) -> None:
    assert reader.status == 200, (reader.status, reader.error)
    text = reader.data.decode()
    assert "shutting down" in text, text[-500:]
    if reader.client == CHAT:
        assert "[DONE]" not in text
        last = [line for line in text.split("\n\n") if line.strip()][-1]
        assert json.loads(last[len("data: "):])["error"]["message"].startswith("the proxy is shutting down")
    elif reader.client == ANTHROPIC:
        assert "event: error" in text and "event: message_stop" not in text
    else:
        assert "event: error" in text and "event: response.failed" in text and "response.completed" not in text


def _wait_for_requests(mock, count: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while len(mock.requests) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(mock.requests) >= count
    time.sleep(0.5)  # and their first events on the way to the clients


def test_sigterm_drains_short_streams_and_ends_long_ones_with_the_protocol_error(harness, mock, tmp_path):
    server = ServerProcess(tmp_path, _config(harness, shutdown_timeout_secs=1.5))
    try:
        mock.enqueue(Turn([Text("quick " * 5, chunks=["quick "] * 5)], delay_secs=0.2))
        short = StreamReader(server.url, CHAT, CHAT)
        short.start()
        _wait_for_requests(mock, 1, 20)
        readers = []
        for client, provider in ((CHAT, CHAT), (ANTHROPIC, CHAT), (RESPONSES, ANTHROPIC), (ANTHROPIC, ANTHROPIC)):
            mock.enqueue(_long_turn())
            readers.append(StreamReader(server.url, client, provider))
            readers[-1].start()
        _wait_for_requests(mock, 5)
        started = time.monotonic()
        server.terminate()
        server.proc.wait(30)
        took = time.monotonic() - started
        for reader in [short, *readers]:
            reader.join(10)
        assert short.status == 200 and b"[DONE]" in short.data  # finished within the drain
        for reader in readers:
            _assert_ended_with_shutdown_error(reader)
        outcomes = sorted(r.get("outcome") for r in server.request_records())
        assert outcomes == ["complete"] + ["incomplete:shutdown"] * 4
        assert took < 15  # the drain deadline, not aiohttp's 60 s per connection
    finally:
        server.stop()


def test_two_workers_drain_in_parallel_and_log_every_request(harness, mock, tmp_path):
    server = ServerProcess(tmp_path, _config(harness, shutdown_timeout_secs=1.5), workers=2)
    try:
        pids = set()
        for _ in range(50):
            pids.add(json.loads(server.get("/healthz"))["pid"])
            if len(pids) == 2:
                break
        readers = []
        for client in (CHAT, ANTHROPIC, RESPONSES, CHAT, ANTHROPIC, RESPONSES):
            mock.enqueue(_long_turn())
            readers.append(StreamReader(server.url, client, CHAT))
            readers[-1].start()
        _wait_for_requests(mock, 6)
        started = time.monotonic()
        server.terminate()
        server.proc.wait(40)
        took = time.monotonic() - started
        for reader in readers:
            reader.join(10)
            _assert_ended_with_shutdown_error(reader)
        records = server.request_records()
        assert sorted(r.get("outcome") for r in records) == ["incomplete:shutdown"] * 6
        assert took < 20
        assert not any("killing it" in r.get("msg", "") for r in server.records())
    finally:
        server.stop()


def test_silent_connections_under_a_low_fd_limit_do_not_take_the_proxy_down(harness, mock, tmp_path):
    server = ServerProcess(tmp_path, _config(harness, header_timeout_secs=60), nofile=256)
    silent: list[socket.socket] = []
    try:
        for _ in range(300):
            silent.append(socket.create_connection(("127.0.0.1", server.port)))
        time.sleep(0.5)
        assert server.fds() < 256
        assert json.loads(server.get("/healthz"))["status"] == "ok"
        host, port = "127.0.0.1", server.port
        for _ in range(3):
            conn = http.client.HTTPConnection(host, port, timeout=10)
            conn.request("POST", PATH[CHAT], body=json.dumps(request_body(CHAT, CHAT, stream=False)),
                         headers={"Content-Type": "application/json"})
            assert conn.getresponse().status == 200
            conn.close()
        messages = [r.get("msg", "") for r in server.records()]
        assert any("server.max_connections lowered from 1024" in m and "open-file limit of 256" in m for m in messages)
        assert any("server.max_connections" in m and "reached" in m for m in messages)
    finally:
        for s in silent:
            s.close()
        server.stop()


# --- the soak -------------------------------------------------------------------------------------------


def _one_round(server: ServerProcess, mock, rnd: int) -> None:
    host, port = "127.0.0.1", server.port
    replies = []
    for i in range(6):
        replies += [
            Turn([Text(f"ok {rnd}.{i}")]),
            Turn([Text("cut " * 20, chunks=["cut "] * 20)], cut_after=4),
            Error(500),
            Error(429, headers={"retry-after": "1"}),
            Turn([Text("slow " * 40, chunks=["slow "] * 40)], delay_secs=0.02),
        ]
    mock.enqueue(*replies)
    threads = []

    def stream_and_leave(client: str, provider: str) -> None:
        conn = http.client.HTTPConnection(host, port, timeout=20)
        try:
            conn.request("POST", PATH[client], body=json.dumps(request_body(client, provider, stream=True)),
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read1(100)
        except OSError:
            pass
        finally:
            conn.sock and conn.sock.close()
            conn.close()

    def full(client: str, provider: str, stream: bool) -> None:
        conn = http.client.HTTPConnection(host, port, timeout=20)
        try:
            conn.request("POST", PATH[client], body=json.dumps(request_body(client, provider, stream=stream)),
                         headers={"Content-Type": "application/json"})
            conn.getresponse().read()
        except OSError:
            pass
        finally:
            conn.close()

    def malformed() -> None:
        with socket.create_connection((host, port), timeout=10) as s:
            s.sendall(b"POST /v1/messages HTTP/1.1\r\nx-api-key: a\x00b\r\n\r\n")
            s.recv(65536)

    def stalled_upload() -> None:
        with socket.create_connection((host, port), timeout=10) as s:
            s.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n{\"mo")
            s.recv(65536)  # the 408, after request_body_timeout_secs

    clients = (CHAT, RESPONSES, ANTHROPIC)
    for i in range(30):
        client, provider = clients[i % 3], clients[(i // 3) % 3]
        kind = i % 5
        if kind == 0:
            t = threading.Thread(target=stream_and_leave, args=(client, provider))
        elif kind == 1:
            t = threading.Thread(target=malformed)
        elif kind == 2:
            t = threading.Thread(target=stalled_upload)
        else:
            t = threading.Thread(target=full, args=(client, provider, kind == 3))
        threads.append(t)
        t.start()
    for t in threads:
        t.join(30)


def _own_fds(server: ServerProcess) -> int:
    """Open fds minus the provider connections kept in the pool (bounded by the pool, reused)."""
    pooled = sum(1 for local, remote in server.sockets() if remote and local != server.port)
    return server.fds() - pooled


def _settled(server: ServerProcess, baseline_fds: int, timeout: float = 20) -> tuple[float, int]:
    deadline = time.monotonic() + timeout
    while True:
        in_flight, fds = server.in_flight(), _own_fds(server)
        if (in_flight == 0 and fds <= baseline_fds) or time.monotonic() > deadline:
            return in_flight, fds
        time.sleep(0.2)


def test_soak_of_mixed_faults_and_disconnects_returns_to_baseline(harness, mock, tmp_path):
    server = ServerProcess(tmp_path, _config(harness, request_body_timeout_secs=1, keepalive_timeout_secs=1,
                                             header_timeout_secs=1))
    try:
        _one_round(server, mock, 0)  # warm up: imports, pools, caches
        time.sleep(1.5)
        mock.reset()
        base_fds = _settled(server, 10_000)[1]
        base_rss = server.status("VmRSS")
        for rnd in range(1, 5):
            _one_round(server, mock, rnd)
            time.sleep(1.5)  # keep-alive timeouts close the clients' idle connections
            mock.reset()
            in_flight, fds = _settled(server, base_fds)
            assert in_flight == 0, f"round {rnd}: {in_flight} requests still in flight"
            assert fds <= base_fds, f"round {rnd}: {fds} fds open, {base_fds} at baseline"
            clients = [local for local, remote in server.sockets() if local == server.port and remote]
            assert clients == [], f"round {rnd}: {len(clients)} client connections still open"
        rss = server.status("VmRSS")
        assert rss - base_rss < 40 * 1024 * 1024, f"RSS grew by {(rss - base_rss) / 1e6:.1f} MB"
        assert server.proc.poll() is None
        statuses = {r.get("status") for r in server.request_records()}
        assert {200, 408, 429, 500} <= statuses
        assert any("refused a malformed HTTP request" in r.get("msg", "") for r in server.records())
    finally:
        server.stop()

"""/readyz is this pod's readiness: a real server process whose shared store (a real
redis-server) is down starts anyway, stays ready with the store shown as degraded,
serves everything that needs no store, answers stateful Responses requests with a
503 in the Responses shape, and reconnects on its own when Redis comes back.
With `state.required_for_readiness` the pod is not ready while the store is down."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

from bench.redis_server import RedisServer
from harness import default_config
from server_process import ServerProcess, free_port

pytestmark = pytest.mark.skipif(RedisServer.available() is None, reason="redis-server is not installed")

KEY = "client-key"


def config(harness, redis_port: int, **state) -> dict:
    cfg = default_config(harness.mock_url)
    cfg["state"] = {"backend": "redis", "url": f"redis://127.0.0.1:{redis_port}/0", **state}
    return cfg


def call(srv: ServerProcess, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(srv.url + path, data=data, method=method, headers={
        "Authorization": f"Bearer {KEY}", "Content-Type": "application/json", "Connection": "close"})
    try:
        with urllib.request.urlopen(req, timeout=15) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def readyz(srv: ServerProcess) -> tuple[int, dict]:
    return call(srv, "GET", "/readyz")


def store_up(srv: ServerProcess) -> float:
    for line in srv.get("/metrics").decode().splitlines():
        if line.startswith('proxai_state_store_up{backend="redis"}'):
            return float(line.split()[-1])
    raise KeyError("proxai_state_store_up")


def wait_for(predicate, timeout: float = 40.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError("timed out")


def state_lines(srv: ServerProcess, level: str, words: str) -> list[dict]:
    return [r for r in srv.records() if r.get("logger") == "proxai.state" and r.get("level") == level
            and words in r.get("msg", "")]


def chat(srv: ServerProcess) -> int:
    return call(srv, "POST", "/v1/chat/completions",
                {"model": "chat/m", "messages": [{"role": "user", "content": "hi"}]})[0]


def responses(srv: ServerProcess, **body) -> tuple[int, dict]:
    return call(srv, "POST", "/v1/responses", {"model": "chat/m", "input": "hi", **body})


@pytest.fixture
def started(tmp_path):
    servers: list = []
    yield servers
    for s in servers:
        s.stop()


def assert_state_unavailable(status: int, body: dict) -> None:
    assert status == 503, body
    error = body["error"]
    assert set(error) >= {"message", "type", "code"}  # OpenAI's error object, not Anthropic's
    assert "state store is unavailable" in error["message"]
    assert "127.0.0.1" not in error["message"]  # where the store is goes to the log, not to clients


def test_a_pod_whose_redis_is_down_starts_serves_and_reconnects(harness, mock, tmp_path, started):
    redis_port = free_port()
    srv = ServerProcess(tmp_path, config(harness, redis_port))  # nothing listens on redis_port
    started.append(srv)

    status, body = readyz(srv)
    assert status == 200 and body["status"] == "ready", body
    assert body["checks"]["rules"] == "ok" and body["checks"]["state_store"].startswith("degraded: ")
    assert "generation" in body
    assert store_up(srv) == 0
    assert chat(srv) == 200
    assert responses(srv, store=False)[0] == 200
    assert_state_unavailable(*responses(srv))
    assert_state_unavailable(*responses(srv, previous_response_id="resp_abc", store=False))
    assert_state_unavailable(*call(srv, "GET", "/v1/responses/resp_abc"))
    assert_state_unavailable(*call(srv, "DELETE", "/v1/responses/resp_abc"))
    (down,) = state_lines(srv, "warning", "is down")
    assert f"127.0.0.1:{redis_port}" in down["msg"]

    redis = RedisServer(tmp_path / "redis")
    redis.port, redis.url = redis_port, f"redis://127.0.0.1:{redis_port}/0"
    redis.start()
    try:
        wait_for(lambda: readyz(srv)[1]["checks"]["state_store"] == "ok")
        assert store_up(srv) == 1
        assert len(state_lines(srv, "info", "is back")) == 1
        status, first = responses(srv)
        assert status == 200, first
        status, second = responses(srv, previous_response_id=first["id"])
        assert status == 200, second
        assert call(srv, "GET", f"/v1/responses/{first['id']}")[0] == 200
    finally:
        redis.stop()

    wait_for(lambda: readyz(srv)[1]["checks"]["state_store"].startswith("degraded: "), timeout=15)
    assert readyz(srv)[0] == 200 and store_up(srv) == 0
    assert_state_unavailable(*responses(srv, previous_response_id=first["id"]))
    assert chat(srv) == 200
    assert len(state_lines(srv, "warning", "is down")) == 2  # once per change, not per reconnect attempt


def test_required_for_readiness_makes_the_pod_unready_while_the_store_is_down(harness, mock, tmp_path, started):
    redis_port = free_port()
    srv = ServerProcess(tmp_path, config(harness, redis_port, required_for_readiness=True))
    started.append(srv)
    status, body = readyz(srv)
    assert status == 503 and body["status"] == "not_ready", body
    assert body["checks"]["rules"] == "ok"
    assert body["checks"]["state_store"].startswith("cannot reach the redis state backend")
    assert chat(srv) == 200  # not ready is advice to the load balancer: what arrives is still served

    redis = RedisServer(tmp_path / "redis")
    redis.port, redis.url = redis_port, f"redis://127.0.0.1:{redis_port}/0"
    redis.start()
    try:
        wait_for(lambda: readyz(srv)[0] == 200)
        assert readyz(srv)[1]["checks"]["state_store"] == "ok"
    finally:
        redis.stop()

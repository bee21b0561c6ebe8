"""OpenTelemetry tracing, checked with the SDK's in-memory exporter: spans, GenAI attributes,
W3C trace context in from the client and out to the provider, and nothing secret in any span."""

from __future__ import annotations

import json
import logging
import sys
import time

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

from harness import CLIENT_KEY, PROVIDER_KEYS  # noqa: E402
from proxai.observability import tracing  # noqa: E402
from proxai.routing.config import TracingConfig, load_dict  # noqa: E402
from proxai.mock import Error, Text, Turn, Usage  # noqa: E402
from test_passthrough_e2e import raw_post  # noqa: E402

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
PROMPT = "SECRET-PROMPT-TEXT"
MESSAGES = [{"role": "user", "content": PROMPT}]


@pytest.fixture
def exporter():
    return InMemorySpanExporter()


@pytest.fixture
def traced(harness, start_proxy, exporter):
    doc = harness.default_config()
    doc["tracing"] = {"enabled": True, "exporter": "none"}
    p = start_proxy(doc)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    p.proxy.tracing = tracing.setup(p.proxy.config.tracing, provider=provider)
    return p


def by_name(spans) -> dict:
    return {s.name: s for s in spans}


def finished(exporter, count: int, timeout: float = 5.0) -> dict:
    """The finished spans by name, once `count` have ended: a stream's spans end after its last
    byte, which the client may have read a moment before."""
    deadline = time.monotonic() + timeout
    while len(exporter.get_finished_spans()) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return by_name(exporter.get_finished_spans())


def assert_nothing_secret(spans) -> None:
    text = json.dumps([dict(s.attributes) for s in spans] + [s.name for s in spans])
    for secret in (PROMPT, CLIENT_KEY, *PROVIDER_KEYS.values()):
        assert secret not in text


def test_translated_request_spans_and_trace_context(traced, mock, exporter):
    mock.enqueue(Turn([Text("Bonjour")], usage=Usage(input_tokens=11, output_tokens=4), model="claude-x-2026"))
    status, _, _ = raw_post(traced.url, "/v1/chat/completions",
                            {"model": "anthropic/claude-x", "messages": MESSAGES, "max_tokens": 20},
                            {"traceparent": TRACEPARENT, "Authorization": f"Bearer {CLIENT_KEY}"})
    assert status == 200
    spans = finished(exporter, 4)
    assert set(spans) == {"POST /v1/chat/completions", "translate request", "chat claude-x", "translate response"}
    root, upstream = spans["POST /v1/chat/completions"], spans["chat claude-x"]
    # The client's trace is continued, and each child hangs off the request span.
    assert format(root.context.trace_id, "032x") == TRACE_ID and format(root.parent.span_id, "016x") == PARENT_ID
    assert root.kind == SpanKind.SERVER and upstream.kind == SpanKind.CLIENT
    for name in ("translate request", "chat claude-x", "translate response"):
        assert spans[name].parent.span_id == root.context.span_id
        assert spans[name].context.trace_id == root.context.trace_id
    # The provider got a traceparent naming the upstream span.
    sent = mock.requests[-1].headers["traceparent"]
    assert sent == f"00-{TRACE_ID}-{format(upstream.context.span_id, '016x')}-01"
    assert upstream.attributes["gen_ai.system"] == "anthropic"
    assert upstream.attributes["gen_ai.operation.name"] == "chat"
    assert upstream.attributes["gen_ai.request.model"] == "claude-x"
    assert upstream.attributes["gen_ai.response.model"] == "claude-x-2026"
    assert upstream.attributes["gen_ai.usage.input_tokens"] == 11
    assert upstream.attributes["gen_ai.usage.output_tokens"] == 4
    assert tuple(upstream.attributes["gen_ai.response.finish_reasons"]) == ("end_turn",)
    assert root.attributes["gen_ai.system"] == "openai" and root.attributes["gen_ai.request.model"] == "anthropic/claude-x"
    assert root.attributes["http.response.status_code"] == 200
    assert root.attributes["proxai.provider_protocol"] == "anthropic_messages"
    assert root.status.status_code != StatusCode.ERROR
    assert_nothing_secret(exporter.get_finished_spans())


def test_stream_and_pass_through_spans(traced, mock, exporter):
    mock.enqueue(Turn([Text("Hi there")], usage=Usage(input_tokens=3, output_tokens=2)))
    client = traced.anthropic()
    with client.messages.stream(model="chat/gpt-x", max_tokens=20, messages=MESSAGES) as s:
        assert s.get_final_message().content[0].text == "Hi there"
    spans = finished(exporter, 3)
    assert set(spans) == {"POST /v1/messages", "translate request", "chat gpt-x"}
    upstream = spans["chat gpt-x"]
    assert upstream.attributes["gen_ai.system"] == "openai"
    assert tuple(upstream.attributes["gen_ai.response.finish_reasons"]) == ("end_turn",)
    assert spans["POST /v1/messages"].attributes["gen_ai.usage.output_tokens"] == 2
    # No client traceparent: a new trace, still propagated upstream.
    assert mock.requests[-1].headers["traceparent"].split("-")[1] == format(upstream.context.trace_id, "032x")
    exporter.clear()
    client.messages.create(model="anthropic/c", max_tokens=20, messages=MESSAGES)  # same protocol: pass-through
    spans = finished(exporter, 2)
    assert set(spans) == {"POST /v1/messages", "chat c"}
    assert tuple(spans["chat c"].attributes["gen_ai.response.finish_reasons"]) == ("end_turn",)
    assert_nothing_secret(exporter.get_finished_spans())
    client.close()


def test_upstream_error_marks_the_request_span(traced, mock, exporter):
    mock.enqueue(Error(503, message="busy"))
    status, _, _ = raw_post(traced.url, "/v1/chat/completions", {"model": "anthropic/c", "messages": MESSAGES},
                            {"traceparent": TRACEPARENT})
    assert status == 503
    root = finished(exporter, 3)["POST /v1/chat/completions"]
    assert root.attributes["http.response.status_code"] == 503
    assert root.attributes["error.type"] == "upstream_error"
    assert root.status.status_code == StatusCode.ERROR


def test_a_malformed_traceparent_starts_a_new_trace(traced, mock, exporter):
    raw_post(traced.url, "/v1/chat/completions", {"model": "anthropic/c", "messages": MESSAGES},
             {"traceparent": "00-zz-not-a-trace"})
    root = finished(exporter, 4)["POST /v1/chat/completions"]
    assert root.parent is None


def test_off_by_default_and_a_no_op_without_the_extra(harness, monkeypatch, caplog):
    assert load_dict(harness.default_config()).tracing == TracingConfig()
    assert tracing.setup(TracingConfig()) is tracing.NOOP
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # as if the otel extra were not installed
    caplog.set_level(logging.WARNING)
    assert tracing.setup(TracingConfig(enabled=True)) is tracing.NOOP
    assert "pip install 'proxai[otel]'" in caplog.text


def test_tracing_config_is_validated(harness):
    from proxai.http.errors import ConfigError

    doc = harness.default_config()
    doc["tracing"] = {"enabled": True, "exporter": "zipkin", "sample": 1}
    with pytest.raises(ConfigError) as err:
        load_dict(doc)
    paths = {path for path, _ in err.value.problems}
    assert paths == {"tracing.exporter", "tracing.sample"}

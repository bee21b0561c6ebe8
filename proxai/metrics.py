"""Prometheus metrics, served at GET /metrics in the text exposition format.

Each app owns its CollectorRegistry, so several apps in one process (tests,
embedding) keep separate counts. Label values come from small closed sets
(protocol ids, status codes, outcome classes, configured provider names),
never from client input such as model names.
"""

from __future__ import annotations

from typing import Any, Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from proxai.streaming import Outcome

NONE = "none"  # label value when a request failed before routing picked a provider

# Latency buckets (seconds) for LLM calls: fast errors through multi-minute streams.
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

# Stream outcomes (the log's detailed vocabulary, proxai/streaming.py) -> the outcome label.
_OUTCOMES = {
    Outcome.COMPLETE: "completed",
    Outcome.COMPLETE_WITHOUT_DONE: "completed",
    Outcome.UPSTREAM_ERROR: "error",
    Outcome.CLIENT_DISCONNECTED: "client_disconnected",
    Outcome.TOOL_CALL_STALL: "tool_call_stall",
}

# Stream outcomes that were the provider's failure -> upstream error kind.
_STREAM_UPSTREAM_KINDS = {
    Outcome.EOF: "stream_incomplete",
    Outcome.IDLE_TIMEOUT: "stream_idle_timeout",
    Outcome.UPSTREAM_RESET: "stream_reset",
    Outcome.TOOL_CALL_STALL: "tool_call_stall",
    Outcome.UPSTREAM_ERROR: "stream_error_event",
    Outcome.MALFORMED: "stream_malformed",
}

# Log fields -> proxai_tokens_total kind. Cache reads and writes are parts of input.
_TOKEN_KINDS = (("input_tokens", "input"), ("output_tokens", "output"),
                ("cache_read_tokens", "cache_read"), ("cache_write_tokens", "cache_write"))

_UPSTREAM_ERROR_KINDS = frozenset({"upstream_error", "upstream_unreachable", "upstream_timeout", "upstream_protocol", "upstream"})


def outcome_class(info: dict[str, Any]) -> str:
    """completed / incomplete / error / client_disconnected / tool_call_stall."""
    outcome = info.get("outcome")
    if outcome is not None:
        if outcome in _OUTCOMES:
            return _OUTCOMES[outcome]
        if outcome.startswith("incomplete"):
            return "incomplete"
    if info.get("status", 0) == 499:
        return "client_disconnected"
    return "completed" if info.get("status", 0) < 400 else "error"


class Metrics:
    def __init__(self, in_flight: Callable[[], float]):
        self.registry = CollectorRegistry(auto_describe=True)
        self._children: dict[tuple, Any] = {}
        r = self.registry
        self.requests = Counter(
            "proxai_requests", "Requests by client protocol, provider protocol, HTTP status and outcome",
            ("client_protocol", "provider_protocol", "status", "outcome"), registry=r,
        )
        self.duration = Histogram(
            "proxai_request_duration_seconds", "Time from request arrival to the last byte of the response",
            ("client_protocol", "provider_protocol", "stream"), buckets=_BUCKETS, registry=r,
        )
        self.ttfb = Histogram(
            "proxai_time_to_first_byte_seconds", "Time from request arrival to the response headers (streams: with the first event)",
            ("client_protocol", "provider_protocol", "stream"), buckets=_BUCKETS, registry=r,
        )
        self.in_flight = Gauge("proxai_requests_in_flight", "Requests being served", registry=r)
        self.in_flight.set_function(in_flight)
        self.upstream_errors = Counter(
            "proxai_upstream_errors", "Provider failures by provider and kind", ("provider", "kind"), registry=r,
        )
        self.translation_errors = Counter(
            "proxai_translation_errors", "Requests or responses the rules could not translate",
            ("client_protocol", "provider_protocol", "direction"), registry=r,
        )
        self.tokens = Counter(
            "proxai_tokens", "Tokens reported by providers", ("client_protocol", "provider_protocol", "kind"), registry=r,
        )

    def _child(self, metric, *labels: str):
        # labels() validates and locks on every call; the label sets are small and closed
        # (see the module docstring), so each child is looked up once and kept.
        key = (metric, labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def observe(self, info: dict[str, Any]) -> None:
        """Count one finished request from its log fields."""
        client = info.get("client_protocol") or NONE
        provider = info.get("provider_protocol") or NONE
        stream = "true" if info.get("stream") else "false"
        child = self._child
        child(self.requests, client, provider, str(info.get("status", 0)), outcome_class(info)).inc()
        child(self.duration, client, provider, stream).observe(info.get("duration_ms", 0) / 1000)
        if info.get("ttfb_ms") is not None:
            child(self.ttfb, client, provider, stream).observe(info["ttfb_ms"] / 1000)
        kind = info.get("error")
        if kind in _UPSTREAM_ERROR_KINDS:
            child(self.upstream_errors, info.get("provider") or NONE, kind).inc()
        elif info.get("outcome") in _STREAM_UPSTREAM_KINDS:
            child(self.upstream_errors, info.get("provider") or NONE, _STREAM_UPSTREAM_KINDS[info["outcome"]]).inc()
        if info.get("translation_error"):
            child(self.translation_errors, client, provider, info["translation_error"]).inc()
        for key, kind in _TOKEN_KINDS:
            if info.get(key):
                child(self.tokens, client, provider, kind).inc(info[key])

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST

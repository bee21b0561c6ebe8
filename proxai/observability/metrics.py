"""Prometheus metrics, served at GET /metrics in the text exposition format.

Each app owns its CollectorRegistry, so several apps in one process (tests,
embedding) keep separate counts. Label values come from small closed sets
(protocol ids, status codes, outcomes) and the config (provider and route names,
fixed upstream models), never from client input such as model names.

Under `--workers N` every worker writes its samples to files in a directory the
supervisor shares (prometheus_client's multiprocess mode, see `share`), and a
scrape of any worker reads them all: one /metrics for the whole instance.
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable

from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector,
                               disable_created_metrics, generate_latest, values)
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector

from proxai.http.streaming import Outcome

# `_created` twins double the series of every counter and histogram and tell a scraper
# nothing it does not already know from the process start time.
disable_created_metrics()

NONE = "none"  # label value when a request failed before routing picked a provider, or had no stream outcome
FROM_MODEL = "(from model)"  # upstream_model label when the client's model decides it (unbounded)

# Latency buckets (seconds) for LLM calls: fast errors through multi-minute streams.
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

# The outcome label is the log's outcome (docs/architecture.md#stream-observers-and-outcomes).
_OUTCOMES = frozenset(o.value for o in Outcome)

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

_REQUEST_LABELS = ("client_protocol", "provider_protocol", "provider", "route", "upstream_model", "client")

_shared_dir: str | None = None  # set in each worker by share()


def share(directory: str) -> None:
    """Multiprocess mode for this process: call in a worker after the fork, before any
    metric is created. prometheus_client picks its value class at import, from the
    environment, and the supervisor imported it long before; so it is set here."""
    global _shared_dir
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory  # the value files are named from it
    values.ValueClass = values.MultiProcessValue()
    _shared_dir = directory


def mark_dead(directory: str, pid: int) -> None:
    """A worker is gone: its live gauges (in flight) leave the sums; its counters stay."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid, directory)


def outcome_label(info: dict[str, Any]) -> str:
    """The log's outcome, or `none` for a request without one (not streamed)."""
    outcome = info.get("outcome")
    return outcome if outcome in _OUTCOMES else NONE


def _fixed_models(config) -> dict[str, str]:
    """Route name -> its upstream_model, for routes where the config alone decides it.
    A regex route's `$1` and a route without a rewrite pass the client's model on: unbounded."""
    fixed = {}
    for route in getattr(config, "routes", ()) or ():
        target = route.upstream_model
        if target and "$" not in target.replace("$$", ""):
            fixed[route.name] = target.replace("$$", "$")
    return fixed


class Metrics:
    def __init__(self, in_flight: Callable[[], float], config: Callable[[], Any] = lambda: None):
        self.registry = CollectorRegistry(auto_describe=True)
        self._children: dict[tuple, Any] = {}
        self._config = config
        self._fixed_for: Any = object()
        self._fixed: dict[str, str] = {}
        r = self.registry
        self.requests = Counter(
            "proxai_requests", "Requests by protocols, provider, route, upstream model, HTTP status and outcome",
            _REQUEST_LABELS + ("status", "outcome"), registry=r,
        )
        self.duration = Histogram(
            "proxai_request_duration_seconds", "Time from request arrival to the last byte of the response",
            _REQUEST_LABELS + ("stream",), buckets=_BUCKETS, registry=r,
        )
        self.ttfb = Histogram(
            "proxai_time_to_first_byte_seconds", "Time from request arrival to the response headers (streams: with the first event)",
            _REQUEST_LABELS + ("stream",), buckets=_BUCKETS, registry=r,
        )
        self.in_flight = Gauge("proxai_requests_in_flight", "Requests being served", registry=r, multiprocess_mode="livesum")
        # One process: the gauge reads the count at scrape, nothing to do per request. Workers:
        # the scraping worker cannot call the others, so each one moves its own value (shared_in_flight).
        self.shared_in_flight = self.in_flight if _shared_dir else None
        if self.shared_in_flight is None:
            self.in_flight.set_function(in_flight)
        self.upstream_errors = Counter(
            "proxai_upstream_errors", "Provider failures by provider and kind", ("provider", "kind"), registry=r,
        )
        self.translation_errors = Counter(
            "proxai_translation_errors", "Requests or responses the rules could not translate",
            ("client_protocol", "provider_protocol", "direction"), registry=r,
        )
        self.tokens = Counter(
            "proxai_tokens", "Tokens reported by providers", _REQUEST_LABELS + ("kind",), registry=r,
        )
        if _shared_dir is None:
            ProcessCollector(registry=r)

    def _child(self, metric, *labels: str):
        # labels() validates and locks on every call; the label sets are small and closed
        # (see the module docstring), so each child is looked up once and kept.
        key = (metric, labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def _model_label(self, info: dict[str, Any]) -> str:
        route = info.get("route")
        if route is None:
            return NONE
        config = self._config()
        if config is not self._fixed_for:  # a reload brings new routes
            self._fixed_for, self._fixed = config, _fixed_models(config)
        return self._fixed.get(route, FROM_MODEL)

    def observe(self, info: dict[str, Any]) -> None:
        """Count one finished request from its log fields."""
        client = info.get("client_protocol") or NONE
        provider = info.get("provider_protocol") or NONE
        # client: the name of the server.api_keys entry (bounded by the config), none without keys
        where = (client, provider, info.get("provider") or NONE, info.get("route") or NONE, self._model_label(info),
                 info.get("client") or NONE)
        stream = "true" if info.get("stream") else "false"
        child = self._child
        child(self.requests, *where, str(info.get("status", 0)), outcome_label(info)).inc()
        child(self.duration, *where, stream).observe(info.get("duration_ms", 0) / 1000)
        if info.get("ttfb_ms") is not None:
            child(self.ttfb, *where, stream).observe(info["ttfb_ms"] / 1000)
        kind = info.get("error")
        if kind in _UPSTREAM_ERROR_KINDS:
            child(self.upstream_errors, info.get("provider") or NONE, kind).inc()
        elif info.get("outcome") in _STREAM_UPSTREAM_KINDS:
            child(self.upstream_errors, info.get("provider") or NONE, _STREAM_UPSTREAM_KINDS[info["outcome"]]).inc()
        if info.get("translation_error"):
            child(self.translation_errors, client, provider, info["translation_error"]).inc()
        for key, kind in _TOKEN_KINDS:
            if info.get(key):
                child(self.tokens, *where, kind).inc(info[key])

    def render(self) -> tuple[bytes, str]:
        if _shared_dir is None:
            return generate_latest(self.registry), CONTENT_TYPE_LATEST
        registry = CollectorRegistry()
        registry.register(_Workers(_shared_dir))
        return generate_latest(registry), CONTENT_TYPE_LATEST


# A live worker has its in-flight gauge file; mark_dead removes it with the worker.
_LIVE_FILE = re.compile(r"gauge_livesum_(\d+)\.db$")


class _Workers:
    """Every worker's samples from the shared files, and the process_* of the live ones."""

    def __init__(self, directory: str):
        self._directory = directory

    def collect(self):
        live = sorted(m.group(1) for m in map(_LIVE_FILE.match, os.listdir(self._directory)) if m)
        alive = set(live)
        for family in MultiProcessCollector(None, self._directory).collect():
            # A gauge without a multiprocess_mode is reported per pid: the dead workers' go.
            family.samples = [s for s in family.samples if s.labels.get("pid", "") in alive or "pid" not in s.labels]
            yield family
        yield from self._processes(live)

    @staticmethod
    def _processes(live: list[str]):
        """process_* of each live worker, read from /proc by the scraping one, with a `pid` label.
        Per worker rather than summed: a restarted worker's CPU counter starts again at zero,
        which a sum would show as a reset of the whole instance."""
        families: dict[str, Metric] = {}
        for pid in live:
            for family in ProcessCollector(pid=lambda pid=pid: pid, registry=None).collect():
                out = families.get(family.name)
                if out is None:
                    out = families[family.name] = Metric(family.name, family.documentation, family.type)
                for sample in family.samples:
                    out.add_sample(sample.name, {**sample.labels, "pid": pid}, sample.value)
        return families.values()

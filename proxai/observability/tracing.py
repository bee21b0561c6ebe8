"""Optional OpenTelemetry tracing: one span per request, children for translation and the upstream call.

Off unless `tracing.enabled` is true and the `otel` extra is installed; otherwise
every hook here is a no-op that costs one attribute lookup. Spans carry the
GenAI semantic-convention attributes (gen_ai.system / gen_ai.provider.name, gen_ai.operation.name,
request and response model, token usage, finish reasons) and never a prompt,
a completion or a key. A client's W3C `traceparent` (and `tracestate`) is the
parent of the request span, and the upstream call sends its own `traceparent`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Callable, ContextManager, Iterator, Mapping

log = logging.getLogger("proxai")

#: protocol -> (gen_ai.system, gen_ai.operation.name): the `gen_ai:` of its protocol.yaml
Describe = Callable[[str], "tuple[str | None, str | None]"]


_NULL = contextlib.nullcontext()  # reusable: the no-op costs no allocation per request


class Tracing:
    """The no-op: tracing off or OpenTelemetry not installed."""

    enabled = False

    def request(self, headers: Mapping[str, str], method: str, path: str, info: dict) -> ContextManager[Any]:
        return _NULL

    def span(self, name: str, info: dict) -> ContextManager[Any]:
        return _NULL

    def upstream_start(self, info: dict, provider_name: str, protocol: str, model: str) -> dict[str, str] | None:
        return None

    def upstream_done(self, info: dict, protocol: str, summary: Mapping[str, Any] | None = None) -> None:
        pass

    def shutdown(self) -> None:
        pass


NOOP = Tracing()


def setup(settings: Any, provider: Any = None, describe: Describe | None = None) -> Tracing:
    """The app's tracing for `settings` (a TracingConfig); `provider` overrides the TracerProvider;
    `describe` gives a protocol's GenAI system and operation (default: the built-in rules')."""
    if settings is None or not settings.enabled:
        return NOOP
    try:
        from opentelemetry import trace  # noqa: F401
    except ImportError:
        log.warning("tracing.enabled is true but OpenTelemetry is not installed (pip install 'proxai[otel]'): no spans")
        return NOOP
    return OtelTracing(settings, provider, describe)


def _builtin_describe(protocol: str) -> tuple[str | None, str | None]:
    from proxai.http.errors import builtin_engine

    return builtin_engine().gen_ai(protocol)


class OtelTracing(Tracing):
    enabled = True

    def __init__(self, settings: Any, provider: Any = None, describe: Describe | None = None):
        from opentelemetry import trace
        from opentelemetry.propagators.textmap import DefaultGetter
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._trace = trace
        self.describe = describe or _builtin_describe
        self._propagator = TraceContextTextMapPropagator()
        self._getter = DefaultGetter()
        self._owned = None
        if provider is None and settings.exporter != "none":
            provider = self._owned = _make_provider(settings)
        self.tracer = (provider or trace.get_tracer_provider()).get_tracer("proxai")

    @contextlib.contextmanager
    def request(self, headers: Mapping[str, str], method: str, path: str, info: dict) -> Iterator[Any]:
        carrier = {k.lower(): v for k, v in headers.items() if k.lower() in ("traceparent", "tracestate")}
        parent = self._propagator.extract(carrier) if carrier else None
        span = self.tracer.start_span(f"{method} {path}", context=parent, kind=self._trace.SpanKind.SERVER,
                                      attributes={"http.request.method": method, "url.path": path})
        info["_span"] = span
        failure: BaseException | None = None
        try:
            with self._trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
                yield span
        except BaseException as exc:
            failure = exc
            raise
        finally:
            self.upstream_done(info, info.get("provider_protocol") or "")
            self._finish(span, info, failure)

    def _finish(self, span: Any, info: dict, failure: BaseException | None = None) -> None:
        from opentelemetry.trace import Status, StatusCode

        from proxai.http.errors import ProxyError

        self._gen_ai(span, info, info.get("client_protocol"), info.get("model"))
        status = info.get("status")
        if isinstance(failure, ProxyError):  # rendered by the middleware after this span ends
            status = failure.status
            span.set_attribute("error.type", failure.kind)
        elif failure is not None:
            status = 499 if isinstance(failure, asyncio.CancelledError) else 500
            span.set_attribute("error.type", type(failure).__name__)
        if status is not None:
            span.set_attribute("http.response.status_code", status)
        for key in ("route", "provider", "outcome"):
            if info.get(key) is not None:
                span.set_attribute(f"proxai.{key}", str(info[key]))
        if info.get("client_protocol"):
            span.set_attribute("proxai.client_protocol", info["client_protocol"])
        if info.get("provider_protocol"):
            span.set_attribute("proxai.provider_protocol", info["provider_protocol"])
        if info.get("error") and failure is None:
            span.set_attribute("error.type", str(info["error"]))
        if (status or 0) >= 500 or str(info.get("outcome") or "").startswith(("incomplete", "upstream", "error")):
            span.set_status(Status(StatusCode.ERROR))
        span.end()

    def _gen_ai(self, span: Any, info: dict, protocol: str | None, model: str | None) -> None:
        system, operation = self.describe(protocol) if protocol else (None, None)
        if system:
            span.set_attribute("gen_ai.system", system)
            span.set_attribute("gen_ai.provider.name", system)
            span.set_attribute("gen_ai.operation.name", operation)
        if model:
            span.set_attribute("gen_ai.request.model", model)
        for key, attr in (("input_tokens", "gen_ai.usage.input_tokens"), ("output_tokens", "gen_ai.usage.output_tokens")):
            if isinstance(info.get(key), int):
                span.set_attribute(attr, info[key])
        if info.get("_response_model"):
            span.set_attribute("gen_ai.response.model", info["_response_model"])
        reasons = info.get("_finish_reasons")
        if not reasons and info.get("_stop"):
            reasons = [info["_stop"]]
        if reasons:
            span.set_attribute("gen_ai.response.finish_reasons", list(reasons))

    @contextlib.contextmanager
    def span(self, name: str, info: dict) -> Iterator[Any]:
        parent = info.get("_span")
        ctx = self._trace.set_span_in_context(parent) if parent is not None else None
        with self.tracer.start_as_current_span(name, context=ctx, kind=self._trace.SpanKind.INTERNAL) as span:
            yield span

    def upstream_start(self, info: dict, provider_name: str, protocol: str, model: str) -> dict[str, str] | None:
        parent = info.get("_span")
        ctx = self._trace.set_span_in_context(parent) if parent is not None else None
        system, operation = self.describe(protocol)
        system, operation = system or "_OTHER", operation or "chat"
        span = self.tracer.start_span(f"{operation} {model}", context=ctx, kind=self._trace.SpanKind.CLIENT,
                                      attributes={"gen_ai.system": system, "gen_ai.provider.name": system,
                                                  "gen_ai.operation.name": operation,
                                                  "gen_ai.request.model": model, "proxai.provider": provider_name})
        info["_upstream_span"] = span
        headers: dict[str, str] = {}
        self._propagator.inject(headers, context=self._trace.set_span_in_context(span))
        return headers

    def upstream_done(self, info: dict, protocol: str, summary: Mapping[str, Any] | None = None) -> None:
        """`summary`: a non-streaming answer's Engine.summary (a stream's stop is info's `_stop`)."""
        span = info.pop("_upstream_span", None)
        if span is None:
            return
        if summary is not None:
            # The IR stop reason, as for streams: one vocabulary whatever the provider's.
            info["_finish_reasons"] = [summary["stop"]] if isinstance(summary.get("stop"), str) else []
            info["_response_model"] = summary.get("model") if isinstance(summary.get("model"), str) else None
        self._gen_ai(span, info, protocol, info.get("upstream_model"))
        if info.get("upstream_request_id"):
            span.set_attribute("proxai.upstream_request_id", str(info["upstream_request_id"]))
        span.end()

    def shutdown(self) -> None:
        if self._owned is not None:
            self._owned.shutdown()


def _make_provider(settings: Any) -> Any:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    provider = TracerProvider(resource=Resource.create({"service.name": settings.service_name}))
    if settings.exporter == "console":
        exporter: Any = ConsoleSpanExporter()
    else:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            log.warning("tracing.exporter is otlp but opentelemetry-exporter-otlp-proto-http is not installed: no spans")
            return provider
        exporter = OTLPSpanExporter(endpoint=settings.endpoint) if settings.endpoint else OTLPSpanExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider

"""Errors, and how each reaches a client in its own protocol's native shape.

Exception hierarchy:

* ConfigError - the config file is invalid (startup; never sent to a client).
* ProxyError - anything answered to a client as an error.
    + InvalidRequest - 400: body not JSON, wrong types, unrepresentable field.
        - RoutingError - 400: no route and no default, or a request_protocol guard mismatch.
    + Unauthorized - 401: inbound auth configured, key missing or wrong.
    + NotFound - 404: unknown path.
    + MethodNotAllowed - 405: known path, wrong method.
    + RequestTimeout - 408: the request body did not arrive within server.request_body_timeout_secs.
    + RequestTooLarge - 413: body over server.max_request_body_bytes.
    + Overloaded - 503: server.max_concurrent_requests reached.
    + InternalError - 500: a bug; the body never carries internals.
    + UpstreamFailure - the provider failed us.
        - UpstreamError - the provider answered non-2xx; its status is kept.
        - UpstreamUnreachable - 502: connect, DNS or TLS failure.
        - UpstreamTimeout - 504: nothing read within the idle-read timeout.
        - UpstreamProtocolError - 502: the provider's answer is malformed.
        - StreamError - 502: a stream ended before its terminal event, or stalled.

Every ProxyError carries `status`, `message`, and optionally `param`, `code`,
`error_type` (already in some protocol's vocabulary) and `headers` (upstream
headers preserved for the client). `render_http` and `render_stream` turn one
into the bytes a client of a given protocol expects (docs/errors.md, docs/streaming.md §5).
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any, Mapping

import orjson

from proxai.sse import encode_event
from engine.ruleset import BUILTIN_RULES, build_tables, layer, read_file

CHAT = "openai_chat_completions"
RESPONSES = "openai_responses"
ANTHROPIC = "anthropic_messages"
GEMINI = "gemini_generate_content"
# The client protocols (ingress validates their bodies); Gemini is served as a provider.
PROTOCOLS = (CHAT, RESPONSES, ANTHROPIC)

ERROR_TABLES = BUILTIN_RULES / "tables" / "errors.yaml"


class ConfigError(Exception):
    """An invalid config file. `problems` lists (path, message); the path is dotted."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = problems
        super().__init__("\n".join(f"{p}: {m}" if p else m for p, m in problems))


class ProxyError(Exception):
    status = 500
    kind = "internal"

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        param: str | None = None,
        code: str | None = None,
        error_type: str | None = None,
        type_family: str | None = None,
        headers: Mapping[str, str] | None = None,
    ):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        self.param = param
        self.code = code
        # error_type is only reused for a client of the same family (openai/anthropic).
        self.error_type = error_type
        self.type_family = type_family
        self.headers = dict(headers or {})


class InvalidRequest(ProxyError):
    status = 400
    kind = "invalid_request"


class RoutingError(InvalidRequest):
    kind = "routing"


class Unauthorized(ProxyError):
    status = 401
    kind = "unauthorized"


class NotFound(ProxyError):
    status = 404
    kind = "not_found"


class MethodNotAllowed(ProxyError):
    status = 405
    kind = "not_found"


class RequestTimeout(ProxyError):
    status = 408
    kind = "request_timeout"


class RequestTooLarge(ProxyError):
    status = 413
    kind = "too_large"


class Overloaded(ProxyError):
    status = 503
    kind = "overloaded"


class InternalError(ProxyError):
    status = 500
    kind = "internal"


class UpstreamFailure(ProxyError):
    status = 502
    kind = "upstream"


class UpstreamError(UpstreamFailure):
    kind = "upstream_error"


class UpstreamUnreachable(UpstreamFailure):
    status = 502
    kind = "upstream_unreachable"


class UpstreamTimeout(UpstreamFailure):
    status = 504
    kind = "upstream_timeout"


class UpstreamProtocolError(UpstreamFailure):
    status = 502
    kind = "upstream_protocol"


class StreamError(UpstreamFailure):
    status = 502
    kind = "stream_error"


# --- vocabularies -----------------------------------------------------------


@functools.lru_cache(maxsize=None)
def builtin_tables() -> dict:
    """The built-in error tables, loaded by the engine's own loader, for callers with no
    engine at hand. The server passes its engine's tables instead, so a rules_dir that
    overrides an entry changes HTTP and in-stream errors alike."""
    src, problems = read_file(ERROR_TABLES)
    if problems:
        raise problems[0]
    return build_tables(layer([src]))


def _lookup(name: str, status: int, tables: Mapping | None) -> str:
    return (tables or builtin_tables())[name].lookup(status)


def family(protocol: str) -> str:
    if protocol == GEMINI:
        return "gemini"
    return "anthropic" if protocol == ANTHROPIC else "openai"


def error_type_for(protocol: str, err: ProxyError, tables: Mapping | None = None) -> str:
    if err.error_type and err.type_family == family(protocol):
        return err.error_type
    if protocol == ANTHROPIC:
        return _lookup("http_status->anthropic_messages.error_type", err.status, tables)
    return _lookup("http_status->openai.error_type", err.status, tables)


def responses_error_code(status: int, tables: Mapping | None = None) -> str:
    return _lookup("http_status->openai_responses.error_code", status, tables)


# --- native shapes ----------------------------------------------------------


def error_body(protocol: str, err: ProxyError, tables: Mapping | None = None) -> dict[str, Any]:
    if protocol == ANTHROPIC:
        # The Anthropic error body has no param field: the field goes into the message.
        message = err.message
        if err.param and f"at {err.param})" not in (message or ""):
            message = f"{message} (at {err.param})"
        return {"type": "error", "error": {"type": error_type_for(protocol, err, tables), "message": message},
                "status": err.status}
    return {
        "error": {
            "message": err.message,
            "type": error_type_for(protocol, err, tables),
            "param": err.param,
            "code": err.code,
            "status": err.status,
        }
    }


def render_http(protocol: str, err: ProxyError, tables: Mapping | None = None) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of an HTTP error answer for a client of `protocol`."""
    headers = dict(err.headers)
    headers["Content-Type"] = "application/json"
    return err.status, headers, orjson.dumps(error_body(protocol, err, tables))


def render_stream(
    protocol: str,
    err: ProxyError,
    *,
    sequence_number: int = 0,
    response: Mapping[str, Any] | None = None,
    tables: Mapping | None = None,
) -> bytes:
    """The in-stream error for a client of `protocol` after 200 was sent (docs/streaming.md §5).

    For Responses clients `sequence_number` is the next unused number and
    `response` the last known snapshot (or None); the output is an `error`
    event followed by `response.failed`.
    """
    if protocol == ANTHROPIC:
        return encode_event(orjson.dumps(error_body(protocol, err, tables)), "error")
    if protocol == CHAT:
        return encode_event(orjson.dumps(error_body(protocol, err, tables)))
    error_event = {
        "type": "error",
        "code": err.code,
        "message": err.message,
        "param": err.param,
        "sequence_number": sequence_number,
    }
    failed = {
        "type": "response.failed",
        "sequence_number": sequence_number + 1,
        "response": failed_snapshot(response, responses_error_code(err.status, tables), err.message),
    }
    return encode_event(orjson.dumps(error_event), "error") + encode_event(orjson.dumps(failed), "response.failed")


def failed_snapshot(response: Mapping[str, Any] | None, code: str, message: str) -> dict[str, Any]:
    """A valid Responses snapshot with status failed, built over the last known one."""
    import time

    snapshot: dict[str, Any] = {
        "id": "resp_failed",
        "object": "response",
        "created_at": time.time(),
        "model": "",
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": None,
        "incomplete_details": None,
    }
    if response:
        snapshot.update(response)
    snapshot["status"] = "failed"
    snapshot["error"] = {"code": code, "message": message}
    return snapshot


# --- upstream errors ----------------------------------------------------------

_PRESERVED_HEADERS = frozenset({"retry-after", "retry-after-ms", "x-request-id", "request-id"})
_PRESERVED_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-")


def preserved_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The upstream headers a client may see: retry hints, request ids, rate limits."""
    kept: dict[str, str] = {}
    for name, value in headers.items():
        lower = name.lower()
        if lower in _PRESERVED_HEADERS or lower.startswith(_PRESERVED_PREFIXES):
            kept[lower] = value
    return kept


_WS = re.compile(r"\s+")


def _summary(raw: bytes, status: int) -> str:
    text = raw.decode("utf-8", "replace").strip()
    if not text:
        return f"upstream returned HTTP {status} with an empty body"
    if text.startswith("<"):
        return f"upstream returned HTTP {status} with a non-JSON body ({len(raw)} bytes)"
    text = _WS.sub(" ", text)
    if len(text) > 200:
        text = text[:200] + "..."
    return f"upstream returned HTTP {status}: {text}"


def upstream_error(
    provider_protocol: str, status: int, raw: bytes, headers: Mapping[str, str]
) -> UpstreamError:
    """Map a provider's non-2xx answer: keep status, message, and code/param only when sent."""
    message = code = param = err_type = None
    try:
        body = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        body = None
    kept = preserved_headers(headers)
    if provider_protocol == GEMINI and isinstance(body, list) and body and isinstance(body[0], dict):
        body = body[0]  # a stream request's error can come as a one-element JSON array
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and provider_protocol == GEMINI:
            # {"error": {"code": 429, "message", "status": "RESOURCE_EXHAUSTED", "details"}}: the
            # status name is the type; the numeric code is the HTTP status already.
            message = err.get("message")
            err_type = err.get("status")
            if "retry-after" not in kept:
                delay = _gemini_retry_delay(err.get("details"))
                if delay is not None:
                    kept["retry-after"] = delay
        elif isinstance(err, dict):
            message = err.get("message")
            err_type = err.get("type")
            code = err.get("code")
            param = err.get("param")
        elif isinstance(err, str):
            message = err
        elif isinstance(body.get("message"), str):
            message = body["message"]
        elif isinstance(body.get("detail"), str):
            message = body["detail"]
    if not isinstance(message, str) or not message:
        message = _summary(raw, status)
    return UpstreamError(
        message,
        status=status,
        code=code if isinstance(code, (str, int)) else None,
        param=param if isinstance(param, str) else None,
        error_type=err_type if isinstance(err_type, str) else None,
        type_family=family(provider_protocol),
        headers=kept,
    )


_DELAY = re.compile(r"^(\d+(?:\.\d+)?)s$")


def _gemini_retry_delay(details: Any) -> str | None:
    """Google's RetryInfo detail (`retryDelay: "37s"`) as a Retry-After value in whole
    seconds: what every client SDK reads before retrying a 429."""
    for detail in details if isinstance(details, list) else ():
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("google.rpc.RetryInfo"):
            match = _DELAY.match(str(detail.get("retryDelay", "")))
            if match:
                return str(max(1, math.ceil(float(match.group(1)))))
    return None

"""How each error reaches a client in its own protocol's native shape.

The exception classes are one tree, defined and documented in `engine/errors.py`
and re-exported here; `render_http` turns one into the HTTP answer a client of a given
protocol expects (docs/errors.md). In-stream errors come from the stream.encode rules
(docs/streaming.md §5).
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any, Mapping

import orjson

from proxai.sse import encode_event
from engine.errors import (  # noqa: F401  (the tree, re-exported)
    ConfigError, InternalError, InvalidRequest, MethodNotAllowed, NotFound, Overloaded, ProxaiError, ProxyError,
    RateLimited, RequestTimeout, RequestTooLarge, RoutingError, RuleError, StreamError, TranslationError, Unauthorized,
    UpstreamError, UpstreamFailure, UpstreamProtocolError, UpstreamTimeout, UpstreamUnreachable,
)
from engine.ruleset import BUILTIN_RULES, build_tables, layer, read_file

CHAT = "openai_chat_completions"
RESPONSES = "openai_responses"
ANTHROPIC = "anthropic_messages"
GEMINI = "gemini_generate_content"
PROTOCOLS = (CHAT, RESPONSES, ANTHROPIC, GEMINI)

ERROR_TABLES = BUILTIN_RULES / "tables" / "errors.yaml"


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
    if protocol == GEMINI:
        return gemini_error_body(err, tables)
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


def gemini_error_body(err: ProxyError, tables: Mapping | None = None) -> dict[str, Any]:
    """google.rpc.Status as the Gemini API sends it; the field, when known, also as a
    BadRequest field violation (where Google's own errors name it)."""
    status = err.error_type if err.error_type and err.type_family == family(GEMINI) else \
        _lookup("http_status->gemini_generate_content.status", err.status, tables)
    message = err.message
    if err.param and err.param not in (message or ""):
        message = f"{message} (at {err.param})"
    body: dict[str, Any] = {"code": err.status, "message": message, "status": status}
    if err.param:
        body["details"] = [{"@type": "type.googleapis.com/google.rpc.BadRequest",
                            "fieldViolations": [{"field": err.param, "description": err.message}]}]
    return {"error": body}


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
    """A Responses client's in-stream error written outside the stream rules: the state
    store failing under a translated stream (proxai/responses_state.py). Every other
    in-stream error is the IR `error` event through the client protocol's stream.encode
    rules (engine/stream.py, proxai/relay.py).

    `sequence_number` is the next unused number and `response` the last known snapshot
    (or None); the output is an `error` event followed by `response.failed`.
    """
    if protocol != RESPONSES:
        raise ValueError(f"render_stream is for Responses streams, not {protocol}")
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

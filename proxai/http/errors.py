"""How each error reaches a client in its own protocol's native shape.

The exception classes are one tree, defined and documented in `engine/errors.py`
and re-exported here; `render_http` turns one into the HTTP answer a client of a given
protocol expects (docs/errors.md) and `upstream_error` reads a provider's error answer,
both by the protocol's `errors:` rules (rules/<protocol>/protocol.yaml, through the
engine). In-stream errors come from the stream.encode rules (docs/streaming.md §5).
"""

from __future__ import annotations

import functools
import re
from typing import Any, Mapping

import orjson

from proxai.http.sse import encode_event
from engine.errors import (  # noqa: F401  (the tree, re-exported)
    ConfigError, InternalError, InvalidRequest, MethodNotAllowed, NotFound, Overloaded, ProxaiError, ProxyError,
    RateLimited, RequestTimeout, RequestTooLarge, RoutingError, RuleError, StateUnavailable, StreamError, TranslationError,
    Unauthorized,
    UpstreamError, UpstreamFailure, UpstreamProtocolError, UpstreamTimeout, UpstreamUnreachable,
)
from engine.ruleset import BUILTIN_RULES, build_tables, layer, read_file

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


@functools.lru_cache(maxsize=1)
def builtin_engine():
    """The built-in rules, for callers with no engine at hand (the server passes its own,
    so a rules_dir that overrides an error body changes every answer)."""
    import engine

    return engine.Engine.load()


# --- native shapes ----------------------------------------------------------


def render_http(protocol: str, err: ProxyError, rules=None) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of an HTTP error answer for a client of `protocol`, by
    the protocol's `errors.encode` rule of `rules` (an engine.Engine; default: the built-in rules)."""
    headers = dict(err.headers)
    headers["Content-Type"] = "application/json"
    return err.status, headers, orjson.dumps((rules or builtin_engine()).http_error(protocol, err))


def render_stream(protocol: str, err: ProxyError, *, sequence_number: int = 0,
                  response: Mapping[str, Any] | None = None, rules=None) -> bytes:
    """An in-stream error written outside the stream rules (the state store failing under
    a translated stream: proxai/endpoints/responses_state.py, conversations.py), by the
    protocol's `errors.stream` rule of `rules` (default: the built-in rules). Every other
    in-stream error is the IR `error` event through the client protocol's stream.encode
    rules (engine/stream.py, proxai/http/relay.py).

    `sequence_number` is the next unused number and `response` the last known snapshot
    (or None); each event is named by the field its protocol's stream.encode names events by.
    """
    rules = rules or builtin_engine()
    events = rules.stream_error(protocol, err, sequence_number, response)
    name = rules.streams[("stream.encode", protocol)].event_name
    return b"".join(encode_event(orjson.dumps(event), event[name]) for event in events)


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
    provider_protocol: str, status: int, raw: bytes, headers: Mapping[str, str], rules=None
) -> UpstreamError:
    """Map a provider's non-2xx answer by the protocol's `errors.decode` rule of `rules`
    (an engine.Engine; default: the built-in rules): keep status, message, and
    code/param only when sent."""
    try:
        body = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        body = None
    kept = preserved_headers(headers)
    ir = (rules or builtin_engine()).parse_error(provider_protocol, status, body)
    message = ir.get("message")
    if (not isinstance(message, str) or not message) and isinstance(body, dict) and not isinstance(body.get("error"), dict):
        # Not the protocol's shape (a gateway in between): the usual places of a message.
        message = next((body[k] for k in ("error", "message", "detail") if isinstance(body.get(k), str)), None)
    if not isinstance(message, str) or not message:
        message = _summary(raw, status)
    retry_after = ir.get("retry_after")
    if isinstance(retry_after, str) and "retry-after" not in kept:
        kept["retry-after"] = retry_after
    code, param, err_type = ir.get("code"), ir.get("param"), ir.get("error_type")
    return UpstreamError(
        message,
        status=status,
        code=code if isinstance(code, (str, int)) else None,
        param=param if isinstance(param, str) else None,
        error_type=err_type if isinstance(err_type, str) else None,
        type_family=ir.get("vocabulary"),
        headers=kept,
    )

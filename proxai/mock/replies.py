"""What a mock upstream answers with: a JSON body, a raw error, an SSE stream, or silence."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from proxai.protocols import ANTHROPIC, CHAT, GEMINI, INTERACTIONS, RESPONSES  # noqa: F401  (re-exported)

from . import interactions_schema

NATIVE = object()  # Error body default: the protocol's own error shape


@dataclass
class Json:
    body: dict
    status: int = 200
    headers: dict | None = None


@dataclass
class Error:
    status: int
    body: object = NATIVE  # dict | str | bytes | None (None = empty body)
    headers: dict | None = None
    content_type: str | None = None
    message: str | None = None  # for the native shape


@dataclass(kw_only=True)
class Delivery:
    """How a stream reaches the client: shared by raw Streams and rendered Turns."""

    split_bytes: int | None = None  # re-chunk the bytes (splits inside UTF-8 and between lines)
    crlf: bool = False
    cut_after: int | None = None  # end after N events, with no terminal event
    stall_after: int | None = None  # sleep stall_secs before event N
    stall_secs: float = 0.0
    delay_secs: float = 0.0  # between events


@dataclass
class Stream(Delivery):
    events: list | None = None  # [(event name | None, data str | dict)]
    raw: list[bytes] | None = None  # sent as-is, one write each
    headers: dict | None = None
    status: int = 200
    abort: bool = False  # with cut_after: drop the connection instead of ending the body cleanly


@dataclass
class Hang:
    secs: float
    after_headers: bool = False


def encode_event(event: str | None, data: str | dict, crlf: bool = False) -> bytes:
    """One SSE event: optional `event:` line, one `data:` line, blank line."""
    nl = "\r\n" if crlf else "\n"
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    head = f"event: {event}{nl}" if event is not None else ""
    return f"{head}data: {payload}{nl}{nl}".encode()


_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}

_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    429: "rate_limit_exceeded",
}


# google.rpc.Code names by HTTP status, as the Gemini API reports them.
_GEMINI_STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def _gemini_error(status: int, message: str) -> dict:
    return {"error": {"code": status, "message": message, "status": _GEMINI_STATUSES.get(status, "UNKNOWN")}}


def _anthropic_error(status: int, message: str) -> dict:
    kind = _ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_mock"}


def _openai_error(status: int, message: str) -> dict:
    kind = _OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


# The Interactions API's error codes by HTTP status (its error body is {error: {code, message}},
# the code a string; the SDK's CreateInteractionClientErrorData).
_INTERACTIONS_CODES = {
    400: "invalid_request", 401: "authentication", 402: "payment_required", 403: "permission_denied",
    404: "not_found", 416: "out_of_range", 429: "rate_limit_exceeded", 499: "cancelled",
}


def interactions_error(status: int, message: str, code: str | None = None) -> dict:
    out = {"error": {"code": code or _INTERACTIONS_CODES.get(status, "api_error" if status >= 500 else "invalid_request"),
                     "message": message}}
    interactions_schema.assert_error(out)
    return out


# The error body of each protocol's real upstreams; OpenAI's for the rest.
_ERROR_BODIES = {GEMINI: _gemini_error, ANTHROPIC: _anthropic_error, INTERACTIONS: interactions_error}


def native_error_body(protocol: str, status: int, message: str | None = None) -> dict:
    """The body a real upstream of `protocol` sends with an HTTP error status."""
    return _ERROR_BODIES.get(protocol, _openai_error)(status, message or f"mock upstream error {status}")

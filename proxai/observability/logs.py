"""Logging setup and the one-line request summary.

The summary names the request id (and the provider's beside it), the client's
name (never its key), protocols, route, provider, upstream attempts, models,
status, stream outcome, time to first byte, duration and token counts. It never
carries bodies, keys, headers or prompt text.

A human line starts with the local time to the millisecond with its UTC offset,
the level, and the logger with the process id (`proxai.request[4242]:`), so the
lines of `--workers N` can be told apart.

Every other line logged while a request runs gets that request's id too: the
id lives in a context variable set by the app, and the handler's filter copies
it onto each record.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from typing import IO, Any

import orjson

from proxai.http import requestid
request_log = logging.getLogger("proxai.request")

FORMATS = ("human", "json")

_FIELDS = (
    "request_id", "upstream_request_id", "client", "method", "path", "client_protocol", "provider_protocol", "route",
    "provider", "key", "attempts", "model", "upstream_model", "stream", "status", "outcome", "ttfb_ms", "duration_ms",
    "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "cache_breakpoints", "translation_notes", "error",
    "rule",
)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def usage_fields(usage: Any) -> dict[str, int]:
    """The summary's token counts from an IR usage (schemas/ir.schema.json `usage`, as the
    rules read it: `Engine.summary`, or a stream's decoded events): `input_tokens` is the
    whole input, caches included; `cache_read_tokens` and `cache_write_tokens` are the
    parts of it read from and written to the provider's prompt cache. A count the
    provider did not report is 0; no usage at all, no counts."""
    if not isinstance(usage, dict):
        return {}
    return {"input_tokens": _count(usage.get("input_tokens")), "output_tokens": _count(usage.get("output_tokens")),
            "cache_read_tokens": _count(usage.get("cached_tokens")), "cache_write_tokens": _count(usage.get("cache_write_tokens"))}


def add_earlier_usage(info: dict) -> None:
    """Add to the request's counts those of the provider calls made before the answer's
    own (``info["_earlier_usage"]``: a compaction's summarisation call): billed all the
    same, so the log line, the metrics and the token limits count them."""
    for counts in info.pop("_earlier_usage", ()):
        for key, n in counts.items():
            info[key] = (info.get(key) or 0) + n


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = requestid.current.get()
        return True


class _HumanFormatter(logging.Formatter):
    # The date, time and offset change once a second: formatted then, not per line.
    _second = -1
    _stamp = ""
    _zone = ""

    def format(self, record: logging.LogRecord) -> str:
        second = int(record.created)
        if second != self._second:
            local = time.localtime(second)
            self._second, self._stamp, self._zone = second, time.strftime("%Y-%m-%dT%H:%M:%S", local), _offset(local)
        line = (f"{self._stamp}.{int(record.msecs):03d}{self._zone} {record.levelname:<7} "
                f"{record.name}[{record.process}]: {_message(record)}")
        rid = getattr(record, "request_id", None)
        if rid and getattr(record, "fields", None) is None:
            line += f" request_id={rid}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _offset(local: time.struct_time) -> str:
    """`+01:00` (ISO 8601) from strftime's `+0100`."""
    zone = time.strftime("%z", local)
    return f"{zone[:3]}:{zone[3:]}" if len(zone) == 5 else zone


_NEEDS_QUOTES = re.compile(r'[\s"=]')
# Anything that could end a line or restyle a terminal: a client-chosen value (a model
# name, a 404's path) must never start a line of its own in the human format.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_control(m: re.Match[str]) -> str:
    ch = m.group()
    return _ESCAPES.get(ch) or (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")


def escape(text: str) -> str:
    """`text` with control characters written as escapes (`\\n`, `\\x1b`)."""
    return _CONTROL.sub(_escape_control, text) if _CONTROL.search(text) else text


# Either of the above: a value with none of them is written as it is.
_PLAIN_BREAKERS = re.compile(r'[\s"=\x00-\x1f\x7f-\x9f\u2028\u2029]')
_NUMBERS = (int, float, bool)


def _human(value: Any) -> str:
    kind = type(value)
    if kind in _NUMBERS:
        return str(value)
    text = value if kind is str else str(value)
    if text and _PLAIN_BREAKERS.search(text) is None:
        return text
    if not text or _NEEDS_QUOTES.search(text):
        return '"' + escape(text.replace("\\", "\\\\").replace('"', '\\"')) + '"'
    return escape(text)


def _safe_arg(value: Any) -> Any:
    if type(value) in (int, float, bool) or value is None or isinstance(value, _Summary):
        return value
    return escape(value if type(value) is str else str(value))


def _message(record: logging.LogRecord) -> str:
    """The record's message with every argument's control characters escaped. The format
    string itself is the program's own (a traceback may follow it on purpose)."""
    args = record.args
    if not args:
        return str(record.msg)
    if isinstance(args, dict):
        return str(record.msg) % {k: _safe_arg(v) for k, v in args.items()}
    try:
        return str(record.msg) % tuple(_safe_arg(a) for a in args)
    except (TypeError, ValueError):
        return record.getMessage()


class _Summary:
    """The human summary line, built only if a handler formats the message."""

    __slots__ = ("fields",)

    def __init__(self, fields: dict[str, Any]):
        self.fields = fields

    def __str__(self) -> str:
        parts = []
        for k, v in self.fields.items():
            if v is None:
                continue
            if type(v) is str and v and _PLAIN_BREAKERS.search(v) is None:
                parts.append(f"{k}={v}")  # what _human writes for a plain string, without the call
            else:
                parts.append(f"{k}={_human(v)}")
        return " ".join(parts)


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", None)
        doc: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": "request" if fields else record.getMessage(),
            "pid": record.process,
        }
        rid = getattr(record, "request_id", None)
        if rid:
            doc["request_id"] = rid
        if fields:
            doc.update({k: v for k, v in fields.items() if v is not None})
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str).decode()


def make_handler(fmt: str = "human", stream: IO[str] | None = None) -> logging.Handler:
    """A handler writing ProxAI's log format (`human` or `json`) to `stream` (default stderr)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _HumanFormatter())
    handler.addFilter(_RequestIdFilter())
    return handler


def setup(level: str = "info", fmt: str = "human", stream: IO[str] | None = None) -> None:
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_proxai", False):
            root.removeHandler(handler)
    handler = make_handler(fmt, stream)
    handler._proxai = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level.upper())
    # aiohttp's access log would duplicate the summary line.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def log_request(**fields: Any) -> None:
    ordered = {k: fields.get(k) for k in _FIELDS}
    if ordered["attempts"] is None and ordered["provider"] is not None and not fields.get("_pooled"):
        ordered["attempts"] = 1  # a route without pool or fallbacks has one; a pooled one counts its own (retry.py)
    status = fields.get("status") or 0
    level = logging.WARNING if status >= 500 or str(fields.get("outcome", "")).startswith("incomplete") else logging.INFO
    if request_log.isEnabledFor(level):
        # The record made and handled as Logger.log would, without its walk up the stack for
        # the caller's file and line (one per request; this function is the caller).
        record = request_log.makeRecord(request_log.name, level, __file__, 0, "%s", (_Summary(ordered),), None,
                                        "log_request", {"fields": ordered, "request_id": fields.get("request_id")})
        request_log.handle(record)

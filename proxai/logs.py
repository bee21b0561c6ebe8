"""Logging setup and the one-line request summary.

The summary names protocols, route, provider, models, status, duration and the
stream outcome. It never carries bodies, keys, headers or prompt text.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson

request_log = logging.getLogger("proxai.request")

_FIELDS = (
    "request_id", "method", "path", "client_protocol", "provider_protocol", "route", "provider",
    "model", "upstream_model", "stream", "status", "duration_ms", "outcome", "error",
)


class _HumanFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(record.created))
        line = f"{ts} {record.levelname:<7} {record.name}: {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _human(value: Any) -> str:
    text = str(value)
    if not text or any(c.isspace() or c in '"=' for c in text):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", None)
        doc: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": "request" if fields else record.getMessage(),
        }
        if fields:
            doc.update({k: v for k, v in fields.items() if v is not None})
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str).decode()


def setup(level: str = "info", fmt: str = "human") -> None:
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_proxai", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler._proxai = True  # type: ignore[attr-defined]
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _HumanFormatter())
    root.addHandler(handler)
    root.setLevel(level.upper())
    # aiohttp's access log would duplicate the summary line.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def log_request(**fields: Any) -> None:
    ordered = {k: fields.get(k) for k in _FIELDS}
    status = fields.get("status") or 0
    level = logging.WARNING if status >= 500 or str(fields.get("outcome", "")).startswith("incomplete") else logging.INFO
    summary = " ".join(f"{k}={_human(v)}" for k, v in ordered.items() if v is not None)
    request_log.log(level, "%s", summary, extra={"fields": ordered})

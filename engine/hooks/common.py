"""Small stateless hooks shared by every codec: JSON arguments, sums, data URLs, ids."""
from __future__ import annotations

import re
import time

import orjson

from ..errors import InvalidRequest


def json_dumps(scope, value=None):
    """Compact JSON text, non-ASCII kept (docs/mappings.md §6: lossy only in whitespace)."""
    value = scope.cur if value is None else value
    return orjson.dumps(value).decode()


def parse_arguments(scope, text=None):
    """Tool-call arguments (a JSON string) -> object. Empty means ``{}`` (docs/decisions.md #2);
    anything else that is not a JSON object is an error, never ``{}``."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return {}
    if isinstance(text, dict):
        return text
    try:
        value = orjson.loads(text)
    except (orjson.JSONDecodeError, TypeError):
        scope.fail("tool call arguments are not valid JSON", "arguments" if scope.path else None)
    if not isinstance(value, dict):
        scope.fail("tool call arguments must be a JSON object", "arguments" if scope.path else None)
    return value


def total(scope, values=None):
    """Sum of the non-null numbers in ``values``; null when all are null."""
    nums = [v for v in values or () if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return sum(nums) if nums else None


def minus_floor0(scope, value=None, minus=None):
    """``value - sum(minus)`` floored at 0 (Anthropic input_tokens exclude cache reads and writes)."""
    if value is None:
        return None
    return max(0, value - sum(v for v in minus or () if isinstance(v, (int, float))))


_DATA_URL = re.compile(r"^data:([\w.+-]+/[\w.+-]+)?((?:;[\w-]+=[^;,]*)*);base64,(.*)$", re.S)


def parse_data_url(scope, url=None):
    """``data:<mt>;base64,<b64>`` -> ``{media_type, data}``; null when not a base64 data URL."""
    if not isinstance(url, str) or not url.startswith("data:"):
        return None
    match = _DATA_URL.match(url)
    if match is None:
        scope.fail("malformed data URL (expected data:<media type>;base64,<data>)")
    return {"media_type": match.group(1) or "application/octet-stream", "data": match.group(3)}


def data_url(scope, media_type=None, data=None):
    return f"data:{media_type};base64,{data}"


def join(scope, values=None, sep=""):
    parts = [v for v in values or () if isinstance(v, str)]
    return sep.join(parts) if parts else None


def prefixed(scope, prefix="", value=None):
    """Minted ids derive from the upstream id (docs/mappings.md §14): ``<prefix><upstream id>``."""
    return f"{prefix}{value}" if value is not None else None


def now(scope):
    return int(time.time())


def trace(scope, message=""):
    """Record a trace line (never payload text) on the request context."""
    if scope.ctx is not None:
        scope.ctx.trace(str(message))
    return None


HOOKS = {
    "json.dumps": json_dumps,
    "arguments.parse": parse_arguments,
    "math.total": total,
    "math.minus_floor0": minus_floor0,
    "data_url.parse": parse_data_url,
    "data_url.build": data_url,
    "text.join": join,
    "id.prefixed": prefixed,
    "time.now": now,
    "trace": trace,
}

# A hook that must not be reachable from rules would go here; InvalidRequest is
# re-exported for hook modules that raise it directly.
__all__ = ["HOOKS", "InvalidRequest"]

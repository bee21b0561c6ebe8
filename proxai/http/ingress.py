"""Ingress: a request body becomes a JSON object of the right top-level shape, or a 400.

The shape of each endpoint's body is data: one JSON Schema per client protocol
under schemas/requests/, compiled once. Only the top level is checked (field
types, required fields, sane bounds); nested content is the translator's or the
provider's business. Unknown fields pass. Error messages name the field and
what it must be, never the value sent, which may be prompt text.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import orjson
from aiohttp import web
from aiohttp.http_exceptions import ContentEncodingError
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from proxai.http.errors import InvalidRequest, RequestTimeout, RequestTooLarge
from engine.ruleset import SCHEMAS

SCHEMA_DIR = SCHEMAS / "requests"

# Deeper documents are refused: translation walks bodies recursively, and an
# unbounded depth would turn a hostile body into a crash instead of a 400.
MAX_DEPTH = 128


def _compile(schema: dict) -> Draft202012Validator:
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


# Compiled once, at import: a broken schema file stops the server from starting.
VALIDATORS = {path.stem: _compile(json.loads(path.read_text(encoding="utf-8")))
              for path in sorted(SCHEMA_DIR.glob("*.json"))}
# A protocol with no schema of its own (one added by a rules folder) gets the least
# every generation body needs: the model to route on, and a boolean stream flag, in the
# fields its descriptor names (endpoints.generate model and stream).
BODY_FIELDS = ("model", "stream")


def _default(fields: tuple[str, str]) -> Draft202012Validator:
    model, stream = fields
    return _compile({"type": "object", "required": [model], "properties": {
        model: {"type": "string", "minLength": 1}, stream: {"type": "boolean"}}})


DEFAULT = _default(BODY_FIELDS)


# --- the fast path ---------------------------------------------------------------------
# jsonschema costs tens of microseconds per body even when it passes. These schemas
# only use a handful of top-level keywords, so each compiles into a plain check that
# accepts exactly what the schema accepts; any failure (or a keyword the fast path
# does not know) goes to jsonschema, which then words the error.

_TYPES = {
    "string": lambda v: type(v) is str,
    "boolean": lambda v: type(v) is bool,
    "null": lambda v: v is None,
    "object": lambda v: type(v) is dict,
    "array": lambda v: type(v) is list,
    "integer": lambda v: (type(v) is int) or (type(v) is float and v.is_integer()),
    "number": lambda v: type(v) in (int, float),
}
_FAST_KEYWORDS = {"type", "description", "minLength", "maxLength", "minimum", "maximum", "minItems", "maxItems"}


def _fast_property(schema: dict):
    if not set(schema) <= _FAST_KEYWORDS:
        return None
    types = schema.get("type")
    types = [types] if isinstance(types, str) else list(types or ())
    checks = [_TYPES[t] for t in types if t in _TYPES]
    if len(checks) != len(types):
        return None
    lo_len, hi_len = schema.get("minLength"), schema.get("maxLength")
    lo, hi = schema.get("minimum"), schema.get("maximum")
    lo_items, hi_items = schema.get("minItems"), schema.get("maxItems")

    def ok(value) -> bool:
        if checks and not any(check(value) for check in checks):
            return False
        kind = type(value)
        if kind is str:
            # jsonschema counts code points, as len() does
            return (lo_len is None or len(value) >= lo_len) and (hi_len is None or len(value) <= hi_len)
        if kind in (int, float):
            return (lo is None or value >= lo) and (hi is None or value <= hi)
        if kind is list:
            return (lo_items is None or len(value) >= lo_items) and (hi_items is None or len(value) <= hi_items)
        return True
    return ok


def _fast_checker(schema: dict):
    if not set(schema) <= {"$schema", "title", "description", "type", "required", "properties"} or schema.get("type") != "object":
        return None
    props = {}
    for name, sub in (schema.get("properties") or {}).items():
        check = _fast_property(sub)
        if check is None:
            return None
        props[name] = check
    required = tuple(schema.get("required") or ())

    def valid(body: dict) -> bool:
        for name in required:
            if name not in body:
                return False
        for name, check in props.items():
            if name in body and not check(body[name]):
                return False
        return True
    return valid


FAST = {protocol: _fast_checker(v.schema) for protocol, v in VALIDATORS.items()}
_FAST_DEFAULT = _fast_checker(DEFAULT.schema)


# The Content-Encodings aiohttp's server decodes before the body is read (gzip and deflate
# by zlib, br with the brotli package, zstd with backports.zstd: Codex compresses its
# requests with zstd). The decoded bytes are what `limit` bounds, read a bounded chunk at
# a time, so a small compressed body that inflates without end stops at the limit.
DECODED = frozenset({"gzip", "deflate", "br", "zstd"})


def _encoding(request: web.Request) -> str | None:
    value = request.headers.get("Content-Encoding", "").strip().lower()
    if value in ("", "identity"):
        return None
    if value not in DECODED:
        raise InvalidRequest("the request's Content-Encoding is not supported; send the body as gzip, deflate, br, "
                             "zstd or unencoded", param="Content-Encoding", status=415)
    return value


async def read(request: web.Request, limit: int, timeout: float) -> bytes:
    """The whole request body: at most `limit` bytes (else 413), all of it within `timeout`
    seconds (else 408). Called before the request takes a concurrency slot, so a client
    that stalls mid-upload holds only its own connection. A compressed body is decoded
    (DECODED): the limit is its decoded size, and one that does not decode is a 400."""
    encoding = _encoding(request)
    too_large = f"request body is larger than the limit of {limit} bytes"
    if encoding is not None:
        too_large += f" once decoded (Content-Encoding: {encoding})"
    if request.content_length is not None and request.content_length > limit:
        raise RequestTooLarge(too_large)
    try:
        if request.content.is_eof():  # the whole body came with the head: nothing to wait for
            raw = await request.read()
        else:
            async with asyncio.timeout(timeout):
                raw = await request.read()
    except TimeoutError:
        raise RequestTimeout(
            f"the request body did not arrive within server.request_body_timeout_secs ({timeout:g}s)"
        ) from None
    except web.HTTPRequestEntityTooLarge:
        raise RequestTooLarge(too_large) from None
    except web.RequestPayloadError as exc:
        if encoding is None or not isinstance(exc.__cause__, ContentEncodingError):
            raise
        # The rest of the body cannot be read either: the connection closes after the answer,
        # and the body counts as read (aiohttp would drain it and log the decoder's error again).
        request.protocol.close()
        request.content.feed_eof()
        raise InvalidRequest(f"request body could not be decoded: it is not valid {encoding} data "
                             f"(Content-Encoding: {encoding})", param="Content-Encoding") from None
    if len(raw) > limit:
        raise RequestTooLarge(too_large)
    return raw


def parse(protocol: str, raw: bytes, fields: tuple[str, str] = BODY_FIELDS) -> dict[str, Any]:
    """The request body as a dict, checked against the endpoint's schema (else the least:
    the `fields` naming the model and the stream flag)."""
    body = decode(raw)
    check(protocol, body, fields)
    return body


def decode(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        # only now: strip() copies the body, which an agent's request makes hundreds of KB
        if not raw.strip():
            raise InvalidRequest("request body is empty; expected a JSON object") from None
        body = _decode_slow(raw)
    if not isinstance(body, dict):
        raise InvalidRequest("request body must be a JSON object")
    _check_depth(raw, body)
    return body


def _decode_slow(raw: bytes) -> Any:
    """The stdlib parser, for what orjson refuses although JSON allows it (integers beyond 64 bits).
    It still refuses invalid UTF-8, NaN and Infinity, and unpaired surrogate escapes."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequest(f"request body is not valid UTF-8 (byte {exc.start})") from None
    try:
        body = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise InvalidRequest(f"request body is nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as exc:
        where = f" (line {exc.lineno}, column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
        raise InvalidRequest(f"request body is not valid JSON{where}") from None
    try:
        # A lone surrogate escape (\ud800) parses, but no provider can take it as UTF-8.
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequest("request body contains an unpaired UTF-16 surrogate escape") from None
    except RecursionError:
        raise InvalidRequest(f"request body is nested more than {MAX_DEPTH} levels deep") from None
    return body


def _reject_constant(name: str) -> Any:
    # NaN and Infinity are not JSON, though Python's parser takes them.
    raise ValueError(f"{name} is not valid JSON")


def _check_depth(raw: bytes, body: dict) -> None:
    if raw.count(b"{") + raw.count(b"[") <= MAX_DEPTH:
        return  # cannot be that deep: skip the walk
    level: list = [body]
    depth = 1
    while level:
        if depth > MAX_DEPTH:
            raise InvalidRequest(f"request body is nested more than {MAX_DEPTH} levels deep")
        # one level at a time: the comprehensions keep this cheap on large bodies
        level = [c for node in level for c in (node.values() if type(node) is dict else node)
                 if type(c) is dict or type(c) is list]
        depth += 1


_DEFAULTS: dict[tuple[str, str], Draft202012Validator] = {BODY_FIELDS: DEFAULT}


def check(protocol: str, body: dict[str, Any], fields: tuple[str, str] = BODY_FIELDS) -> None:
    """Raise InvalidRequest naming the first field whose top-level shape is wrong."""
    if protocol not in VALIDATORS and fields != BODY_FIELDS:
        if fields not in _DEFAULTS:
            _DEFAULTS[fields] = _default(tuple(fields))
        v = _DEFAULTS[fields]
        error = _first_error(v, body)
        if error is not None:
            raise _describe(error, body)
        return
    fast = FAST.get(protocol, _FAST_DEFAULT)
    if fast is not None and fast(body):
        return
    v = VALIDATORS.get(protocol, DEFAULT)
    error = _first_error(v, body)
    if error is not None:
        raise _describe(error, body)


def _first_error(v: Draft202012Validator, body: dict) -> ValidationError | None:
    # Sorted by path so the report is stable: the earliest field wins.
    errors = sorted(v.iter_errors(body), key=lambda e: [str(p) for p in e.absolute_path])
    return errors[0] if errors else None


def _describe(error: ValidationError, body: dict) -> InvalidRequest:
    path = list(error.absolute_path)
    if error.validator == "required":
        missing = next((name for name in error.validator_value if name not in (error.instance or {})), None)
        param = _param([*path, missing] if missing else path)
        return InvalidRequest(f"{param} is required", param=param)
    param = _param(path)
    if not path:
        return InvalidRequest("request body must be a JSON object")
    expected = error.schema.get("description") if isinstance(error.schema, dict) else None
    if expected:
        return InvalidRequest(f"{param} must be {expected}", param=param)
    return InvalidRequest(f"{param} is invalid ({error.validator})", param=param)


def _param(path: list) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out

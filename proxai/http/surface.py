"""The proxy as the modules around it see it.

The endpoint modules (token counting, Gemini paths, models, stored Responses,
conversations, background runs, server-side tools), the inspector, reload and drain
are given the running proxy; they reach it through the app keys, the JSON writer
and the public methods declared here, never by importing `proxai.http.app` (which imports
them to register their routes).
"""
from __future__ import annotations

import json
from typing import Any, Protocol

import orjson
from aiohttp import web

from proxai.observability import capture

from proxai.http import requestid
from proxai.http import errors as E
PROXY_KEY: web.AppKey["Proxy"] = web.AppKey("proxai.proxy", object)  # type: ignore[arg-type]
INFO_KEY: web.RequestKey[dict] = web.RequestKey("proxai.info", dict)
CAPTURE_KEY: web.RequestKey[capture.RequestCapture] = web.RequestKey("proxai.observability.capture", capture.RequestCapture)


def dump_json(body: Any) -> bytes:
    try:
        return orjson.dumps(body)
    except TypeError:  # integers beyond 64 bits
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def json_response(status: int, data: bytes, upstream_headers, info: dict, wire) -> web.Response:
    """A JSON answer with the provider's preserved headers, the request id and the
    proxy's own headers; the status goes on the request's log record."""
    response = web.Response(status=status, body=data)
    response.headers["Content-Type"] = "application/json"
    response.headers.update(E.preserved_headers(upstream_headers))
    requestid.stamp(response.headers, info["request_id"], wire.request_id_header(info.get("client_protocol")),
                    info.get("upstream_request_id"))
    response.headers.update(info.get("_headers") or {})
    info["status"] = status
    return response


class Proxy(Protocol):
    """What a satellite may use of the running proxy (proxai.http.app.Proxy implements it)."""

    config: Any
    engine: Any
    router: Any
    metrics: Any
    state: Any
    inspector: Any
    limits: Any
    recorder: Any
    tracing: Any
    transport: Any
    resilience: Any
    open_streams: Any
    live: Any

    def authorize(self, request: web.Request, key: str | None = None) -> None: ...
    async def admit(self, request: web.Request, info: dict) -> bytes: ...
    def capture_inbound(self, request: web.Request, raw: bytes) -> None: ...
    def route(self, model: str, protocol: str, info: dict) -> Any: ...
    def slot(self) -> Any: ...
    def swap(self, generation: Any) -> None: ...
    def translation_context(self, request: web.Request, protocol: str, match: Any, body: dict) -> Any: ...
    async def serve(self, request: web.Request, protocol: str, match: Any, body: dict, raw: bytes,
                    stream: bool, info: dict) -> web.StreamResponse: ...
    async def passthrough(self, request: web.Request, protocol: str, provider: Any, raw: bytes, stream: bool,
                          info: dict, *args: Any, **kwargs: Any) -> web.StreamResponse: ...
    async def translate(self, request: web.Request, protocol: str, match: Any, body: dict, stream: bool,
                        info: dict, turn: Any = None) -> web.StreamResponse: ...
    async def send(self, request: web.Request, provider: Any, body: bytes, stream: bool, info: dict,
                   target: Any) -> Any: ...
    async def raise_for_status(self, upstream: Any, provider: Any) -> None: ...

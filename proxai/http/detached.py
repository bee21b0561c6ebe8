"""A client request served somewhere other than its own connection.

A background run writes into the state store and a WebSocket turn into socket messages,
but both go through the same pipeline as an HTTP request: the pipeline reads the
request's headers, query and version from the real request and keeps its per-request
state (log record, capture) in the request mapping. `DetachedRequest` is that request
with its own state and its own response writer (any object with aiohttp's payload
writer methods the response uses).
"""
from __future__ import annotations

from typing import Any

from aiohttp import web


class Writer:
    """The parts of aiohttp's payload writer a response calls that have nothing to do
    off a connection; a subclass says where `write` and `write_eof` send the bytes."""

    buffer_size = 0
    output_size = 0
    length = None

    async def write_headers(self, status_line: str, headers) -> None:
        pass

    def send_headers(self) -> None:
        pass

    async def drain(self) -> None:
        pass

    def enable_chunking(self) -> None:
        pass

    def enable_compression(self, *args, **kwargs) -> None:
        pass


class DetachedRequest:
    fixed_response_id: str | None = None  # a background run's: minted before the provider answered

    def __init__(self, request: web.Request, writer: Any, state: dict):
        self._inner = request
        self._payload_writer = writer
        self._state = state

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def _prepare_hook(self, response) -> None:
        pass

    def get(self, key, default=None):
        return self._state.get(key, default)

    def __getitem__(self, key):
        return self._state[key]

    def __setitem__(self, key, value) -> None:
        self._state[key] = value

    def __contains__(self, key) -> bool:
        return key in self._state

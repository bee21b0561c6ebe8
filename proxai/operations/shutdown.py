"""Graceful shutdown: let requests in flight finish, then end open streams properly.

On SIGTERM/SIGINT the server stops accepting connections and closes idle ones
(aiohttp does that), then `drain` waits up to `server.shutdown_timeout_secs`
for requests in flight. Streams still open after that end with their client
protocol's in-stream error ("the proxy is shutting down"), never with a bare
cut, and are logged with outcome `incomplete:shutdown`. Whatever remains after
AFTER_DRAIN_SECS more is cancelled by aiohttp.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Iterator

from aiohttp import web

log = logging.getLogger("proxai")

AFTER_DRAIN_SECS = 3.0
_POLL_SECS = 0.05


class OpenStreams:
    """The relays of the streams being written right now."""

    def __init__(self) -> None:
        self._relays: set[Any] = set()

    def __len__(self) -> int:
        return len(self._relays)

    @contextlib.contextmanager
    def track(self, relay: Any) -> Iterator[None]:
        self._relays.add(relay)
        try:
            yield
        finally:
            self._relays.discard(relay)

    def stop_all(self) -> int:
        relays = list(self._relays)
        for relay in relays:
            relay.stop()
        return len(relays)


async def drain(app: web.Application) -> None:
    """The app's on_shutdown hook."""
    from proxai.http.surface import PROXY_KEY

    proxy = app[PROXY_KEY]
    deadline = proxy.config.server.shutdown_timeout_secs
    loop = asyncio.get_running_loop()
    if proxy.active:
        log.info("shutting down: waiting up to %gs for %d requests in flight (%d streams)",
                 deadline, proxy.active, len(proxy.open_streams))
    end = loop.time() + deadline
    while proxy.active and loop.time() < end:
        await asyncio.sleep(_POLL_SECS)
    if not proxy.active:
        return
    stopped = proxy.open_streams.stop_all()
    await proxy.background.stop(AFTER_DRAIN_SECS / 2)  # runs still going end failed, saying why
    log.warning("shutdown deadline of %gs passed: ending %d open streams with an in-stream error; "
                "%d other requests in flight are cut", deadline, stopped, max(0, proxy.active - stopped))
    # Give the stopped streams a moment to write their error events and be logged.
    end = loop.time() + AFTER_DRAIN_SECS / 2
    while len(proxy.open_streams) and loop.time() < end:
        await asyncio.sleep(_POLL_SECS)

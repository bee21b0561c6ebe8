"""Per-client limits of named `server.api_keys` entries (docs/client-keys.md "Client keys and limits").

The counters live in the state store's key-value part, so several instances over one
Redis share them (sqlite: the processes of one machine; without a store: this process):

* `requests_per_minute`: generation requests in the current clock minute (a fixed
  window: `limit:<name>:rpm:<minute>`, expiring after two minutes);
* `tokens_per_minute`: input plus output tokens of the answers finished in the current
  minute; a request is refused once the window is spent, so one answer may overshoot;
* `concurrent_streams`: streams open now (`limit:<name>:streams`). The counter expires
  `STREAMS_TTL_SECS` after it was created and is dropped whenever it returns to zero,
  so the streams of an instance killed mid-stream are not counted for ever.

Over a limit is a 429 in the client's protocol with `Retry-After`. When the store
cannot be reached the request is served (the limits fail open) and a warning is logged,
at most once a minute: a Redis blip must not stop every client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time

from proxai.http import errors as E
from proxai.routing.config import ClientKey
from proxai.state import StateError, StateStore
from proxai.state.memory import MemoryStore

log = logging.getLogger("proxai.limits")

WINDOW_SECS = 60
STREAMS_TTL_SECS = 600.0
_WARN_EVERY_SECS = 60.0
_NO_SLOT = contextlib.nullcontext()


class Limits:
    def __init__(self, store: StateStore | None):
        self.store = store if store is not None else MemoryStore()
        self._warned = 0.0
        self._spending: set[asyncio.Task] = set()

    async def admit(self, client: ClientKey | None) -> None:
        """Before a generation request: refuse it when the client's minute is spent."""
        if client is None or not client.limited:
            return
        minute, retry_after = _window()
        try:
            if client.tokens_per_minute is not None:
                spent = await self.store.kv_get(_key(client, "tpm", minute))
                if spent is not None and int(spent) >= client.tokens_per_minute:
                    raise _limited(client, f"its tokens_per_minute ({client.tokens_per_minute})", retry_after)
            if client.requests_per_minute is not None:
                count = await self.store.kv_incr(_key(client, "rpm", minute), ttl_secs=2 * WINDOW_SECS)
                if count > client.requests_per_minute:
                    raise _limited(client, f"its requests_per_minute ({client.requests_per_minute})", retry_after)
        except StateError as exc:
            self._unavailable(exc)

    def spend_later(self, client: ClientKey, tokens: int) -> None:
        """`spend` off the request's path: the answer does not wait for the store."""
        task = asyncio.get_running_loop().create_task(self.spend(client, tokens))
        self._spending.add(task)
        task.add_done_callback(self._spending.discard)

    async def spend(self, client: ClientKey | None, tokens: int) -> None:
        """After an answer: its tokens count against the client's current minute."""
        if client is None or client.tokens_per_minute is None or tokens <= 0:
            return
        minute, _ = _window()
        try:
            await self.store.kv_incr(_key(client, "tpm", minute), tokens, ttl_secs=2 * WINDOW_SECS)
        except StateError as exc:
            self._unavailable(exc)

    def stream_slot(self, info: dict, stream: bool):
        """Around a request, before the provider is called: a stream holds one of the
        client's concurrent_streams while it is open (nothing to hold otherwise). The slot
        is also on `info["_stream_slot"]`, so the stream can free it before its last byte."""
        client = info.get("_client")
        if stream and client is not None and client.concurrent_streams is not None:
            slot = info["_stream_slot"] = StreamSlot(self, client)
            return slot
        return _NO_SLOT

    async def _release(self, key: str) -> None:
        try:
            if await self.store.kv_incr(key, -1, ttl_secs=STREAMS_TTL_SECS) <= 0:
                await self.store.kv_delete(key)
        except StateError as exc:
            self._unavailable(exc)

    def _unavailable(self, exc: StateError) -> None:
        now = time.monotonic()
        if now - self._warned >= _WARN_EVERY_SECS:
            self._warned = now
            log.warning("client limits not enforced: the state store is unavailable (%s)", exc)


def _window() -> tuple[int, int]:
    """The current clock minute and the seconds until the next one starts (at least 1)."""
    now = time.time()
    minute = int(now // WINDOW_SECS)
    return minute, max(1, math.ceil((minute + 1) * WINDOW_SECS - now))


def _key(client: ClientKey, what: str, minute: int | None = None) -> str:
    return f"limit:{client.name}:{what}" + (f":{minute}" if minute is not None else "")


def _limited(client: ClientKey, which: str, retry_after: int) -> E.RateLimited:
    return E.RateLimited(f"client {client.name!r} is over {which}; retry after {retry_after}s",
                         headers={"Retry-After": str(retry_after)})


class StreamSlot:
    """One held concurrent_streams slot; `release()` may be called early and runs once."""

    def __init__(self, limits: Limits, client: ClientKey):
        self.limits = limits
        self.client = client
        self.key = _key(client, "streams")
        self.held = False

    async def __aenter__(self) -> "StreamSlot":
        try:
            open_now = await self.limits.store.kv_incr(self.key, ttl_secs=STREAMS_TTL_SECS)
        except StateError as exc:
            self.limits._unavailable(exc)
            return self
        self.held = True
        if open_now > self.client.concurrent_streams:
            await self.release()
            raise _limited(self.client, f"its concurrent_streams ({self.client.concurrent_streams})", 1)
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.release()

    async def release(self) -> None:
        if self.held:
            self.held = False
            await self.limits._release(self.key)

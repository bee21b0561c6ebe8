"""Streaming relay: upstream SSE to the client, event by event, with terminal watch.

`StreamRelay` is shared by both kinds of stream:

* pass-through (same protocol): each upstream event's bytes are written
  unchanged as soon as the event is complete; a `PassthroughWatch` observes
  the events for the terminal signal, tool-argument state, upstream error
  events and malformed events (replaced by an error, never relayed);
* translation: each parsed event is fed to the engine's stream translator and
  its output written.

Both observers have the same interface as the engine's stream object: `feed`,
`eof`, `fail`, `complete`, `failed`, `in_tool_arguments`. A stream that ends
before its terminal event gets the client protocol's in-stream error.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

import aiohttp
import orjson
from aiohttp import web

from proxai.errors import (
    ANTHROPIC, CHAT, GEMINI, RESPONSES, Overloaded, StreamError, UpstreamProtocolError, UpstreamTimeout, render_stream,
)
from proxai.sse import EventTooLarge, SSEEvent, SSEParser

log = logging.getLogger("proxai.stream")

# An SSE comment: every SDK's parser skips it, and it keeps proxies and load balancers
# between the client and us from cutting a stream that is quiet while the model thinks.
HEARTBEAT = b": keep-alive\n\n"
# Bytes relayed between two forced turns of the event loop (see transport.YIELD_EVERY_BYTES).
_YIELD_EVERY_BYTES = 1 << 20
SHUTDOWN_MESSAGE = "the proxy is shutting down; retry the request"

_RESPONSES_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


class StreamObserver(Protocol):
    complete: bool
    failed: bool
    in_tool_arguments: bool

    def feed(self, event: SSEEvent) -> list[bytes]: ...
    def eof(self) -> list[bytes]: ...
    def fail(self, kind: str, message: str, status: int = 502) -> list[bytes]: ...


class PassthroughWatch:
    """Observes a same-protocol stream; emits bytes only for a failure the upstream did not report.

    `feed` returns [] for an event to forward unchanged, or the in-stream error that
    replaces a malformed event (data that is not a JSON object; Chat's `[DONE]` aside).
    """

    def __init__(self, protocol: str, tables=None):
        self.protocol = protocol
        self.tables = tables  # the engine's tables (error types by status); None: the built-in ones
        self.complete = False
        self.failed = False
        self.failed_here = False  # the failure is the proxy's own (EOF, stall, malformed), not the upstream's
        self.error_seen = False  # Responses: the provider sent an `error` event
        self.in_tool_arguments = False
        self.usage: dict[str, Any] | None = None
        self.finish_seen = False  # Chat: a chunk with finish_reason arrived
        self.clean_eof_without_done = False
        self._seq = -1  # Responses: highest sequence_number seen
        self._snapshot: dict[str, Any] | None = None  # Responses: last lifecycle snapshot
        self._items: dict[int, Any] = {}  # Responses: output items seen, by output_index
        self._feed = {CHAT: self._feed_chat, RESPONSES: self._feed_responses, ANTHROPIC: self._feed_anthropic,
                      GEMINI: self._feed_gemini}[protocol]

    def feed(self, event: SSEEvent) -> list[bytes]:
        if self.complete or self.failed:
            return []
        if self.protocol == CHAT and event.data == "[DONE]":
            self.complete = True
            self.in_tool_arguments = False
            return []
        try:
            payload = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            payload = None
        if not isinstance(payload, dict):
            return self.fail("malformed", f"the provider sent a malformed {self.protocol} stream event (not a JSON object)")
        self._feed(event.event, payload)
        return []

    # Chat: [DONE] ends the stream; a top-level "error" object is the upstream's own failure.
    def _feed_chat(self, name: str | None, payload: dict) -> None:
        if payload.get("error"):
            self.failed = True
            return
        choices = payload.get("choices")
        if not isinstance(choices, list):
            return
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            if choice.get("finish_reason"):
                self.finish_seen = True
                self.in_tool_arguments = False
                return
            delta = choice.get("delta")
            if not self.finish_seen and isinstance(delta, dict) and delta.get("tool_calls"):
                self.in_tool_arguments = True

    def _feed_responses(self, name: str | None, payload: dict) -> None:
        seq = payload.get("sequence_number")
        if isinstance(seq, int) and seq > self._seq:
            self._seq = seq
        if not name:  # servers that omit the event line: fall back to data.type
            name = payload.get("type") if isinstance(payload.get("type"), str) else ""
        if name in _RESPONSES_TERMINAL:
            if name == "response.failed":
                self.failed = True
            else:
                self.complete = True
            self.in_tool_arguments = False
        elif name == "error":
            # Not terminal: a `response.failed` normally follows, and is relayed too.
            self.error_seen = True
            self.in_tool_arguments = False
        elif name == "response.created" or name == "response.in_progress":
            if isinstance(payload.get("response"), dict):
                self._snapshot = payload["response"]
        elif name == "response.output_item.added" or name == "response.output_item.done":
            if isinstance(payload.get("output_index"), int):
                self._items[payload["output_index"]] = payload.get("item")
            if name == "response.output_item.done":
                self.in_tool_arguments = False
        elif name == "response.function_call_arguments.delta":
            self.in_tool_arguments = True
        elif name == "response.function_call_arguments.done":
            self.in_tool_arguments = False

    def _feed_anthropic(self, name: str | None, payload: dict) -> None:
        if not name:
            name = payload.get("type") if isinstance(payload.get("type"), str) else ""
        if name == "message_stop":
            self.complete = True
            self.in_tool_arguments = False
        elif name == "error":
            self.failed = True
        elif name == "content_block_start":
            block = payload.get("content_block")
            self.in_tool_arguments = isinstance(block, dict) and block.get("type") == "tool_use"
        elif name == "content_block_stop":
            self.in_tool_arguments = False

    # Gemini: no terminal event; a chunk with a finishReason completes the stream, and an
    # `error` object is the upstream's own failure. Calls arrive whole, never in fragments.
    def _feed_gemini(self, name: str | None, payload: dict) -> None:
        if payload.get("error"):
            self.failed = True
            return
        candidates = payload.get("candidates")
        if isinstance(candidates, list) and any(isinstance(c, dict) and c.get("finishReason") for c in candidates):
            self.complete = True
        elif isinstance(payload.get("promptFeedback"), dict) and payload["promptFeedback"].get("blockReason"):
            self.complete = True  # a blocked prompt: no candidates at all

    def eof(self) -> list[bytes]:
        if self.complete or self.failed:
            return []
        if self.error_seen:  # the provider already reported its failure to the client
            self.failed = True
            return []
        if self.protocol == CHAT and self.finish_seen:
            # docs/decisions.md #12: several servers omit [DONE] after the finish chunk.
            self.complete = True
            self.clean_eof_without_done = True
            return []
        return self.fail("incomplete", "the upstream stream ended before its terminal event")

    def fail(self, kind: str, message: str, status: int = 502) -> list[bytes]:
        if self.complete or self.failed:
            return []
        self.failed = self.failed_here = True
        if self.error_seen:
            return []  # the client already has the provider's error event; a second would mislead
        self.in_tool_arguments = False
        err = StreamError(message, status=status)
        if self.protocol != RESPONSES:
            return [render_stream(self.protocol, err, tables=self.tables)]
        snapshot = dict(self._snapshot or {})
        snapshot["output"] = [self._items[i] for i in sorted(self._items) if self._items[i] is not None]
        snapshot["usage"] = None
        return [render_stream(RESPONSES, err, sequence_number=self._seq + 1, response=snapshot, tables=self.tables)]


class StreamRelay:
    """Reads an upstream SSE body and writes the client's stream.

    `prime()` runs before the client's 200 is committed: it waits for the first
    complete upstream event, so a failure before it is still an HTTP error.
    `run()` then relays to the end and returns the stream outcome for the log.

    Output is written event by event: in pass-through each complete event's own
    bytes, in translation what the observer makes of it. A partial event is
    never written, so an error appended after a broken upstream always parses.
    """

    def __init__(
        self,
        upstream: aiohttp.ClientResponse,
        observer: StreamObserver,
        *,
        raw: bool,
        idle_timeout: float,
        tool_call_timeout: float,
        provider_name: str,
        max_event_bytes: int | None = None,
        heartbeat: float = 0,
    ):
        self.upstream = upstream
        self.observer = observer
        self.raw = raw
        self.idle_timeout = idle_timeout
        self.tool_call_timeout = tool_call_timeout
        self.provider_name = provider_name
        self.parser = SSEParser(max_event_bytes)
        self.heartbeat = heartbeat  # seconds of silence toward the client before a comment; 0: never
        self._stopping = False
        self._too_large = False
        self._unyielded = 0
        self._pending: list[bytes] = []
        self._eof = False
        self._seen_event = False
        self._relayed = 0  # pass-through events relayed unchanged
        self.outcome = "open"

    @property
    def _broken(self) -> bool:
        """The stream is over. In pass-through, what follows the provider's own error is still its
        to say and is relayed unchanged; after a failure the proxy declared, nothing is."""
        observer = self.observer
        return observer.failed and (not self.raw or getattr(observer, "failed_here", False))

    @property
    def _tool_stall_applies(self) -> bool:
        return self.observer.in_tool_arguments and self.tool_call_timeout < self.idle_timeout

    def stop(self) -> None:
        """Shutdown: end the stream now with the client protocol's in-stream error."""
        self._stopping = True
        self.upstream.close()  # the pending read fails, and run() or prime() sees _stopping

    async def _read(self, client: web.StreamResponse | None = None) -> bytes | None:
        """One upstream chunk; b"" at EOF; None on the idle or tool-call stall timeout.
        With a `client` and a heartbeat, a heartbeat comment goes out for every quiet interval."""
        limit = self.tool_call_timeout if self._tool_stall_applies else self.idle_timeout
        beat = self.heartbeat if client is not None and 0 < self.heartbeat < limit else 0
        if not beat:
            try:
                async with asyncio.timeout(limit):
                    return await self.upstream.content.readany()
            except (TimeoutError, aiohttp.ServerTimeoutError):
                return None
        loop = asyncio.get_running_loop()
        end = loop.time() + limit
        while True:
            left = end - loop.time()
            if left <= 0:
                return None
            try:
                async with asyncio.timeout(min(beat, left)):
                    return await self.upstream.content.readany()
            except aiohttp.ServerTimeoutError:
                return None
            except TimeoutError:
                if end - loop.time() > 0:
                    await client.write(HEARTBEAT)

    def _take(self, chunk: bytes) -> list[bytes]:
        out: list[bytes] = []
        observer = self.observer
        try:
            blocks = self.parser.feed_raw(chunk)
        except EventTooLarge as exc:
            if not self._seen_event:
                raise UpstreamProtocolError(
                    f"provider {self.provider_name!r} sent a stream event larger than server.max_sse_event_bytes "
                    f"({exc.limit} bytes)"
                ) from None
            self._too_large = True
            return observer.fail("event_too_large", f"the provider sent a stream event larger than "
                                                    f"server.max_sse_event_bytes ({exc.limit} bytes)")
        for raw, event in blocks:
            if self._broken:
                break  # nothing follows a failure of the proxy's making
            if event is None:  # comment or keep-alive
                if self.raw:
                    out.append(raw)
                continue
            self._seen_event = True
            produced = observer.feed(event)
            if self.raw:
                # The watch only speaks to replace a malformed event with an error.
                if not produced:
                    self._relayed += 1
                out.extend(produced or [raw])
            else:
                out.extend(produced)
        return out

    async def prime(self) -> None:
        """Buffer upstream bytes until the first complete event (HTTP errors still possible)."""
        while not self._seen_event:
            try:
                chunk = await self._read()
            except (aiohttp.ClientError, ConnectionError) as exc:
                if self._stopping:
                    raise Overloaded(SHUTDOWN_MESSAGE, headers={"Retry-After": "1"}) from None
                raise UpstreamProtocolError(
                    f"provider {self.provider_name!r} dropped the stream before its first event ({type(exc).__name__})"
                ) from None
            if chunk is None:
                raise UpstreamTimeout(f"provider {self.provider_name!r} sent no event for {self.idle_timeout:g}s")
            if not chunk:
                raise UpstreamProtocolError(f"provider {self.provider_name!r} ended the stream before its first event")
            out = self._take(chunk)
            if self._relayed == 0 and getattr(self.observer, "failed_here", False):
                raise UpstreamProtocolError(f"provider {self.provider_name!r} sent a malformed first stream event")
            self._pending.extend(out)

    @property
    def primed(self) -> bytes:
        """What prime() buffered for the client (its first event or events)."""
        return b"".join(self._pending)

    async def run(self, client: web.StreamResponse) -> str:
        observer = self.observer
        try:
            await self._write_all(client, self._pending)
            self._pending.clear()
            while not self._broken:
                try:
                    chunk = await self._read(client)
                except (aiohttp.ClientError, ConnectionError) as exc:
                    if observer.complete or observer.failed:
                        break
                    if self._stopping:
                        await self._write_all(client, observer.fail("shutdown", SHUTDOWN_MESSAGE, 503))
                        return self._finish("incomplete:shutdown")
                    await self._write_all(client, observer.fail("upstream_reset", f"the provider connection failed mid-stream ({type(exc).__name__})"))
                    return self._finish("incomplete:upstream_reset")
                if chunk is None:
                    if observer.complete or observer.failed:
                        break
                    if self._tool_stall_applies:
                        msg = f"tool call arguments stalled for {self.tool_call_timeout:g}s"
                        kind = "tool_call_stall"
                    else:
                        msg = f"provider {self.provider_name!r} sent nothing for {self.idle_timeout:g}s"
                        kind = "idle_timeout"
                    await self._write_all(client, observer.fail(kind, msg))
                    return self._finish(f"incomplete:{kind}")
                if not chunk:
                    self._eof = True
                    break
                await self._write_all(client, self._take(chunk))
                self._unyielded += len(chunk)
                if self._unyielded >= _YIELD_EVERY_BYTES:
                    # An upstream that is always ready would otherwise keep the loop to itself.
                    self._unyielded = 0
                    await asyncio.sleep(0)
            if observer.failed:
                # The provider reported the failure in its own stream, or an event was malformed or too large.
                if self._too_large:
                    return self._finish("incomplete:event_too_large")
                return self._finish("incomplete:malformed" if getattr(observer, "failed_here", False) else "upstream_error_event")
            complete_before_eof = observer.complete
            rest = self.parser.close()
            if self.raw and complete_before_eof and rest:
                await client.write(rest)  # trailing bytes after the terminal event, unchanged
            tail = observer.eof()
            await self._write_all(client, tail)
            if observer.complete:
                if getattr(observer, "clean_eof_without_done", False):
                    return self._finish("complete_without_done")
                return self._finish("complete")
            return self._finish("incomplete:eof" if tail else "upstream_error_event")
        except (ConnectionResetError, aiohttp.ClientConnectionResetError):
            return self._finish("client_disconnected")
        except Exception as exc:
            # A bug after 200 was sent: end the stream with an error instead of a second response.
            log.error("internal error %s while relaying a stream", type(exc).__name__)
            try:
                await self._write_all(client, observer.fail("internal", "internal error in the proxy", 500))
            except Exception:
                pass
            return self._finish("incomplete:internal")
        finally:
            if self._eof and not self._stopping:
                self.upstream.release()  # fully read: the connection goes back to the pool
            else:
                self.upstream.close()  # never pooled: what is left of this answer would be the next one's start

    def _finish(self, outcome: str) -> str:
        self.outcome = outcome
        return outcome

    @staticmethod
    async def _write_all(client: web.StreamResponse, blobs: list[bytes]) -> None:
        # Events produced by one upstream read are ready at the same instant: one write
        # (one send) for all of them delays none, and saves a syscall per event.
        if len(blobs) == 1:
            if blobs[0]:
                await client.write(blobs[0])
        elif blobs:
            data = b"".join(blobs)
            if data:
                await client.write(data)

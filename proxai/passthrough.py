"""Streaming relay: upstream SSE to the client, event by event, with terminal watch.

`StreamRelay` is shared by both kinds of stream:

* pass-through (same protocol): the upstream bytes are written unchanged as
  they arrive; a `PassthroughWatch` only observes the events for the terminal
  signal, tool-argument state and upstream error events;
* translation: each parsed event is fed to the engine's stream translator and
  its output written.

Both observers have the same interface as the engine's stream object: `feed`,
`eof`, `fail`, `complete`, `failed`, `in_tool_arguments`. A stream that ends
before its terminal event gets the client protocol's in-stream error.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any, Protocol

import aiohttp
import orjson
from aiohttp import web

from proxai.errors import ANTHROPIC, CHAT, RESPONSES, StreamError, UpstreamProtocolError, UpstreamTimeout, render_stream
from proxai.sse import SSEEvent, SSEParser

log = logging.getLogger("proxai.stream")

_RESPONSES_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
_FINISH = re.compile(r'"finish_reason"\s*:\s*"')
_TOOL_CALLS = re.compile(r'"tool_calls"\s*:\s*\[\s*\{')
_SEQ = re.compile(r'"sequence_number"\s*:\s*(\d+)')
_TYPE_HINT = re.compile(r'"type"\s*:\s*"(response\.(?:completed|incomplete|failed)|error)"')


class StreamObserver(Protocol):
    complete: bool
    failed: bool
    in_tool_arguments: bool

    def feed(self, event: SSEEvent) -> list[bytes]: ...
    def eof(self) -> list[bytes]: ...
    def fail(self, kind: str, message: str, status: int = 502) -> list[bytes]: ...


class PassthroughWatch:
    """Observes a same-protocol stream; emits bytes only for a failure the upstream did not report."""

    def __init__(self, protocol: str):
        self.protocol = protocol
        self.complete = False
        self.failed = False
        self.in_tool_arguments = False
        self.usage: dict[str, Any] | None = None
        self.finish_seen = False  # Chat: a chunk with finish_reason arrived
        self.clean_eof_without_done = False
        self._last_data = ""
        self._snapshot: dict[str, Any] | None = None  # Responses: last lifecycle snapshot
        self._items: dict[int, Any] = {}  # Responses: output items seen, by output_index
        self._feed = {CHAT: self._feed_chat, RESPONSES: self._feed_responses, ANTHROPIC: self._feed_anthropic}[protocol]

    def feed(self, event: SSEEvent) -> list[bytes]:
        if not (self.complete or self.failed):
            self._feed(event)
        return []

    # Chat: [DONE] ends the stream; a top-level "error" object is the upstream's own failure.
    def _feed_chat(self, event: SSEEvent) -> None:
        data = event.data
        if data.startswith("[DONE]"):
            self.complete = True
            self.in_tool_arguments = False
            return
        if '"error"' in data:
            parsed = _json(data)
            if isinstance(parsed, dict) and parsed.get("error"):
                self.failed = True
                return
        if _FINISH.search(data):
            parsed = _json(data)
            choices = parsed.get("choices") if isinstance(parsed, dict) else None
            if choices and any(isinstance(c, dict) and c.get("finish_reason") for c in choices):
                self.finish_seen = True
                self.in_tool_arguments = False
                return
        if not self.finish_seen and _TOOL_CALLS.search(data):
            self.in_tool_arguments = True

    def _feed_responses(self, event: SSEEvent) -> None:
        data = event.data
        self._last_data = data
        name = event.event
        if name is None:  # servers that omit the event line: fall back to data.type
            if "response." in data or '"error"' in data:
                m = _TYPE_HINT.search(data)
                parsed = _json(data) if m else None
                name = parsed.get("type") if isinstance(parsed, dict) else None
            if name is None:
                name = ""
        if name in _RESPONSES_TERMINAL:
            if name == "response.failed":
                self.failed = True
            else:
                self.complete = True
            self.in_tool_arguments = False
        elif name == "error":
            self.failed = True
        elif name == "response.created" or name == "response.in_progress":
            parsed = _json(data)
            if isinstance(parsed, dict) and isinstance(parsed.get("response"), dict):
                self._snapshot = parsed["response"]
        elif name == "response.output_item.added" or name == "response.output_item.done":
            parsed = _json(data)
            if isinstance(parsed, dict) and isinstance(parsed.get("output_index"), int):
                self._items[parsed["output_index"]] = parsed.get("item")
            if name == "response.output_item.done":
                self.in_tool_arguments = False
        elif name == "response.function_call_arguments.delta":
            self.in_tool_arguments = True
        elif name == "response.function_call_arguments.done":
            self.in_tool_arguments = False

    def _feed_anthropic(self, event: SSEEvent) -> None:
        name = event.event
        if name == "message_stop":
            self.complete = True
            self.in_tool_arguments = False
        elif name == "error":
            self.failed = True
        elif name == "content_block_start":
            if '"tool_use"' in event.data:
                parsed = _json(event.data)
                block = parsed.get("content_block") if isinstance(parsed, dict) else None
                self.in_tool_arguments = isinstance(block, dict) and block.get("type") == "tool_use"
        elif name == "content_block_stop":
            self.in_tool_arguments = False

    def eof(self) -> list[bytes]:
        if self.complete or self.failed:
            return []
        if self.protocol == CHAT and self.finish_seen:
            # decisions.md #12: several servers omit [DONE] after the finish chunk.
            self.complete = True
            self.clean_eof_without_done = True
            return []
        return self.fail("incomplete", "the upstream stream ended before its terminal event")

    def fail(self, kind: str, message: str, status: int = 502) -> list[bytes]:
        if self.complete or self.failed:
            return []
        self.failed = True
        self.in_tool_arguments = False
        err = StreamError(message, status=status)
        if self.protocol != RESPONSES:
            return [render_stream(self.protocol, err)]
        snapshot = dict(self._snapshot or {})
        snapshot["output"] = [self._items[i] for i in sorted(self._items) if self._items[i] is not None]
        snapshot["usage"] = None
        m = None
        for m in _SEQ.finditer(self._last_data):
            pass
        seq = int(m.group(1)) + 1 if m else 0
        return [render_stream(RESPONSES, err, sequence_number=seq, response=snapshot)]


def _json(data: str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


class StreamRelay:
    """Reads an upstream SSE body and writes the client's stream.

    `prime()` runs before the client's 200 is committed: it waits for the first
    complete upstream event, so a failure before it is still an HTTP error.
    `run()` then relays to the end and returns the stream outcome for the log.
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
    ):
        self.upstream = upstream
        self.observer = observer
        self.raw = raw
        self.idle_timeout = idle_timeout
        self.tool_call_timeout = tool_call_timeout
        self.provider_name = provider_name
        self.parser = SSEParser()
        self._pending: list[bytes] = []
        self._eof = False
        self.outcome = "open"

    async def _read(self) -> bytes | None:
        """One upstream chunk; b"" at EOF; None on the idle or tool-call stall timeout."""
        stalled = self.observer.in_tool_arguments and self.tool_call_timeout < self.idle_timeout
        limit = self.tool_call_timeout if stalled else self.idle_timeout
        try:
            async with asyncio.timeout(limit):
                return await self.upstream.content.readany()
        except (TimeoutError, aiohttp.ServerTimeoutError):
            return None

    def _take(self, chunk: bytes) -> list[bytes]:
        out: list[bytes] = []
        for event in self.parser.feed(chunk):
            out.extend(self.observer.feed(event))
        if self.raw:
            return [chunk]
        return out

    async def prime(self) -> None:
        """Buffer upstream bytes until the first complete event (HTTP errors still possible)."""
        seen = False
        while not seen:
            try:
                chunk = await self._read()
            except (aiohttp.ClientError, ConnectionError) as exc:
                raise UpstreamProtocolError(
                    f"provider {self.provider_name!r} dropped the stream before its first event ({type(exc).__name__})"
                ) from None
            if chunk is None:
                raise UpstreamTimeout(f"provider {self.provider_name!r} sent no event for {self.idle_timeout:g}s")
            if not chunk:
                raise UpstreamProtocolError(f"provider {self.provider_name!r} ended the stream before its first event")
            events = self.parser.feed(chunk)
            seen = bool(events)
            out: list[bytes] = []
            for event in events:
                out.extend(self.observer.feed(event))
            self._pending.extend([chunk] if self.raw else out)

    async def run(self, client: web.StreamResponse) -> str:
        try:
            for blob in self._pending:
                await client.write(blob)
            self._pending.clear()
            while True:
                try:
                    chunk = await self._read()
                except (aiohttp.ClientError, ConnectionError) as exc:
                    if self.observer.complete:
                        break
                    await self._write_all(client, self.observer.fail("upstream_reset", f"the provider connection failed mid-stream ({type(exc).__name__})"))
                    return self._finish("incomplete:upstream_reset")
                if chunk is None:
                    if self.observer.complete or self.observer.failed:
                        break
                    if self.observer.in_tool_arguments and self.tool_call_timeout < self.idle_timeout:
                        msg = f"tool call arguments stalled for {self.tool_call_timeout:g}s"
                        kind = "tool_call_stall"
                    else:
                        msg = f"provider {self.provider_name!r} sent nothing for {self.idle_timeout:g}s"
                        kind = "idle_timeout"
                    await self._write_all(client, self.observer.fail(kind, msg))
                    return self._finish(f"incomplete:{kind}")
                if not chunk:
                    self._eof = True
                    break
                await self._write_all(client, self._take(chunk))
            self.parser.close()
            tail = self.observer.eof()
            await self._write_all(client, tail)
            if self.observer.complete:
                if getattr(self.observer, "clean_eof_without_done", False):
                    return self._finish("complete_without_done")
                return self._finish("complete")
            # The provider reported the failure in its own stream, or we appended one at EOF.
            return self._finish("incomplete:eof" if tail else "upstream_error_event")
        except (ConnectionResetError, aiohttp.ClientConnectionResetError):
            return self._finish("client_disconnected")
        except Exception as exc:
            # A bug after 200 was sent: end the stream with an error instead of a second response.
            log.error("internal error %s while relaying a stream", type(exc).__name__)
            try:
                await self._write_all(client, self.observer.fail("internal", "internal error in the proxy", 500))
            except Exception:
                pass
            return self._finish("incomplete:internal")
        finally:
            if self._eof:
                self.upstream.release()  # fully read: the connection goes back to the pool
            else:
                self.upstream.close()

    def _finish(self, outcome: str) -> str:
        self.outcome = outcome
        return outcome

    @staticmethod
    async def _write_all(client: web.StreamResponse, blobs: list[bytes]) -> None:
        for blob in blobs:
            if blob:
                await client.write(blob)

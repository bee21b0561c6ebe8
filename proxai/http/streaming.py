"""Serving a stream to the client: the loop both kinds of stream run, and its observer contract.

The loop (`StreamLoop`) reads the provider's SSE body, cuts it into events and hands
each to a stream observer, which answers with the bytes to write:

* a translated stream's observer is `TranslatedStream` (the engine's stream translator
  from the provider's protocol to the client's): it writes what the translator makes
  of each event;
* a pass-through stream's observer is `proxai.http.relay.Relay`: it writes each event's
  own bytes unchanged.

Observer contract (`StreamObserver`): `feed(event)`, `eof()` and `fail(outcome,
message, status)` return the bytes to write; `outcome` is None while the stream is
open and one `Outcome` once the observer saw its end; `in_tool_arguments` says a tool
call's arguments are streaming (the tool-call stall timeout applies); `usage` (the
IR's canonical counts), `stop` and `error_rule` (the rule file:line of a translation
failure) are read for the log when the stream is over. One `Outcome` names how a
stream ended, for both kinds, in the log, the metrics, the inspector and captures.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from typing import Any, Protocol

import aiohttp
from aiohttp import web

from proxai.http.body_guard import READ_FAILURES, BodyGuard
from proxai.http.errors import Overloaded, UpstreamProtocolError, UpstreamTimeout
from proxai.http.sse import EventTooLarge, SSEEvent, SSEParser

log = logging.getLogger("proxai.stream")

# An SSE comment: every SDK's parser skips it, and it keeps proxies and load balancers
# between the client and us from cutting a stream that is quiet while the model thinks.
HEARTBEAT = b": keep-alive\n\n"
# Bytes relayed between two forced turns of the event loop (see transport.YIELD_EVERY_BYTES).
_YIELD_EVERY_BYTES = 1 << 20
# asyncio runs a timer up to its clock resolution early: a beat that fires this close to its
# interval counts as on time.
_TIMER_SLACK = 0.005
SHUTDOWN_MESSAGE = "the proxy is shutting down; retry the request"
MALFORMED_BODY_MESSAGE = "the provider's response body is malformed (its HTTP framing is invalid)"


class Outcome(enum.StrEnum):
    """How a stream ended (the log's `outcome`). `incomplete:*` ended before the
    provider's terminal event, and the client got its protocol's in-stream error."""

    OPEN = "open"
    COMPLETE = "complete"
    # The provider ended its stream without the terminal event, but the rules accept
    # it as complete at EOF (Chat: finish_reason came, [DONE] did not: docs/decisions.md #12).
    COMPLETE_WITHOUT_DONE = "complete_without_done"
    # The provider reported a failure in its own stream (an error event).
    UPSTREAM_ERROR = "upstream_error_event"
    # An upstream event the proxy could not read: not JSON, not an object, or (translated)
    # rejected or untranslatable by the rules (the rule file:line is logged); or a body
    # whose HTTP framing broke (an invalid chunk-size line).
    MALFORMED = "incomplete:malformed"
    EOF = "incomplete:eof"
    IDLE_TIMEOUT = "incomplete:idle_timeout"
    TOOL_CALL_STALL = "incomplete:tool_call_stall"
    UPSTREAM_RESET = "incomplete:upstream_reset"
    EVENT_TOO_LARGE = "incomplete:event_too_large"
    SHUTDOWN = "incomplete:shutdown"
    INTERNAL = "incomplete:internal"
    CLIENT_DISCONNECTED = "client_disconnected"

    @property
    def complete(self) -> bool:
        return self is Outcome.COMPLETE or self is Outcome.COMPLETE_WITHOUT_DONE

    @property
    def kind(self) -> str:
        """The failure's short name (`idle_timeout`), as the IR error's error_type."""
        return self.value.removeprefix("incomplete:")


# The IR error types the rules raise themselves (engine/stream.py, the stream.decode
# rules), as opposed to a provider's own error report: what each means for the outcome.
RULE_ERROR_OUTCOMES = {"upstream_protocol_error": Outcome.MALFORMED, "incomplete_stream": Outcome.EOF}


class StreamObserver(Protocol):
    outcome: Outcome | None
    in_tool_arguments: bool
    usage: dict | None
    stop: str | None
    error_rule: str | None

    def feed(self, event: SSEEvent) -> list[bytes]: ...
    def eof(self) -> list[bytes]: ...
    def fail(self, outcome: Outcome, message: str, status: int = 502) -> list[bytes]: ...


class TranslatedStream:
    """The observer of a translated stream: the engine's StreamTranslator, and how it ended."""

    raw = False  # writes what the translator makes of each event, never the event itself

    def __init__(self, translator: Any):
        self.translator = translator
        self.outcome: Outcome | None = None

    @property
    def in_tool_arguments(self) -> bool:
        return self.translator.in_tool_arguments

    @property
    def usage(self) -> dict | None:
        return self.translator.usage

    # The engine's translator also reports these; a stand-in translator (tests) may not.
    @property
    def stop(self) -> str | None:
        return getattr(self.translator, "stop", None)

    @property
    def error_rule(self) -> str | None:
        return getattr(self.translator, "error_rule", None)

    @property
    def translation_failed(self) -> bool:
        return getattr(self.translator, "translation_failed", False)

    def inspect(self) -> list:
        return self.translator.inspect()

    def feed(self, event: SSEEvent) -> list[bytes]:
        if self.outcome is not None:
            return []
        out = self.translator.feed(event)
        self._settle(Outcome.COMPLETE)
        return out

    def eof(self) -> list[bytes]:
        if self.outcome is not None:
            return []
        out = self.translator.eof()
        self._settle(Outcome.COMPLETE_WITHOUT_DONE)
        return out

    def fail(self, outcome: Outcome, message: str, status: int = 502) -> list[bytes]:
        if self.outcome is not None:
            return []
        out = self.translator.fail(outcome.kind, message, status)
        self.outcome = outcome
        return out

    def _settle(self, complete: Outcome) -> None:
        t = self.translator
        if t.complete:
            self.outcome = complete
        elif t.failed:
            if self.translation_failed:
                self.outcome = Outcome.MALFORMED
            else:
                error = getattr(t, "error", None) or {}
                self.outcome = RULE_ERROR_OUTCOMES.get(error.get("error_type"), Outcome.UPSTREAM_ERROR)


def _split_first(chunk: bytes) -> tuple[bytes, bytes]:
    """The chunk up to its first blank line, and the rest. A provider's opening burst (several
    events in the first read) then goes out from its first event, not once all of it is
    decoded. Only LF endings are cut (a CR may pair with an LF in the next read): with a CR,
    or no blank line, the whole chunk is the head."""
    end = chunk.find(b"\n\n")
    if end < 0 or end + 2 == len(chunk) or chunk.find(b"\r") >= 0:
        return chunk, b""
    return chunk[:end + 2], chunk[end + 2:]


class StreamLoop:
    """Reads an upstream SSE body and writes the client's stream.

    `prime()` runs before the client's 200 is committed: it waits for the first
    complete upstream event, so a failure before it is still an HTTP error.
    `run()` then serves to the end and returns the stream's `Outcome`.

    Output is written event by event: in pass-through each complete event's own
    bytes, in translation what the observer makes of it. A partial event is
    never written, so an error appended after a broken upstream always parses.
    """

    def __init__(
        self,
        upstream: aiohttp.ClientResponse,
        observer: Any,
        *,
        idle_timeout: float,
        tool_call_timeout: float,
        provider_name: str,
        max_event_bytes: int | None = None,
        heartbeat: float = 0,
        idle_guarded: bool = False,
    ):
        self.upstream = upstream
        self.observer = observer
        # Pass-through: what follows the provider's own error is still its to say, and relayed.
        self.raw = observer.raw
        self.idle_timeout = idle_timeout
        self.tool_call_timeout = tool_call_timeout
        self.provider_name = provider_name
        self.parser = SSEParser(max_event_bytes)
        self.heartbeat = heartbeat  # seconds of silence toward the client before a comment; 0: never
        # The upstream connection's own read timeout (aiohttp's sock_read, restarted by every
        # byte) is idle_timeout: a read that only waits for that needs no timer of its own,
        # as long as the guard sees that timer armed.
        self.idle_guarded = idle_guarded
        self.guard = BodyGuard(upstream)
        self._stopping = False
        self._unyielded = 0
        self._pending: list[bytes] = []
        self._rest = b""  # what prime() read after the first event, for run() to take first
        self._eof = False
        self._seen_event = False
        self._relayed = 0  # pass-through events relayed unchanged
        # Pass-through: bytes -> bytes applied to each relayed event (proxai/http/response_model.py).
        self.rewrite = None
        self.outcome = Outcome.OPEN
        # The heartbeat: one timer for the whole stream, armed at the first read that waits and
        # re-armed when it fires, rather than a timeout around every read that waits.
        self._waiting_since: float | None = None  # when the read in progress began to wait
        self._beat_handle: asyncio.TimerHandle | None = None
        self._beat_task: asyncio.Task | None = None
        self._beat_client: web.StreamResponse | None = None
        self._client_gone = False

    @property
    def _over(self) -> bool:
        return self.observer.outcome is not None

    @property
    def _broken(self) -> bool:
        """Nothing more is written: the stream failed. In pass-through, what follows the
        provider's own error is still relayed; after a failure the proxy declared, nothing is."""
        outcome = self.observer.outcome
        if outcome is None or outcome.complete:
            return False
        return not self.raw or outcome is not Outcome.UPSTREAM_ERROR

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
        if self.idle_guarded:
            # What already arrived is taken without a wait (and so without a timer): events
            # that came in while the last ones were written go out together.
            try:
                chunk = self.upstream.content.read_nowait()
            except (TimeoutError, aiohttp.ServerTimeoutError):
                return None
            if chunk:
                return chunk
        bounded = self.guard.timer_bounds_wait()
        limit = self.tool_call_timeout if self._tool_stall_applies else self.idle_timeout
        if client is not None and 0 < self.heartbeat < limit:
            self._wait_begins(client)
        try:
            if self.idle_guarded and limit >= self.idle_timeout and bounded:
                return await self.upstream.content.readany()
            async with asyncio.timeout(limit):
                return await self.upstream.content.readany()
        except (TimeoutError, aiohttp.ServerTimeoutError):
            return None
        finally:
            self._waiting_since = None

    def _wait_begins(self, client: web.StreamResponse) -> None:
        loop = asyncio.get_running_loop()
        self._waiting_since = now = loop.time()
        if self._beat_handle is None:
            self._beat_client = client
            self._beat_handle = loop.call_at(now + self.heartbeat, self._beat, loop)

    def _beat(self, loop: asyncio.AbstractEventLoop) -> None:
        """The heartbeat timer: a comment when the read in progress has waited a whole interval."""
        now = loop.time()
        since = self._waiting_since
        if since is not None and now + _TIMER_SLACK >= since + self.heartbeat:
            self._waiting_since = since = now  # the next one after another whole interval
            self._beat_task = loop.create_task(self._send_beat())
        self._beat_handle = loop.call_at((since if since is not None else now) + self.heartbeat, self._beat, loop)

    async def _send_beat(self) -> None:
        try:
            await self._beat_client.write(HEARTBEAT)
        except (ConnectionResetError, aiohttp.ClientConnectionResetError, RuntimeError):
            # The client left (or the answer was already finished): as stop() does, the
            # pending read fails, and run() ends the stream as the client's disconnect.
            self._client_gone = True
            self.upstream.close()

    def _stop_beating(self) -> None:
        if self._beat_handle is not None:
            self._beat_handle.cancel()
            self._beat_handle = None
        if self._beat_task is not None and not self._beat_task.done():
            self._beat_task.cancel()

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
            return observer.fail(Outcome.EVENT_TOO_LARGE, f"the provider sent a stream event larger than "
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
                # The relay only speaks to replace a malformed event with an error.
                if not produced:
                    self._relayed += 1
                    produced = [raw]
                out.extend(produced if self.rewrite is None else map(self.rewrite, produced))
            else:
                out.extend(produced)
        return out

    async def prime(self) -> None:
        """Buffer upstream bytes until the first complete event (HTTP errors still possible)."""
        while not self._seen_event:
            if self._rest:
                chunk, self._rest = self._rest, b""
            else:
                try:
                    chunk = await self._read()
                except (*READ_FAILURES, ConnectionError) as exc:
                    if self._stopping:
                        raise Overloaded(SHUTDOWN_MESSAGE, headers={"Retry-After": "1"}) from None
                    if self.guard.malformed(exc):
                        raise UpstreamProtocolError(
                            f"provider {self.provider_name!r} sent a malformed response body before its first event "
                            "(its HTTP framing is invalid)") from None
                    raise UpstreamProtocolError(
                        f"provider {self.provider_name!r} dropped the stream before its first event ({type(exc).__name__})"
                    ) from None
            if chunk is None:
                raise UpstreamTimeout(f"provider {self.provider_name!r} sent no event for {self.idle_timeout:g}s")
            if not chunk:
                raise UpstreamProtocolError(f"provider {self.provider_name!r} ended the stream before its first event")
            head, self._rest = _split_first(chunk)
            out = self._take(head)
            if self.raw and self._relayed == 0 and self.observer.outcome is Outcome.MALFORMED:
                raise UpstreamProtocolError(f"provider {self.provider_name!r} sent a malformed first stream event")
            self._pending.extend(out)

    @property
    def primed(self) -> bytes:
        """What prime() buffered for the client (its first event or events)."""
        return b"".join(self._pending)

    async def run(self, client: web.StreamResponse) -> Outcome:
        observer = self.observer
        try:
            await self._write_all(client, self._pending)
            self._pending.clear()
            while not self._broken:
                try:
                    if self._rest:
                        chunk, self._rest = self._rest, b""
                    else:
                        chunk = await self._read(client)
                except (*READ_FAILURES, ConnectionError) as exc:
                    if self._client_gone:
                        return self._finish(Outcome.CLIENT_DISCONNECTED)
                    if self._over:
                        break
                    if self._stopping:
                        await self._write_all(client, observer.fail(Outcome.SHUTDOWN, SHUTDOWN_MESSAGE, 503))
                        return self._finish(Outcome.SHUTDOWN)
                    outcome, message = self._read_failure(exc)
                    await self._write_all(client, observer.fail(outcome, message))
                    return self._finish(outcome)
                if chunk is None:
                    if self._over:
                        break
                    if self._tool_stall_applies:
                        outcome, msg = Outcome.TOOL_CALL_STALL, f"tool call arguments stalled for {self.tool_call_timeout:g}s"
                    else:
                        outcome, msg = Outcome.IDLE_TIMEOUT, f"provider {self.provider_name!r} sent nothing for {self.idle_timeout:g}s"
                    await self._write_all(client, observer.fail(outcome, msg))
                    return self._finish(outcome)
                if not chunk:
                    self._eof = True
                    break
                blobs = self._take(chunk)
                if blobs:  # as _write_all, without a coroutine per read
                    data = blobs[0] if len(blobs) == 1 else b"".join(blobs)
                    if data:
                        await client.write(data)
                self._unyielded += len(chunk)
                if self._unyielded >= _YIELD_EVERY_BYTES:
                    # An upstream that is always ready would otherwise keep the loop to itself.
                    self._unyielded = 0
                    await asyncio.sleep(0)
            if self._over and not observer.outcome.complete:
                # The provider reported the failure in its own stream, or an event was malformed or too large.
                return self._finish(observer.outcome)
            complete_before_eof = self._over
            rest = self.parser.close()
            if self.raw and complete_before_eof and rest:
                await client.write(rest)  # trailing bytes after the terminal event, unchanged
            await self._write_all(client, observer.eof())
            return self._finish(observer.outcome or Outcome.EOF)
        except (ConnectionResetError, aiohttp.ClientConnectionResetError):
            return self._finish(Outcome.CLIENT_DISCONNECTED)
        except Exception as exc:
            # A bug after 200 was sent: end the stream with an error instead of a second response.
            log.error("internal error %s while serving a stream", type(exc).__name__)
            try:
                await self._write_all(client, observer.fail(Outcome.INTERNAL, "internal error in the proxy", 500))
            except Exception:
                pass
            return self._finish(Outcome.INTERNAL)
        finally:
            self._stop_beating()
            self.guard.release()
            if self._eof and not self._stopping:
                self.upstream.release()  # fully read: the connection goes back to the pool
            else:
                self.upstream.close()  # never pooled: what is left of this answer would be the next one's start

    def _read_failure(self, exc: BaseException) -> tuple[Outcome, str]:
        if self.guard.malformed(exc):
            return Outcome.MALFORMED, MALFORMED_BODY_MESSAGE
        return Outcome.UPSTREAM_RESET, f"the provider connection failed mid-stream ({type(exc).__name__})"

    def _finish(self, outcome: Outcome) -> Outcome:
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


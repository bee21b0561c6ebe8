"""The HTTP server's own defences: header and keep-alive deadlines, a connection cap,
malformed requests answered in the client's shape, and a word when fds run out.

aiohttp's server has no deadline for a request's headers and keeps idle
connections for about an hour, so silent connections pile up until the process
runs out of file descriptors. Here:

* a new connection must deliver complete request headers within
  `server.header_timeout_secs`; so must each later request on it, counted from
  its first byte. An idle keep-alive connection closes after
  `server.keepalive_timeout_secs`.
* at most `server.max_connections` client connections are open (lowered at
  startup to fit the open-file limit). One more closes the oldest idle
  connection, one that has not sent a byte of a request, or failing that the
  newcomer.
* a request aiohttp cannot parse (a malformed header line, one too long) gets a
  400 in the client protocol's shape; the offending bytes are neither echoed
  nor logged, and such refusals log one line per interval, not one per request.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import re
import resource
import time
from typing import Any

from aiohttp import http_exceptions, web
from aiohttp.web_protocol import RequestHandler

from proxai.http import errors as E
log = logging.getLogger("proxai.server")

# File descriptors kept free for everything that is not a client connection: one upstream
# connection per request in flight, the listening socket, logs, capture files.
_FD_RESERVE = 32
_REQUEST_LINE = re.compile(rb"[A-Z]{3,10} (/[^ ]{0,200})")


class RateLimitedLog:
    """At most one line per `interval` seconds for one kind of event, saying how many were folded in."""

    def __init__(self, interval: float = 10.0):
        self.interval = interval
        self._last = float("-inf")
        self._folded = 0

    def __call__(self, level: int, msg: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._last < self.interval:
            self._folded += 1
            return
        if self._folded:
            msg += f" ({self._folded} more like it in the last {self.interval:g}s)"
        self._last, self._folded = now, 0
        log.log(level, msg, *args)


_malformed_log = RateLimitedLog()
_cap_log = RateLimitedLog()
_fd_log = RateLimitedLog()

_PARSE_REASONS = (
    (http_exceptions.LineTooLong, "a request line or header is too long"),
    (http_exceptions.InvalidHeader, "a request header is malformed"),
    (http_exceptions.BadStatusLine, "the request line is malformed"),
    (http_exceptions.BadHttpMethod, "the request method is malformed"),
    (http_exceptions.TransferEncodingError, "the request's transfer encoding is malformed"),
    (http_exceptions.ContentLengthError, "the request's Content-Length is malformed"),
)


def _reason(exc: BaseException | None) -> str:
    for cls, text in _PARSE_REASONS:
        if isinstance(exc, cls):
            return text
    return "the request line or a header is malformed"


class Handler(RequestHandler):
    """aiohttp's per-connection protocol with the deadlines above."""

    def __init__(self, manager: "Server", *, header_timeout: float, **kwargs: Any):
        super().__init__(manager, **kwargs)
        self._server = manager
        self._header_timeout = header_timeout
        self._header_handle: asyncio.TimerHandle | None = None
        self._head = b""  # the start of the current request, to answer a parse error in its protocol
        self.fresh = True  # no byte of a request since the connection opened or the last request ended

    # --- deadlines ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if not self._force_close:
            # Until the first request's headers are in, the header deadline applies, not the
            # (longer) keep-alive one.
            self._start_header_timer()

    def _start_header_timer(self) -> None:
        if self._keepalive_handle is not None:
            self._keepalive_handle.cancel()
            self._keepalive_handle = None
        self._header_handle = self._loop.call_later(self._header_timeout, self._header_expired)

    def _header_expired(self) -> None:
        self._header_handle = None
        if self._force_close or self._messages:
            return
        if self._waiter is not None and not self._waiter.done():
            log.debug("closed a connection whose request headers did not arrive within %gs", self._header_timeout)
            self.force_close()

    def data_received(self, data: bytes) -> None:
        waiting = self._waiter is not None and not self._waiter.done() and not self._messages
        if data and waiting and self._payload_parser is None:
            if self.fresh:
                self.fresh = False
                m = _REQUEST_LINE.match(data)
                self._head = m.group(1) if m else b""
            if self._header_handle is None:
                self._start_header_timer()  # the first byte of a request on an idle keep-alive connection
        super().data_received(data)
        if self._messages:
            self.fresh = True  # headers complete: a request, not a connection, is now what waits
            if self._header_handle is not None:
                self._header_handle.cancel()
                self._header_handle = None

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._header_handle is not None:
            self._header_handle.cancel()
            self._header_handle = None
        super().connection_lost(exc)

    @property
    def idle(self) -> bool:
        """Waiting for a request of which no byte has arrived: safe to close."""
        return (self.fresh and self._waiter is not None and not self._waiter.done()
                and not self._messages and not self._force_close)

    # --- malformed requests ----------------------------------------------------------------------

    def handle_error(self, request, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if request.writer.output_size > 0:
            raise ConnectionError("response already started")
        path = self._head.decode("latin-1")
        protocol = self._server.protocol_for_path(path.split("?", 1)[0])
        if status == 400:
            err: E.ProxyError = E.InvalidRequest(f"malformed HTTP request: {_reason(exc)}")
            _malformed_log(logging.WARNING, "refused a malformed HTTP request from %s: %s (%s)",
                           request.remote, _reason(exc), type(exc).__name__ if exc else "unknown")
        else:
            # Our middleware answers every error a handler raises; what reaches here is aiohttp's own.
            err = E.ProxyError("error in the proxy's HTTP server", status=status)
            log.error("HTTP server error %d (%s) for a request from %s", status,
                      type(exc).__name__ if exc else "unknown", request.remote)
        code, headers, body = E.render_http(protocol, err, self._server.rules())
        response = web.Response(status=code, body=body, headers=headers)
        response.force_close()
        return response


class Server(web.Server):
    """aiohttp's connection manager with the connection cap."""

    def __init__(self, *args: Any, limits, protocol_for_path, rules, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._limits = limits
        self.protocol_for_path = protocol_for_path
        self.rules = rules  # () -> the live engine: its protocols' `errors:` rules word the answers
        self.max_connections = effective_max_connections(limits.max_connections, limits.max_concurrent_requests)

    def __call__(self) -> RequestHandler:
        return Handler(self, loop=self._loop, header_timeout=self._limits.header_timeout_secs,
                       keepalive_timeout=self._limits.keepalive_timeout_secs, **self._kwargs)

    def connection_made(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        if len(self._connections) <= self.max_connections:
            return
        victim = next((h for h in self._connections if h is not handler and getattr(h, "idle", False)), None)
        if victim is not None:
            victim.force_close()
            _cap_log(logging.WARNING, "server.max_connections (%d) reached: closed the oldest idle connection",
                     self.max_connections)
        else:
            handler.force_close()
            _cap_log(logging.WARNING, "server.max_connections (%d) reached and none idle: refused a new connection",
                     self.max_connections)


def effective_max_connections(configured: int, max_concurrent: int) -> int:
    """`configured`, lowered to what the open-file limit leaves after upstream connections."""
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ValueError, OSError):
        return configured
    if soft == resource.RLIM_INFINITY:
        return configured
    room = max(1, soft - _FD_RESERVE - max_concurrent)
    if room < configured:
        log.warning("server.max_connections lowered from %d to %d to fit the open-file limit of %d "
                    "(raise it with `ulimit -n`)", configured, room, soft)
        return room
    return configured


class Runner(web.AppRunner):
    """An AppRunner whose server is the hardened one above."""

    def __init__(self, app: web.Application, *, limits, protocol_for_path, rules, **kwargs: Any):
        super().__init__(app, **kwargs)
        self._hardening = dict(limits=limits, protocol_for_path=protocol_for_path, rules=rules)

    async def _make_server(self) -> web.Server:
        base = await super()._make_server()
        # Same handler, request factory and options as aiohttp's own, in the hardened manager.
        return Server(base.request_handler, request_factory=base.request_factory,
                      handler_cancellation=base.handler_cancellation, loop=base._loop,
                      **self._hardening, **base._kwargs)


def _open_file_limit() -> int:
    try:
        return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ValueError, OSError):
        return -1


def _log_fds_exhausted(limit: int) -> None:
    _fd_log(logging.ERROR, "out of file descriptors (open-file limit %d): new connections wait until some "
            "close; raise `ulimit -n` or lower server.max_connections", limit)


FD_WATCH_SECS = 1.0
_FD_HEADROOM = 8


def fds_nearly_exhausted(limit: int | None = None) -> bool:
    """True (and one rate-limited error line) when fewer than a few descriptors are left."""
    limit = _open_file_limit() if limit is None else limit
    if limit < 0 or limit == resource.RLIM_INFINITY:
        return False
    try:
        used = len(os.listdir("/proc/self/fd"))
    except OSError:  # no /proc: the accept() report below is all there is
        return False
    if used >= limit - _FD_HEADROOM:
        _log_fds_exhausted(limit)
        return True
    return False


async def watch_fds() -> None:
    """uvloop (libuv) sheds connections silently when accept() fails for lack of fds, so the
    count is also watched directly."""
    while True:
        await asyncio.sleep(FD_WATCH_SECS)
        fds_nearly_exhausted()


def install_fd_exhaustion_log(loop: asyncio.AbstractEventLoop) -> None:
    """Turn the event loop's report of a failed accept() for lack of fds into one clear, rate-limited line."""
    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
            _log_fds_exhausted(_open_file_limit())
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)

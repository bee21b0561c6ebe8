"""A provider's response body, guarded against what aiohttp's reader of it is never told.

When the framing of a body breaks mid-body (an invalid chunk-size line, a chunk not
followed by CRLF, an undecodable compressed body), aiohttp's C parser sets the error on
the connection, cancels the connection's sock_read timer and closes it, but leaves the
body's reader (`response.content`) as it was: a read waiting for the next bytes waits
forever, and one begun after the close fails with a bare RuntimeError.

`BodyGuard` closes the gap with one callback per response on the connection's `closed`
future: a connection lost while its body is unfinished and unfailed hands the body's
reader a payload error, which wakes any read. It also tells a read about to wait whether
aiohttp's own timer bounds the wait (so the common path needs no timer of its own), and
whether a failed read was the provider's broken framing or a lost connection.
"""

from __future__ import annotations

from typing import Any

import aiohttp
from aiohttp.http_exceptions import HttpProcessingError


class MalformedBody(aiohttp.ClientPayloadError):
    """The provider's body broke its HTTP framing; the parser refused it."""


# What a read of a body raises when it fails (besides its timeout): aiohttp's pure-Python
# parser hands the reader its own TransferEncodingError and the like, not a ClientError.
READ_FAILURES = (aiohttp.ClientError, HttpProcessingError)


class BodyGuard:
    __slots__ = ("_content", "_protocol", "_closed", "_drained")

    def __init__(self, response: Any):
        self._content = response.content
        connection = getattr(response, "connection", None)
        self._protocol = getattr(connection, "protocol", None)
        self._closed = None
        # aiohttp lets go of the connection once the whole body has arrived: no read will wait.
        self._drained = connection is None and _is_eof(self._content)
        if self._protocol is None:
            return
        closed = self._protocol.closed
        if closed is None:  # the connection is already gone
            self.fail_unfinished()
        else:
            closed.add_done_callback(self._lost)
            self._closed = closed

    def release(self) -> None:
        """The body is done with: the callback leaves a connection that may serve other requests."""
        if self._closed is not None:
            self._closed.remove_done_callback(self._lost)
            self._closed = None

    def timer_bounds_wait(self) -> bool:
        """Whether aiohttp's sock_read timer bounds a read about to wait (False: use a timer
        of your own). A parser failure the reader was not told of is handed to it first."""
        protocol = self._protocol
        if protocol is None:
            return self._drained
        if self._content.is_eof():
            return True  # nothing left to wait for
        if protocol.exception() is not None or not protocol.connected:
            self.fail_unfinished()  # before the connection's loss is reported
        # A private attribute: if aiohttp renames it, every wait takes a timer of its own
        # (slower, never unbounded).
        return getattr(protocol, "_read_timeout_handle", None) is not None

    def malformed(self, exc: BaseException) -> bool:
        """Whether a failed read was the provider's broken framing (not a lost connection).
        aiohttp's pure-Python parser reports broken framing to the reader as a cut body:
        the connection's own error says what it was."""
        if isinstance(exc, (MalformedBody, HttpProcessingError)):
            return True
        protocol = self._protocol
        return protocol is not None and isinstance(protocol.exception(), HttpProcessingError)

    def fail_unfinished(self) -> None:
        content = self._content
        if content.is_eof() or content.exception() is not None:
            return  # aiohttp ended or failed it itself
        cause = self._protocol.exception() if self._protocol is not None else None
        if isinstance(cause, HttpProcessingError):
            error: aiohttp.ClientPayloadError = MalformedBody(
                f"the provider's response body is malformed ({type(cause).__name__})")
        else:
            error = aiohttp.ClientPayloadError("the provider connection was lost before the body ended")
        error.__cause__ = cause
        content.set_exception(error)

    def _lost(self, _closed: Any) -> None:
        self._closed = None
        self.fail_unfinished()


def _is_eof(content: Any) -> bool:
    is_eof = getattr(content, "is_eof", None)  # a stand-in reader may not say
    return bool(is_eof is not None and is_eof())

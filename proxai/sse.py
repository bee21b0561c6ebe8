"""Server-sent events: a byte-oriented parser and an encoder.

The parser buffers raw bytes and only decodes an event once it is complete,
because a network chunk may end inside a multi-byte UTF-8 character.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["SSEEvent", "SSEParser", "encode_event"]


class SSEEvent(NamedTuple):
    event: str | None
    data: str


class SSEParser:
    """Split a byte stream into events at blank lines (LF, CRLF or CR endings, mixed)."""

    __slots__ = ("_buf", "_pending_cr")

    def __init__(self) -> None:
        self._buf = b""
        # The previous chunk ended in CR: an LF starting the next chunk belongs to it.
        self._pending_cr = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if not chunk:
            return []
        if self._pending_cr:
            self._pending_cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if b"\r" in chunk:
            self._pending_cr = chunk[-1:] == b"\r"
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf = self._buf + chunk if self._buf else chunk
        end = buf.find(b"\n\n")
        if end < 0:
            self._buf = buf
            return []
        events: list[SSEEvent] = []
        start = 0
        while end >= 0:
            event = _parse_block(buf[start:end])
            if event is not None:
                events.append(event)
            start = end + 2
            end = buf.find(b"\n\n", start)
        self._buf = buf[start:]
        return events

    def close(self) -> None:
        """End of stream: bytes not terminated by a blank line are not an event."""
        self._buf = b""
        self._pending_cr = False


def _parse_block(block: bytes) -> SSEEvent | None:
    # Fast path: the common single-line `data: ...` event.
    if block.startswith(b"data: ") and b"\n" not in block:
        return SSEEvent(None, block[6:].decode("utf-8", "replace"))
    event: str | None = None
    data: list[str] | None = None
    for raw in block.decode("utf-8", "replace").split("\n"):
        if not raw or raw[0] == ":":
            continue
        name, sep, value = raw.partition(":")
        if sep and value[:1] == " ":
            value = value[1:]
        if name == "data":
            if data is None:
                data = [value]
            else:
                data.append(value)
        elif name == "event":
            event = value or None
        # id:, retry: and unknown fields carry nothing the proxy uses.
    if data is None:
        return None
    return SSEEvent(event, "\n".join(data))


def encode_event(data: str | bytes, event: str | None = None) -> bytes:
    """One SSE event: `event: X\\ndata: ...\\n\\n`, or `data: ...\\n\\n` without a name."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    if b"\n" in payload or b"\r" in payload:
        lines = payload.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        payload = b"\ndata: ".join(lines)
    if event is None:
        return b"data: " + payload + b"\n\n"
    return b"event: " + event.encode("utf-8") + b"\ndata: " + payload + b"\n\n"

"""Server-sent events: a byte-oriented parser and an encoder.

The parser buffers raw bytes and only decodes an event once it is complete,
because a network chunk may end inside a multi-byte UTF-8 character. Besides
the parsed events it can hand back each event's exact bytes (`feed_raw`), so a
pass-through relay forwards whole events unchanged and never leaves half an
event in the client's stream when the upstream breaks.
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["SSEEvent", "SSEParser", "encode_event"]


class SSEEvent(NamedTuple):
    event: str | None
    data: str


# A blank line: two line endings in a row, each CRLF, LF or CR. The atomic groups
# stop a CRLF from being read as CR followed by LF (which would be a blank line).
_BLANK_LINE = re.compile(rb"(?>\r\n|\r|\n)(?>\r\n|\r|\n)")
_LINE_END = re.compile(rb"\r\n|\r|\n")


class SSEParser:
    """Split a byte stream into events at blank lines (LF, CRLF or CR endings, mixed)."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """The events completed by `chunk` (comment-only blocks give none)."""
        return [event for _, event in self.feed_raw(chunk) if event is not None]

    def feed_raw(self, chunk: bytes) -> list[tuple[bytes, SSEEvent | None]]:
        """Each block completed by `chunk`: its exact bytes (blank line included) and its
        event, or None for a block without data (comments, keep-alives, `retry:`)."""
        if not chunk:
            return []
        # Resume the search a little before the old end: a blank line may straddle chunks.
        resume = max(0, len(self._buf) - 3)
        buf = self._buf + chunk if self._buf else chunk
        blocks: list[tuple[bytes, SSEEvent | None]] = []
        start = 0
        search = resume
        while True:
            m = _BLANK_LINE.search(buf, search)
            if m is None:
                break
            end = m.end()
            # A final CR may be the first half of a CRLF whose LF is still to come. The block
            # is complete either way; that LF then opens the next block as an empty line.
            blocks.append((buf[start:end], _parse_block(buf[start:m.start()])))
            start = search = end
        self._buf = buf[start:]
        return blocks

    def close(self) -> bytes:
        """End of stream: bytes not terminated by a blank line are not an event; they are returned."""
        rest, self._buf = self._buf, b""
        return rest


def _parse_block(block: bytes) -> SSEEvent | None:
    # Fast path: the common single-line `data: ...` event.
    if block.startswith(b"data: ") and b"\n" not in block and b"\r" not in block:
        return SSEEvent(None, block[6:].decode("utf-8", "replace"))
    event: str | None = None
    data: list[str] | None = None
    for line in _LINE_END.split(block):
        if not line or line[:1] == b":":
            continue
        name, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            text = value.decode("utf-8", "replace")
            if data is None:
                data = [text]
            else:
                data.append(text)
        elif name == b"event":
            event = value.decode("utf-8", "replace") or None
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

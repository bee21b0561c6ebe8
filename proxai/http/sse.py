"""Server-sent events: a byte-oriented parser and an encoder.

The parser buffers raw bytes and only decodes an event once it is complete,
because a network chunk may end inside a multi-byte UTF-8 character. Besides
the parsed events it can hand back each event's exact bytes (`feed_raw`), so a
pass-through relay forwards whole events unchanged and never leaves half an
event in the client's stream when the upstream breaks.

An unfinished event waits in a growing buffer and each chunk is searched only
from where the last search stopped, so a long event costs linear time; with
`max_event_bytes`, an event (or an unterminated run of bytes) longer than that
raises EventTooLarge instead of growing without bound.
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["EventTooLarge", "SSEEvent", "SSEParser", "encode_event"]


class EventTooLarge(ValueError):
    def __init__(self, limit: int):
        super().__init__(f"a stream event is larger than {limit} bytes")
        self.limit = limit


class SSEEvent(NamedTuple):
    event: str | None
    data: str


# A blank line: two line endings in a row, each CRLF, LF or CR. The atomic groups
# stop a CRLF from being read as CR followed by LF (which would be a blank line).
_BLANK_LINE = re.compile(rb"(?>\r\n|\r|\n)(?>\r\n|\r|\n)")
_LINE_END = re.compile(rb"\r\n|\r|\n")


class SSEParser:
    """Split a byte stream into events at blank lines (LF, CRLF or CR endings, mixed)."""

    __slots__ = ("_buf", "_scanned", "_held_cr", "max_event_bytes")

    def __init__(self, max_event_bytes: int | None = None) -> None:
        self._buf = bytearray()
        self._scanned = 0  # bytes of _buf already searched for a blank line
        self._held_cr = False  # _buf holds a CR (the general line-ending search applies)
        self.max_event_bytes = max_event_bytes

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """The events completed by `chunk` (comment-only blocks give none)."""
        return [event for _, event in self.feed_raw(chunk) if event is not None]

    def feed_raw(self, chunk: bytes) -> list[tuple[bytes, SSEEvent | None]]:
        """Each block completed by `chunk`: its exact bytes (blank line included) and its
        event, or None for a block without data (comments, keep-alives, `retry:`)."""
        if not chunk:
            return []
        held = self._buf
        if held:
            held += chunk
            buf: bytes | bytearray = held
            # Resume a little before the old end: a blank line may straddle chunks.
            search = max(0, self._scanned - 3)
        else:
            buf, search = chunk, 0  # the common case: nothing held, no copy
        limit = self.max_event_bytes
        blocks: list[tuple[bytes, SSEEvent | None]] = []
        start = 0
        # find() rather than `in`: bytes.__contains__ tries the operand as an integer first,
        # and raising and clearing that TypeError costs more than the search.
        cr = chunk.find(b"\r") >= 0 or (held and self._held_cr)
        if not cr:
            # LF endings only (what providers send): a blank line is exactly b"\n\n", and
            # find() is all the search there is. A CR takes the general path below.
            size = len(buf)
            while True:
                stop = buf.find(b"\n\n", search)
                if stop < 0:
                    break
                if limit is not None and stop - start > limit:
                    raise EventTooLarge(limit)
                end = stop + 2
                if held:
                    blocks.append((bytes(buf[start:end]), _parse_lf_block(bytes(buf[start:stop]))))
                else:
                    blocks.append((buf[start:end], _parse_lf_block(buf[start:stop])))
                start = search = end
                if end == size:  # the chunk ended with its last event (the usual case)
                    break
        else:
            while True:
                m = _next_blank_line(buf, search)
                if m is None:
                    break
                end = m.end()
                if limit is not None and m.start() - start > limit:
                    raise EventTooLarge(limit)
                # A final CR may be the first half of a CRLF whose LF is still to come. The block
                # is complete either way; that LF then opens the next block as an empty line.
                block = buf[start:end]
                blocks.append((bytes(block) if held else block, _parse_block(bytes(buf[start:m.start()]) if held else buf[start:m.start()])))
                start = search = end
        rest = len(buf) - start
        if limit is not None and rest > limit:
            raise EventTooLarge(limit)
        if held:
            if start:
                del held[:start]
        elif rest:
            held += buf[start:]
        self._scanned = len(self._buf)
        self._held_cr = bool(cr and self._buf)  # conservatively: a CR may be in what is held
        return blocks

    def close(self) -> bytes:
        """End of stream: bytes not terminated by a blank line are not an event; they are returned."""
        rest = bytes(self._buf)
        self._buf.clear()
        self._scanned = 0
        self._held_cr = False
        return rest


def _next_blank_line(buf: bytes | bytearray, pos: int) -> re.Match | None:
    # Only a line ending can start a blank line: jump from one to the next with find()
    # (memchr speed) and try the pattern there, instead of scanning every byte with it.
    while True:
        lf = buf.find(b"\n", pos)
        cr = buf.find(b"\r", pos, lf if lf >= 0 else len(buf))
        first = cr if cr >= 0 else lf
        if first < 0:
            return None
        m = _BLANK_LINE.match(buf, first)
        if m is not None:
            return m
        pos = first + 1


def _parse_lf_block(block: bytes) -> SSEEvent | None:
    # `data: ...` alone, or after `event: ...`: the two shapes providers send, read without
    # splitting lines. Anything else (comments, several data lines, id:) takes _parse_block.
    # (tuple.__new__ builds the SSEEvent without the Python-level __new__ NamedTuple defines.)
    if block.startswith(b"data: "):
        if block.find(b"\n") < 0:
            return _new_event(SSEEvent, (None, block[6:].decode("utf-8", "replace")))
    elif block.startswith(b"event: "):
        nl = block.find(b"\n")
        if nl > 0 and block.startswith(b"data: ", nl + 1) and block.find(b"\n", nl + 1) < 0:
            return _new_event(SSEEvent, (block[7:nl].decode("utf-8", "replace") or None,
                                         block[nl + 7:].decode("utf-8", "replace")))
    return _parse_block(block)


_new_event = tuple.__new__


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

"""What the inspector keeps of each request while `server.inspector.enabled` is on.

A bounded ring of `Entry` objects, newest last. Each entry holds the request's
summary (the same `info` dict the log line is built from), the four phases as
capture-format bytes (start line, redacted headers, body) unless that phase is
captured to disk already, and for streams a timeline: every upstream event with
its time and the client events it produced.

`InspectCapture` stands in for the per-request capture object the app already
calls at each phase, so recording needs no hooks of its own; it forwards each
phase to the disk capture when that phase is captured to disk.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import time
from typing import Any, Iterable

from proxai.observability import capture
# Per-request bounds: a huge body or an endless stream must not grow the ring without limit.
MAX_PHASE_BYTES = 2 * 1024 * 1024
MAX_TIMELINE_EVENTS = 5000
MAX_RING_BYTES = 128 * 1024 * 1024  # the whole ring; the oldest requests go first

ON_DISK = "disk"


class Entry:
    __slots__ = ("key", "request_id", "started", "info", "phases", "truncated", "disk_root", "upstream",
                 "outputs", "timeline_truncated", "observer", "done", "size")

    def __init__(self, key: int, info: dict, disk_root=None):
        self.key = key
        self.request_id: str = info["request_id"]
        self.started = time.time()
        self.info = info  # the request's own dict: filled in as the request runs
        self.phases: dict[str, Any] = {}  # phase -> bytearray (capture format) or ON_DISK
        self.truncated: set[str] = set()
        self.disk_root = disk_root
        self.upstream: list[tuple[float, str | None, str]] = []  # (t_ms, event name, data), numbered from 1
        self.outputs: list[tuple[int | None, float, bytes | None]] = []  # (source number, t_ms, client bytes | None = relayed as is)
        self.timeline_truncated = False
        self.observer: Any = None  # the stream's observer (engine translator or pass-through watch)
        self.done = False
        self.size = 0  # bytes held, counted when the request ends

    def measure(self) -> int:
        held = sum(len(b) for b in self.phases.values() if b is not ON_DISK)
        held += sum(len(data) for _, _, data in self.upstream)
        held += sum(len(blob) for _, _, blob in self.outputs if blob)
        return held

    def elapsed_ms(self) -> float:
        return round((time.monotonic() - self.info["_started"]) * 1000, 2)


class InspectCapture:
    """The capture interface (wants/start/write/whole/end/close/summary) over an Entry, tee'd to disk."""

    __slots__ = ("entry", "disk")

    def __init__(self, entry: Entry, disk: capture.RequestCapture | None):
        self.entry = entry
        self.disk = disk

    def wants(self, phase: str) -> bool:
        return True

    def start(self, phase: str, start_line: str, headers: Iterable[tuple[str, str]]) -> None:
        if self.disk is not None and self.disk.wants(phase):
            self.disk.start(phase, start_line, headers)
            self.entry.phases[phase] = ON_DISK
        else:
            self.entry.phases[phase] = bytearray(capture.head(start_line, headers))

    def write(self, phase: str, data: bytes) -> None:
        buf = self.entry.phases.get(phase)
        if buf is ON_DISK:
            self.disk.write(phase, data)  # type: ignore[union-attr]
        elif buf is not None and data:
            room = MAX_PHASE_BYTES - len(buf)
            if room < len(data):
                self.entry.truncated.add(phase)
                data = data[: max(0, room)]
            buf += data

    def whole(self, phase: str, start_line: str, headers: Iterable[tuple[str, str]], body: bytes) -> None:
        self.start(phase, start_line, headers)
        self.write(phase, body)
        self.end(phase)

    def end(self, phase: str) -> None:
        if self.entry.phases.get(phase) is ON_DISK:
            self.disk.end(phase)  # type: ignore[union-attr]

    def close(self) -> None:
        if self.disk is not None:
            self.disk.close()

    def summary(self, fields) -> None:
        # The ring reads the request's own info; only a disk capture writes a summary file.
        if self.disk is not None:
            self.disk.summary(fields)


class StreamWatch:
    """Wraps a stream observer and records the timeline: each upstream event fed, and the
    client bytes it produced. The engine's translator records which source event produced
    each client event (`inspect()`); a pass-through stream relays each event as is."""

    def __init__(self, inner: Any, entry: Entry):
        self._inner = inner
        self._entry = entry
        entry.observer = inner
        self._links = inner.inspect() if hasattr(inner, "inspect") else None

    def __getattr__(self, name: str) -> Any:  # complete, failed, in_tool_arguments, usage, ...
        return getattr(self._inner, name)

    def feed(self, event: Any) -> list[bytes]:
        entry = self._entry
        recording = len(entry.upstream) < MAX_TIMELINE_EVENTS
        if recording:
            entry.upstream.append((entry.elapsed_ms(), event.event, event.data))
        else:
            entry.timeline_truncated = True
        produced = self._inner.feed(event)
        if recording:
            source = len(entry.upstream)
            if self._links is None and not produced:
                entry.outputs.append((source, entry.upstream[-1][0], None))
            else:
                self._record(produced, source)
        elif self._links:
            self._links.clear()
        return produced

    def eof(self) -> list[bytes]:
        produced = self._inner.eof()
        self._record(produced, None)
        return produced

    def fail(self, kind: str, message: str, status: int = 502) -> list[bytes]:
        produced = self._inner.fail(kind, message, status)
        self._record(produced, None)
        return produced

    def _record(self, produced: list[bytes], source: int | None) -> None:
        entry = self._entry
        t = entry.elapsed_ms()
        if self._links is not None:
            # The entry keeps the bytes; the translator's own list is emptied each time.
            for origin, blob in self._links:
                entry.outputs.append((origin, t, blob))
            self._links.clear()
        else:
            for blob in produced:
                if blob:
                    entry.outputs.append((source, t, blob))


class Ring:
    """The inspector's memory: the last `size` requests, and subscribers to live updates."""

    def __init__(self, size: int, disk_root=None):
        self.entries: collections.OrderedDict[int, Entry] = collections.OrderedDict()
        self.size = size
        self.disk_root = disk_root
        self._keys = itertools.count(1)
        self.bytes = 0  # held by finished entries
        self._subscribers: set[asyncio.Queue] = set()

    def open(self, info: dict, disk: capture.RequestCapture | None) -> InspectCapture:
        entry = Entry(next(self._keys), info, self.disk_root if disk is not None else None)
        info["_inspect"] = entry
        self.entries[entry.key] = entry
        while len(self.entries) > self.size:
            self._evict()
        self.publish(entry)
        return InspectCapture(entry, disk)

    def finish(self, info: dict) -> None:
        entry = info.get("_inspect")
        if entry is None:
            return
        entry.done = True
        entry.size = entry.measure()
        self.bytes += entry.size
        while self.bytes > MAX_RING_BYTES and len(self.entries) > 1:
            self._evict()
        self.publish(entry)

    def _evict(self) -> None:
        _, old = self.entries.popitem(last=False)
        self.bytes -= old.size

    def get(self, key: int) -> Entry | None:
        return self.entries.get(key)

    def by_request_id(self) -> dict[str, Entry]:
        return {e.request_id: e for e in self.entries.values()}

    # --- live updates --------------------------------------------------------------

    def subscribe(self) -> asyncio.Queue:
        queue: asyncio.Queue = asyncio.Queue(maxsize=1000)
        self._subscribers.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue) -> None:
        self._subscribers.discard(queue)

    def publish(self, entry: Entry | None) -> None:
        """Tell every open page about an entry; None tells them to go (shutdown)."""
        for queue in list(self._subscribers):
            try:
                queue.put_nowait(entry)
            except asyncio.QueueFull:  # a page that stopped reading: drop it
                self._subscribers.discard(queue)

    def close(self) -> None:
        self.publish(None)

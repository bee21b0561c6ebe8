"""Timestamps at the stages of a request, inside the proxy or the floor relay, for bench/timeline.py.

    python -m bench.timeline_probe proxy --out DIR server.py --config ... [server args]
    python -m bench.timeline_probe floor --out DIR --upstream URL [floor args]

Each stage is a `time.perf_counter_ns()` stored in the current request's dict, set by a
wrapper around the method that reaches it. Every SIGUSR1 writes the finished requests'
records to `DIR/timeline-<pid>-<k>.json` (whole or absent: the reader polls for it) and
starts a new list. One request at a time (concurrency 1): there is one current record.

The probe wraps private methods of the proxy (`Proxy.admit`, `StreamLoop._read`, ...), of
proxai's connection handler and of aiohttp (`ClientSession._request`). A rename breaks it:
`install` checks that every attribute it wraps exists before wrapping any, and refuses
with the names it could not find.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import orjson

ns = time.perf_counter_ns


class ProbeError(RuntimeError):
    """An attribute the probe wraps is missing: the code it measures changed."""


class Timeline:
    """The records of finished requests and the one in progress."""

    def __init__(self) -> None:
        self.records: list[dict[str, int]] = []
        self.current: dict[str, int] = {}
        self.pending: int | None = None  # the first bytes of the next request, before its handler
        self.in_request = False

    def received(self) -> None:
        # Bytes that come while a request is in progress are its own body, not the next request.
        if not self.in_request and self.pending is None:
            self.pending = ns()

    def begin(self) -> None:
        self.current = {"received": self.pending or 0, "handler": ns()}
        self.pending = None
        self.in_request = True

    def stamp(self, stage: str) -> None:
        self.current[stage] = ns()

    def first(self, stage: str) -> None:
        if stage not in self.current:
            self.current[stage] = ns()

    def finish(self) -> None:
        """The handler returned: the record is kept (later stamps, the tail, still land in it)."""
        self.stamp("end")
        self.records.append(self.current)

    def idle(self) -> None:
        self.in_request = False

    def take(self) -> list[dict[str, int]]:
        records, self.records = self.records, []
        self.pending = None
        return records  # a record whose "received" is 0 missed its bytes; the reader counts them


@dataclass(frozen=True)
class Patch:
    """Wrap `owner.name` with `wrap(original)`; `stamps` says what the wrapper records."""

    owner: Any
    name: str
    stamps: str
    wrap: Callable[[Any], Any]

    @property
    def where(self) -> str:
        return f"{getattr(self.owner, '__module__', '?')}.{getattr(self.owner, '__qualname__', self.owner)}.{self.name}"


def install(patches: list[Patch]) -> None:
    missing = [p.where for p in patches if getattr(p.owner, p.name, None) is None]
    if missing:
        raise ProbeError("the timeline probe cannot find " + ", ".join(missing)
                         + ": renamed or moved? bench/timeline_probe.py wraps it (stamps: "
                         + "; ".join(p.stamps for p in patches if p.where in missing) + ")")
    for p in patches:
        setattr(p.owner, p.name, p.wrap(getattr(p.owner, p.name)))


# --- wrappers ------------------------------------------------------------------------------------

def _around(tl: Timeline, before: str | None, after: str | None, first: bool = False):
    mark = tl.first if first else tl.stamp

    def wrap(original):
        async def wrapper(*args, **kwargs):
            if before:
                mark(before)
            result = await original(*args, **kwargs)
            if after:
                mark(after)
            return result
        return wrapper
    return wrap


def _received(tl: Timeline):
    def wrap(original):
        def data_received(self, data):
            tl.received()
            return original(self, data)
        return data_received
    return wrap


def _request(tl: Timeline):
    """The whole handler: starts the record, ends it when the handler returns or raises."""
    def wrap(original):
        async def handle(*args, **kwargs):
            tl.begin()
            try:
                return await original(*args, **kwargs)
            finally:
                tl.finish()
        return handle
    return wrap


def _observed(tl: Timeline):
    def wrap(original):
        def observe(self, info):
            original(self, info)
            if tl.in_request and tl.records:
                tl.records[-1]["observed"] = ns()
            tl.idle()
        return observe
    return wrap


def _floor_handler(tl: Timeline):
    """web.Server(handler): the floor's relay closure, wrapped as it is handed to the server."""
    def wrap(original):
        def __init__(self, handler, *args, **kwargs):
            async def relay(request):
                tl.begin()
                try:
                    return await handler(request)
                finally:
                    tl.finish()
                    tl.idle()
            original(self, relay, *args, **kwargs)
        return __init__
    return wrap


def proxy_patches(tl: Timeline) -> list[Patch]:
    from aiohttp import web

    import proxai.http.app as app
    import proxai.http.serving as serving
    import proxai.http.streaming as streaming
    import proxai.http.transport as transport
    import proxai.observability.metrics as metrics

    return [
        Patch(serving.Handler, "data_received", "received: a request's first bytes", _received(tl)),
        Patch(app.Proxy, "handle", "handler; end: it returns", _request(tl)),
        Patch(app.Proxy, "admit", "body_read: the body is read", _around(tl, None, "body_read")),
        Patch(app.Proxy, "serve", "serve: it starts", _around(tl, "serve", None)),
        Patch(transport.Transport, "send", "upstream_send, upstream_headers",
              _around(tl, "upstream_send", "upstream_headers")),
        Patch(streaming.StreamLoop, "prime", "stream_setup: prime starts; first_event: it returns",
              _around(tl, "stream_setup", "first_event")),
        Patch(streaming.StreamLoop, "_read", "first_read: the first upstream read returns",
              _around(tl, None, "first_read", first=True)),
        Patch(web.StreamResponse, "prepare", "prepared", _around(tl, None, "prepared", first=True)),
        Patch(web.StreamResponse, "write", "first_write: the first body write returns",
              _around(tl, None, "first_write", first=True)),
        Patch(web.Response, "write_eof", "answer_sent: a whole answer is sent", _around(tl, None, "answer_sent", first=True)),
        Patch(metrics.Metrics, "observe", "observed: the request's metrics are counted", _observed(tl)),
    ]


def floor_patches(tl: Timeline) -> list[Patch]:
    import aiohttp
    from aiohttp import web, web_protocol, web_server

    return [
        Patch(web_protocol.RequestHandler, "data_received", "received: a request's first bytes", _received(tl)),
        Patch(web_server.Server, "__init__", "handler; end: it returns", _floor_handler(tl)),
        Patch(aiohttp.ClientSession, "_request", "upstream_send, upstream_headers",
              _around(tl, "upstream_send", "upstream_headers")),
        Patch(web.StreamResponse, "prepare", "prepared", _around(tl, None, "prepared", first=True)),
        Patch(web.StreamResponse, "write", "first_write: the first body write returns",
              _around(tl, None, "first_write", first=True)),
    ]


def dump_on_signal(tl: Timeline, out: Path) -> None:
    count = [0]

    def on_signal(signum, frame):
        count[0] += 1
        path = out / f"timeline-{os.getpid()}-{count[0]}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(orjson.dumps(tl.take()))
        tmp.rename(path)

    signal.signal(signal.SIGUSR1, on_signal)


def main() -> None:
    args = sys.argv[1:]
    if len(args) < 3 or args[0] not in ("proxy", "floor") or args[1] != "--out":
        sys.exit("usage: python -m bench.timeline_probe proxy|floor --out DIR [server.py | floor] args...")
    kind, out, rest = args[0], Path(args[2]), args[3:]
    out.mkdir(parents=True, exist_ok=True)
    tl = Timeline()
    try:
        install(proxy_patches(tl) if kind == "proxy" else floor_patches(tl))
    except ProbeError as exc:
        sys.exit(str(exc))
    dump_on_signal(tl, out)
    if kind == "floor":
        from bench import floor
        sys.exit(floor.main(rest))
    sys.argv = rest
    runpy.run_path(rest[0], run_name="__main__")


if __name__ == "__main__":
    main()

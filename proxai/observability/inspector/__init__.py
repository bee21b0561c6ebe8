"""The translation inspector: a page at /_proxai/ showing recent requests phase by phase.

Off unless `server.inspector.enabled`. When on, the app hands each request's
capture calls to `Inspector.open` (a bounded ring in memory, tee'd to the disk
capture when that is on), wraps each stream's observer to record its timeline,
and reports each request's end; `web` serves the page and its API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from proxai.observability.inspector.record import InspectCapture, Ring, StreamWatch
from proxai.observability.inspector.web import PREFIX, InspectorWeb

if TYPE_CHECKING:
    from aiohttp import web

    from proxai.observability import capture
    from proxai.http.surface import Proxy

__all__ = ["Inspector", "PREFIX"]


class Inspector:
    def __init__(self, size: int, disk_root=None):
        self.ring = Ring(size, disk_root)

    def open(self, info: dict, disk: "capture.RequestCapture | None") -> InspectCapture:
        """The request's capture object: records every phase, forwards to `disk`'s phases."""
        return self.ring.open(info, disk)

    def watch(self, observer: Any, info: dict) -> Any:
        """A stream's observer, wrapped to record the timeline (unchanged if not recorded)."""
        entry = info.get("_inspect")
        return observer if entry is None else StreamWatch(observer, entry)

    def finish(self, info: dict) -> None:
        self.ring.finish(info)

    def add_routes(self, app: "web.Application", proxy: "Proxy") -> None:
        InspectorWeb(proxy, self.ring).add_routes(app)

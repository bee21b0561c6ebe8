"""The client's blocks of a translated stream, by IR block index (a base of the encoders'
stream objects): each block's own index, 0, 1, 2... in start order whatever the IR indexes
are; a reasoning block's text (its deltas, joined at the close) and opaque state, which make
its signature or continuation envelope."""
from __future__ import annotations

from ..errors import UpstreamProtocolError


class OpenBlocks:
    __slots__ = ("blocks", "next_index")

    def __init__(self, ctx=None):
        self.blocks: dict = {}  # IR index -> {index, kind, text, opaque}
        self.next_index = 0

    def open(self, index=None, kind=None, text=None, opaque=None) -> dict:
        entry = {"index": self.next_index, "kind": kind, "text": "", "opaque": opaque}
        self.next_index += 1
        self.blocks[index] = entry
        return entry

    def skip(self, index=None) -> None:
        """An IR block the client has no block for (a server tool the proxy ran): its events go nowhere."""
        self.blocks[index] = {"index": None, "kind": "skipped"}

    def _entry(self, index) -> dict:
        entry = self.blocks.get(index)
        if entry is None:
            raise UpstreamProtocolError(f"IR event for block {index} before its block_start")
        return entry

    def delta(self, index=None, delta=None) -> dict:
        entry = self._entry(index)
        if entry["kind"] == "reasoning" and delta:
            entry.setdefault("chunks", []).append(delta)  # joined into "text" at the close
        return entry

    def opaque(self, index=None, opaque=None) -> None:
        self._entry(index)["opaque"] = opaque

    def close(self, index=None) -> dict:
        """The closed block, a reasoning block's text whole."""
        entry = self.blocks.pop(index, None)
        if entry is None:
            raise UpstreamProtocolError(f"block_stop for block {index} that is not open")
        if "chunks" in entry:
            entry["text"] += "".join(entry.pop("chunks"))
        return entry

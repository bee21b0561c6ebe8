"""The stateful parts of the Anthropic Messages stream rules, one small object per stream
(rules/anthropic_messages/stream.*.yaml declare them under ``state:``)."""
from __future__ import annotations

import orjson

from ..errors import UpstreamProtocolError
from .open_blocks import OpenBlocks


class BlocksIn:
    """Decoding: the upstream's blocks by index (Anthropic indexes are the IR indexes),
    with tool-call arguments accumulated so they can be checked at the block's stop."""

    __slots__ = ("blocks",)

    def __init__(self, ctx):
        self.blocks: dict = {}   # index -> {kind, arguments, streamed}

    def open(self, index=None, kind=None) -> None:
        self.blocks[index] = {"kind": kind, "arguments": "", "streamed": False}

    def append(self, index=None, delta=None) -> None:
        entry = self.blocks.get(index)
        if entry is None or entry["kind"] != "tool_call":
            raise UpstreamProtocolError("input_json_delta for a block that is not an open tool_use block")
        if delta:
            entry.setdefault("chunks", []).append(delta)  # joined at the stop: += on a dict entry copies it all
            entry["streamed"] = True

    def stop(self, index=None) -> dict | None:
        """The stopping block ``{kind, streamed}`` (null when never opened); a tool call's
        accumulated arguments must be a JSON object."""
        entry = self.blocks.get(index)
        if entry is not None and "chunks" in entry:
            entry["arguments"] = "".join(entry.pop("chunks"))
        if entry is not None and entry["kind"] == "tool_call" and entry["arguments"].strip():
            try:
                value = orjson.loads(entry["arguments"])
            except orjson.JSONDecodeError:
                raise UpstreamProtocolError("tool call arguments streamed by the provider are not valid JSON") from None
            if not isinstance(value, dict):
                raise UpstreamProtocolError("tool call arguments streamed by the provider are not a JSON object")
        return entry


def usage_merge(scope, usage=None, update=None):
    """Anthropic usage is cumulative: a later report overwrites the fields it carries."""
    if not isinstance(update, dict):
        return usage
    return {**(usage or {}), **{k: v for k, v in update.items() if v is not None}}


class BlocksOut(OpenBlocks):
    """Encoding: our block per IR block (engine/hooks/open_blocks.py), and whether text or a
    refusal was sent."""

    __slots__ = ("text_seen", "refusal_seen")

    def __init__(self, ctx):
        super().__init__(ctx)
        self.text_seen = False
        self.refusal_seen = False

    def open(self, index=None, kind=None, text=None) -> dict:
        entry = super().open(index, kind)
        if kind == "refusal":
            self.refusal_seen = True
        self._note_text(kind, text)
        return entry

    def _note_text(self, kind, delta) -> None:
        if kind == "text" and delta:
            self.text_seen = True

    def delta(self, index=None, delta=None) -> dict:
        entry = super().delta(index, delta)
        self._note_text(entry["kind"], delta)
        return entry

    def seen(self) -> dict:
        """``{text, refusal}``: whether any text / a refusal block was sent."""
        return {"text": self.text_seen, "refusal": self.refusal_seen}


HOOKS = {"anthropic.usage_merge": usage_merge}

OBJECTS = {
    "anthropic.blocks_in": BlocksIn,
    "anthropic.blocks_out": BlocksOut,
}

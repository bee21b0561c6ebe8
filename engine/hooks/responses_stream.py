"""The stateful parts of the Responses stream rules, one small object per stream
(rules/openai_responses/stream.*.yaml declare them under ``state:``).

Decoding (:class:`ItemsIn`): Responses items and parts -> IR blocks (first-appearance
indexes, lazy opening, "done without deltas", argument accumulation and validation, the
reasoning item's first-kind-wins rule and its opaque state). Encoding (:class:`ItemsOut`):
IR blocks -> Responses items (output indexes, item ids, content indexes, the open message
item, the items a snapshot lists); :class:`Sequence` numbers every event.

Event and item shapes live in the rule files; these objects keep their own fields and
answer with indexes, records and IR events.
"""
from __future__ import annotations

import time
import uuid

import orjson

from ..errors import UpstreamProtocolError
from .responses import SEP

# --- decoding: Responses events -> IR events ---------------------------------------


class ItemsIn:
    __slots__ = ("ctx", "started", "blocks", "order", "next_index")

    def __init__(self, ctx):
        self.ctx = ctx
        self.started = False
        self.blocks: dict = {}   # "<output_index>" or "<output_index>:<content_index>" -> block
        self.order: list = []
        self.next_index = 0

    def start(self) -> bool:
        """response.created: true the first time (a repeated one is ignored)."""
        first = not self.started
        self.started = True
        return first

    def _new(self, key, kind, **extra) -> dict:
        index = self.next_index
        self.next_index += 1
        # "chunks": the deltas, joined when read (text += delta on a dict entry copies the whole text each time)
        block = {"index": index, "kind": kind, "open": True, "deltas": 0, "chunks": [], **extra}
        self.blocks[key] = block
        self.order.append(key)
        return block

    def _require_started(self):
        if not self.started:
            raise UpstreamProtocolError("upstream Responses stream sent content before response.created")

    def open(self, key=None, kind=None, id=None, name=None, custom=None) -> list:
        """block_start for a new Responses part/item (IR indexes in first-appearance order)."""
        self._require_started()
        key = str(key)
        if key in self.blocks:
            return []
        block = self._new(key, kind, id=id, name=name, **({"custom": True} if custom else {}))
        ev = {"type": "block_start", "index": block["index"], "kind": block["kind"]}
        if custom:
            ev["custom"] = True
        if id is not None:
            ev["id"] = id
        if name is not None:
            ev["name"] = name
        return [ev]

    def delta(self, key=None, kind=None, delta=None) -> list:
        """block_delta for a part/item; opens it first if its `added` event never came.
        Empty deltas emit nothing."""
        key = str(key)
        out = [] if key in self.blocks else self.open(key, kind)
        block = self.blocks[key]
        if not block["open"]:
            raise UpstreamProtocolError("upstream Responses stream sent a delta after its part or item was done")
        if not isinstance(delta, str) or delta == "":
            return out
        block["deltas"] += 1
        block["chunks"].append(delta)
        out.append({"type": "block_delta", "index": block["index"], "kind": block["kind"], "delta": delta})
        return out

    def done(self, key=None, kind=None, text=None) -> list:
        """A `*.done` event: when no delta came, its full value is the one delta (docs/streaming.md §7);
        otherwise the accumulated value is authoritative and a mismatch is only traced."""
        block = self.blocks.get(str(key))
        if block is not None and block["deltas"]:
            if isinstance(text, str) and text != _joined(block):
                self.ctx.trace("upstream done event disagrees with the streamed deltas; deltas kept")
            return []
        return self.delta(key, kind, text)

    def _close(self, block) -> list:
        if not block["open"]:
            return []
        block["open"] = False
        out = []
        if block["kind"] == "tool_call" and not block.get("custom"):  # a free-form input is any text
            if not block["deltas"]:
                block["chunks"] = ["{}"]
                out.append({"type": "block_delta", "index": block["index"], "kind": "tool_call", "delta": "{}"})
            try:
                value = orjson.loads(_joined(block))
            except orjson.JSONDecodeError:
                value = None
            if not isinstance(value, dict):
                return [{"type": "error", "status": 502, "error_type": "upstream_protocol_error",
                         "message": f"upstream tool call {block.get('id')!r} arguments are not a JSON object"}]
        out.append({"type": "block_stop", "index": block["index"]})
        return out

    def close(self, key=None) -> list:
        """block_stop (tool calls: a "{}" delta when none streamed, then the arguments must be a
        JSON object, else an error instead of the stop)."""
        block = self.blocks.get(str(key))
        return self._close(block) if block is not None else []

    def close_item(self, output_index=None) -> list:
        """Close every still-open block of one output item (its parts), in index order."""
        prefix = f"{output_index}:"
        out = []
        for key in self.order:
            if key == str(output_index) or key.startswith(prefix):
                out.extend(self._close(self.blocks[key]))
        return out

    def close_all(self) -> list:
        """At the terminal event: close whatever is still open, in index order."""
        out = []
        for key in self.order:
            out.extend(self._close(self.blocks[key]))
        return out

    def reasoning_delta(self, output_index=None, source=None, part=None, delta=None) -> list:
        """A reasoning item is one IR block. Its text comes from either the summary parts or the
        reasoning_text parts: the first kind seen wins, the other is ignored; a new part of the
        same kind starts with a blank-line separator."""
        key = str(output_index)
        block = self.blocks.get(key)
        if block is None:
            out = self.open(key, "reasoning")
            block = self.blocks[key]
            block.update(source=source, part=part, lengths=[0])
        else:
            out = []
            if block["kind"] != "reasoning":
                raise UpstreamProtocolError("upstream Responses stream sent reasoning text for an item that is not reasoning")
            if block.get("source") is None:
                block.update(source=source, part=part, lengths=[0])
            if block["source"] != source:
                return []
        if part != block["part"]:
            block["part"] = part
            block["lengths"].append(0)
            out.extend(self.delta(key, "reasoning", SEP))
        if isinstance(delta, str) and delta:
            block["lengths"][-1] += len(delta)
            out.extend(self.delta(key, "reasoning", delta))
        return out

    def reasoning_part_done(self, output_index=None, source=None, part=None, text=None) -> list:
        """reasoning_text.done / reasoning_summary_text.done: the full part when no delta came."""
        block = self.blocks.get(str(output_index))
        if block is not None and block.get("source") == source and block.get("part") == part and block["lengths"][-1]:
            return []
        if block is not None and block.get("source") not in (None, source):
            return []
        return self.reasoning_delta(output_index, source, part, text)

    def reasoning_done(self, output_index=None, item=None, opaque=None) -> list:
        """output_item.done(reasoning): done-without-deltas text, then the opaque state
        (encrypted_content, item id and, for summary text, the part lengths), then the stop.
        An item with no text at all but encrypted_content is a redacted_reasoning block."""
        item = item or {}
        key = str(output_index)
        block = self.blocks.get(key)
        out: list = []
        if block is None or block.get("source") is None:
            content = [c.get("text") or "" for c in item.get("content") or () if isinstance(c, dict)]
            summary = [s.get("text") or "" for s in item.get("summary") or () if isinstance(s, dict)]
            texts, source = (content, "text") if any(content) else (summary, "summary") if any(summary) else ([], None)
            for i, text in enumerate(texts):
                out.extend(self.reasoning_delta(output_index, source, i, text))
            block = self.blocks.get(key)
        if block is None:
            if not opaque:
                return out
            self._require_started()
            block = self._new(key, "redacted_reasoning")
            block["open"] = False
            return out + [{"type": "block_start", "index": block["index"], "kind": "redacted_reasoning", "opaque": opaque},
                          {"type": "block_stop", "index": block["index"]}]
        if opaque and block["open"]:
            opaque = {**opaque, "summary_lengths": block["lengths"] if block.get("source") == "summary" else None}
            out.append({"type": "block_opaque", "index": block["index"], "opaque": opaque})
        return out + self._close(block)


# --- encoding: IR events -> Responses events ---------------------------------------


class ItemsOut:
    __slots__ = ("ctx", "k", "next_oi", "msg", "blocks", "items", "text_seen_")

    def __init__(self, ctx):
        self.ctx = ctx
        self.k = ""              # the upstream id: item ids derive from it
        self.next_oi = 0
        self.msg = None          # the open message item's record
        self.blocks: dict = {}   # IR index -> block record
        self.items: dict = {}    # output_index -> item as last emitted (for snapshots)
        self.text_seen_ = False

    def start(self, id=None, model=None, created=None) -> dict:
        """The response identity, constant over the stream: ``{id, model, created_at}`` with
        id resp_<upstream id> (minted when the source had none), the upstream model,
        created_at (now when the source had none)."""
        upstream = id if isinstance(id, str) and id else uuid.uuid4().hex
        self.k = upstream
        return {"id": f"resp_{upstream}",  # the upstream prefix is not stripped (docs/mappings.md §14)
                "model": model if model is not None else self.ctx.upstream_model,
                "created_at": int(created) if isinstance(created, (int, float)) else int(time.time())}

    def _next_oi(self) -> int:
        oi = self.next_oi
        self.next_oi += 1
        return oi

    def close_message(self, phase="commentary") -> dict | None:
        """Close the open message item: its record (id, output_index, content, phase), or null
        when none is open. Real Responses streams finish one item before the next. ``phase``:
        ``final_answer`` when the answer ends with it, else ``commentary`` (another item
        follows). A translated stream knows it only here, so output_item.added has none."""
        msg, self.msg = self.msg, None
        if msg is not None:
            msg["phase"] = phase
        return msg

    def part(self, index=None, kind=None) -> dict:
        """A text/refusal block becomes the next content part of the open message item,
        opening one when needed: ``{opened: the new message record or null, blk: the block's record}``."""
        opened = None
        msg = self.msg
        if msg is None:
            oi = self._next_oi()
            msg = opened = self.msg = {"id": f"msg_{self.k}_{oi}", "output_index": oi, "content": [], "parts": 0}
            self.items[oi] = {"id": msg["id"], "type": "message", "role": "assistant", "status": "in_progress",
                              "content": msg["content"]}
        blk = {"kind": kind, "item_id": msg["id"], "output_index": msg["output_index"],
               "content_index": msg["parts"], "text": ""}
        msg["parts"] += 1
        self.blocks[str(index)] = blk
        return {"opened": opened, "blk": blk}

    def item(self, index=None, kind=None, call_id=None, name=None, opaque=None, custom=None, namespace=None) -> dict:
        """A reasoning / redacted reasoning / tool call block becomes its own output item
        (close the message first): the block's record. Redacted reasoning with continuation
        off would carry nothing: its record is marked ``skip`` and gets no item."""
        if (kind == "redacted_reasoning" and not self.ctx.continuation_enabled) or kind == "web_search_result":
            # web_search_result: a web search's results ride in its call's item (sources).
            blk = {"kind": kind, "skip": True, "text": ""}
        else:
            oi = self._next_oi()
            prefix = "ctc" if custom else "fc"
            item_id = f"{prefix}_{call_id}" if kind == "tool_call" else f"rs_{self.k}_{oi}"
            blk = {"kind": kind, "item_id": item_id, "output_index": oi, "content_index": 0, "text": "",
                   "call_id": call_id, "name": name, "opaque": opaque, "custom": bool(custom), "namespace": namespace}
        self.blocks[str(index)] = blk
        return blk

    def block(self, index=None) -> dict:
        """The record of IR block ``index``, its ``text`` whole."""
        blk = self.blocks.get(str(index))
        if blk is None:
            raise UpstreamProtocolError(f"IR block {index} was never started")
        if "chunks" in blk:
            blk["text"] += "".join(blk.pop("chunks"))
        return blk

    def delta(self, index=None, delta=None) -> dict:
        """Accumulate a block's text (the done events and the final snapshot repeat it); its record."""
        blk = self.blocks.get(str(index))
        if blk is None:
            raise UpstreamProtocolError(f"IR block {index} was never started")
        if isinstance(delta, str):
            blk.setdefault("chunks", []).append(delta)  # joined into "text" by block(), when the rules read it
            if blk["kind"] == "text" and delta:
                self.text_seen_ = True
        return blk

    def opaque(self, index=None, opaque=None) -> None:
        self.block(index)["opaque"] = opaque

    def part_done(self, part=None):
        """Record a finished content part in the open message item; returns it."""
        if self.msg is not None and part is not None:
            self.msg["content"].append(part)
        return part

    def record(self, item=None, output_index=None):
        """Record an output item (added or done) for the snapshots; returns it."""
        if item is not None:
            self.items[output_index] = item
        return item

    def output(self) -> list:
        """A snapshot's output: every item recorded so far, in output_index order."""
        return [self.items[oi] for oi in sorted(self.items)]

    def text_seen(self) -> bool:
        return self.text_seen_


class Sequence:
    """``stamp``: sequence_number, one counter per stream, +1 on every emitted event (error included)."""

    __slots__ = ("next",)

    def __init__(self, ctx):
        self.next = 0

    def stamp(self, event: dict) -> dict:
        event["sequence_number"] = self.next
        self.next += 1
        return event


OBJECTS = {
    "responses.items_in": ItemsIn,
    "responses.items_out": ItemsOut,
    "responses.sequence": Sequence,
}


def _joined(block: dict) -> str:
    """A decoded block's streamed text, its chunks collapsed to one."""
    chunks = block["chunks"]
    if len(chunks) > 1:
        chunks[:] = ["".join(chunks)]
    return chunks[0] if chunks else ""

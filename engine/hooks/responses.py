"""Hooks for the OpenAI Responses codec (rules/openai_responses/).

Three groups, each keeping the bookkeeping that YAML cannot express:

* requests: grouping input items into IR turns (and IR parts back into input items),
  allowed-tools typing, summary parts rebuilt from recorded lengths;
* stream decoding: Responses items and parts -> IR blocks (first-appearance indexes,
  lazy opening, "done without deltas", argument accumulation and validation, the
  reasoning item's first-kind-wins rule and its opaque state);
* stream encoding: IR blocks -> Responses items (output indexes, item ids, content
  indexes, the open message item, finished items for the final snapshot, sequence
  numbers).

Event and item *shapes* live in the rule files; these functions only keep state in
``$state`` and answer with indexes, records and IR events.
"""
from __future__ import annotations

import time
import uuid

import orjson

from ..errors import UpstreamProtocolError

SEP = "\n\n"  # between a reasoning item's summary (or content) parts in one IR text


# --- requests -----------------------------------------------------------------------


def group_turns(scope, messages=None):
    """Responses input is a flat item list; the IR has turns. Consecutive assistant-side
    items (reasoning, assistant message, function_call) form one assistant message with
    their parts in order; every other item stays a message of its own."""
    out: list = []
    for msg in messages or ():
        if not isinstance(msg, dict):
            continue
        path = msg.get("_path")
        for part in msg.get("content") or ():
            if isinstance(part, dict) and path and "_path" not in part:
                part["_path"] = path
        if msg.get("role") == "assistant" and out and out[-1].get("role") == "assistant" and out[-1].get("_turn"):
            out[-1]["content"].extend(msg.get("content") or ())
            continue
        if msg.get("role") == "assistant":
            msg = {**msg, "content": list(msg.get("content") or ()), "_turn": True}
        out.append(msg)
    for msg in out:
        msg.pop("_turn", None)
    return [m for m in out if m.get("role") != "assistant" or m["content"]]


def merge_messages(scope, items=None):
    """IR assistant parts became one input item each; adjacent assistant message items
    (text and refusal runs) merge into one message item, as Responses writes them."""
    out: list = []
    for item in items or ():
        if not isinstance(item, dict):
            continue
        prev = out[-1] if out else None
        if (item.get("type") == "message" and item.get("role") == "assistant" and prev is not None
                and prev.get("type") == "message" and prev.get("role") == "assistant" and prev.get("_run")):
            prev["content"].extend(item.get("content") or ())
            continue
        if item.get("type") == "message" and item.get("role") == "assistant":
            item = {**item, "content": list(item.get("content") or ()), "_run": True}
        out.append(item)
    for item in out:
        item.pop("_run", None)
    return out


def is_custom_call(scope, call_id=None, messages=None):
    """Whether the history's call ``call_id`` is a custom (free-form) tool call: its result
    is then a custom_tool_call_output item, not a function_call_output."""
    for msg in messages or ():
        for part in (msg or {}).get("content") or ():
            if isinstance(part, dict) and part.get("type") == "tool_call" and part.get("id") == call_id:
                return bool(part.get("custom"))
    return False


def allowed_tools(scope, names=None, tools=None):
    """allowed_tools entries name their tool type; the IR keeps names only."""
    types = {t.get("name"): t.get("type") for t in tools or () if isinstance(t, dict)}
    return [{"type": "custom" if types.get(n) == "custom" else "function", "name": n} for n in names or ()]


def split_summary(scope, text=None, lengths=None):
    """Summary parts rebuilt from the visible text and the recorded part lengths (the text
    joined them with a blank line), so a replayed reasoning item is byte-identical."""
    parts, offset, text = [], 0, text or ""
    for length in lengths or ():
        parts.append({"type": "summary_text", "text": text[offset: offset + length]})
        offset += length + len(SEP)
    return parts


def number_items(scope, items=None, response_id=None):
    """Output items of a non-streamed response: adjacent message items merge (one message
    item per run of text/refusal parts) and message / reasoning items get ids
    ``msg_<k>_<i>`` / ``rs_<k>_<i>`` (k: the response id without ``resp_``)."""
    k = (response_id or "").removeprefix("resp_")
    out = merge_messages(scope, items)
    for i, item in enumerate(out):
        if item.get("type") == "message":
            item["id"] = f"msg_{k}_{i}"
        elif item.get("type") == "reasoning":
            item["id"] = f"rs_{k}_{i}"
    return out


# --- stream decoding: Responses events -> IR events ---------------------------------


def _dec(scope) -> dict:
    state = scope.vars["state"]
    state.setdefault("blocks", {})
    state.setdefault("order", [])
    return state


def _new_block(state, key, kind, **extra) -> dict:
    index = state.get("next_index", 0)
    state["next_index"] = index + 1
    block = {"index": index, "kind": kind, "open": True, "deltas": 0, "text": "", **extra}
    state["blocks"][key] = block
    state["order"].append(key)
    return block


def _start_event(block, id=None, name=None) -> dict:
    ev = {"type": "block_start", "index": block["index"], "kind": block["kind"]}
    if block.get("custom"):
        ev["custom"] = True
    if id is not None:
        ev["id"] = id
    if name is not None:
        ev["name"] = name
    return ev


def _require_started(state):
    if not state.get("started"):
        raise UpstreamProtocolError("upstream Responses stream sent content before response.created")


def dec_open(scope, key=None, kind=None, id=None, name=None, custom=None):
    """block_start for a new Responses part/item (IR indexes in first-appearance order)."""
    state = _dec(scope)
    _require_started(state)
    key = str(key)
    if key in state["blocks"]:
        return []
    extra = {"custom": True} if custom else {}
    return [_start_event(_new_block(state, key, kind, id=id, name=name, **extra), id, name)]


def dec_delta(scope, key=None, kind=None, delta=None):
    """block_delta for a part/item; opens it first if its `added` event never came.
    Empty deltas emit nothing."""
    state = _dec(scope)
    key = str(key)
    out = [] if key in state["blocks"] else dec_open(scope, key, kind)
    block = state["blocks"][key]
    if not block["open"]:
        raise UpstreamProtocolError("upstream Responses stream sent a delta after its part or item was done")
    if not isinstance(delta, str) or delta == "":
        return out
    block["deltas"] += 1
    block["text"] += delta
    out.append({"type": "block_delta", "index": block["index"], "kind": block["kind"], "delta": delta})
    return out


def dec_done(scope, key=None, kind=None, text=None):
    """A `*.done` event: when no delta came, its full value is the one delta (docs/streaming.md §7);
    otherwise the accumulated value is authoritative and a mismatch is only traced."""
    state = _dec(scope)
    block = state["blocks"].get(str(key))
    if block is not None and block["deltas"]:
        if isinstance(text, str) and text != block["text"]:
            scope.ctx.trace("upstream done event disagrees with the streamed deltas; deltas kept")
        return []
    return dec_delta(scope, key, kind, text)


def _close(scope, state, block) -> list:
    if not block["open"]:
        return []
    block["open"] = False
    out = []
    if block["kind"] == "tool_call" and not block.get("custom"):  # a free-form input is any text
        if not block["deltas"]:
            block["text"] = "{}"
            out.append({"type": "block_delta", "index": block["index"], "kind": "tool_call", "delta": "{}"})
        try:
            value = orjson.loads(block["text"])
        except orjson.JSONDecodeError:
            value = None
        if not isinstance(value, dict):
            return [{"type": "error", "status": 502, "error_type": "upstream_protocol_error",
                     "message": f"upstream tool call {block.get('id')!r} arguments are not a JSON object"}]
    out.append({"type": "block_stop", "index": block["index"]})
    return out


def dec_close(scope, key=None):
    """block_stop (tool calls: a "{}" delta when none streamed, then the arguments must be a
    JSON object, else an error instead of the stop)."""
    state = _dec(scope)
    block = state["blocks"].get(str(key))
    return _close(scope, state, block) if block is not None else []


def dec_close_item(scope, output_index=None):
    """Close every still-open block of one output item (its parts), in index order."""
    state = _dec(scope)
    prefix = f"{output_index}:"
    out = []
    for key in state["order"]:
        if key == str(output_index) or key.startswith(prefix):
            out.extend(_close(scope, state, state["blocks"][key]))
    return out


def dec_close_all(scope):
    """At the terminal event: close whatever is still open, in index order."""
    state = _dec(scope)
    out = []
    for key in state["order"]:
        out.extend(_close(scope, state, state["blocks"][key]))
    return out


def dec_reasoning_delta(scope, output_index=None, source=None, part=None, delta=None):
    """A reasoning item is one IR block. Its text comes from either the summary parts or the
    reasoning_text parts: the first kind seen wins, the other is ignored; a new part of the
    same kind starts with a blank-line separator."""
    state = _dec(scope)
    key = str(output_index)
    block = state["blocks"].get(key)
    if block is None:
        out = dec_open(scope, key, "reasoning")
        block = state["blocks"][key]
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
        out.extend(dec_delta(scope, key, "reasoning", SEP))
    if isinstance(delta, str) and delta:
        block["lengths"][-1] += len(delta)
        out.extend(dec_delta(scope, key, "reasoning", delta))
    return out


def dec_reasoning_part_done(scope, output_index=None, source=None, part=None, text=None):
    """reasoning_text.done / reasoning_summary_text.done: the full part when no delta came."""
    state = _dec(scope)
    block = state["blocks"].get(str(output_index))
    if block is not None and block.get("source") == source and block.get("part") == part and block["lengths"][-1]:
        return []
    if block is not None and block.get("source") not in (None, source):
        return []
    return dec_reasoning_delta(scope, output_index, source, part, text)


def dec_reasoning_done(scope, output_index=None, item=None, opaque=None):
    """output_item.done(reasoning): done-without-deltas text, then the opaque state
    (encrypted_content, item id and, for summary text, the part lengths), then the stop.
    An item with no text at all but encrypted_content is a redacted_reasoning block."""
    state = _dec(scope)
    item = item or {}
    key = str(output_index)
    block = state["blocks"].get(key)
    out: list = []
    if block is None or block.get("source") is None:
        content = [c.get("text") or "" for c in item.get("content") or () if isinstance(c, dict)]
        summary = [s.get("text") or "" for s in item.get("summary") or () if isinstance(s, dict)]
        texts, source = (content, "text") if any(content) else (summary, "summary") if any(summary) else ([], None)
        for i, text in enumerate(texts):
            out.extend(dec_reasoning_delta(scope, output_index, source, i, text))
        block = state["blocks"].get(key)
    if block is None:
        if not opaque:
            return out
        _require_started(state)
        block = _new_block(state, key, "redacted_reasoning")
        block["open"] = False
        return out + [{"type": "block_start", "index": block["index"], "kind": "redacted_reasoning", "opaque": opaque},
                      {"type": "block_stop", "index": block["index"]}]
    if opaque and block["open"]:
        opaque = {**opaque, "summary_lengths": block["lengths"] if block.get("source") == "summary" else None}
        out.append({"type": "block_opaque", "index": block["index"], "opaque": opaque})
    return out + _close(scope, state, block)


# --- stream encoding: IR events -> Responses events ---------------------------------


def _enc(scope) -> dict:
    state = scope.vars["state"]
    state.setdefault("blocks", {})
    state.setdefault("items", {})
    return state


def enc_start(scope, id=None, model=None, created=None):
    """The response identity, constant over the stream: resp_<upstream id> (minted when
    the source had none), the upstream model, created_at (now when the source had none)."""
    state = _enc(scope)
    upstream = id if isinstance(id, str) and id else uuid.uuid4().hex
    state["rid"] = f"resp_{upstream}"  # the upstream prefix is not stripped (docs/mappings.md §14)
    state["k"] = upstream
    state["model"] = model if model is not None else scope.ctx.upstream_model
    state["created_at"] = int(created) if isinstance(created, (int, float)) else int(time.time())
    state["started"] = True
    return None


def _next_oi(state) -> int:
    oi = state.get("next_oi", 0)
    state["next_oi"] = oi + 1
    return oi


def enc_close_message(scope):
    """Close the open message item: returns its record (id, output_index, content), or
    null when none is open. Real Responses streams finish one item before the next."""
    state = _enc(scope)
    msg = state.get("msg")
    state["msg"] = None
    return msg


def enc_part(scope, index=None, kind=None):
    """A text/refusal block becomes the next content part of the open message item,
    opening one when needed: returns the new message record (null when one was open).
    ``$state.blk`` is the block's record."""
    state = _enc(scope)
    opened = None
    msg = state.get("msg")
    if msg is None:
        oi = _next_oi(state)
        msg = opened = {"id": f"msg_{state.get('k', '')}_{oi}", "output_index": oi, "content": [], "parts": 0}
        state["msg"] = msg
        state["items"][oi] = {"id": msg["id"], "type": "message", "role": "assistant", "status": "in_progress",
                              "content": msg["content"]}
    blk = {"kind": kind, "item_id": msg["id"], "output_index": msg["output_index"],
           "content_index": msg["parts"], "text": ""}
    msg["parts"] += 1
    state["blocks"][str(index)] = state["blk"] = blk
    return opened


def enc_item(scope, index=None, kind=None, call_id=None, name=None, opaque=None, custom=None, namespace=None):
    """A reasoning / redacted reasoning / tool call block becomes its own output item
    (call the message close first). ``$state.blk`` is its record. Redacted reasoning with
    continuation off would carry nothing: its record is marked ``skip`` and gets no item."""
    state = _enc(scope)
    if kind == "redacted_reasoning" and not scope.ctx.continuation_enabled:
        blk = {"kind": kind, "skip": True, "text": ""}
    else:
        oi = _next_oi(state)
        prefix = "ctc" if custom else "fc"
        item_id = f"{prefix}_{call_id}" if kind == "tool_call" else f"rs_{state.get('k', '')}_{oi}"
        blk = {"kind": kind, "item_id": item_id, "output_index": oi, "content_index": 0, "text": "",
               "call_id": call_id, "name": name, "opaque": opaque, "custom": bool(custom), "namespace": namespace}
    state["blocks"][str(index)] = state["blk"] = blk
    return None


def enc_block(scope, index=None):
    """``$state.blk`` = the record of IR block ``index``."""
    state = _enc(scope)
    blk = state["blocks"].get(str(index))
    if blk is None:
        raise UpstreamProtocolError(f"IR block {index} was never started")
    state["blk"] = blk
    return None


def enc_delta(scope, index=None, delta=None):
    """Accumulate a block's text (the done events and the final snapshot repeat it)."""
    enc_block(scope, index)
    state = scope.vars["state"]
    blk = state["blk"]
    if isinstance(delta, str):
        blk["text"] += delta
        if blk["kind"] == "text" and delta:
            state["text_seen"] = True
    return None


def enc_opaque(scope, index=None, opaque=None):
    enc_block(scope, index)
    scope.vars["state"]["blk"]["opaque"] = opaque
    return None


def enc_part_done(scope, part=None):
    """Record a finished content part in the open message item; returns it."""
    state = _enc(scope)
    msg = state.get("msg")
    if msg is not None and part is not None:
        msg["content"].append(part)
    return part


def enc_finish(scope, item=None, output_index=None):
    """Record an output item (added or done) for the snapshots; returns it."""
    state = _enc(scope)
    if item is not None:
        state["items"][output_index] = item
    return item


def enc_output(scope):
    """A snapshot's output: every item added so far, in output_index order."""
    state = _enc(scope)
    return [state["items"][oi] for oi in sorted(state["items"])]


def stamp(scope):
    """sequence_number: one counter per stream, +1 on every emitted event (error included)."""
    state = scope.vars["state"]
    seq = state.get("seq", 0)
    state["seq"] = seq + 1
    event = scope.cur
    event["sequence_number"] = seq
    return event


HOOKS = {
    "responses.group_turns": group_turns,
    "responses.merge_messages": merge_messages,
    "responses.is_custom_call": is_custom_call,
    "responses.allowed_tools": allowed_tools,
    "responses.split_summary": split_summary,
    "responses.number_items": number_items,
    "responses.dec_open": dec_open,
    "responses.dec_delta": dec_delta,
    "responses.dec_done": dec_done,
    "responses.dec_close": dec_close,
    "responses.dec_close_item": dec_close_item,
    "responses.dec_close_all": dec_close_all,
    "responses.dec_reasoning_delta": dec_reasoning_delta,
    "responses.dec_reasoning_part_done": dec_reasoning_part_done,
    "responses.dec_reasoning_done": dec_reasoning_done,
    "responses.enc_start": enc_start,
    "responses.enc_close_message": enc_close_message,
    "responses.enc_part": enc_part,
    "responses.enc_item": enc_item,
    "responses.enc_block": enc_block,
    "responses.enc_delta": enc_delta,
    "responses.enc_opaque": enc_opaque,
    "responses.enc_part_done": enc_part_done,
    "responses.enc_finish": enc_finish,
    "responses.enc_output": enc_output,
    "responses.stamp": stamp,
}

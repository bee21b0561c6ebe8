"""Tool calls back in the client's form.

A provider encoder may send a tool under another name or form (engine/hooks/fit.py:
a namespaced tool flattened, a free-form tool as a function with one string
parameter) and records it in ``ctx.tool_calls``. The provider's calls of such a tool
are restored here, between the provider's decoder and the client's encoder: the
name and namespace the client declared, and for a free-form tool a custom call whose
``input`` is the string parameter's value.
"""
from __future__ import annotations

import orjson

from .hooks.fit import CUSTOM_INPUT


def custom_input(arguments) -> str:
    """The free-form input inside a wrapped call's JSON arguments. A model that sent
    something else than ``{"input": "..."}`` still has its arguments delivered, as text."""
    try:
        value = orjson.loads(arguments) if isinstance(arguments, str) and arguments.strip() else arguments
    except orjson.JSONDecodeError:
        return arguments
    if isinstance(value, dict) and isinstance(value.get(CUSTOM_INPUT), str):
        return value[CUSTOM_INPUT]
    return arguments if isinstance(arguments, str) else orjson.dumps(value).decode()


def _restored(part: dict, entry: dict) -> dict:
    out = {k: v for k, v in part.items() if k != "arguments" or not entry.get("custom")}
    out["name"] = entry["name"]
    if entry.get("namespace"):
        out["namespace"] = entry["namespace"]
    if entry.get("custom"):
        out["custom"] = True
        out["input"] = custom_input(part.get("arguments"))
    return out


def restore_response(ir: dict, ctx) -> dict:
    """A whole IR response: its tool_call parts in the client's form."""
    table = ctx.tool_calls
    content = ir.get("content") if isinstance(ir, dict) else None
    if not table or not isinstance(content, list):
        return ir
    parts = [
        _restored(p, table[p["name"]]) if isinstance(p, dict) and p.get("type") == "tool_call" and p.get("name") in table else p
        for p in content
    ]
    return {**ir, "content": parts}


class StreamRestorer:
    """The same over IR stream events. A free-form call's input is JSON-escaped inside
    the provider's argument fragments, so its deltas are held and the decoded input
    goes out as one delta before the block stops."""

    __slots__ = ("table", "held")

    def __init__(self, table: dict):
        self.table = table
        self.held: dict = {}  # IR block index -> argument text so far (free-form calls)

    def push(self, ev: dict) -> list:
        kind = ev.get("type")
        if kind == "block_start" and ev.get("kind") == "tool_call" and ev.get("name") in self.table:
            entry = self.table[ev["name"]]
            ev = {**ev, "name": entry["name"]}
            if entry.get("namespace"):
                ev["namespace"] = entry["namespace"]
            if entry.get("custom"):
                ev["custom"] = True
                self.held[ev["index"]] = ""
            return [ev]
        if kind == "block_delta" and ev.get("index") in self.held:
            self.held[ev["index"]] += ev.get("delta") or ""
            return []
        if kind == "block_stop" and ev.get("index") in self.held:
            text = custom_input(self.held.pop(ev["index"]))
            delta = [{"type": "block_delta", "index": ev["index"], "kind": "tool_call", "delta": text}] if text else []
            return [*delta, ev]
        return [ev]

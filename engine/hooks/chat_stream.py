"""The stateful parts of the Chat Completions stream rules, one small object per stream
(rules/openai_chat_completions/stream.*.yaml declare them under ``state:``).

Decoding (Chat upstream -> IR): :class:`Chunks` cuts a chunk into typed sub-events and
tracks the tool-call index of fragments that omit it; :class:`Blocks` mints IR block
indexes and accumulates tool arguments. Encoding (IR -> Chat client): :class:`ToolIndexes`
mints ``tool_calls[].index``; :class:`Turn` records the turn's parts for the
continuation envelope (docs/continuation.md, Chat carrier).
"""
from __future__ import annotations

import orjson

from ..errors import UpstreamProtocolError
from .continuation import BLOCK_SEP

# --- stream decode ------------------------------------------------------------------


class Chunks:
    """``split``: one Chat SSE payload -> typed sub-events (openai_chat_completions.events),
    in the order they take effect: first, reasoning, content, refusal, tool_call...,
    finish | usage | done | error."""

    __slots__ = ("id", "started", "finished", "tool_ids", "last_tool_index")

    def __init__(self, ctx):
        self.id = None
        self.started = False
        self.finished = False
        self.tool_ids: dict = {}
        self.last_tool_index = None

    def split(self, chunk) -> list:
        if chunk.get("type") == "[DONE]":
            return [{"type": "done"}]
        if "error" in chunk:
            return [{"type": "error", "error": chunk["error"] if isinstance(chunk["error"], dict) else {"message": str(chunk["error"])}}]
        choices = chunk.get("choices") or []
        if not isinstance(choices, list) or len(choices) > 1:
            raise UpstreamProtocolError("upstream chunk carries more than one choice")
        usage = chunk.get("usage") or None
        if not choices and not usage:
            # Nothing for the client: Azure's leading prompt_filter_results chunk (empty id,
            # model and created) and similar annotations. The stream starts at the next one.
            return []
        chunk_id = chunk.get("id") or None  # "" is no id (Azure)
        if chunk_id is not None:
            if self.id is None:
                self.id = chunk_id
            elif chunk_id != self.id:
                raise UpstreamProtocolError("upstream chunk id changed within the stream")
        out = []
        if not self.started:
            self.started = True
            out.append({"type": "first", "id": chunk_id, "model": chunk.get("model") or None, "created": chunk.get("created") or None})
        if not choices:
            out.append({"type": "usage", "usage": usage})
            return out
        choice = choices[0]
        if (choice.get("index") or 0) != 0:
            raise UpstreamProtocolError("upstream chunk choice index is not 0")
        delta = choice.get("delta") or {}
        finish = choice.get("finish_reason")
        pieces = []
        for key, kind in (("reasoning_content", "reasoning"), ("content", "content"), ("refusal", "refusal")):
            value = delta.get(key)
            if isinstance(value, str) and value:
                pieces.append({"type": kind, "delta": value})
        for call in delta.get("tool_calls") or ():
            function = call.get("function") or {}
            pieces.append({"type": "tool_call", "index": self._tool_index(call), "id": call.get("id"),
                           "name": function.get("name"), "arguments": function.get("arguments")})
        if pieces and self.finished:
            raise UpstreamProtocolError("upstream sent content after finish_reason")
        out.extend(pieces)
        if finish is not None:
            if self.finished:
                raise UpstreamProtocolError("upstream sent finish_reason twice")
            self.finished = True
            out.append({"type": "finish", "finish_reason": finish, "usage": usage})
        elif usage:
            # OpenRouter: the final usage on a chunk that still has a (empty) choice.
            out.append({"type": "usage", "usage": usage})
        return out

    def _tool_index(self, call: dict):
        """The fragment's Chat ``index``. Some OpenAI-compatible servers omit it and send
        each call whole: then a new ``id`` is a new call, and a fragment with neither
        continues the latest one."""
        index, call_id = call.get("index"), call.get("id")
        seen = self.tool_ids
        if isinstance(index, int) and not isinstance(index, bool):
            if call_id is not None:
                seen.setdefault(call_id, index)
            self.last_tool_index = index
            return index
        if call_id is not None and call_id in seen:
            index = seen[call_id]
        elif call_id is not None:
            index = max(seen.values(), default=-1) + 1
            seen[call_id] = index
        else:
            index = self.last_tool_index
        self.last_tool_index = index
        return index


class Blocks:
    """IR blocks of a Chat upstream: indexes in first-appearance order; text, refusal and
    reasoning runs are one block each, tool calls one per ``tool_calls[].index``."""

    __slots__ = ("next", "blocks", "open", "tools", "names", "repeat_noted")

    def __init__(self, ctx):
        self.next = 0
        self.blocks: dict = {}   # IR index -> {kind, args}
        self.open = None         # the open text-like block
        self.tools: dict = {}    # Chat tool index -> IR index
        self.names: dict = {}    # Chat tool index -> the function name it started with
        self.repeat_noted = False

    def _new(self, kind) -> int:
        index = self.next
        self.next += 1
        self.blocks[index] = {"kind": kind, "args": []}  # fragments, joined at the end (+= copies it all)
        return index

    def text(self, kind=None) -> dict:
        """Route a text, refusal or reasoning delta: ``{closed, opened, index}``. Another kind's
        open block is closed first; tool blocks stay open until finish_reason."""
        current = self.open
        if current is not None and self.blocks[current]["kind"] == kind:
            return {"closed": None, "opened": False, "index": current}
        if current is not None:
            self.blocks.pop(current)
        index = self.open = self._new(kind)
        return {"closed": current, "opened": True, "index": index}

    def tool(self, index=None, arguments=None, name=None) -> dict:
        """Route a tool-call fragment by its Chat ``index``: ``{closed, new, index, repeat,
        renamed}``; arguments accumulate.

        OpenAI names a call once, in its first fragment. Some compatible servers (Novita
        through OpenRouter, tests/corpus/llm/openai_chat_completions/stream/
        test_tools_streaming_variant_a.0.sse) repeat the whole name in every fragment. A
        later name equal to the call's name is such a repeat: ignored, since concatenating
        it would name a tool nobody declared; ``repeat`` is true for the first one of the
        stream, for one trace line. A later name that differs is ``renamed``: the name
        went to the client with the call's start (every client protocol names a call when
        it opens), so a continuation cannot be honoured, and keeping the first piece could
        run another tool than the model meant; the rules refuse the stream instead."""
        if not isinstance(index, int):
            raise UpstreamProtocolError("upstream tool call fragment has no integer index")
        closed = None
        repeat = renamed = False
        block = self.tools.get(index)
        new = block is None
        if new:
            closed = self.open
            if closed is not None:
                self.blocks.pop(closed)
                self.open = None
            block = self.tools[index] = self._new("tool_call")
            self.names[index] = name
        elif isinstance(name, str) and name:
            if name == self.names.get(index):
                repeat = not self.repeat_noted
                self.repeat_noted = True
            else:
                renamed = True
        if isinstance(arguments, str):
            self.blocks[block]["args"].append(arguments)
        return {"closed": closed, "new": new, "index": block, "repeat": repeat, "renamed": renamed}

    def close_all(self) -> list:
        """At finish_reason: every open block in ascending index order, as
        ``{index, kind, empty, invalid}``; ``empty`` tool calls get a ``"{}"`` delta, and
        ``invalid`` names why the accumulated arguments are not a JSON object."""
        out = []
        for index in sorted(self.blocks):
            block = self.blocks[index]
            item = {"index": index, "kind": block["kind"], "empty": False, "invalid": None}
            if block["kind"] == "tool_call":
                args = "".join(block["args"])
                if not args.strip():
                    item["empty"] = True
                else:
                    item["invalid"] = _arguments_problem(args)
            out.append(item)
        self.blocks.clear()
        self.open = None
        return out


def _arguments_problem(text: str) -> str | None:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return "upstream tool call arguments are not valid JSON"
    if not isinstance(value, dict):
        return "upstream tool call arguments are not a JSON object"
    return None


# --- stream encode ------------------------------------------------------------------


class ToolIndexes:
    """The client's ``tool_calls[].index`` for an IR block: 0, 1, 2... minted at first sight."""

    __slots__ = ("indexes",)

    def __init__(self, ctx):
        self.indexes: dict = {}

    def index(self, index=None) -> int:
        if index not in self.indexes:
            self.indexes[index] = len(self.indexes)
        return self.indexes[index]


class Turn:
    """The turn's IR parts as they stream (envelope layout: reasoning relative to text and
    tool calls), and whether any visible text or refusal was sent."""

    __slots__ = ("parts_", "at", "spoke_")

    def __init__(self, ctx):
        self.parts_: list = []
        self.at: dict = {}       # IR index -> part
        self.spoke_ = False

    def add(self, index=None, part=None, said=None) -> None:
        """Record a started block's IR part (its shape is the rule's); ``said``: it carried visible text."""
        self.parts_.append(part)
        self.at[index] = part
        if said:
            self.spoke_ = True

    def gap(self):
        """The separator owed before a new reasoning block's text: blocks flattened into one
        reasoning_content are joined as the envelope's layout expects (null for the first)."""
        if any(p["type"] == "reasoning" and p.get("text") is not None for p in self.parts_):
            return BLOCK_SEP
        return None

    def delta(self, index=None, delta=None) -> str:
        """Record a delta; returns the block's kind (a block_delta may omit it):
        text, refusal, reasoning (redacted too), tool_call or custom_tool_call."""
        part = self.at.get(index)
        if part is None:
            raise UpstreamProtocolError("block delta for a block that was never started")
        if part["type"] == "reasoning" and isinstance(delta, str):
            part["text"] = (part.get("text") or "") + delta
        elif part["type"] in ("text", "refusal") and delta:
            self.spoke_ = True
        if part.get("custom"):
            return "custom_tool_call"
        return part["type"]

    def opaque(self, index=None, opaque=None) -> None:
        part = self.at.get(index)
        if part is not None and isinstance(opaque, dict):
            part["opaque"] = opaque

    def parts(self) -> list | None:
        return self.parts_ or None

    def spoke(self) -> bool:
        return self.spoke_


OBJECTS = {
    "chat.chunks": Chunks,
    "chat.blocks": Blocks,
    "chat.tool_indexes": ToolIndexes,
    "chat.turn": Turn,
}

"""Hooks for the OpenAI Chat Completions codec: the steps its rule files cannot say as data.

Stream decoding (Chat upstream -> IR): a chunk carries several things at once, so
``chat.split`` cuts it into typed sub-events; ``chat.open_block`` / ``chat.tool_block``
/ ``chat.close_all`` keep the IR block bookkeeping (indexes in first-appearance order,
the open text-like block, tool argument accumulation and validation).

Stream encoding (IR -> Chat client): ``chat.tool_index`` mints ``tool_calls[].index``;
``chat.turn_*`` record the turn's parts so the continuation envelope can be built at
the end of the stream (docs/continuation.md, Chat carrier).
"""
from __future__ import annotations

import orjson

from ..errors import UpstreamProtocolError
from .continuation import BLOCK_SEP, reasoning_text, suffix

# --- stream decode ------------------------------------------------------------------


def split(scope):
    """One Chat SSE payload -> typed sub-events (openai_chat_completions.events), in the
    order they take effect: first, reasoning, content, refusal, tool_call..., finish | usage | done | error."""
    chunk, state = scope.cur, scope.vars["state"]
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
        if state.get("id") is None:
            state["id"] = chunk_id
        elif chunk_id != state["id"]:
            raise UpstreamProtocolError("upstream chunk id changed within the stream")
    out = []
    if not state.get("started"):
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
        pieces.append({"type": "tool_call", "index": _tool_index(state, call), "id": call.get("id"),
                       "name": function.get("name"), "arguments": function.get("arguments")})
    if pieces and state.get("stop") is not None:
        raise UpstreamProtocolError("upstream sent content after finish_reason")
    out.extend(pieces)
    if finish is not None:
        if state.get("stop") is not None:
            raise UpstreamProtocolError("upstream sent finish_reason twice")
        out.append({"type": "finish", "finish_reason": finish, "usage": usage})
    elif usage:
        # OpenRouter: the final usage on a chunk that still has a (empty) choice.
        out.append({"type": "usage", "usage": usage})
    return out


def _tool_index(state, call: dict):
    """The fragment's Chat ``index``. Some OpenAI-compatible servers omit it and send
    each call whole: then a new ``id`` is a new call, and a fragment with neither
    continues the latest one."""
    index, call_id = call.get("index"), call.get("id")
    seen = state.setdefault("tool_ids", {})
    if isinstance(index, int) and not isinstance(index, bool):
        if call_id is not None:
            seen.setdefault(call_id, index)
        state["last_tool_index"] = index
        return index
    if call_id is not None and call_id in seen:
        index = seen[call_id]
    elif call_id is not None:
        index = max(seen.values(), default=-1) + 1
        seen[call_id] = index
    else:
        index = state.get("last_tool_index")
    state["last_tool_index"] = index
    return index


def _blocks(state) -> dict:
    return state.setdefault("blocks", {})


def _new_block(state, kind) -> int:
    index = state.get("next_block", 0)
    state["next_block"] = index + 1
    _blocks(state)[index] = {"kind": kind, "args": ""}
    return index


def open_block(scope, kind=None):
    """Route a text, refusal or reasoning delta: ``{closed, opened, index}``. Another kind's
    open block is closed first; tool blocks stay open until finish_reason."""
    state = scope.vars["state"]
    current = state.get("open")
    if current is not None and _blocks(state)[current]["kind"] == kind:
        return {"closed": None, "opened": False, "index": current}
    if current is not None:
        _blocks(state).pop(current)
    index = _new_block(state, kind)
    state["open"] = index
    return {"closed": current, "opened": True, "index": index}


def tool_block(scope, index=None, arguments=None):
    """Route a tool-call fragment by its Chat ``index``: ``{closed, new, index}``; arguments accumulate."""
    state = scope.vars["state"]
    if not isinstance(index, int):
        raise UpstreamProtocolError("upstream tool call fragment has no integer index")
    tools = state.setdefault("tools", {})
    closed = None
    block = tools.get(index)
    new = block is None
    if new:
        closed = state.get("open")
        if closed is not None:
            _blocks(state).pop(closed)
            state["open"] = None
        block = tools[index] = _new_block(state, "tool_call")
    if isinstance(arguments, str):
        _blocks(state)[block]["args"] += arguments
    return {"closed": closed, "new": new, "index": block}


def close_all(scope):
    """At finish_reason: every open block in ascending index order, as
    ``{index, kind, empty, invalid}``; ``empty`` tool calls get a ``"{}"`` delta, and
    ``invalid`` names why the accumulated arguments are not a JSON object."""
    state = scope.vars["state"]
    blocks = _blocks(state)
    out = []
    for index in sorted(blocks):
        block = blocks[index]
        item = {"index": index, "kind": block["kind"], "empty": False, "invalid": None}
        if block["kind"] == "tool_call":
            args = block["args"]
            if not args.strip():
                item["empty"] = True
            else:
                item["invalid"] = _arguments_problem(args)
        out.append(item)
    blocks.clear()
    state["open"] = None
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


def tool_index(scope, index=None):
    """The client's ``tool_calls[].index`` for an IR block: 0, 1, 2... minted at first sight."""
    state = scope.vars["state"]
    tools = state.setdefault("tool_index", {})
    if index not in tools:
        tools[index] = len(tools)
    return tools[index]


def turn_add(scope, index=None, kind=None, id=None, text=None, opaque=None, custom=None):
    """Record a started block as an IR part of the turn (envelope layout: order of
    reasoning relative to text and tool calls)."""
    state = scope.vars["state"]
    part = {"type": "reasoning" if kind in ("reasoning", "redacted_reasoning") else kind}
    if kind == "reasoning":
        part["text"] = text or ""
    elif kind == "redacted_reasoning":
        part["text"] = None
    elif kind == "tool_call":
        part["id"] = id
        if custom:
            part["custom"] = True
    if opaque:
        part["opaque"] = opaque
    state.setdefault("parts", []).append(part)
    state.setdefault("part_at", {})[index] = part
    if kind in ("text", "refusal") and text:
        state["spoke"] = True
    return None


def reasoning_gap(scope):
    """The separator owed before a new reasoning block's text: blocks flattened into one
    reasoning_content are joined as the envelope's layout expects (null for the first)."""
    parts = scope.vars["state"].get("parts") or ()
    if any(p["type"] == "reasoning" and p.get("text") is not None for p in parts):
        return BLOCK_SEP
    return None


def turn_delta(scope, index=None, delta=None):
    state = scope.vars["state"]
    part = state.get("part_at", {}).get(index)
    if part is None:
        raise UpstreamProtocolError("block delta for a block that was never started")
    if part["type"] == "reasoning" and isinstance(delta, str):
        part["text"] = (part.get("text") or "") + delta
    elif part["type"] in ("text", "refusal") and delta:
        state["spoke"] = True
    return None


def turn_opaque(scope, index=None, opaque=None):
    part = scope.vars["state"].get("part_at", {}).get(index)
    if part is not None and isinstance(opaque, dict):
        part["opaque"] = opaque
    return None


def kind(scope, index=None):
    """The IR kind of a started block (a block_delta may omit ``kind``)."""
    part = scope.vars["state"].get("part_at", {}).get(index)
    if part is None:
        return None
    if part.get("custom"):
        return "custom_tool_call"
    return "reasoning" if part["type"] == "reasoning" else part["type"]


# --- requests and responses ---------------------------------------------------------


def compact(scope, parts=None):
    """Chat content: one text part -> its string (what every Chat server accepts), several
    parts -> the list, none -> null."""
    if not parts:
        return None
    if len(parts) == 1 and parts[0].get("type") == "text":
        return parts[0].get("text")
    return parts


def allowed_tools(scope, tools=None, names=None):
    """An allowed_tools subset as ``[{type, name}]``, each typed from the request's tool list."""
    types = {t.get("name"): t.get("type") for t in tools or () if isinstance(t, dict)}
    return [{"type": "custom" if types.get(name) == "custom" else "function", "name": name} for name in names or ()]


def reasoning_content(scope, parts=None):
    """Chat carrier: visible reasoning (blocks joined) plus the continuation envelope suffix."""
    text = reasoning_text(scope, parts=parts)
    tail = suffix(scope, parts=parts)
    if text is None and not tail:
        return None
    return (text or "") + tail


def annotations(scope, parts=None):
    """URL citations of the text parts, offsets shifted onto the concatenated content
    (docs/mappings.md §3: the one citation kind all three protocols share)."""
    out, offset = [], 0
    for part in parts or ():
        if part.get("type") != "text":
            continue
        for note in part.get("annotations") or ():
            if isinstance(note, dict) and note.get("type") == "url_citation":
                out.append({"type": "url_citation", "url_citation": {
                    "url": note.get("url"), "title": note.get("title") or "",
                    "start_index": (note.get("start_index") or 0) + offset,
                    "end_index": (note.get("end_index") or 0) + offset}})
        offset += len(part.get("text") or "")
    return out or None


def upstream_failed(scope, error=None):
    """A failed upstream answer is an error for the client, with the upstream's own words."""
    message = error.get("message") if isinstance(error, dict) else None
    raise UpstreamProtocolError(f"upstream response failed: {message}" if message else "upstream response failed")


HOOKS = {
    "chat.split": split,
    "chat.open_block": open_block,
    "chat.tool_block": tool_block,
    "chat.close_all": close_all,
    "chat.tool_index": tool_index,
    "chat.turn_add": turn_add,
    "chat.reasoning_gap": reasoning_gap,
    "chat.turn_delta": turn_delta,
    "chat.turn_opaque": turn_opaque,
    "chat.kind": kind,
    "chat.compact": compact,
    "chat.allowed_tools": allowed_tools,
    "chat.reasoning_content": reasoning_content,
    "chat.annotations": annotations,
    "chat.upstream_failed": upstream_failed,
}

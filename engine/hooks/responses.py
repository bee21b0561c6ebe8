"""Hooks for the OpenAI Responses codec (rules/openai_responses/).

Requests: grouping input items into IR turns (and IR parts back into input items),
allowed-tools typing, summary parts rebuilt from recorded lengths. The stream rules'
stateful parts are objects in :mod:`engine.hooks.responses_stream`.
"""
from __future__ import annotations

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


LOGPROBS = "message.output_text.logprobs"
ENCRYPTED_REASONING = "reasoning.encrypted_content"


def include(scope, values=None):
    """``include`` -> the IR ``logprobs`` flag; every value with no counterpart is traced.

    ``message.output_text.logprobs`` is the flag. ``reasoning.encrypted_content`` is
    honoured while continuation is on: the envelope is what a reasoning item's
    encrypted_content then carries. The other values (hosted tools' results and sources,
    input and screenshot image URLs) ask for output items no other protocol produces, so
    the provider cannot be asked for them: dropped, each named in a trace line."""
    if not isinstance(values, list):
        return None
    ctx = scope.ctx
    for value in dict.fromkeys(v for v in values if isinstance(v, str)):
        if value == LOGPROBS or (value == ENCRYPTED_REASONING and (ctx is None or ctx.continuation_enabled)):
            continue
        if ctx is not None:
            why = "continuation is off" if value == ENCRYPTED_REASONING else f"no counterpart in {ctx.provider_protocol}"
            ctx.trace(f"dropped include value {value} ({why})")
    return True if LOGPROBS in values else None


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


def configuration(scope, items=None, field=None):
    """The ``field`` settings (``reasoning``, ``text``) of the last configuration_update input
    item that has them: in effect until a later update replaces them (None: no update)."""
    if not isinstance(items, list):
        return None
    for item in reversed(items):
        if isinstance(item, dict) and item.get("type") == "configuration_update" and isinstance(item.get(field), dict):
            return item[field]
    return None


def phases(scope, items=None):
    """A translated answer's assistant message items get the ``phase`` Responses models
    write (clients such as Codex tell the turn's final answer by it): ``final_answer`` for
    the message that ends the answer, ``commentary`` for one another item (a tool call,
    reasoning) follows, as the stream encoder decides when it closes a message."""
    out = list(items or ())
    for i, item in enumerate(out):
        if isinstance(item, dict) and item.get("type") == "message" and item.get("role") == "assistant":
            item["phase"] = "final_answer" if i == len(out) - 1 else "commentary"
    return out


# --- tool search (emulated, engine/hooks/tool_search.py) --------------------------------


def tool_search_names(scope, tools=None):
    """The names a tool_search_output loaded, as the proxy's search finds them (a
    namespace's tools by their flattened names)."""
    from .names import wire_name

    names = []
    for tool in tools or ():
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            continue
        if tool.get("type") == "namespace":
            names.extend(wire_name(tool["name"], t["name"]) for t in tool.get("tools") or ()
                         if isinstance(t, dict) and isinstance(t.get("name"), str))
        else:
            names.append(tool["name"])
    return names


def tool_search_tools(scope, names=None):
    """tool_search_output.tools: the client's own definitions of the tools a search the
    proxy ran loaded, a namespace's under the namespace (its other tools left out)."""
    from .names import wire_name

    wanted = set(names or ())
    body = getattr(scope.ctx, "client_body", None) or {}
    out = []
    for tool in body.get("tools") or ():
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "namespace":
            found = [t for t in tool.get("tools") or () if isinstance(t, dict) and wire_name(tool.get("name"), t.get("name")) in wanted]
            if found:
                out.append({"type": "namespace", "name": tool.get("name"), "description": tool.get("description") or "",
                            "tools": found})
        elif tool.get("name") in wanted:
            out.append(tool)
    return out


HOOKS = {
    "responses.tool_search_names": tool_search_names,
    "responses.tool_search_tools": tool_search_tools,
    "responses.phases": phases,
    "responses.configuration": configuration,
    "responses.group_turns": group_turns,
    "responses.merge_messages": merge_messages,
    "responses.is_custom_call": is_custom_call,
    "responses.allowed_tools": allowed_tools,
    "responses.include": include,
    "responses.split_summary": split_summary,
    "responses.number_items": number_items,
}

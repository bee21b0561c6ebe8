"""Hooks for the Anthropic Messages codec rules: block bookkeeping for the two
stream directions, turn merging, PDF sources, citations, and a few checks whose
messages depend on the data."""
from __future__ import annotations

import orjson

from ..errors import InvalidRequest, UpstreamProtocolError
from .common import parse_data_url

# --- request decode --------------------------------------------------------------

# Fields nested in blocks and tools that no Chat or Responses slot carries; they
# only affect caching, cost or display (docs/mappings.md §2, §4).


def data_path(scope):
    """The client's wire path of the current item (``messages[2].content[1]``),
    for IR items built outside a ``$map`` result."""
    return scope.path or None


def citations_to_annotations(scope, citations=None, text=None):
    """Web-search citations of one text block -> IR url_citation annotations over
    the block's text (other citation kinds are advisory, docs/mappings.md §3)."""
    out = [
        {"type": "url_citation", "url": c.get("url"), "title": c.get("title"),
         "start_index": 0, "end_index": len(text or "")}
        for c in citations or () if isinstance(c, dict) and c.get("type") == "web_search_result_location"
    ]
    return out or None


# --- request encode --------------------------------------------------------------


def merge_turns(scope):
    """Anthropic wants alternating turns: consecutive same-role messages merge into
    one (tool results and the user text after them become one user turn, the
    tool_result blocks first); turns left empty (only skipped reasoning) go."""
    body = scope.cur
    merged: list = []
    for msg in body.get("messages") or ():
        content = list(msg.get("content") or ())
        if not content:
            continue
        if merged and merged[-1]["role"] == msg["role"]:
            merged[-1]["content"].extend(content)
        else:
            merged.append({"role": msg["role"], "content": content})
    for msg in merged:
        if msg["role"] == "user":
            blocks = msg["content"]
            msg["content"] = [b for b in blocks if b.get("type") == "tool_result"] + [
                b for b in blocks if b.get("type") != "tool_result"]
    body["messages"] = merged
    return body


def tool_allowed(scope, allowed=None, name=None):
    return allowed is None or name in allowed


# Anthropic's smallest thinking budget.
MIN_THINKING_BUDGET = 1024


def thinking_budget(scope, budget=None, max_tokens=None):
    """An effort's thinking budget, kept below max_tokens (Anthropic requires it);
    None, with a trace, when not even the minimum budget fits."""
    if not isinstance(budget, int):
        return None
    if isinstance(max_tokens, int) and budget >= max_tokens:
        budget = max_tokens - 1
    if budget < MIN_THINKING_BUDGET:
        if scope.ctx is not None:
            scope.ctx.trace(f"reasoning effort dropped: max_tokens leaves no room for a {MIN_THINKING_BUDGET}-token thinking budget")
        return None
    return budget


def pdf_data(scope):
    """The base64 data of an IR document part bound for a PDF source: a PDF data
    URL, or raw base64 marked as PDF by media type or a ``.pdf`` filename
    (docs/mappings.md §2). Anything else cannot be expressed."""
    part = scope.cur
    data = part.get("data") if part.get("source") == "base64" else part.get("url")
    if isinstance(data, str) and data.startswith("data:"):
        parsed = parse_data_url(scope, url=data)
        if parsed["media_type"] != "application/pdf":
            scope.fail("Anthropic Messages accepts only PDF documents (application/pdf)")
        return parsed["data"]
    media_type = part.get("media_type")
    filename = part.get("filename") or ""
    if media_type == "application/pdf" or (not media_type and filename.lower().endswith(".pdf")):
        if isinstance(data, str) and data:
            return data
    scope.fail("Anthropic Messages accepts only PDF documents (a PDF data URL, or base64 with a .pdf filename)")


def reject(scope, message="", param=None):
    """A 400 whose message depends on the data (``$reject`` takes a fixed one)."""
    raise InvalidRequest(str(message), scope.param(param))


# --- response encode -------------------------------------------------------------


def fail(scope, message=""):
    """An upstream protocol error (502) whose message depends on the data."""
    raise UpstreamProtocolError(str(message), scope.param())


def annotations_to_citations(scope, annotations=None, text=None):
    """IR url_citation annotations -> web_search_result_location citations. Lossy:
    the provider's encrypted_index does not exist for a foreign citation."""
    out = []
    for a in annotations or ():
        if not isinstance(a, dict) or a.get("type") != "url_citation":
            continue
        start, end = a.get("start_index"), a.get("end_index")
        cited = text[start:end] if isinstance(text, str) and isinstance(start, int) and isinstance(end, int) else ""
        out.append({"type": "web_search_result_location", "url": a.get("url"), "title": a.get("title"),
                    "cited_text": cited, "encrypted_index": ""})
    return out or None


# --- stream decode: Anthropic blocks by index ------------------------------------


def _blocks(scope) -> dict:
    return scope.vars["state"].setdefault("blocks", {})


def block_open(scope, index=None, kind=None):
    _blocks(scope)[index] = {"kind": kind, "arguments": "", "streamed": False}


def block(scope, index=None):
    return _blocks(scope).get(index)


def arguments_append(scope, index=None, delta=None):
    entry = _blocks(scope).get(index)
    if entry is None or entry["kind"] != "tool_call":
        scope.fail("input_json_delta for a block that is not an open tool_use block")
    if delta:
        entry["arguments"] += delta
        entry["streamed"] = True


def arguments_check(scope, index=None):
    """At a tool block's close its accumulated arguments must be a JSON object."""
    text = _blocks(scope)[index]["arguments"]
    if not text.strip():
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        scope.fail("tool call arguments streamed by the provider are not valid JSON")
    if not isinstance(value, dict):
        scope.fail("tool call arguments streamed by the provider are not a JSON object")
    return None


def usage_update(scope, usage=None):
    """Anthropic usage is cumulative: a later report overwrites the fields it carries."""
    state = scope.vars["state"]
    if isinstance(usage, dict):
        state["usage"] = {**state.get("usage", {}), **{k: v for k, v in usage.items() if v is not None}}


# --- stream encode: our blocks by IR index -----------------------------------------


def out_open(scope, index=None, kind=None, text=None):
    """Mint the next Anthropic block index (0, 1, 2... in start order) for an IR block."""
    state = scope.vars["state"]
    entry = {"index": state["next_index"], "kind": kind, "text": "", "opaque": None}
    state["next_index"] += 1
    state["blocks"][index] = entry
    if kind == "refusal":
        state["refusal_seen"] = True
    _note_text(state, kind, text)
    return entry


def out_skip(scope, index=None):
    scope.vars["state"]["blocks"][index] = {"index": None, "kind": "skipped"}


def _note_text(state, kind, delta):
    if kind == "text" and delta:
        state["text_seen"] = True


def _out_entry(scope, index):
    entry = scope.vars["state"]["blocks"].get(index)
    if entry is None:
        scope.fail(f"IR event for block {index} before its block_start")
    return entry


def out_delta(scope, index=None, delta=None):
    state = scope.vars["state"]
    entry = _out_entry(scope, index)
    if entry["kind"] == "reasoning" and delta:
        entry["text"] += delta
    _note_text(state, entry["kind"], delta)
    return entry


def out_opaque(scope, index=None, opaque=None):
    _out_entry(scope, index)["opaque"] = opaque


def out_close(scope, index=None):
    """The closed block, with the reasoning part the envelope is made from."""
    entry = scope.vars["state"]["blocks"].pop(index, None)
    if entry is None:
        scope.fail(f"block_stop for block {index} that is not open")
    if entry["kind"] == "reasoning":
        entry = {**entry, "part": {"type": "reasoning", "text": entry["text"], "opaque": entry["opaque"]}}
    return entry


HOOKS = {
    "anthropic.data_path": data_path,
    "anthropic.citations_to_annotations": citations_to_annotations,
    "anthropic.merge_turns": merge_turns,
    "anthropic.tool_allowed": tool_allowed,
    "anthropic.pdf_data": pdf_data,
    "anthropic.thinking_budget": thinking_budget,
    "anthropic.reject": reject,
    "anthropic.fail": fail,
    "anthropic.annotations_to_citations": annotations_to_citations,
    "anthropic.block_open": block_open,
    "anthropic.block": block,
    "anthropic.arguments_append": arguments_append,
    "anthropic.arguments_check": arguments_check,
    "anthropic.usage_update": usage_update,
    "anthropic.out_open": out_open,
    "anthropic.out_skip": out_skip,
    "anthropic.out_delta": out_delta,
    "anthropic.out_opaque": out_opaque,
    "anthropic.out_close": out_close,
}

"""Hooks for the Anthropic Messages codec rules: turn merging, PDF sources, citations,
and a few checks whose messages depend on the data. The stream rules' stateful parts
are objects in :mod:`engine.hooks.anthropic_stream`."""
from __future__ import annotations

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


THINKING_BLOCKS = ("thinking", "redacted_thinking")


def turn_in_progress(messages) -> list[int]:
    """Indexes of the assistant messages of the tool-use turn a request continues:
    those after the last user message with no tool_result (a tool loop is one
    assistant turn), when the request ends with tool results; else none."""
    # System messages in place (engine/hooks/instructions.py) are not turns: skipped.
    turns = [i for i, m in enumerate(messages or ()) if not (isinstance(m, dict) and m.get("role") == "system")]
    if not turns or not _has_tool_result(messages[turns[-1]]):
        return []
    out: list[int] = []
    for i in reversed(turns):
        msg = messages[i]
        if msg.get("role") == "assistant":
            out.append(i)
        elif not _has_tool_result(msg):
            break
    return out[::-1]


def _has_tool_result(msg) -> bool:
    return isinstance(msg, dict) and msg.get("role") == "user" and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in msg.get("content") or ())


def thinking_turn(scope):
    """Thinking against the turn in progress. With thinking on, Anthropic wants the
    tool-use turn a request continues to start with the thinking block the model wrote
    (400 otherwise), and one thinking mode per turn. A block restored from this
    provider's state goes first in its message (clients may have put text or the
    call before it); when the turn has none to restore (its reasoning came from
    another provider or the client dropped it), this request goes without thinking."""
    body = scope.cur
    thinking = body.get("thinking") if isinstance(body, dict) else None
    if not isinstance(thinking, dict) or thinking.get("type") == "disabled":
        return body
    turn = turn_in_progress(body.get("messages") or [])
    if not turn:
        return body
    for i in turn:
        body["messages"][i]["content"] = _thinking_first(body["messages"][i]["content"])
    first = body["messages"][turn[0]]["content"]
    if first and first[0].get("type") in THINKING_BLOCKS:
        return body
    del body["thinking"]
    if scope.ctx is not None:
        scope.ctx.trace("thinking off for this request: the tool-use turn in progress has no thinking block "
                        "from this provider to restore (Anthropic requires one with thinking on)")
    return body


def _thinking_first(blocks: list) -> list:
    """The first run of thinking blocks moved before what precedes it (the model
    writes it first; interleaved thinking later in the message stays where it is)."""
    start = next((k for k, b in enumerate(blocks) if b.get("type") in THINKING_BLOCKS), None)
    if not start:
        return blocks
    end = start
    while end < len(blocks) and blocks[end].get("type") in THINKING_BLOCKS:
        end += 1
    return blocks[start:end] + blocks[:start] + blocks[end:]


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


HOOKS = {
    "anthropic.data_path": data_path,
    "anthropic.citations_to_annotations": citations_to_annotations,
    "anthropic.merge_turns": merge_turns,
    "anthropic.thinking_turn": thinking_turn,
    "anthropic.tool_allowed": tool_allowed,
    "anthropic.pdf_data": pdf_data,
    "anthropic.thinking_budget": thinking_budget,
    "anthropic.reject": reject,
    "anthropic.fail": fail,
    "anthropic.annotations_to_citations": annotations_to_citations,
}

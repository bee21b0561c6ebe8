"""Hooks for the OpenAI Chat Completions codec: the steps its rule files cannot say as data.

The stream rules' stateful parts are objects in :mod:`engine.hooks.chat_stream`.
"""
from __future__ import annotations

from ..errors import UpstreamProtocolError
from .continuation import reasoning_text, suffix

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
    (docs/mappings.md §3: the one citation kind Chat, Responses and Anthropic share)."""
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
    "chat.compact": compact,
    "chat.allowed_tools": allowed_tools,
    "chat.reasoning_content": reasoning_content,
    "chat.annotations": annotations,
    "chat.upstream_failed": upstream_failed,
}

"""Responses compaction items toward a provider without them (docs/responses-api.md "Compaction").

A Responses client compacts its history with ``POST /v1/responses/compact`` or with a
``compaction_trigger`` as the final input item of ``POST /v1/responses`` (Codex's remote
compaction). Toward a provider of another protocol the proxy asks the routed model for a
summary (proxai/endpoints/compaction.py, the prompt of rules/tables/context_management.yaml) and
answers with one ``compaction`` item whose ``encrypted_content`` is a continuation
envelope (engine/hooks/continuation.py) holding the summary: ``{"k": "compaction", "t":
summary}``, signed when ``continuation.secret`` is set. A later request that carries the
item back gets it expanded in place: the provider reads the summary as a user message.

The summary is plain text any provider can read, so unlike reasoning state the envelope
is not bound to the provider that wrote it.
"""
from __future__ import annotations

from ..errors import InvalidRequest
from . import continuation

COMPACTION = "compaction"
TRIGGER = "compaction_trigger"


def envelope(ctx, summary: str) -> str:
    return continuation.pack(ctx, [{"k": COMPACTION, "t": summary}])


def summary_in(ctx, value) -> str | None:
    """The summary an envelope holds; None when the value is not one of ours (a provider's
    own compaction, another proxy's key, or tampered)."""
    payload = continuation.unpack(ctx, value)
    if payload is None:
        return None
    blocks = payload["b"]
    if len(blocks) != 1 or not isinstance(blocks[0], dict) or blocks[0].get("k") != COMPACTION:
        return None
    summary = blocks[0].get("t")
    return summary if isinstance(summary, str) and summary else None


# --- hooks -------------------------------------------------------------------------------


def expand(scope, value=None, prefix=None):
    """A compaction input item -> the text that stands for the history it summarises
    (``prefix``, rules/tables/context_management.yaml, then the summary)."""
    summary = summary_in(scope.ctx, value) if scope.ctx is not None else None
    if summary is None:
        scope.fail("this compaction item was not made by this proxy (or its signature does not verify), so its "
                   "summary cannot be read for this provider; compact the history again through this proxy",
                   "encrypted_content")
    scope.ctx.trace("compaction item: its summary sent in its place")
    return f"{prefix or ''}{summary}"


def apply(scope):
    """The request decoder's after hook. A ``compaction_trigger`` that is the last input item
    marks the request for compaction (its answer is the compaction item alone); one followed
    by a compaction item is a trigger already answered (a replayed history) and says nothing.
    Before the last compaction item, what it summarised (assistant turns, tool calls and
    their results) is left out; user, system and developer messages stay, as in the
    compacted history responses.compact returns."""
    ir, ctx = scope.cur, scope.ctx
    body = ctx.client_body if ctx is not None and isinstance(ctx.client_body, dict) else {}
    items = body.get("input")
    if not isinstance(items, list) or not isinstance(ir, dict):
        return ir
    kinds = [item.get("type") if isinstance(item, dict) else None for item in items]
    for i, kind in enumerate(kinds):
        if kind != TRIGGER:
            continue
        if i == len(items) - 1:
            ctx.compaction = {"instructions": None, "pause": True}
            ctx.trace("compaction_trigger: the history is summarised by the routed model")
        elif kinds[i + 1] != COMPACTION:
            raise InvalidRequest("a compaction_trigger item must be the final input item", f"input[{i}]")
    if COMPACTION not in kinds:
        return ir
    at = f"input[{len(kinds) - 1 - kinds[::-1].index(COMPACTION)}]"
    messages = ir.get("messages") or []
    cut = next((k for k, msg in enumerate(messages) if isinstance(msg, dict) and msg.get("_path") == at), None)
    if cut is None:
        return ir
    kept = [m for m in messages[:cut] if m.get("role") not in ("assistant", "tool")]
    if len(kept) < cut:
        ctx.trace(f"compaction item: {cut - len(kept)} summarised messages before it left out")
    return {**ir, "messages": [*kept, *messages[cut:]]}


def item(scope, summary=None):
    """The answer's compaction item (None: no compaction ran for it)."""
    if not summary or scope.ctx is None:
        return None
    return envelope(scope.ctx, summary)


HOOKS = {
    "compaction_items.expand": expand,
    "compaction_items.apply": apply,
    "compaction_items.envelope": item,
}

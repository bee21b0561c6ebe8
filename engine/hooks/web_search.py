"""``web_search.history``: web searches in a client's history reach the provider as text.

A web search the proxy ran (docs/web-search.md) comes back in the next request as IR
``web_search_call`` {id, query} and ``web_search_result`` {call_id, results | error}
parts of an assistant turn (Anthropic's server_tool_use / web_search_tool_result blocks,
a Responses web_search_call item). No provider of another protocol ran that search as
its tool, so each becomes a text part of the same turn: the query, then the results.
"""
from __future__ import annotations

CALL, RESULT = "web_search_call", "web_search_result"


def results_text(results) -> str:
    """Search results as the model reads them (also the tool result of a search the proxy runs)."""
    if isinstance(results, str):
        return f"The search failed ({results})."
    if not results:
        return "No results."
    lines = []
    for i, r in enumerate(results, 1):
        get = r.get if isinstance(r, dict) else (lambda k, r=r: getattr(r, k, None))
        lines.append(f"{i}. {get('title') or ''}\n{get('url') or ''}" + (f"\n{get('snippet')}" if get("snippet") else ""))
    return "\n\n".join(lines)


def _text(part: dict) -> dict:
    if part["type"] == CALL:
        return {"type": "text", "text": f'(Searched the web for "{part.get("query") or ""}".)'}
    return {"type": "text", "text": f"(Search results: {results_text(part.get('error') or part.get('results') or [])})"}


def history(scope):
    ir = scope.cur
    messages = ir.get("messages") if isinstance(ir, dict) else None
    if not messages or not any(isinstance(p, dict) and p.get("type") in (CALL, RESULT)
                               for m in messages if isinstance(m, dict) for p in m.get("content") or ()):
        return ir
    out = []
    for m in messages:
        if isinstance(m, dict) and isinstance(m.get("content"), list):
            m = {**m, "content": [_text(p) if isinstance(p, dict) and p.get("type") in (CALL, RESULT) else p
                                  for p in m["content"]]}
        out.append(m)
    return {**ir, "messages": out}


HOOKS = {"web_search.history": history}

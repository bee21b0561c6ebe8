"""The web search tool loop on the IR: what the provider is offered, what its calls are,
how the next round continues, and what the client gets back. Nothing here knows a wire
protocol: the client's encoders turn the IR blocks `web_search_call` {id, query} and
`web_search_result` {call_id, results | error} into their own (Anthropic's server_tool_use
and web_search_tool_result, Responses' web_search_call item).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from engine.hooks.web_search import results_text
from proxai.http.web_search.backends import Result

HOSTED = "hosted_type->web_search"
SETTINGS = "web_search.setting->value"
CALL, RESULT = "web_search_call", "web_search_result"


def setting(tables, key: str) -> Any:
    return tables[SETTINGS].lookup(key)


def is_web_search(tables, tool: Any) -> bool:
    return isinstance(tool, dict) and tool.get("type") == "hosted" and tables[HOSTED].lookup(tool.get("hosted_type")) is True


@dataclass
class Session:
    """One client request whose web search the proxy runs."""
    name: str  # the function tool's name toward the provider
    searches_left: int
    rounds: list = field(default_factory=list)  # (IR response, {call id: results | error code})

    def calls(self, response: dict) -> list[dict]:
        return [b for b in response.get("content") or () if isinstance(b, dict)
                and b.get("type") == "tool_call" and b.get("name") == self.name]


def offer(ir: dict, ctx, tables, configured: bool, max_searches: int) -> tuple[dict, Session | None]:
    """The IR request with the client's web search tool replaced by a function tool (a
    backend is configured) or left for the encoder to drop, the provider told so in its
    system prompt (none is)."""
    tools = ir.get("tools") or []
    wanted = [t for t in tools if is_web_search(tables, t)]
    if not wanted:
        return ir, None
    if not configured:
        note = setting(tables, "unavailable_note")
        ctx.trace("web search is not available (no web_search backend configured): the provider's system prompt says so")
        return {**ir, "system": [*(ir.get("system") or ()), {"type": "text", "text": note}]}, None
    name = setting(tables, "function_name")
    function = {
        "type": "function", "name": name, "description": setting(tables, "function_description"),
        "parameters": {"type": "object", "properties": {"query": {"type": "string", "description": setting(tables, "query_description")}},
                       "required": ["query"]},
    }
    out = {**ir, "tools": [t for t in tools if not is_web_search(tables, t)] + [function]}
    choice = ir.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "hosted":
        out["tool_choice"] = {"type": "tool", "name": name}
    ctx.trace(f"web search run by the proxy: the provider is offered the function tool {name}")
    return out, Session(name, max_searches)


def query_of(call: dict) -> str:
    try:
        args = json.loads(call.get("arguments") or "{}")
    except ValueError:
        args = {}
    query = args.get("query") if isinstance(args, dict) else None
    return query if isinstance(query, str) else ""


def continued(request: dict, response: dict, outcomes: dict[str, Any]) -> dict:
    """The next round's request: the provider's turn, then one tool result per search."""
    results = [{"role": "tool", "content": [{"type": "tool_result", "call_id": call_id, "content": [{"type": "text", "text": _as_text(outcome)}]}]}
               for call_id, outcome in outcomes.items()]
    return {**request, "messages": [*(request.get("messages") or ()), {"role": "assistant", "content": response.get("content") or []}, *results]}


def merged(session: Session, final: dict) -> dict:
    """The client's answer: each earlier round's content with its searches as web search
    blocks, then the last round's; usage summed over the rounds."""
    content: list = []
    usage = None
    for response, outcomes in session.rounds:
        for block in response.get("content") or ():
            if isinstance(block, dict) and block.get("type") == "tool_call" and block.get("id") in outcomes:
                outcome = outcomes[block["id"]]
                content.append({"type": CALL, "id": block["id"], "query": query_of(block),
                                "sources": [] if isinstance(outcome, str) else [r.url for r in outcome]})
                result = {"type": RESULT, "call_id": block["id"]}
                if isinstance(outcome, str):
                    result["error"] = outcome
                else:
                    result["results"] = [_result_dict(r) for r in outcome]
                content.append(result)
            else:
                content.append(block)
        usage = _add(usage, response.get("usage"))
    return {**final, "content": content + list(final.get("content") or ()), "usage": _add(usage, final.get("usage"))}


def stream_events(response: dict) -> list[dict]:
    """A whole IR response as the IR stream events a decoder would have produced."""
    events: list[dict] = [{"type": "message_start", "id": response.get("id"), "model": response.get("model"),
                           "created": response.get("created"), "usage": response.get("usage")}]
    for index, block in enumerate(response.get("content") or ()):
        kind = block.get("type")
        if kind in (CALL, RESULT):
            events.append({**block, "type": "block_start", "index": index, "kind": kind})
        elif kind == "reasoning" and block.get("text") is None:
            events.append({"type": "block_start", "index": index, "kind": "redacted_reasoning", "opaque": block.get("opaque")})
        elif kind == "tool_call":
            start = {k: v for k, v in block.items() if k not in ("type", "arguments")}
            events.append({**start, "type": "block_start", "index": index, "kind": kind})
            events.append({"type": "block_delta", "index": index, "kind": kind, "delta": block.get("arguments") or "{}"})
        else:
            events.append({"type": "block_start", "index": index, "kind": kind})
            text = block.get("text") if kind != "refusal" else block.get("text") or block.get("refusal")
            if text:
                events.append({"type": "block_delta", "index": index, "kind": kind, "delta": text})
            if kind == "reasoning" and block.get("opaque"):
                events.append({"type": "block_opaque", "index": index, "opaque": block["opaque"]})
        if not (kind == "reasoning" and block.get("text") is None):
            events.append({"type": "block_stop", "index": index})
    events.append({"type": "message_stop", "stop": response.get("stop"), "stop_sequence": response.get("stop_sequence"),
                   "stop_details": response.get("stop_details"), "usage": response.get("usage")})
    return events


def _as_text(outcome: Any) -> str:
    return results_text(outcome)


def _result_dict(result: Result) -> dict:
    return {"url": result.url, "title": result.title, "snippet": result.snippet, "page_age": result.page_age}


def _add(total: dict | None, usage: Any) -> dict | None:
    if not isinstance(usage, dict):
        return total
    if total is None:
        return dict(usage)
    out = dict(total)
    for key, value in usage.items():
        if isinstance(value, int) and isinstance(out.get(key), int):
            out[key] += value
        elif key not in out:
            out[key] = value
    return out

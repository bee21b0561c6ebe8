"""What the provider is offered in place of the client's hosted web search tool.

With a backend configured, an ordinary function tool the proxy answers itself (noted on
``ctx.server_tools`` as kind ``web_search``; the loop is proxai/http/server_tools/);
without one, nothing, and the provider's system prompt says so.
"""

from __future__ import annotations

import json
from typing import Any

HOSTED = "hosted_type->web_search"
SETTINGS = "web_search.setting->value"


def setting(tables, key: str) -> Any:
    return tables[SETTINGS].lookup(key)


def is_web_search(tables, tool: Any) -> bool:
    return isinstance(tool, dict) and tool.get("type") == "hosted" and tables[HOSTED].lookup(tool.get("hosted_type")) is True


def offer(ir: dict, ctx, tables, configured: bool) -> dict:
    """The IR request with the client's web search tool replaced by a function tool (a
    backend is configured) or left for the encoder to drop, the provider told so in its
    system prompt (none is)."""
    tools = ir.get("tools") or []
    wanted = [t for t in tools if is_web_search(tables, t)]
    if not wanted:
        return ir
    if not configured:
        note = setting(tables, "unavailable_note")
        ctx.trace("web search is not available (no web_search backend configured): the provider's system prompt says so")
        return {**ir, "system": [*(ir.get("system") or ()), {"type": "text", "text": note}]}
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
    ctx.server_tools[name] = {"kind": "web_search", "client_name": wanted[0].get("name") or name}
    ctx.trace(f"web search run by the proxy: the provider is offered the function tool {name}")
    return out


def query_of(arguments: str | None) -> str:
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        args = {}
    query = args.get("query") if isinstance(args, dict) else None
    return query if isinstance(query, str) else ""

"""The kinds of server tool and how each runs one call of the model.

A run is a `Ran`: the IR parts the client is shown (the call under the client's name for
the tool, then its result), the assistant parts the next provider request carries in
their place, and the messages after that turn (the tool's result as the provider reads it).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import aiohttp

from engine.hooks import tool_search
from engine.hooks.web_search import results_text
from proxai.http.web_search import backends
from proxai.http.web_search.offer import query_of

# Searches beyond web_search.max_searches are answered "max_uses_exceeded" (Anthropic's
# word for it), and the provider call after them may call no tool.
ERROR_LIMIT, ERROR_BACKEND = "max_uses_exceeded", "unavailable"


@dataclass
class Ran:
    shown: list
    sent: list
    replies: list = field(default_factory=list)


class WebSearch:
    """The configured search backend (`web_search:`)."""

    def __init__(self, proxy, ctx, info: dict):
        self.settings = backends.Settings.from_config(proxy.config.web_search)
        self.ctx, self.info = ctx, info
        self.left = self.settings.max_searches if self.settings else 0
        self.session: aiohttp.ClientSession | None = None

    @property
    def exhausted(self) -> bool:
        return self.left <= 0

    async def run(self, tool: dict, call: dict) -> Ran:
        query = query_of(call.get("arguments"))
        outcome = await self._search(query)
        shown = [{"type": "web_search_call", "id": call["id"], "query": query,
                  "sources": [] if isinstance(outcome, str) else [r.url for r in outcome]},
                 {"type": "web_search_result", "call_id": call["id"],
                  **({"error": outcome} if isinstance(outcome, str) else
                     {"results": [{"url": r.url, "title": r.title, "snippet": r.snippet, "page_age": r.page_age}
                                  for r in outcome]})}]
        reply = {"role": "tool", "content": [{"type": "tool_result", "call_id": call["id"],
                                              "content": [{"type": "text", "text": results_text(outcome)}]}]}
        return Ran(shown, [call], [reply])

    async def _search(self, query: str):
        if self.left <= 0:
            return ERROR_LIMIT
        self.left -= 1
        self.info["_web_searches"] = self.info.get("_web_searches", 0) + 1
        if self.session is None:
            self.session = aiohttp.ClientSession()
        started = asyncio.get_running_loop().time()
        try:
            return await backends.search(self.settings, self.session, query)
        except backends.SearchFailed as exc:
            self.ctx.trace(f"web search failed: {exc}")
            return ERROR_BACKEND
        finally:
            spent = (asyncio.get_running_loop().time() - started) * 1000
            self.info["_web_search_ms"] = round(self.info.get("_web_search_ms", 0) + spent, 1)

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()


class ToolSearch:
    """Regex or BM25 over the client's deferred tools (engine/hooks/tool_search.py)."""

    exhausted = False  # its limit is on provider calls (Loop.limit): a search is never refused

    def __init__(self, proxy, ctx, info: dict):
        self.tables, self.ctx = proxy.engine.tables, ctx

    async def run(self, tool: dict, call: dict) -> Ran:
        result = tool_search.run(tool, call.get("arguments"), self.tables)
        self.ctx.trace(f"tool_search run by the proxy: {len(result.get('tool_names') or ())} found"
                       + (f" ({result['error']})" if result.get("error") else ""))
        # The history's search parts are what the request encoder turns into the proxy
        # tool's call and result, and what loads the tools found (tool_search.fit).
        shown = [{"type": "server_tool_call", "id": call["id"], "name": tool["client_name"],
                  "arguments": call.get("arguments") or "{}"},
                 {"type": "tool_search_result", "call_id": call["id"], **result}]
        return Ran(shown, shown)

    async def close(self) -> None:
        pass


KINDS = {"web_search": WebSearch, "tool_search": ToolSearch}

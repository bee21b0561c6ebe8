"""The provider calls of one client request while the model calls tools the proxy runs.

A round is one provider call. When its answer calls server tools, the proxy runs them
(kinds.py), and, when the model called no tool of the client's, sends the provider the
conversation with the calls and their results and goes on; the client is shown each run
as the server-tool parts of its one answer (in the place of the call), and the client's
own calls end the answer (the client runs them and comes back).
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

from engine.hooks import tool_search
from proxai.http.server_tools.kinds import KINDS, Ran

_SUMMED = ("input_tokens", "cached_tokens", "cache_write_tokens", "cache_write_long_tokens", "output_tokens",
           "reasoning_tokens")
# Whatever the tools' own limits, a model that keeps calling them (a provider that ignores
# tool_choice none) is stopped here.
MAX_ROUNDS = 16


def active(ctx) -> bool:
    return bool(getattr(ctx, "server_tools", None))


def add_usage(total: dict | None, usage: dict | None) -> dict | None:
    """Every provider call of a run is billed: the client's usage is their sum."""
    if not isinstance(usage, dict):
        return total
    if total is None:
        return dict(usage)
    out = dict(total)
    for key in _SUMMED:
        if isinstance(usage.get(key), int):
            out[key] = (out.get(key) or 0) + usage[key]
    return out


class Loop:
    """One client request's rounds: runs server tools, builds the next provider request."""

    def __init__(self, proxy, ctx, ir_request: dict, info: dict):
        self.engine, self.ctx, self.ir, self.info = proxy.engine, ctx, ir_request, info
        self.runners = {kind: cls(proxy, ctx, info) for kind, cls in KINDS.items()}
        self.rounds = 0
        self.usage: dict | None = None
        offered = {t.get("kind") for t in ctx.server_tools.values()}
        # Tool search's limit is on provider calls after a search (Anthropic's pause_turn when spent).
        self.limit = int(tool_search.setting(self.engine.tables, "max_searches") or 4) if "tool_search" in offered else MAX_ROUNDS

    def is_server(self, name) -> bool:
        return isinstance(name, str) and name in self.ctx.server_tools

    async def run(self, calls: list[dict]) -> dict[str, Ran]:
        """The model's server tool calls (IR tool_call parts), run together: call id -> Ran."""
        async def one(call):
            tool = self.ctx.server_tools[call["name"]]
            return await self.runners[tool["kind"]].run(tool, {**call, "id": call.get("id") or ""})

        ran = await asyncio.gather(*(one(c) for c in calls))
        self.info["_server_tool_runs"] = self.info.get("_server_tool_runs", 0) + len(calls)
        return {c.get("id") or "": r for c, r in zip(calls, ran)}

    def may_continue(self, stop, client_calls: int) -> bool:
        """Whether the proxy continues the model itself: it called server tools only."""
        return stop == "tool_use" and client_calls == 0 and self.rounds < self.limit

    def paused(self, stop, client_calls: int) -> bool:
        """Out of rounds while the model still calls server tools only: the client continues the
        turn with its next request (as Anthropic's API does when its own server-tool loop stops)."""
        if stop == "tool_use" and client_calls == 0:
            self.ctx.trace(f"server tools: {self.rounds + 1} provider calls in one request, answered with pause_turn")
            return True
        return False

    def shown(self, content: list, ran: dict[str, Ran]) -> list:
        """A round's content as the client sees it: each server call as its run's parts."""
        return [q for p in content for q in (ran[p.get("id") or ""].shown if self._ran(p, ran) else (p,))]

    def next_request(self, content: list, ran: dict[str, Ran]) -> dict:
        """The provider request after a round whose content (server calls included) is `content`."""
        self.rounds += 1
        sent = [q for p in content for q in (ran[p.get("id") or ""].sent if self._ran(p, ran) else (p,))]
        replies = [m for p in content if self._ran(p, ran) for m in ran[p.get("id") or ""].replies]
        self.ir = {**self.ir, "messages": [*(self.ir.get("messages") or ()), {"role": "assistant", "content": sent}, *replies]}
        ir = self.ir
        if any(getattr(r, "exhausted", False) for r in self.runners.values()):
            # A tool's budget is spent: the provider answers with what it has.
            ir = {**ir, "tool_choice": {"type": "none"}}
        before = len(self.ctx.traces)
        body = self.engine.encode_request(self.ctx, ir)
        # The same fitting runs again: its notes were made for the first call already.
        seen = set(self.ctx.traces[:before])
        self.ctx.traces[before:] = [t for t in dict.fromkeys(self.ctx.traces[before:]) if t not in seen]
        return body

    async def close(self) -> None:
        for runner in self.runners.values():
            await runner.close()

    def _ran(self, part, ran) -> bool:
        return isinstance(part, dict) and part.get("type") == "tool_call" and self.is_server(part.get("name")) \
            and (part.get("id") or "") in ran


def server_calls(loop: Loop, content: list) -> tuple[list[dict], int]:
    """(the server tool calls of a round's content, how many calls of the client's tools)."""
    calls = [p for p in content if isinstance(p, dict) and p.get("type") == "tool_call" and loop.is_server(p.get("name"))]
    client = sum(1 for p in content if isinstance(p, dict) and p.get("type") == "tool_call") - len(calls)
    return calls, client


async def complete(loop: Loop, response: dict, fetch: Callable[[dict], Awaitable[dict]]) -> dict:
    """The IR response the client gets: `response` (the provider's first, decoded) and the
    rounds that follow. `fetch` sends a provider request and returns its decoded response."""
    content: list = []
    while True:
        parts = list(response.get("content") or ())
        calls, client_calls = server_calls(loop, parts)
        ran = await loop.run(calls) if calls else {}
        content.extend(loop.shown(parts, ran))
        loop.usage = add_usage(loop.usage, response.get("usage"))
        if not calls or not loop.may_continue(response.get("stop"), client_calls):
            break
        response = await fetch(loop.next_request(parts, ran))
    out = {**response, "content": content}
    if loop.usage is not None:
        out["usage"] = loop.usage
    if calls and loop.paused(response.get("stop"), client_calls):
        out["stop"] = "pause_turn"
    return out

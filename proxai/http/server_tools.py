"""Server tools the proxy runs itself inside one client request.

A translated request may declare a tool the provider's model calls but the proxy
answers (``ctx.server_tools``, by the name the provider sees; tool search is the
first, engine/hooks/tool_search.py). When the provider's answer calls only such
tools, the proxy runs them, sends the provider the conversation with the calls and
their results, and goes on until the model answers otherwise; the client gets one
answer in which each run shows as the server-tool blocks its own API sends (IR
``server_tool_call`` + the tool's result part). When the model also calls the
client's tools, the run shows the same way and the client's calls end the answer.

The provider is asked without streaming while server tools may run (a turn that ends
in a run is never the client's to see as it comes, as with the proxy's web search,
proxai/http/web_search/); a client that asked for a stream gets the whole answer as one
stream (:func:`stream_events`). :func:`serve` is the request's path, :class:`Turns`
what a run is and what the next provider request is, :func:`complete` the loop.
"""
from __future__ import annotations

from typing import Awaitable, Callable

import orjson
from aiohttp import web

from engine.hooks import tool_search
from proxai.http import errors as E
from proxai.http import requestid
from proxai.http.streaming import Outcome
from proxai.http.transport import read_body

# Runs of a kind of server tool: the IR result part's fields for one call.
RUNNERS = {
    "tool_search": tool_search.run,
}
RESULT_PARTS = {"tool_search": "tool_search_result"}
_SUMMED = ("input_tokens", "cached_tokens", "cache_write_tokens", "cache_write_long_tokens", "output_tokens",
           "reasoning_tokens")


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


class Turns:
    """The provider calls of one client request: runs server tools, builds the next request."""

    def __init__(self, engine, ctx, ir_request: dict):
        self.engine, self.ctx, self.ir = engine, ctx, ir_request
        self.runs = 0
        self.limit = int(tool_search.setting(engine.tables, "max_searches") or 4)

    def is_server(self, name) -> bool:
        return isinstance(name, str) and name in self.ctx.server_tools

    def run(self, call_id: str, name: str, arguments: str | None) -> list[dict]:
        """One server tool call as the IR parts the client is shown: the call, under the
        client's name for the tool, and its result."""
        tool = self.ctx.server_tools[name]
        result = RUNNERS[tool["kind"]](tool, arguments, self.engine.tables)
        self.ctx.trace(f"{tool['kind']} run by the proxy: {len(result.get('tool_names') or ())} found"
                       + (f" ({result['error']})" if result.get("error") else ""))
        return [{"type": "server_tool_call", "id": call_id, "name": tool["client_name"], "arguments": arguments or "{}"},
                {"type": RESULT_PARTS[tool["kind"]], "call_id": call_id, **result}]

    def may_continue(self, stop, client_calls: int) -> bool:
        """Whether the proxy continues the model itself: it called server tools only."""
        return stop == "tool_use" and client_calls == 0 and self.runs < self.limit

    def next_request(self, parts: list) -> dict:
        """The provider request after a turn whose content (server runs included) is `parts`."""
        self.runs += 1
        self.ir = {**self.ir, "messages": [*(self.ir.get("messages") or ()), {"role": "assistant", "content": parts}]}
        before = len(self.ctx.traces)
        body = self.engine.encode_request(self.ctx, self.ir)
        # The same fitting runs again: its notes were made for the first call already.
        seen = set(self.ctx.traces[:before])
        self.ctx.traces[before:] = [t for t in dict.fromkeys(self.ctx.traces[before:]) if t not in seen]
        return body


async def complete(turns: Turns, response: dict, fetch: Callable[[dict], Awaitable[dict]]) -> dict:
    """The IR response the client gets: `response` (the provider's first, decoded) and the
    provider calls that follow while the model calls server tools only. `fetch` sends a
    provider request and returns the provider's response body."""
    engine, ctx = turns.engine, turns.ctx
    content: list = []
    usage = None
    while True:
        parts, client_calls, ran = [], 0, False
        for p in response.get("content") or ():
            if isinstance(p, dict) and p.get("type") == "tool_call" and turns.is_server(p.get("name")):
                parts.extend(turns.run(p.get("id") or "", p["name"], p.get("arguments")))
                ran = True
                continue
            if isinstance(p, dict) and p.get("type") == "tool_call":
                client_calls += 1
            parts.append(p)
        content.extend(parts)
        usage = add_usage(usage, response.get("usage"))
        if not ran or not turns.may_continue(response.get("stop"), client_calls):
            break
        response = engine.decode_response(ctx, await fetch(turns.next_request(parts)))
    out = {**response, "content": content}
    if usage is not None:
        out["usage"] = usage
    if ran and client_calls == 0 and response.get("stop") == "tool_use":
        # Out of runs: the client continues the turn with its next request (as Anthropic's
        # API does when its own server-tool loop stops).
        ctx.trace(f"server tools: {turns.limit} runs in one request, answered with pause_turn")
        out["stop"] = "pause_turn"
    return out


async def serve(proxy, request: web.Request, match, ctx, ir: dict, stream: bool, info: dict, turn=None) -> web.StreamResponse:
    """A translated request that declares a server tool: the provider's calls, the runs
    between them, and one answer in the client's protocol."""
    from proxai.http.surface import dump_json, json_response

    engine, provider = proxy.engine, match.provider
    target = engine.wire.target(provider.protocol, "generate", match.upstream_model, False)
    turns = Turns(engine, ctx, {**ir, "stream": False})
    headers: dict = {}

    async def fetch(body: dict) -> dict:
        upstream = await proxy.send(request, provider, dump_json(body), False, info, target)
        try:
            await proxy.raise_for_status(upstream, provider)
            data = await read_body(upstream, provider, cap=proxy.config.server.max_upstream_body_bytes)
            headers.update(upstream.headers)
        finally:
            upstream.release()
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            raise E.UpstreamProtocolError(f"provider {provider.name!r} answered with a body that is not JSON") from None

    first = engine.encode_request(ctx, turns.ir)
    answer = await complete(turns, engine.decode_response(ctx, await fetch(first)), fetch)
    info["_server_tool_runs"] = turns.runs
    if not stream:
        body = engine.encode_answer(ctx, answer)
        if turn is not None:
            body = await turn.finish_body(body)
        return json_response(200, dump_json(body), headers, info, engine.wire)
    if ctx.response_model is not None:
        answer["model"] = ctx.response_model
    translator = engine.open_stream(ctx)
    data = b"".join(translator.push(stream_events(answer)))
    response = web.StreamResponse(status=200)
    response.headers["Content-Type"] = "text/event-stream; charset=utf-8"
    response.headers["Cache-Control"] = "no-cache"
    response.headers.update(E.preserved_headers(headers))
    requestid.stamp(response.headers, info["request_id"], engine.wire.request_id_header(info.get("client_protocol")),
                    info.get("upstream_request_id"))
    response.headers.update(info.get("_headers") or {})
    info["status"] = 200
    await response.prepare(request)
    client = turn.tee(response) if turn is not None else response
    await client.write(data)
    await response.write_eof()
    info["outcome"] = Outcome.COMPLETE.value
    return response


def stream_events(response: dict) -> list[dict]:
    """A whole IR response as the IR stream events a stream decoder would produce."""
    events: list[dict] = [{"type": "message_start", "id": response.get("id"), "model": response.get("model"),
                           "usage": response.get("usage")}]
    for index, part in enumerate(response.get("content") or ()):
        kind = part.get("type")
        if kind == "reasoning" and part.get("text") is None:
            events.append({"type": "block_start", "index": index, "kind": "redacted_reasoning", "opaque": part.get("opaque")})
        elif kind in ("tool_call", "server_tool_call"):
            events.append({"type": "block_start", "index": index, "kind": kind,
                           **{k: v for k, v in part.items() if k not in ("type", "arguments")}})
            events.append({"type": "block_delta", "index": index, "kind": kind, "delta": part.get("arguments") or "{}"})
        elif kind in RESULT_PARTS.values():
            events.append({"type": "block_start", "index": index, "kind": kind,
                           **{k: v for k, v in part.items() if k in ("call_id", "tool_names", "error")}})
        else:
            events.append({"type": "block_start", "index": index, "kind": kind})
            text = part.get("text")
            if text:
                events.append({"type": "block_delta", "index": index, "kind": kind, "delta": text})
            if kind == "reasoning" and part.get("opaque"):
                events.append({"type": "block_opaque", "index": index, "opaque": part["opaque"]})
        events.append({"type": "block_stop", "index": index})
    events.append({"type": "message_stop", "stop": response.get("stop"), "stop_sequence": response.get("stop_sequence"),
                   "stop_details": response.get("stop_details"), "usage": response.get("usage")})
    return events

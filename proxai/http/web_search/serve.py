"""A translated request whose web search the proxy runs: the provider's rounds (each asked
without streaming: a round that ends in a search call is never the client's to see as it
comes), the searches between them, and one answer in the client's protocol (a stream when
it asked for one, written once the last round is in).
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
import orjson
from aiohttp import web

from engine import restore_response
from proxai.http import errors as E
from proxai.http import requestid
from proxai.http.streaming import Outcome
from proxai.http.transport import read_body
from proxai.http.web_search import rounds
from proxai.http.web_search.backends import SearchFailed, Settings, search

SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"
# Searches beyond web_search.max_searches are answered "max_uses_exceeded" (Anthropic's
# word for it), and the round after them may call no tool.
ERROR_LIMIT, ERROR_BACKEND = "max_uses_exceeded", "unavailable"


def translate_request(proxy, ctx, body: dict) -> tuple[dict, rounds.Session | None, dict]:
    """(the provider request, the search session or None, the IR request it came from)."""
    engine = proxy.engine
    settings = Settings.from_config(proxy.config.web_search)
    ir = engine.decode_request(ctx, body)
    ir, session = rounds.offer(ir, ctx, engine.tables, settings is not None, settings.max_searches if settings else 0)
    if session is not None:
        ir = {**ir, "stream": False}
    return engine.encode_request(ctx, ir), session, ir


async def serve(proxy, request: web.Request, protocol: str, match, ctx, session: rounds.Session, ir: dict,
                out_body: dict, stream: bool, info: dict, turn=None) -> web.StreamResponse:
    from proxai.http.surface import dump_json

    engine = proxy.engine
    settings = Settings.from_config(proxy.config.web_search)
    provider = match.provider
    target = engine.wire.target(provider.protocol, "generate", match.upstream_model, False)
    started = time.monotonic()
    async with aiohttp.ClientSession() as http:
        while True:
            upstream = await proxy.send(request, provider, dump_json(out_body), False, info, target)
            try:
                await proxy.raise_for_status(upstream, provider)
                data = await read_body(upstream, provider, cap=proxy.config.server.max_upstream_body_bytes)
            finally:
                upstream.release()
            try:
                answer = engine.decode_response(ctx, orjson.loads(data))
            except orjson.JSONDecodeError:
                raise E.UpstreamProtocolError(f"provider {provider.name!r} answered with a body that is not JSON") from None
            calls = session.calls(answer)
            if not calls:
                break
            outcomes = await _run(settings, http, session, calls, ctx)
            session.rounds.append((answer, outcomes))
            ir = rounds.continued(ir, answer, outcomes)
            if session.searches_left <= 0:
                # The search budget is spent: the last round answers with what it has.
                ir = {**ir, "tool_choice": {"type": "none"}}
            out_body = engine.encode_request(ctx, ir)
    info["_web_searches"] = sum(len(o) for _, o in session.rounds)
    info["_web_search_ms"] = round((time.monotonic() - started) * 1000, 1)
    final = rounds.merged(session, answer)
    if ctx.response_model is not None:
        final["model"] = ctx.response_model
    if not stream:
        body = engine.encode_response(ctx, restore_response(final, ctx) if ctx.tool_calls else final)
        if turn is not None:
            body = await turn.finish_body(body)
        return _respond_json(proxy, dump_json(body), info)
    wire = engine.open_stream(ctx).push(rounds.stream_events(final))
    return await _respond_stream(proxy, request, b"".join(wire), info, turn)


async def _run(settings: Settings, http, session: rounds.Session, calls: list[dict], ctx) -> dict:
    async def one(call):
        if session.searches_left <= 0:
            return ERROR_LIMIT
        session.searches_left -= 1
        try:
            return await search(settings, http, rounds.query_of(call))
        except SearchFailed as exc:
            ctx.trace(f"web search failed: {exc}")
            return ERROR_BACKEND

    results = await asyncio.gather(*(one(c) for c in calls))
    return {call["id"]: result for call, result in zip(calls, results)}


def _respond_json(proxy, data: bytes, info: dict) -> web.Response:
    response = web.Response(status=200, body=data)
    response.headers["Content-Type"] = "application/json"
    _stamp(proxy, response, info)
    info["status"] = 200
    return response


async def _respond_stream(proxy, request, data: bytes, info: dict, turn) -> web.StreamResponse:
    response = web.StreamResponse(status=200)
    response.headers["Content-Type"] = SSE_CONTENT_TYPE
    response.headers["Cache-Control"] = "no-cache"
    _stamp(proxy, response, info)
    info["status"] = 200
    await response.prepare(request)
    client = turn.tee(response) if turn is not None else response
    await client.write(data)
    await response.write_eof()
    info["outcome"] = Outcome.COMPLETE.value
    return response


def _stamp(proxy, response, info: dict) -> None:
    requestid.stamp(response.headers, info["request_id"], proxy.engine.wire.request_id_header(info.get("client_protocol")),
                    info.get("upstream_request_id"))
    response.headers.update(info.get("_headers") or {})

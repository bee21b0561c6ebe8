"""A translated request that declares a server tool: its provider calls, the runs between
them, and one answer in the client's protocol (streamed as it comes when it asked for a stream)."""

from __future__ import annotations

import orjson
from aiohttp import web

from proxai.http import errors as E
from proxai.http import web_search
from proxai.http.server_tools.loop import Loop, complete
from proxai.http.server_tools.stream import LoopRelay
from proxai.http.transport import read_body


def prepare(proxy, ctx, body: dict) -> tuple[dict, dict]:
    """(the provider request, the IR request it came from); the server tools it offers are on ctx."""
    engine = proxy.engine
    ir = engine.decode_request(ctx, body)
    ir = web_search.offer(ir, ctx, engine.tables, bool(proxy.config.web_search))
    return engine.encode_request(ctx, ir), ir


async def serve(proxy, request: web.Request, match, ctx, ir: dict, out_body: dict, stream: bool, info: dict,
                turn=None) -> web.StreamResponse:
    from proxai.http.surface import dump_json, json_response

    engine, provider = proxy.engine, match.provider
    target = engine.wire.target(provider.protocol, "generate", match.upstream_model, stream)
    loop = Loop(proxy, ctx, ir, info)

    async def send(body: dict):
        upstream = await proxy.send(request, provider, dump_json(body), stream, info, target)
        try:
            await proxy.raise_for_status(upstream, provider)
            if stream and not upstream.headers.get("Content-Type", "").lower().startswith("text/event-stream"):
                raise E.UpstreamProtocolError(f"provider {provider.name!r} did not answer with an event stream")
        except BaseException:
            upstream.close()
            raise
        return upstream

    if stream:
        upstream = await send(out_body)
        relay = LoopRelay(proxy, request, match, loop, upstream, info, send)
        try:
            return await proxy._stream(request, relay, upstream, info, turn)
        finally:
            await loop.close()

    headers: dict = {}

    async def fetch(body: dict) -> dict:
        upstream = await send(body)
        try:
            data = await read_body(upstream, provider, cap=proxy.config.server.max_upstream_body_bytes)
            headers.update(upstream.headers)
        finally:
            upstream.release()
        try:
            return engine.decode_response(ctx, orjson.loads(data))
        except orjson.JSONDecodeError:
            raise E.UpstreamProtocolError(f"provider {provider.name!r} answered with a body that is not JSON") from None

    try:
        answer = await complete(loop, await fetch(out_body), fetch)
    finally:
        await loop.close()
    body = engine.encode_answer(ctx, answer)
    if turn is not None:
        body = await turn.finish_body(body)
    return json_response(200, dump_json(body), headers, info, engine.wire)

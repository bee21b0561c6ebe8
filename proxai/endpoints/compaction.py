"""Compaction toward a provider without it (``compact_20260112``, docs/context-management.md).

When an Anthropic client's compaction edit reaches its trigger (engine/hooks/context_editing.py
marks ``ctx.compaction``), the proxy asks the routed model, through the same provider and
transport, for a summary of the history (the summarisation prompt is
rules/tables/context_management.yaml). The client's answer opens with the compaction block
(its encoders read the summary from the context). With ``pause_after_compaction`` the
answer is that block alone, stop reason ``compaction``; otherwise the provider is asked
the client's request with the summary in place of the history, and the answer goes on
from there. An on-demand compaction request (``compaction: {type: summarize}``) is
answered like a pause, its instructions in place of the prompt. A later request that
carries the block back is expanded by the decoder's hook.
"""
from __future__ import annotations

import json

import orjson
from aiohttp import web

from engine.hooks import context_editing
from proxai.http import errors as E
from proxai.http import requestid
from proxai.observability.logs import usage_fields
from proxai.http.streaming import Outcome
from proxai.http.transport import read_body

SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"


def _dump(body) -> bytes:
    try:
        return orjson.dumps(body)
    except TypeError:  # integers beyond 64 bits
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


async def summarise(proxy, request: web.Request, match, ctx, ir: dict, info: dict) -> dict:
    """Run the compaction ``ctx.compaction`` asks for: the summary goes on the context (for
    the answer's compaction block) and the answer (IR) of the summarisation call is returned.
    Its tokens are counted on `info` (``_earlier_usage``)."""
    engine = proxy.engine
    match, writer = _writer(proxy, request, match, ctx)
    provider = match.provider
    ask = context_editing.summary_request(ir, ctx.compaction.get("instructions"), engine.tables,
                                          replace=ctx.compaction.get("replace", False))
    before = len(ctx.traces)
    body = engine.encode_request(writer, ask)
    # The request was fitted once already: keep only the notes this encoding adds.
    seen = set(ctx.traces[:before])
    ctx.traces[before:] = [t for t in dict.fromkeys(ctx.traces[before:]) if t not in seen]
    target = engine.wire.target(provider.protocol, "generate", match.upstream_model, False)
    upstream = await proxy.send(request, provider, _dump(body), False, info, target)
    try:
        await proxy.raise_for_status(upstream, provider)
        data = await read_body(upstream, provider, cap=proxy.config.server.max_upstream_body_bytes)
    finally:
        upstream.release()
    try:
        answer = engine.decode_response(writer, orjson.loads(data))
    except orjson.JSONDecodeError:
        raise E.UpstreamProtocolError(f"provider {provider.name!r} answered with a body that is not JSON") from None
    summary = context_editing.summary_of(answer)
    if summary is None:
        raise E.UpstreamProtocolError(f"provider {provider.name!r} answered the compaction request without a summary")
    ctx.compaction["summary"] = summary
    usage = answer.get("usage") or {}
    # Billed apart from the answer's own call: the log line and metrics add it
    # (proxai/http/app.py), the Anthropic client's usage.iterations list it.
    ctx.compaction["usage"] = usage
    info.setdefault("_earlier_usage", []).append(usage_fields(usage))
    ctx.trace(f"compact_20260112: history summarised by the routed model ({usage.get('input_tokens', '?')} input, "
              f"{usage.get('output_tokens', '?')} output tokens; summary ~{context_editing.tokens(summary)} tokens)")
    return answer


def _writer(proxy, request: web.Request, match, ctx):
    """(route match, translation context) of the model that writes the summary: the route's
    ``compaction_model`` when it names one (routed like a client's model name; the summary
    is text, so any provider's will do), else the routed model itself."""
    name = match.config.compaction_model if match.config is not None else None
    if not name:
        return match, ctx
    other = proxy.router.resolve(name, ctx.client_protocol)
    writer = proxy.translation_context(request, ctx.client_protocol, other, ctx.client_body)
    writer.traces = ctx.traces  # one request, one list of notes
    ctx.trace(f"compaction summary written by compaction_model {name!r} (provider {other.provider.name!r})")
    return other, writer


def continued(engine, ctx, ir: dict) -> tuple[dict, dict]:
    """(the IR request, the provider request) that go on from the summary."""
    after = context_editing.compacted(ir, ctx.compaction["summary"], engine.tables)
    return after, engine.encode_request(ctx, after)


async def paused(proxy, request: web.Request, ctx, answer: dict, stream: bool, info: dict, turn=None) -> web.StreamResponse:
    """The answer of a compaction with pause_after_compaction: the compaction block alone.
    Its usage is the summarisation call's, the only one this request made (counted on
    `info` by :func:`summarise`)."""
    engine = proxy.engine
    final = {"id": answer.get("id"), "model": answer.get("model"), "content": [], "stop": "compaction",
             "usage": answer.get("usage")}
    if not stream:
        body = engine.encode_answer(ctx, final)
        if turn is not None:
            body = await turn.finish_body(body)
        response = web.Response(status=200, body=_dump(body))
        response.headers["Content-Type"] = "application/json"
        _stamp(proxy, response, info)
        info["status"] = 200
        return response
    events = [{"type": "message_start", "id": final["id"], "model": final["model"], "usage": final["usage"]},
              {"type": "message_stop", "stop": "compaction", "usage": final["usage"]}]
    data = b"".join(engine.open_stream(ctx).push(events))
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

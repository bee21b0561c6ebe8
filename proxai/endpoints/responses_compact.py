"""``POST /v1/responses/compact`` (the openai SDK's ``responses.compact``; docs/responses-api.md "Compaction").

Toward a Responses provider the request is passed through: the provider compacts. Toward
a provider of another protocol the proxy has the routed model (or the route's
``compaction_model``) summarise the history, as it does for a ``compaction_trigger``
input item (engine/hooks/compaction_items.py), and answers OpenAI's ``CompactedResponse``:
the input's user messages, then the one ``compaction`` item, whose encrypted_content is
the summary in the continuation envelope.
"""
from __future__ import annotations

import dataclasses

from aiohttp import web

from engine.wire import Target
from proxai.endpoints import compaction, state_spec
from proxai.http import ingress, paths
from proxai.http import errors as E
from proxai.protocols import RESPONSES
from proxai.http.surface import INFO_KEY, dump_json, json_response

PATH = "/v1/responses/compact"
TRIGGER = {"type": "compaction_trigger"}
# CompactedResponse.usage is required: a provider that reported none counts as zero.
_NO_USAGE = {"input_tokens": 0, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 0,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 0}


def add_routes(app: web.Application, proxy) -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        info = request[INFO_KEY]
        info["client_protocol"] = RESPONSES
        proxy.authorize(request)
        raw = await proxy.admit(request, info)
        with proxy.slot():
            return await compact(proxy, request, info, raw)

    app.router.add_post(PATH, handle)
    app.router.add_post(paths.unprefixed(PATH), handle)


async def compact(proxy, request: web.Request, info: dict, raw: bytes) -> web.StreamResponse:
    body = ingress.parse(RESPONSES, raw)
    if body.get("stream") is not None:
        raise E.InvalidRequest("stream is not a parameter of responses/compact: the compacted answer is one JSON body",
                               param="stream")
    model = body["model"]
    info.update(model=model, stream=False)
    match = proxy.route(model, RESPONSES, info)
    plan = proxy.resilience.pools.plan(match)
    if plan is None:  # one key, no fallbacks
        return await _compact_on(proxy, request, info, body, raw, match)

    async def attempt(provider, upstream_model: str) -> web.StreamResponse:  # a key pool, fallbacks
        target = dataclasses.replace(match, provider=provider, upstream_model=upstream_model)
        return await _compact_on(proxy, request, info, dict(body), raw, target)

    info["_pooled"] = True
    return await proxy.resilience.serve(plan, info, None, attempt)


async def _compact_on(proxy, request: web.Request, info: dict, body: dict, raw: bytes, match) -> web.StreamResponse:
    model, provider = body["model"], match.provider
    if proxy.engine.wire.has(provider.protocol, "compaction"):  # the provider compacts: passed through
        if match.upstream_model != model:
            body["model"] = match.upstream_model
            raw = dump_json(body)
        # the compaction endpoint is a resource below the generation endpoint (/responses/compact)
        target = Target(proxy.engine.wire.target(provider.protocol, "generate").path + "/compact",
                        request.rel_url.raw_query_string)
        return await proxy.passthrough(request, RESPONSES, provider, raw, False, info, target, body=body)
    if body.get("previous_response_id") is not None and proxy.state is not None:
        body["store"] = False  # resolved into input; nothing of the compaction is stored
        await proxy.state.begin(request, body, provider.name, state_spec.of(proxy.engine.wire, RESPONSES))
    items = _items(body.get("input"))
    body["input"] = [*items, TRIGGER]
    ctx = proxy.translation_context(request, RESPONSES, match, body)
    info["_traces"] = ctx.traces
    try:
        ir = proxy.engine.decode_request(ctx, body)  # the trigger marks ctx.compaction
    except Exception:
        info["translation_error"] = "request"
        raise
    answer = await compaction.summarise(proxy, request, match, ctx, ir, info)
    usage = answer.get("usage")  # counted on info by summarise
    # A Response whose one output item is the compaction (response.encode.yaml); the
    # compacted answer is its item after the input's user messages, and its usage.
    encoded = proxy.engine.encode_answer(ctx, {"id": answer.get("id"), "model": answer.get("model"), "content": [],
                                               "stop": "compaction", "usage": usage})
    compacted = {
        "id": "cmp_" + encoded["id"].removeprefix("resp_"),
        "object": "response.compaction",
        "created_at": encoded["created_at"],
        "output": [*(item for item in items if _is_user_message(item)), *encoded["output"]],
        "usage": encoded["usage"] or _NO_USAGE,
    }
    return json_response(200, dump_json(compacted), {}, info, proxy.engine.wire)


def _items(value) -> list:
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return list(value) if isinstance(value, list) else []


def _is_user_message(item) -> bool:
    return isinstance(item, dict) and item.get("role") == "user" and item.get("type", "message") == "message"

"""Clients that name the model in the path (Gemini's: `POST /v1beta/models/{model}:generateContent`,
`:streamGenerateContent`, `:countTokens`, also under `/v1/models/`, and `GET /v1beta/models[/{model}]`).

The endpoints are the descriptors' (`endpoints` paths with `{model}`, `also_under`), read
through the engine's Wire. The model and the choice to stream are in the URL, not the body: they are put into the
body as `model` and `stream` for routing and the request decoder. The client's key comes
as `x-goog-api-key` or the `key` query parameter; it is checked like any client key and
never forwarded or written down (captures redact the query).
"""

from __future__ import annotations

import dataclasses

import orjson
from aiohttp import web

from proxai.endpoints import count_tokens, models_endpoint, token_estimate

from proxai.http import ingress, response_model

from proxai.routing import pools
from proxai.http import errors as E
from proxai.http.transport import read_body


def _no_endpoint(wire, path: str, info: dict) -> E.NotFound:
    """A POST under a model-in-path prefix that names none of its endpoints, in the shape of
    the protocol whose prefix it is, listing that protocol's endpoints."""
    routes = wire.model_paths()
    protocol = next(p for prefix, _, p, *_ in routes if path.startswith(prefix))
    info["client_protocol"] = protocol
    own = next(prefix for prefix, _, p, *_ in routes if p == protocol)
    suffixes = [suffix for prefix, suffix, p, *_ in routes if p == protocol and prefix == own]
    listed = f"{own}{{model}}{suffixes[0]}" + (f", {', '.join(suffixes[1:-1])}" if len(suffixes) > 2 else "") \
        + (f" or {suffixes[-1]}" if len(suffixes) > 1 else "")
    return E.NotFound(f"no endpoint at {path}; {wire.title(protocol)} clients use POST {listed}")


def register(app: web.Application, proxy, info_key, capture_key) -> None:
    wire = proxy.engine.wire

    async def post(request: web.Request) -> web.StreamResponse:
        info = request[info_key]
        target = wire.model_path(request.path)
        if target is None:
            raise _no_endpoint(wire, request.path, info)
        protocol = info["client_protocol"] = target.protocol
        model = models_endpoint.model_name(wire, protocol, target.model)
        models_endpoint.authorize(proxy, request, protocol)
        raw = await proxy.admit(request, info)
        with proxy.slot(), proxy.tracing.request(request.headers, request.method, request.path, info):
            cap = request.get(capture_key)
            if cap is not None:
                version = f"HTTP/{request.version.major}.{request.version.minor}"
                cap.whole("inbound_request", f"{request.method} {request.path_qs} {version}", request.headers.items(), raw)
            if target.operation == "count_tokens":
                return await count(proxy, request, info, raw, model, protocol)
            async with proxy.limits.stream_slot(info, target.stream):
                return await generate(proxy, request, info, raw, model, target.stream, protocol)

    def listing(protocol: str):
        # The model list of a protocol whose endpoints name the model in the path (GET
        # /v1beta/models), in its own shape whatever the client's headers say.
        async def list_models(request: web.Request) -> web.Response:
            models_endpoint.authorize(proxy, request, protocol)
            proxy.capture_inbound(request, b"")  # a GET: no body
            info = request[info_key]
            info["client_protocol"] = protocol
            served = models_endpoint.catalog(wire, proxy.config, proxy.router, wire.family(protocol))
            return _respond(200, orjson.dumps(models_endpoint.list_body(proxy, protocol, served, request.query)), {}, info)

        async def get_model(request: web.Request) -> web.Response:
            models_endpoint.authorize(proxy, request, protocol)
            proxy.capture_inbound(request, b"")
            model = models_endpoint.model_name(wire, protocol, request.match_info["name"])
            info = request[info_key]
            info.update(client_protocol=protocol, model=model)
            served = models_endpoint.catalog(wire, proxy.config, proxy.router, wire.family(protocol))
            return _respond(200, orjson.dumps(models_endpoint.find(proxy, protocol, served, model)["body"]), {}, info)

        return list_models, get_model

    for prefix in dict.fromkeys(prefix for prefix, *_ in wire.model_paths()):
        app.router.add_post(prefix + "{tail:.+}", post)
    # Each protocol's own model list at its endpoints' prefix (`/v1/models` is the shared one).
    for protocol in dict.fromkeys(protocol for *_, protocol, _, _ in wire.model_paths()):
        root = next(prefix for prefix, _, p, *_ in wire.model_paths() if p == protocol).rstrip("/")
        list_models, get_model = listing(protocol)
        app.router.add_get(root, list_models)
        app.router.add_get(root + "/{name:.+}", get_model)


async def generate(proxy, request: web.Request, info: dict, raw: bytes, model: str, stream: bool,
                   protocol: str) -> web.StreamResponse:
    body = ingress.parse(protocol, raw)
    body["model"], body["stream"] = model, stream
    info.update(model=model, stream=stream)
    match = proxy.route(model, protocol, info)

    async def serve_on(target) -> web.StreamResponse:
        if target.provider.protocol == info["client_protocol"]:
            return await passthrough(proxy, request, target, raw, stream, info)
        return await proxy.translate(request, protocol, target, dict(body), stream, info)

    plan = proxy.resilience.pools.plan(match)
    if plan is None:
        return await serve_on(match)

    async def attempt(provider, upstream_model: str) -> web.StreamResponse:
        return await serve_on(dataclasses.replace(match, provider=provider, upstream_model=upstream_model))

    info["_pooled"] = True
    conversation = pools.conversation_key(body, proxy.engine.wire.user_fields(protocol))
    return await proxy.resilience.serve(plan, info, conversation, attempt, responses=False)


async def passthrough(proxy, request: web.Request, match, raw: bytes, stream: bool, info: dict) -> web.StreamResponse:
    """The client's protocol is the provider's: the body as sent, to the route's model; only
    the upstream's own query (`alt=sse`) goes on (the client's `key` never does)."""
    protocol = match.provider.protocol
    target = proxy.engine.wire.target(protocol, "generate", match.upstream_model, stream)
    return await proxy.passthrough(request, protocol, match.provider, raw, stream, info, target,
                                    answer_model=response_model.answer_model(match, info.get("model")))


async def count(proxy, request: web.Request, info: dict, raw: bytes, model: str, protocol: str) -> web.Response:
    from proxai.http.surface import dump_json

    body = ingress.decode(raw)
    # countTokens takes {contents} or a whole {generateContentRequest}.
    inner = body.get("generateContentRequest")
    source = dict(inner) if isinstance(inner, dict) else dict(body)
    source.pop("generateContentRequest", None)
    ingress.check(protocol, source)
    source["model"], source["stream"] = model, False
    info["model"] = model
    match = proxy.route(model, protocol, info)
    provider = match.provider
    wire = proxy.engine.wire
    target = wire.target(provider.protocol, "count_tokens", match.upstream_model)
    if target is None:  # the provider's protocol has no counting endpoint
        return _estimate(source, info)
    same = provider.protocol == info["client_protocol"]
    if same:
        upstream = await proxy.send(request, provider, raw, False, info, target)
    else:
        payload = count_tokens._translate(proxy, request, protocol, match, source, info)
        upstream = await proxy.send(request, provider, dump_json(payload), False, info, target)
    try:
        if upstream.status in count_tokens.NO_ENDPOINT:
            return _estimate(source, info)
        await proxy.raise_for_status(upstream, provider)
        data = await read_body(upstream, provider)
    finally:
        upstream.release()
    if same:
        return _respond(upstream.status, data, upstream.headers, info)
    tokens = count_tokens._upstream_count(wire, provider, data)
    return _respond(200, orjson.dumps(wire.count_answer(protocol, tokens)), upstream.headers, info)


def _estimate(body: dict, info: dict) -> web.Response:
    # The estimate reads the fields of the other protocols: Gemini's are given their names.
    payload = {"messages": body.get("contents"), "system": body.get("systemInstruction"),
               "tools": [d for t in body.get("tools") or () if isinstance(t, dict)
                         for d in t.get("functionDeclarations") or t.get("function_declarations") or ()]}
    response = _respond(200, orjson.dumps({"totalTokens": token_estimate.estimate(payload)}), {}, info)
    response.headers[count_tokens.ESTIMATE_HEADER] = "estimate"
    info["outcome"] = "estimated"
    return response


def _respond(status: int, data: bytes, upstream_headers, info: dict) -> web.Response:
    return count_tokens._respond(status, data, upstream_headers, info)

"""Gemini clients: `POST /v1beta/models/{model}:generateContent`, `:streamGenerateContent`,
`:countTokens` (and the same under `/v1/models/`), `GET /v1beta/models[/{model}]`.

The model and the choice to stream are in the URL, not the body: they are put into the
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
from proxai.protocols import GEMINI
from proxai.http.transport import read_body

VERSIONS = ("/v1beta", "/v1")
# The URL's method -> whether it streams; countTokens answers {totalTokens}.
GENERATE = {"generateContent": False, "streamGenerateContent": True}
COUNT = "countTokens"


def split(path: str) -> tuple[str, str] | None:
    """`/v1beta/models/gemini-2.5-flash:generateContent` -> (`gemini-2.5-flash`, `generateContent`).
    Model names may hold slashes (`models/chat/gpt-4o`: routing prefixes); the method follows the last colon."""
    for version in VERSIONS:
        prefix = version + "/models/"
        if path.startswith(prefix):
            model, colon, method = path[len(prefix):].rpartition(":")
            if colon and model and (method in GENERATE or method == COUNT):
                return model, method
    return None


def is_gemini_path(path: str) -> bool:
    return path.startswith("/v1beta/") or path == "/v1beta" or split(path) is not None


def authorize(proxy, request: web.Request) -> None:
    # x-goog-api-key or ?key= (the descriptor's headers.client_key), else a bearer token or
    # x-api-key, as other clients send
    proxy.authorize(request, proxy.engine.wire.client_key(GEMINI, request.headers, request.rel_url.query))


def register(app: web.Application, proxy, info_key, capture_key) -> None:
    async def post(request: web.Request) -> web.StreamResponse:
        info = request[info_key]
        info["client_protocol"] = GEMINI
        target = split(request.path)
        if target is None:
            raise E.NotFound(f"no endpoint at {request.path}; Gemini clients use POST "
                             "/v1beta/models/{model}:generateContent, :streamGenerateContent or :countTokens")
        model, method = target
        if model.startswith("models/"):
            model = model[len("models/"):]
        authorize(proxy, request)
        raw = await proxy.admit(request, info)
        with proxy.slot(), proxy.tracing.request(request.headers, request.method, request.path, info):
            cap = request.get(capture_key)
            if cap is not None:
                version = f"HTTP/{request.version.major}.{request.version.minor}"
                cap.whole("inbound_request", f"{request.method} {request.path_qs} {version}", request.headers.items(), raw)
            if method == COUNT:
                return await count(proxy, request, info, raw, model)
            async with proxy.limits.stream_slot(info, GENERATE[method]):
                return await generate(proxy, request, info, raw, model, GENERATE[method])

    async def list_models(request: web.Request) -> web.Response:
        authorize(proxy, request)
        proxy.capture_inbound(request, b"")  # a GET: no body
        info = request[info_key]
        info["client_protocol"] = GEMINI
        served = models_endpoint.catalog(proxy.engine.wire, proxy.config, proxy.router, "google")
        return _respond(200, orjson.dumps({"models": [models_endpoint.gemini_model(e) for e in served]}), {}, info)

    async def get_model(request: web.Request) -> web.Response:
        authorize(proxy, request)
        proxy.capture_inbound(request, b"")
        model = request.match_info["name"]
        model = model[len("models/"):] if model.startswith("models/") else model
        info = request[info_key]
        info.update(client_protocol=GEMINI, model=model)
        served = models_endpoint.catalog(proxy.engine.wire, proxy.config, proxy.router, "google")
        entry = next((e for e in served if e.id.casefold() == model.casefold()), None) \
            or models_endpoint._served_by(proxy.engine.wire, proxy.router, model, "google")
        if entry is None:
            raise E.NotFound(f"model {model!r} is not served by this proxy", param="model")
        return _respond(200, orjson.dumps(models_endpoint.gemini_model(entry)), {}, info)

    for version in VERSIONS:
        app.router.add_post(version + "/models/{tail:.+}", post)
    app.router.add_get("/v1beta/models", list_models)
    app.router.add_get("/v1beta/models/{name:.+}", get_model)


async def generate(proxy, request: web.Request, info: dict, raw: bytes, model: str, stream: bool) -> web.StreamResponse:
    body = ingress.parse(GEMINI, raw)
    body["model"], body["stream"] = model, stream
    info.update(model=model, stream=stream)
    match = proxy.route(model, GEMINI, info)
    provider = match.provider

    async def serve_on(target) -> web.StreamResponse:
        if target.provider.protocol == info["client_protocol"]:
            return await passthrough(proxy, request, target, raw, stream, info)
        return await proxy.translate(request, GEMINI, target, dict(body), stream, info)

    plan = proxy.resilience.pools.plan(match)
    if plan is None:
        return await serve_on(match)

    async def attempt(provider, upstream_model: str) -> web.StreamResponse:
        return await serve_on(dataclasses.replace(match, provider=provider, upstream_model=upstream_model))

    info["_pooled"] = True
    conversation = pools.conversation_key(body, proxy.engine.wire.user_fields(GEMINI))
    return await proxy.resilience.serve(plan, info, conversation, attempt, responses=False)


async def passthrough(proxy, request: web.Request, match, raw: bytes, stream: bool, info: dict) -> web.StreamResponse:
    """Gemini to Gemini: the body as sent, to the route's model; only `alt=sse` of the query
    goes on (the client's `key` never does)."""
    target = proxy.engine.wire.target(GEMINI, "generate", match.upstream_model, stream)
    return await proxy.passthrough(request, GEMINI, match.provider, raw, stream, info, target,
                                    answer_model=response_model.answer_model(match, info.get("model")))


async def count(proxy, request: web.Request, info: dict, raw: bytes, model: str) -> web.Response:
    from proxai.http.surface import dump_json

    body = ingress.decode(raw)
    # countTokens takes {contents} or a whole {generateContentRequest}.
    inner = body.get("generateContentRequest")
    source = dict(inner) if isinstance(inner, dict) else dict(body)
    source.pop("generateContentRequest", None)
    ingress.check(GEMINI, source)
    source["model"], source["stream"] = model, False
    info["model"] = model
    match = proxy.route(model, GEMINI, info)
    provider = match.provider
    wire = proxy.engine.wire
    target = wire.target(provider.protocol, "count_tokens", match.upstream_model)
    if target is None:  # the provider's protocol has no counting endpoint
        return _estimate(source, info)
    same = provider.protocol == info["client_protocol"]
    if same:
        upstream = await proxy.send(request, provider, raw, False, info, target)
    else:
        payload = count_tokens._translate(proxy, request, GEMINI, match, source, info)
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
    return _respond(200, orjson.dumps(wire.count_answer(GEMINI, tokens)), upstream.headers, info)


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

"""Input-token counting: `POST /v1/messages/count_tokens` (Anthropic clients) and
`POST /v1/responses/input_tokens` (Responses clients), toward any provider.

* The provider speaks the client's protocol: the request is forwarded to its own
  counting endpoint (model rewritten as routing says, query string kept).
* The provider has a counting endpoint of another protocol (Anthropic <->
  Responses): the request is translated by the same rules as a generation
  request, reduced to the fields that endpoint takes, and the count comes back
  in the client's shape.
* Chat Completions has no counting endpoint, and a provider that answers 404,
  405 or 501 on its own has none either: the answer is the local estimate of
  `token_estimate`, marked by the response header `proxai-token-count: estimate`.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from proxai.http import errors as E
from proxai.http import ingress, paths, requestid
from proxai.endpoints import token_estimate
from proxai.http.transport import read_body
from engine.wire import Target

# Each protocol's counting endpoints, client side and upstream (the path, what the
# upstream endpoint accepts, the answer's shape), are its descriptor's `count_tokens`.
ESTIMATE_HEADER = "proxai-token-count"
# Upstream answers meaning "no such endpoint here": the estimate stands in.
NO_ENDPOINT = frozenset({404, 405, 501})


def register(app: web.Application, proxy, info_key) -> None:
    """Routes on `app` for `proxy` (an app.Proxy); `info_key` finds the request's log record."""
    for path, protocol in proxy.paths.count_tokens.items():
        handler = _handler(proxy, protocol, info_key)
        app.router.add_post(path, handler)
        app.router.add_post(paths.unprefixed(path), handler)


def _handler(proxy, protocol: str, info_key):
    async def handle(request: web.Request) -> web.StreamResponse:
        info = request[info_key]
        info["client_protocol"] = protocol
        proxy.authorize(request)
        server = proxy.config.server
        # Read before taking a concurrency slot, as the generation endpoints do.
        raw = await ingress.read(request, server.max_request_body_bytes, server.request_body_timeout_secs)
        proxy.capture_inbound(request, raw)
        with proxy.slot():
            return await count(proxy, protocol, request, info, raw)

    return handle


def _filled(wire, protocol: str, body: dict) -> dict:
    """The body with what a generation request requires and a counting one leaves out
    (Messages' max_tokens: the descriptor's `endpoints.count_tokens.fill`)."""
    missing = {k: v for k, v in wire.count_fill(protocol).items() if k not in body}
    return {**body, **missing} if missing else body


def _check(wire, protocol: str, body: dict) -> None:
    """The generation endpoint's top-level checks, less its output limit."""
    ingress.check(protocol, _filled(wire, protocol, body), wire.body_fields(protocol))


async def count(proxy, protocol: str, request: web.Request, info: dict, raw: bytes) -> web.StreamResponse:
    from proxai.http.surface import dump_json  # the app imports this module to register its routes

    wire = proxy.engine.wire
    body = ingress.decode(raw)
    _check(wire, protocol, body)
    model = body[wire.body_fields(protocol)[0]]
    info["model"] = model
    match = proxy.route(model, protocol, info)
    provider = match.provider
    target = wire.target(provider.protocol, "count_tokens", match.upstream_model)
    if target is None:  # the provider's protocol has no counting endpoint
        return _estimate(wire, protocol, body, info)
    if provider.protocol == protocol:  # its own endpoint: the request as sent, query kept
        payload = raw if match.upstream_model == model else dump_json(dict(body, model=match.upstream_model))
        target = Target(target.path, target.query or request.rel_url.raw_query_string)
    else:
        payload = dump_json(_translate(proxy, request, protocol, match, body, info))
    upstream = await proxy.send(request, provider, payload, False, info, target)
    try:
        if upstream.status in NO_ENDPOINT:
            return _estimate(wire, protocol, body, info)
        await proxy.raise_for_status(upstream, provider)
        data = await read_body(upstream, provider)
    finally:
        upstream.release()  # back to the pool once read; closed when not
    if provider.protocol == protocol:
        return _respond(upstream.status, data, upstream.headers, info)
    tokens = _upstream_count(wire, provider, data)
    return _respond(200, orjson.dumps(wire.count_answer(protocol, tokens)), upstream.headers, info)


def _translate(proxy, request: web.Request, protocol: str, match, body: dict, info: dict) -> dict[str, Any]:
    """The request translated for the provider's counting endpoint, reduced to what it accepts."""
    provider = match.provider
    wire = proxy.engine.wire
    source = _filled(wire, protocol, body)
    ctx = proxy.translation_context(request, protocol, match, source)
    info["_traces"] = ctx.traces
    try:
        translated = proxy.engine.translate_request(ctx, source)
    except E.TranslationError as exc:
        info["translation_error"] = "request"
        info["rule"] = exc.rule
        raise
    return wire.count_request(provider.protocol, translated, match.upstream_model)


def _upstream_count(wire, provider, data: bytes) -> int:
    try:
        answer = orjson.loads(data)
    except orjson.JSONDecodeError:
        answer = None
    key = wire.count_field(provider.protocol)
    tokens = answer.get(key) if isinstance(answer, dict) else None
    if type(tokens) is not int or tokens < 0:
        raise E.UpstreamProtocolError(f"provider {provider.name!r} answered a token count without {key}")
    return tokens


def _estimate(wire, protocol: str, body: dict, info: dict) -> web.Response:
    # The client SDK's type (MessageTokensCount, InputTokenCountResponse): the descriptor's answer.
    response = _respond(200, orjson.dumps(wire.count_answer(protocol, token_estimate.estimate(body))), {}, info)
    response.headers[ESTIMATE_HEADER] = "estimate"
    info["outcome"] = "estimated"
    return response


def _respond(status: int, data: bytes, upstream_headers, info: dict) -> web.Response:
    response = web.Response(status=status, body=data)
    response.headers["Content-Type"] = "application/json"
    response.headers.update(E.preserved_headers(upstream_headers))
    requestid.stamp(response.headers, info["request_id"])
    info["status"] = status
    return response

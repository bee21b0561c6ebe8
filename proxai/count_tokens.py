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

import engine
from proxai import errors as E
from proxai import ingress, paths, requestid, token_estimate
from proxai.errors import ANTHROPIC, CHAT, GEMINI, RESPONSES
from proxai.transport import generate_target, read_body

# The counting endpoint of each protocol that has one, below its generation path.
SUFFIX = {ANTHROPIC: "/count_tokens", RESPONSES: "/input_tokens"}
# What each counting endpoint accepts (MessageCountTokensParams, InputTokenCountParams);
# the rest of a translated generation request (limits, sampling, stream) is left out.
ACCEPTED = {
    ANTHROPIC: ("model", "messages", "system", "tools", "tool_choice", "thinking", "output_config", "mcp_servers",
                "cache_control"),
    RESPONSES: ("model", "input", "instructions", "tools", "tool_choice", "text", "reasoning", "parallel_tool_calls",
                "truncation", "conversation", "previous_response_id"),
    # countTokens takes a whole generateContentRequest (system and tools count too).
    GEMINI: ("contents", "systemInstruction", "tools", "toolConfig", "generationConfig"),
}
ESTIMATE_HEADER = "proxai-token-count"
# Upstream answers meaning "no such endpoint here": the estimate stands in.
NO_ENDPOINT = frozenset({404, 405, 501})
# Counting requests carry no output limit, which the Messages request schema requires.
_PLACEHOLDER_MAX_TOKENS = 128000


def register(app: web.Application, proxy, info_key) -> None:
    """Routes on `app` for `proxy` (an app.Proxy); `info_key` finds the request's log record."""
    for path, protocol in paths.COUNT_TOKENS.items():
        handler = _handler(proxy, protocol, info_key)
        app.router.add_post(path, handler)
        app.router.add_post(paths.unprefixed(path), handler)


def _handler(proxy, protocol: str, info_key):
    async def handle(request: web.Request) -> web.StreamResponse:
        info = request[info_key]
        info["client_protocol"] = protocol
        proxy._authorize(request)
        server = proxy.config.server
        # Read before taking a concurrency slot, as the generation endpoints do.
        raw = await ingress.read(request, server.max_request_body_bytes, server.request_body_timeout_secs)
        proxy.capture_inbound(request, raw)
        with proxy.slot():
            return await count(proxy, protocol, request, info, raw)

    return handle


def _check(protocol: str, body: dict) -> None:
    """The generation endpoint's top-level checks, less its output limit."""
    if protocol == ANTHROPIC and "max_tokens" not in body:
        ingress.check(protocol, {**body, "max_tokens": _PLACEHOLDER_MAX_TOKENS})
    else:
        ingress.check(protocol, body)


async def count(proxy, protocol: str, request: web.Request, info: dict, raw: bytes) -> web.StreamResponse:
    from proxai.app import dump_json  # the app imports this module to register its routes

    body = ingress.decode(raw)
    _check(protocol, body)
    model = body["model"]
    info["model"] = model
    match = proxy.route(model, protocol, info)
    provider = match.provider
    if provider.protocol == CHAT:
        return _estimate(protocol, body, info)
    if provider.protocol == protocol:
        payload = raw if match.upstream_model == model else dump_json(dict(body, model=match.upstream_model))
        query = request.rel_url.raw_query_string
    else:
        translated = _translate(proxy, request, protocol, match, body, info)
        if provider.protocol == GEMINI:
            name = match.upstream_model.removeprefix("models/")
            translated = {"generateContentRequest": {"model": f"models/{name}", **translated}}
        payload = dump_json(translated)
        query = ""
    if provider.protocol == GEMINI:
        suffix = generate_target(provider, match.upstream_model, False)[0].replace(":generateContent", ":countTokens")
    else:
        suffix = SUFFIX[provider.protocol]
    upstream = await proxy._send(request, provider, payload, False, info, suffix=suffix, query=query)
    try:
        if upstream.status in NO_ENDPOINT:
            return _estimate(protocol, body, info)
        await proxy._raise_for_status(upstream, provider)
        data = await read_body(upstream, provider)
    finally:
        upstream.release()  # back to the pool once read; closed when not
    if provider.protocol == protocol:
        return _respond(upstream.status, data, upstream.headers, info)
    tokens = _upstream_count(provider, data)
    return _respond(200, orjson.dumps(_shape(protocol, tokens)), upstream.headers, info)


def _translate(proxy, request: web.Request, protocol: str, match, body: dict, info: dict) -> dict[str, Any]:
    provider = match.provider
    source = body if protocol != ANTHROPIC or "max_tokens" in body else {**body, "max_tokens": _PLACEHOLDER_MAX_TOKENS}
    ctx = proxy.translation_context(request, protocol, match, source)
    info["_traces"] = ctx.traces
    try:
        translated = proxy.engine.translate_request(ctx, source)
    except E.TranslationError as exc:
        info["translation_error"] = "request"
        info["rule"] = exc.rule
        raise
    return {k: v for k, v in translated.items() if k in ACCEPTED[provider.protocol]}


def _upstream_count(provider, data: bytes) -> int:
    try:
        answer = orjson.loads(data)
    except orjson.JSONDecodeError:
        answer = None
    key = "totalTokens" if provider.protocol == GEMINI else "input_tokens"
    tokens = answer.get(key) if isinstance(answer, dict) else None
    if type(tokens) is not int or tokens < 0:
        raise E.UpstreamProtocolError(f"provider {provider.name!r} answered a token count without {key}")
    return tokens


def _shape(protocol: str, tokens: int) -> dict[str, Any]:
    """The client SDK's type: MessageTokensCount, or InputTokenCountResponse."""
    if protocol == RESPONSES:
        return {"object": "response.input_tokens", "input_tokens": tokens}
    return {"input_tokens": tokens}


def _estimate(protocol: str, body: dict, info: dict) -> web.Response:
    response = _respond(200, orjson.dumps(_shape(protocol, token_estimate.estimate(body))), {}, info)
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

"""`GET /v1/models` and `GET /v1/models/{id}`: the models this configuration serves.

One path, two shapes: an Anthropic client (it sends `anthropic-version` or
`x-api-key`) gets Anthropic's paginated list of `ModelInfo`, any other client
OpenAI's `{"object": "list"}`. Nothing is asked of the providers: the list is
what the config names (routes' exact patterns, literal `upstream_model`s,
providers' `models:`), kept only where routing sends the name, for a protocol
of the client's family, to the provider that named it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from aiohttp import web

from proxai.http import errors as E
from proxai.http import paths, requestid
from proxai.routing.config import Config
from proxai.routing.route_patterns import compile_route
from proxai.routing.routes import Router
from engine.wire import Wire

# Anthropic's ModelInfo requires a release date; "an epoch value if the release date is unknown".
UNKNOWN_DATE = "1970-01-01T00:00:00Z"
ANTHROPIC_DEFAULT_LIMIT, ANTHROPIC_MAX_LIMIT = 20, 1000


@dataclass(frozen=True)
class Served:
    id: str
    provider: str
    max_tokens: int | None = None  # the route's or provider's max_output_tokens, when set


def candidates(config: Config) -> Iterable[Served]:
    """Names the config spells out, in config order, with the provider that names them."""
    for route in config.routes:
        compiled = compile_route(route)
        if compiled.kind == "exact":
            yield Served(route.model_pattern, route.provider)
        target = route.upstream_model
        if target and "$" not in target:
            yield Served(target, route.provider)
    for provider in config.providers.values():
        for model in provider.models:
            yield Served(model, provider.name)


def _served_by(wire: Wire, router: Router, model: str, family: str) -> Served | None:
    """Where routing sends `model`, for the first protocol of the family that has a route."""
    for protocol in wire.of_family(family):
        try:
            match = router.resolve(model, protocol)
        except E.RoutingError:
            continue
        route_limit = match.config.max_output_tokens if match.config is not None else None
        return Served(model, match.provider.name, route_limit or match.provider.max_output_tokens)
    return None


def catalog(wire: Wire, config: Config, router: Router, family: str) -> list[Served]:
    out: list[Served] = []
    seen: set[str] = set()
    for entry in candidates(config):
        key = entry.id.casefold()
        if key in seen:
            continue
        served = _served_by(wire, router, entry.id, family)
        if served is not None and served.provider == entry.provider:
            seen.add(key)
            out.append(served)
    return out


def openai_model(entry: Served) -> dict[str, Any]:
    return {"id": entry.id, "object": "model", "created": 0, "owned_by": entry.provider}


def anthropic_model(entry: Served) -> dict[str, Any]:
    out = {"type": "model", "id": entry.id, "display_name": entry.id, "created_at": UNKNOWN_DATE,
           "lifecycle": "active"}
    if entry.max_tokens is not None:
        out["max_tokens"] = entry.max_tokens
    return out


def anthropic_page(entries: list[Served], query) -> dict[str, Any]:
    """Anthropic's cursor pagination: `limit`, then `after_id` or `before_id` (ids of this list)."""
    raw = query.get("limit", str(ANTHROPIC_DEFAULT_LIMIT))
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= ANTHROPIC_MAX_LIMIT:
        raise E.InvalidRequest(f"limit must be an integer from 1 to {ANTHROPIC_MAX_LIMIT}", param="limit")
    ids = [e.id for e in entries]
    after, before = query.get("after_id"), query.get("before_id")
    if after is not None and before is not None:
        raise E.InvalidRequest("give after_id or before_id, not both", param="after_id")
    if before is not None:
        end = ids.index(before) if before in ids else len(ids)
        start = max(0, end - limit)
        page, has_more = entries[start:end], start > 0
    else:
        start = ids.index(after) + 1 if after in ids else 0
        page = entries[start:start + limit]
        has_more = start + limit < len(entries)
    data = [anthropic_model(e) for e in page]
    return {"data": data, "has_more": has_more,
            "first_id": data[0]["id"] if data else None, "last_id": data[-1]["id"] if data else None}


def gemini_model(entry: Served) -> dict[str, Any]:
    """types.Model as the Gemini API lists it."""
    out = {"name": f"models/{entry.id}", "displayName": entry.id,
           "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens"]}
    if entry.max_tokens is not None:
        out["outputTokenLimit"] = entry.max_tokens
    return out


def _family(proxy, request: web.Request) -> str:
    # By what the family's SDK sends (the descriptors' headers.client_marks): a Gemini
    # client its key as x-goog-api-key or ?key=, an Anthropic one anthropic-version.
    return proxy.paths.client_family(request.headers, request.rel_url.query)


def _json(request: web.Request, info: dict, body: dict) -> web.Response:
    response = web.json_response(body)
    requestid.stamp(response.headers, info["request_id"])
    info["status"] = 200
    return response


def _authorize(proxy, request: web.Request, family: str) -> None:
    if family == "google":
        from proxai.endpoints import gemini_client
        return gemini_client.authorize(proxy, request)
    proxy.authorize(request)


def register(app: web.Application, proxy, info_key) -> None:
    """Routes on `app` for `proxy` (an app.Proxy); `info_key` finds the request's log record."""
    cache: dict[tuple[int, str], list[Served]] = {}

    def entries(family: str) -> list[Served]:
        # Demo mode swaps its config at startup: key the cache on the config object.
        key = (id(proxy.config), family)
        if key not in cache:
            cache[key] = catalog(proxy.engine.wire, proxy.config, proxy.router, family)
        return cache[key]

    async def list_models(request: web.Request) -> web.Response:
        family = _family(proxy, request)
        _authorize(proxy, request, family)
        proxy.capture_inbound(request, b"")  # a GET: no body
        info = request[info_key]
        info["client_protocol"] = proxy.engine.wire.of_family(family)[0]
        served = entries(family)
        if family == "anthropic":
            return _json(request, info, anthropic_page(served, request.query))
        if family == "google":
            return _json(request, info, {"models": [gemini_model(e) for e in served]})
        return _json(request, info, {"object": "list", "data": [openai_model(e) for e in served]})

    async def retrieve_model(request: web.Request) -> web.Response:
        family = _family(proxy, request)
        _authorize(proxy, request, family)
        proxy.capture_inbound(request, b"")  # a GET: no body
        model = request.match_info["model_id"]
        if family == "google" and model.startswith("models/"):
            model = model[len("models/"):]
        info = request[info_key]
        info.update(client_protocol=proxy.engine.wire.of_family(family)[0], model=model)
        entry = next((e for e in entries(family) if e.id.casefold() == model.casefold()), None)
        if entry is None:
            # A name no list spells out (a glob or regex route's) is still served if routing takes it.
            entry = _served_by(proxy.engine.wire, proxy.router, model, family)
            if entry is None:
                raise E.NotFound(f"model {model!r} is not served by this proxy", param="model",
                                 code=None if family == "anthropic" else "model_not_found")
        info["provider"] = entry.provider
        body = {"anthropic": anthropic_model, "google": gemini_model}.get(family, openai_model)(entry)
        return _json(request, info, body)

    for base in (paths.MODELS, paths.unprefixed(paths.MODELS)):
        app.router.add_get(base, list_models)
        app.router.add_get(base + "/{model_id:.+}", retrieve_model)

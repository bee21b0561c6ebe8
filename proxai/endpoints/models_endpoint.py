"""`GET /v1/models` and `GET /v1/models/{id}`: the models this configuration serves.

One path, a shape per API family: a client is of the family whose SDK marks it sends
(the descriptors' `headers.client_marks`), and the family's first protocol's `models:`
rules write the list and its items (pagination included). Nothing is asked of the providers: the list is
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


def _item(entry: Served) -> dict[str, Any]:
    return {"id": entry.id, "provider": entry.provider, "max_tokens": entry.max_tokens}


def page(section: dict, entries: list[Served], query) -> tuple[list[Served], bool]:
    """The page of `entries` the query asks for by the `models.page` cursor parameters
    (`limit`, then `after` or `before`: ids of this list), and whether more follow."""
    spec = section.get("page")
    if not spec:
        return entries, False
    limit_name, top = spec["limit"], spec["max"]
    raw = query.get(limit_name, str(spec["default"]))
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= top:
        raise E.InvalidRequest(f"{limit_name} must be an integer from 1 to {top}", param=limit_name)
    ids = [e.id for e in entries]
    after = query.get(spec["after"]) if spec.get("after") else None
    before = query.get(spec["before"]) if spec.get("before") else None
    if after is not None and before is not None:
        raise E.InvalidRequest(f"give {spec['after']} or {spec['before']}, not both", param=spec["after"])
    if before is not None:
        end = ids.index(before) if before in ids else len(ids)
        start = max(0, end - limit)
        return entries[start:end], start > 0
    start = ids.index(after) + 1 if after in ids else 0
    return entries[start:start + limit], start + limit < len(entries)


def list_body(proxy, protocol: str, served: list[Served], query) -> dict[str, Any]:
    """The model list in `protocol`'s shape (its `models:` rules)."""
    shown, has_more = page(proxy.engine.wire.models(protocol), served, query)
    return proxy.engine.model_list(protocol, [_item(e) for e in shown], has_more)


def find(proxy, protocol: str, served: list[Served], model: str) -> dict[str, Any]:
    """One served model in `protocol`'s shape, or the protocol's not-found error."""
    wire = proxy.engine.wire
    entry = next((e for e in served if e.id.casefold() == model.casefold()), None)
    if entry is None:
        # A name no list spells out (a glob or regex route's) is still served if routing takes it.
        entry = _served_by(wire, proxy.router, model, wire.family(protocol))
        if entry is None:
            raise E.NotFound(f"model {model!r} is not served by this proxy", param="model",
                             code=wire.models(protocol).get("not_found_code"))
    return {"provider": entry.provider, "body": proxy.engine.model_item(protocol, _item(entry))}


def model_name(wire: Wire, protocol: str, name: str) -> str:
    """A model named in the path, without the protocol's `models.prefix`."""
    return name.removeprefix(wire.models(protocol).get("prefix") or "\0")


def authorize(proxy, request: web.Request, protocol: str) -> None:
    # The key where the protocol's clients send it (the descriptor's headers.client_key:
    # a Gemini client's x-goog-api-key or ?key=), else a bearer token or x-api-key.
    proxy.authorize(request, proxy.engine.wire.client_key(protocol, request.headers, request.rel_url.query))


def _family(proxy, request: web.Request) -> str:
    # By what the family's SDK sends (the descriptors' headers.client_marks): a Gemini
    # client its key as x-goog-api-key or ?key=, an Anthropic one anthropic-version.
    return proxy.paths.client_family(request.headers, request.rel_url.query)


def _json(request: web.Request, info: dict, body: dict) -> web.Response:
    response = web.json_response(body)
    requestid.stamp(response.headers, info["request_id"])
    info["status"] = 200
    return response


def register(app: web.Application, proxy, info_key) -> None:
    """Routes on `app` for `proxy` (an app.Proxy); `info_key` finds the request's log record."""
    cache: dict[tuple[int, str], list[Served]] = {}

    def entries(family: str) -> list[Served]:
        # Demo mode swaps its config at startup: key the cache on the config object.
        key = (id(proxy.config), family)
        if key not in cache:
            cache[key] = catalog(proxy.engine.wire, proxy.config, proxy.router, family)
        return cache[key]

    def protocol_of(request: web.Request) -> str:
        return proxy.engine.wire.of_family(_family(proxy, request))[0]

    async def list_models(request: web.Request) -> web.Response:
        protocol = protocol_of(request)
        authorize(proxy, request, protocol)
        proxy.capture_inbound(request, b"")  # a GET: no body
        info = request[info_key]
        info["client_protocol"] = protocol
        body = list_body(proxy, protocol, entries(proxy.engine.wire.family(protocol)), request.query)
        return _json(request, info, body)

    async def retrieve_model(request: web.Request) -> web.Response:
        protocol = protocol_of(request)
        authorize(proxy, request, protocol)
        proxy.capture_inbound(request, b"")  # a GET: no body
        model = model_name(proxy.engine.wire, protocol, request.match_info["model_id"])
        info = request[info_key]
        info.update(client_protocol=protocol, model=model)
        found = find(proxy, protocol, entries(proxy.engine.wire.family(protocol)), model)
        info["provider"] = found["provider"]
        return _json(request, info, found["body"])

    for base in (paths.MODELS, paths.unprefixed(paths.MODELS)):
        app.router.add_get(base, list_models)
        app.router.add_get(base + "/{model_id:.+}", retrieve_model)

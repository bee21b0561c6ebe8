"""Model -> route -> provider, with the optional upstream_model rewrite.

Routes are tried in order and the first match wins; defaults per client
protocol apply only when no route matches. Matching ignores case.

How a pattern matches: proxai/routing/route_patterns.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxai.routing.config import Config, ProviderConfig, RouteConfig
from proxai.http.errors import RoutingError
from proxai.routing.route_patterns import compile_route


@dataclass(frozen=True)
class RouteMatch:
    route: str  # route name, or "default"
    provider: ProviderConfig
    upstream_model: str
    config: RouteConfig | None = None  # the matched route (its model capability overrides)


class Router:
    def __init__(self, config: Config):
        self._providers = config.providers
        self._defaults = config.default_providers
        self._routes = [compile_route(r) for r in config.routes]

    def resolve(self, model: str, protocol: str) -> RouteMatch:
        for route in self._routes:
            match = route.matcher(model)
            if not match:
                continue
            guard = route.config.request_protocol
            if guard is not None and guard != protocol:
                raise RoutingError(
                    f"model {model!r} is routed by route {route.config.name!r} only for {guard} "
                    f"requests; this request is {protocol}",
                    param="model",
                )
            provider = self._providers[route.config.provider]
            return RouteMatch(route.config.name, provider, route.rewrite(model, match), route.config)
        default = self._defaults.get(protocol)
        if default is None:
            raise RoutingError(
                f"no route matches model {model!r} and there is no default provider for {protocol}",
                param="model",
            )
        return RouteMatch("default", self._providers[default], model)

"""Provider pools: the deployments a route may use, the keys each holds, and the order to try them.

A route's chain is its `provider` (or its balanced `providers`, ordered per request by
the route's `strategy`: proxai/routing/balance.py) then its `fallbacks`, always in that order.
Within one provider, the pool's `strategy` orders the keys:

* `round_robin`: the next key in turn (per process);
* `weighted`: a key drawn by weight first, the rest by weight;
* `least_in_flight`: the key with the fewest requests open in this process;
* `sticky`: rendezvous hashing on the conversation, so every instance puts the same
  conversation on the same key, and a resting key moves only its own conversations.
  Requests that name no conversation go round robin.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import re
from dataclasses import dataclass, field
from typing import Any

from proxai.routing.balance import Balancer, pinned_key, rendezvous, turn_key
from proxai.routing.config import Config, ProviderConfig, key_fingerprint
from proxai.routing.routes import RouteMatch


fingerprint = key_fingerprint


@dataclass(eq=False)
class KeySlot:
    provider: str
    index: int
    fingerprint: str
    weight: float
    config: ProviderConfig  # the provider with this key as its api_key
    in_flight: int = 0


class Pool:
    """One provider's keys."""

    def __init__(self, provider: ProviderConfig):
        self.provider = provider
        self.strategy = provider.strategy
        keys = provider.api_keys or (provider.api_key,)
        weights = provider.key_weights or (1.0,) * len(keys)
        self.slots = [
            KeySlot(provider.name, i, fingerprint(key), weights[i], dataclasses.replace(provider, api_key=key))
            for i, key in enumerate(keys)
        ]
        self._turn = itertools.count()

    @property
    def in_flight(self) -> int:
        return sum(s.in_flight for s in self.slots)

    def order(self, conversation: str | None) -> list[KeySlot]:
        ordered = self._order(conversation)
        pinned = turn_key(conversation)
        if pinned:
            ordered.sort(key=lambda s: s.fingerprint != pinned)
        return ordered

    def _order(self, conversation: str | None) -> list[KeySlot]:
        slots = self.slots
        if len(slots) == 1:
            return list(slots)
        strategy = self.strategy
        if strategy == "sticky" and conversation:
            ordered = sorted(slots, key=lambda s: rendezvous(conversation, s.fingerprint), reverse=True)
            pinned = pinned_key(conversation)
            if pinned:  # the key that served the chain's first turn
                ordered.sort(key=lambda s: s.fingerprint != pinned)
            return ordered
        if strategy == "weighted":
            first = random.choices(slots, weights=[s.weight for s in slots])[0]
            return [first] + sorted((s for s in slots if s is not first), key=lambda s: -s.weight)
        start = next(self._turn) % len(slots)
        rotated = slots[start:] + slots[:start]
        if strategy == "least_in_flight":
            return sorted(rotated, key=lambda s: s.in_flight)  # stable: ties keep the turn order
        return rotated


@dataclass(frozen=True)
class Deployment:
    pool: Pool
    upstream_model: str | None  # None: the route's (or the client's) model
    weight: float = 1.0


@dataclass
class Plan:
    """The deployments of one request's route: the balanced ones, then the fallbacks."""

    route: str
    upstream_model: str  # the route's rewrite of the client's model
    balancer: Balancer
    fallbacks: list[Deployment] = field(default_factory=list)

    def order(self, conversation: str | None, down: frozenset[str] = frozenset()) -> list[Deployment]:
        ordered = self.balancer.order(conversation, down) + self.fallbacks
        pinned = turn_key(conversation)
        if pinned:  # the deployment that served the turn so far, a fallback too
            ordered.sort(key=lambda d: not any(s.fingerprint == pinned for s in d.pool.slots))
        return ordered

    def model(self, deployment: Deployment) -> str:
        return deployment.upstream_model or self.upstream_model

    @property
    def sticky(self) -> bool:
        return self.balancer.strategy == "sticky" or any(
            d.pool.strategy == "sticky" for d in self.balancer.deployments + self.fallbacks
        )


class Pools:
    def __init__(self, config: Config):
        self.pools = {name: Pool(p) for name, p in config.providers.items()}
        self._fallbacks = {r.name: r.fallbacks for r in config.routes}
        self._balancers = {
            r.name: Balancer(r.strategy, [Deployment(self.pools[d.provider], d.upstream_model, d.weight) for d in r.providers])
            for r in config.routes if r.providers
        }

    def plan(self, match: RouteMatch) -> Plan | None:
        """None when the route has one deployment with one key and no fallbacks: nothing to choose or retry."""
        primary = self.pools.get(match.provider.name)
        fallbacks = self._fallbacks.get(match.route, ())
        balancer = self._balancers.get(match.route)
        if primary is None:
            return None
        if not fallbacks and len(primary.slots) == 1 and (
            balancer is None or len(balancer.deployments) == 1 and balancer.deployments[0].upstream_model is None
        ):
            return None
        if balancer is None:
            balancer = Balancer("round_robin", [Deployment(primary, None)])
        return Plan(match.route, match.upstream_model, balancer,
                    [Deployment(self.pools[fb.provider], fb.upstream_model) for fb in fallbacks])

    def describe(self, config: Config) -> list[str]:
        """Lines for `check-config`: each pool and each route's chain."""
        lines = []
        for name, pool in self.pools.items():
            keys = ", ".join(
                s.fingerprint + (f" (weight {s.weight:g})" if pool.strategy == "weighted" else "") for s in pool.slots
            )
            lines.append(f"provider {name}: {pool.provider.protocol}, {len(pool.slots)} key(s), {pool.strategy}: {keys}")
        for route in config.routes:
            first = route.provider
            if route.providers:  # balanced: alternatives, then the route's strategy
                first = " | ".join(
                    d.provider + (f" (weight {d.weight:g})" if route.strategy == "weighted" else "")
                    + (f" (model {d.upstream_model})" if d.upstream_model else "") for d in route.providers
                ) + f" [{route.strategy}]"
            chain = [first] + [
                fb.provider + (f" (model {fb.upstream_model})" if fb.upstream_model else "") for fb in route.fallbacks
            ]
            lines.append(f"route {route.name}: {' -> '.join(chain)}")
        return lines


_RESPONSE_ID = re.compile(rb'"id"\s*:\s*"(resp_[A-Za-z0-9_-]{1,200})"')


def response_id(data: bytes) -> str | None:
    """The first Responses id in a body or in a stream's first events."""
    m = _RESPONSE_ID.search(data)
    return m.group(1).decode() if m else None


# Claude Code puts its session in metadata.user_id: "user_<hash>_account_<uuid>_session_<uuid>"
# (newer versions: a JSON object with session_id).
_SESSION = re.compile(r"session_([0-9A-Za-z-]{8,})")
_SESSION_JSON = re.compile(r'"session_id"\s*:\s*"([^"]{1,200})"')


def conversation_key(body: dict[str, Any], user_fields: tuple[str, ...] = ()) -> str | None:
    """What keeps a conversation on one key: prompt_cache_key, Claude Code's session, the
    end user (`user_fields`: the protocol's body fields naming one, from its descriptor),
    or the previous_response_id (its chain root when known)."""
    value = body.get("prompt_cache_key")
    if isinstance(value, str) and value:
        return "pck:" + value
    metadata = body.get("metadata")
    if isinstance(metadata, dict):
        user = metadata.get("user_id")
        if isinstance(user, str) and user:
            m = _SESSION.search(user) or _SESSION_JSON.search(user)
            return "session:" + (m.group(1) if m else user)
    for name in user_fields:
        user = body.get(name)
        if isinstance(user, str) and user:
            return "user:" + user
    prev = body.get("previous_response_id")
    if isinstance(prev, str) and prev:
        return "prev:" + prev
    return None

"""Load balancing over a route's several `providers`: which deployment a request tries first.

The order returned is the whole list: the chosen deployment first, then the others a
request falls over to (before the route's `fallbacks`). Strategies:

* `round_robin`: the next deployment in turn (per process);
* `weighted`: smooth weighted round robin (per process): with weights 3 and 1, every run
  of four requests sends exactly three to the first, interleaved, rather than a random draw;
* `least_in_flight`: the deployment with the fewest requests open in this process (all
  routes counted: a deployment's load is its own), ties in turn;
* `sticky`: rendezvous hashing on the conversation (as the key pools do), so every
  instance puts the same conversation on the same deployment and a deployment that is
  out moves only its own conversations; a `previous_response_id` chain follows the
  deployment of the key that served its first turn. No conversation: round robin.

Deployments whose circuit breaker is open (`down`) are left out of the choice and put
last, in case the shared state changed since this instance read it.
"""

from __future__ import annotations

import hashlib
import itertools
from typing import Any, Protocol


class Deployment(Protocol):
    """What the balancer reads of a deployment (proxai/routing/pools.py builds them)."""
    pool: Any
    weight: float


def rendezvous(conversation: str, name: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{conversation}\0{name}".encode(), digest_size=8).digest(), "big")


def pinned_key(conversation: str) -> str | None:
    """The key fingerprint a `pin:` conversation (a chain's first turn) names."""
    return conversation[4:] if conversation.startswith("pin:") else None


def turn_key(conversation: str | None) -> str | None:
    """The key fingerprint a `turn:` conversation (a Codex turn, proxai/routing/turn_state.py)
    names: tried first whatever the strategy, fallbacks included."""
    return conversation[5:] if conversation and conversation.startswith("turn:") else None


class Balancer:
    def __init__(self, strategy: str, deployments: list["Deployment"]):
        self.strategy = strategy
        self.deployments = deployments
        self._turn = itertools.count()
        self._current = [0.0] * len(deployments)  # smooth weighted round robin

    def order(self, conversation: str | None, down: frozenset[str] = frozenset()) -> list["Deployment"]:
        every = self.deployments
        up = [i for i, d in enumerate(every) if d.pool.provider.name not in down]
        rest = [every[i] for i in range(len(every)) if i not in up]
        if not up:
            return rest
        strategy = self.strategy
        if strategy == "sticky" and conversation:
            chosen = sorted(up, key=lambda i: rendezvous(conversation, every[i].pool.provider.name), reverse=True)
            pinned = pinned_key(conversation)
            if pinned:  # the deployment whose key served the chain's first turn
                chosen.sort(key=lambda i: not any(s.fingerprint == pinned for s in every[i].pool.slots))
        elif strategy == "weighted":
            chosen = self._smooth(up)
        else:
            start = next(self._turn) % len(up)
            chosen = up[start:] + up[:start]
            if strategy == "least_in_flight":
                chosen.sort(key=lambda i: every[i].pool.in_flight)  # stable: ties keep the turn order
        return [every[i] for i in chosen] + rest

    def _smooth(self, up: list[int]) -> list[int]:
        """nginx's smooth weighted round robin over the deployments that are up."""
        current, every = self._current, self.deployments
        total = 0.0
        for i in up:
            current[i] += every[i].weight
            total += every[i].weight
        first = max(up, key=lambda i: current[i])
        current[first] -= total
        return [first] + sorted((i for i in up if i != first), key=lambda i: -every[i].weight)

"""Retries and fallbacks before the commit point, bounded.

One request walks its route's chain (pools.Plan): its balanced deployments in the order
the route's strategy picked for this request (proxai/routing/balance.py; breaker-open ones last),
then its fallbacks; of each deployment the breaker admits, each key that is not resting,
in the pool's order. An attempt that fails before the commit point (no byte went to
the client: for streams, before the first event was relayed) moves on:

* 429: the key rests for Retry-After (or a doubling backoff); the next key is tried.
* 401/403: the key is disabled (a loud log line); the next key is tried.
* 5xx, 408, 529, timeouts, unreachable, a connection closed or a stream ended before
  its first event, or a stream that opened with an error event: the deployment's
  breaker counts it; the next deployment is tried (its other keys share the outage).
* anything else (a 400, a translation error) is the client's answer as it is.

Bounds: `max_attempts` tries, none started after `deadline_secs`, and retries draw on
a budget (a share of recent requests plus a small floor) so they cannot multiply
load when a provider struggles: once it is spent, the failure goes to the client.

The deadline also cuts a running attempt, but only before the commit point: an attempt
still without its answer (non-streamed) or its first event (streamed) when the deadline
passes is cancelled and the client gets a 504 timeout. `commit` disarms the cut, so a
stream that has started runs as long as its provider sends (read_idle_timeout_secs
still applies): cutting it would be an in-stream error the client cannot retry around.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import math
import time
from typing import Awaitable, Callable

from prometheus_client import Counter

from proxai.http import errors as E
from proxai.routing.breaker import OPEN, Health
from proxai.routing.config import Config, ProviderConfig
from proxai.routing import pools
from proxai.routing.pools import Plan, Pools
from proxai.state import StateError, StateStore
from proxai.http.transport import UpstreamTooLarge

log = logging.getLogger("proxai.pools")

RATE_LIMITED, REFUSED, FAILED = "rate_limited", "refused", "failed"
CHAIN_TTL_SECS = 24 * 3600  # how long a response id remembers its conversation's key
_FAILED_STATUSES = frozenset({408, 500, 502, 503, 504, 529})

Attempt = Callable[[ProviderConfig, str], Awaitable[object]]


class DeadlineExceeded(E.UpstreamTimeout):
    """The request's total deadline passed before the attempt reached its commit point."""


def commit(info: dict) -> None:
    """The commit point: bytes go to the client now, so no retry, fallback or deadline cut."""
    info["_committed"] = True
    cut = info.pop("_deadline", None)
    if cut is not None and not cut.expired():
        cut.reschedule(None)


async def _within(deadline: float, info: dict, call: Awaitable[object]):
    """Await one attempt, cancelled if the deadline (time.monotonic()) passes before `commit`."""
    cut = asyncio.timeout(max(0.0, deadline - time.monotonic()))
    info["_deadline"] = cut
    try:
        async with cut:
            return await call
    except TimeoutError:
        if cut.expired() and not info.get("_committed"):
            raise DeadlineExceeded("no answer from the provider within the request's deadline "
                                   "(resilience.deadline_secs)") from None
        raise
    finally:
        info.pop("_deadline", None)


def classify(exc: BaseException) -> str | None:
    """What a pre-commit failure says about the key or deployment (None: not retryable)."""
    if isinstance(exc, E.UpstreamError):
        if exc.status == 429:
            return RATE_LIMITED
        if exc.status in (401, 403):
            return REFUSED
        if exc.status in _FAILED_STATUSES:
            return FAILED
        return None
    if isinstance(exc, UpstreamTooLarge):
        return None  # the same answer would come from any deployment
    if isinstance(exc, (E.UpstreamUnreachable, E.UpstreamTimeout, E.UpstreamProtocolError)):
        return FAILED
    return None


def retry_after(headers: dict[str, str]) -> float | None:
    """Seconds from retry-after-ms or Retry-After (delta-seconds or an HTTP date)."""
    value = headers.get("retry-after-ms")
    if value:
        try:
            return max(0.0, float(value) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class RetryBudget:
    """Retries allowed = ratio x recent requests + floor x window, both decaying over ~10 s."""

    WINDOW = 10.0

    def __init__(self, ratio: float, min_per_sec: float):
        self.ratio = ratio
        self.floor = min_per_sec * self.WINDOW
        self._requests = 0.0
        self._retries = 0.0
        self._at = time.monotonic()

    def _decay(self) -> None:
        now = time.monotonic()
        factor = math.exp(-(now - self._at) / self.WINDOW)
        self._requests *= factor
        self._retries *= factor
        self._at = now

    def request(self) -> None:
        self._decay()
        self._requests += 1

    def take(self) -> bool:
        self._decay()
        if self._retries + 1 > self.floor + self.ratio * self._requests:
            return False
        self._retries += 1
        return True


class Resilience:
    def __init__(self, config: Config, registry):
        self.settings = config.resilience
        self.pools = Pools(config)
        self.budget = RetryBudget(self.settings.retry_budget_ratio, self.settings.retry_budget_min_per_sec)
        self._registry = registry
        self.health: Health | None = None
        self._own: StateStore | None = None
        self._sweeper: asyncio.Task | None = None
        self.attempts = Counter(
            "proxai_upstream_attempts", "Upstream attempts of pooled routes by provider and outcome",
            ("provider", "outcome"), registry=registry,
        )
        self.retries = Counter(
            "proxai_retries", "Requests moved to another key or deployment, by reason", ("reason",), registry=registry,
        )
        self.budget_exhausted = Counter(
            "proxai_retry_budget_exhausted", "Retries refused by the retry budget or the deadline", ("limit",),
            registry=registry,
        )

    async def start(self, store: StateStore | None) -> None:
        """`store`: the state store; None (state.backend none): an in-process one of our own."""
        if store is None:
            from proxai.state.memory import MemoryStore

            store = self._own = MemoryStore()
            await store.open()
            self._sweeper = asyncio.ensure_future(self._sweep(store))
        self.health = Health(store, self.settings, self._registry)
        self.health.register(self.pools.pools)

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if self._own is not None:
            await self._own.close()
            self._own = None

    @staticmethod
    async def _sweep(store: StateStore) -> None:
        while True:
            await asyncio.sleep(60)
            try:
                await store.sweep()
            except StateError:
                pass

    async def serve(self, plan: Plan, info: dict, conversation: str | None, attempt: Attempt, *, responses: bool = False):
        health = self.health
        assert health is not None, "resilience not started"
        chain = responses and plan.sticky
        if chain:
            conversation = await self._chain_root(conversation)
            info["_response_id"] = None
        response = await self._serve(plan, info, conversation, attempt)
        if chain and conversation is None and info.get("key"):
            conversation = "pin:" + info["key"]  # a chain's first turn: later turns follow its key
        if chain and conversation:
            rid = info.get("_response_id")
            if rid is None and isinstance(getattr(response, "body", None), (bytes, bytearray)):
                rid = pools.response_id(bytes(response.body[:4096]))
            if rid:
                await self._remember(rid, conversation)
        return response

    async def _chain_root(self, conversation: str | None) -> str | None:
        """A previous_response_id chain keeps the conversation key of its first turn."""
        if conversation is None or not conversation.startswith("prev:"):
            return conversation
        try:
            root = await self.health.store.kv_get("conv:" + conversation[5:])
        except StateError:
            return conversation
        return root.decode() if root else conversation

    async def _remember(self, response_id: str, conversation: str) -> None:
        try:
            await self.health.store.kv_set("conv:" + response_id, conversation.encode(), ttl_secs=CHAIN_TTL_SECS)
        except StateError as exc:
            log.warning("sticky conversation not recorded (%s)", exc)

    async def _serve(self, plan: Plan, info: dict, conversation: str | None, attempt: Attempt):
        health = self.health
        settings = self.settings
        deadline = info.get("_started", time.monotonic()) + settings.deadline_secs
        self.budget.request()
        tried = 0
        last: E.ProxyError | None = None
        views = []
        down = set()
        for deployment in plan.balancer.deployments:
            if len(plan.balancer.deployments) > 1 and (await health.view(deployment.pool)).breaker == OPEN:
                down.add(deployment.pool.provider.name)
        for deployment in plan.order(conversation, frozenset(down)):
            pool = deployment.pool
            model = plan.model(deployment)
            view = await health.view(pool)
            views.append(view)
            if not await _noted(health.admit(pool, view), True):
                continue
            for slot in pool.order(conversation):
                if not health.available(view, slot, time.time()):
                    continue
                if tried >= settings.max_attempts:
                    self.budget_exhausted.labels("max_attempts").inc()
                    return _give_up(last, info)
                if tried:
                    if time.monotonic() >= deadline:
                        self.budget_exhausted.labels("deadline").inc()
                        return _give_up(last, info)
                    if not self.budget.take():
                        self.budget_exhausted.labels("budget").inc()
                        return _give_up(last, info)
                tried += 1
                for stale in ("translation_error", "upstream_request_id"):  # an earlier attempt's
                    info.pop(stale, None)
                info.update(provider=pool.provider.name, provider_protocol=pool.provider.protocol,
                            upstream_model=model, key=slot.fingerprint, attempts=tried)
                slot.in_flight += 1
                try:
                    response = await _within(deadline, info, attempt(slot.config, model))
                except E.ProxyError as exc:
                    if info.get("_committed"):
                        raise  # bytes went out: the failure is the client's, as it is today
                    if isinstance(exc, DeadlineExceeded):  # no time left for another attempt either
                        self.attempts.labels(pool.provider.name, "deadline").inc()
                        self.budget_exhausted.labels("deadline").inc()
                        log.info("provider %s cut by the request's deadline (%gs) before the first byte",
                                 pool.provider.name, settings.deadline_secs)
                        await _noted(health.failed(pool))  # a deployment that hangs must trip its breaker
                        raise
                    reason = classify(exc)
                    if reason is None:
                        raise
                    last = exc
                    self.attempts.labels(pool.provider.name, reason).inc()
                    self.retries.labels(reason).inc()
                    if reason == RATE_LIMITED:
                        await _noted(health.rate_limited(slot, retry_after(exc.headers)))
                        continue
                    if reason == REFUSED:
                        await _noted(health.refused(slot, exc.status))
                        continue
                    log.info("provider %s failed before the first byte (%s, HTTP %d: %s); trying the next deployment",
                             pool.provider.name, exc.kind, exc.status, exc.message if exc.kind != "upstream_error" else "-")
                    await _noted(health.failed(pool))
                    break
                finally:
                    slot.in_flight -= 1
                self.attempts.labels(pool.provider.name, "ok").inc()
                await _noted(health.succeeded(pool, slot))
                return response
        if last is not None:
            return _give_up(last, info)
        wait = health.soonest(views, time.time())
        if wait is not None:
            raise E.UpstreamError(
                f"every key of route {plan.route!r} is rate limited; retry in {math.ceil(wait)}s",
                status=429, headers={"retry-after": str(max(1, math.ceil(wait)))},
            )
        raise E.UpstreamError(
            f"every provider of route {plan.route!r} is unavailable (circuit breaker open or keys refused)",
            status=503, headers={"retry-after": str(math.ceil(settings.breaker.open_secs))},
        )


async def _noted(coro, default=None):
    """A state store that fails must not fail the request: the pool works on what it knows."""
    try:
        return await coro
    except StateError as exc:
        log.warning("pool state not shared (%s)", exc)
        return default


def _give_up(last: E.ProxyError | None, info: dict):
    if last is None:
        raise E.UpstreamError("no attempt was possible within the retry bounds", status=503)
    raise last

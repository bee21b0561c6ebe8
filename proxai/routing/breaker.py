"""Key cooldowns and per-deployment circuit breakers, kept in the state store's key-value part.

Every instance writes what it learns (a 429, a refused key, a failing deployment) to
the store and reads the others' at most every `resilience.sync_secs`, so a key that
hit its limit rests on every instance: in-process with `memory`, across `--workers`
with `sqlite`, across machines with `redis`.

Keys (values are the Unix time the state ends, so a reader knows how long is left):

* `pool:cool:<provider>:<fingerprint>`: the key rests (429); TTL = the rest.
* `pool:strikes:<provider>:<fingerprint>`: 429s without Retry-After in a row: the backoff doubles.
* `pool:off:<provider>:<fingerprint>`: the provider refused the key (401/403).
* `brk:fails:<provider>`: 5xx/timeouts in the current window (a counter).
* `brk:open:<provider>`: the breaker is open; when it expires the breaker is half-open
  while `brk:half:<provider>` lives, and `brk:probe:<provider>` elects the one probe.
"""

from __future__ import annotations

import logging
import time

from prometheus_client import Counter, Gauge

from proxai.routing.config import ResilienceConfig
from proxai.routing.pools import KeySlot, Pool
from proxai.state import StateError, StateStore

log = logging.getLogger("proxai.pools")

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"
_STATE_VALUE = {CLOSED: 0, HALF_OPEN: 1, OPEN: 2}


class _View:
    """One provider's last-read shared state."""

    __slots__ = ("read_at", "cool", "off", "breaker", "half")

    def __init__(self) -> None:
        self.read_at = float("-inf")
        self.cool: dict[str, float] = {}  # fingerprint -> rests until (Unix time)
        self.off: dict[str, float] = {}
        self.breaker = CLOSED
        self.half = False


class Health:
    def __init__(self, store: StateStore, settings: ResilienceConfig, registry):
        self.store = store
        self.settings = settings
        self._views: dict[str, _View] = {}
        self.breaker_state = Gauge(
            "proxai_breaker_state", "Circuit breaker per deployment (0 closed, 1 half-open, 2 open)",
            ("provider",), registry=registry, multiprocess_mode="livemax",  # workers: the most open view
        )
        self.breaker_transitions = Counter(
            "proxai_breaker_transitions", "Circuit breaker state changes per deployment", ("provider", "state"),
            registry=registry,
        )
        self.key_events = Counter(
            "proxai_key_events", "Keys rested (429) or disabled (401/403), by provider and key fingerprint",
            ("provider", "key", "event"), registry=registry,
        )
        self.keys_resting = Gauge(
            "proxai_keys_unavailable", "Keys resting or disabled per provider (this instance's view)",
            ("provider",), registry=registry, multiprocess_mode="livemax",
        )

    def register(self, pools: dict[str, Pool]) -> None:
        for name in pools:
            self.breaker_state.labels(name).set(0)
            self.keys_resting.labels(name).set(0)

    # --- reading ---

    async def view(self, pool: Pool, now: float | None = None) -> _View:
        view = self._views.get(pool.provider.name)
        if view is None:
            view = self._views[pool.provider.name] = _View()
        mono = time.monotonic()
        if mono - view.read_at >= self.settings.sync_secs:
            view.read_at = mono
            try:
                await self._read(pool, view)
            except StateError as exc:
                log.warning("pool state for provider %s unreadable (%s); using the last view", pool.provider.name, exc)
        return view

    async def _read(self, pool: Pool, view: _View) -> None:
        name = pool.provider.name
        cool, off = {}, {}
        for slot in pool.slots:
            until = _time(await self.store.kv_get(f"pool:cool:{name}:{slot.fingerprint}"))
            if until:
                cool[slot.fingerprint] = until
            until = _time(await self.store.kv_get(f"pool:off:{name}:{slot.fingerprint}"))
            if until:
                off[slot.fingerprint] = until
        view.cool, view.off = cool, off
        opened = await self.store.kv_get(f"brk:open:{name}")
        half = await self.store.kv_get(f"brk:half:{name}")
        self._set_breaker(name, view, OPEN if opened else HALF_OPEN if half else CLOSED)
        self.keys_resting.labels(name).set(len(set(cool) | set(off)))

    def available(self, view: _View, slot: KeySlot, now: float) -> bool:
        fp = slot.fingerprint
        return view.cool.get(fp, 0) <= now and view.off.get(fp, 0) <= now

    def soonest(self, views: list[_View], now: float) -> float | None:
        """Seconds until the first resting key is back (None: none rests, something else failed)."""
        ends = [u for v in views for u in v.cool.values() if u > now]
        return min(ends) - now if ends else None

    async def admit(self, pool: Pool, view: _View) -> bool:
        """May this request use the deployment? Half-open: only the one elected probe."""
        if view.breaker == CLOSED:
            return True
        name = pool.provider.name
        if view.breaker == OPEN:
            if await self.store.kv_get(f"brk:open:{name}"):
                return False
            self._set_breaker(name, view, HALF_OPEN)
        probe_ttl = min(self.settings.deadline_secs, pool.provider.read_idle_timeout_secs) + 1
        return await self.store.kv_set(f"brk:probe:{name}", b"1", ttl_secs=probe_ttl, only_if_absent=True)

    # --- writing ---

    async def rate_limited(self, slot: KeySlot, retry_after: float | None) -> float:
        name, fp = slot.provider, slot.fingerprint
        if retry_after is None:
            strikes = await self.store.kv_incr(f"pool:strikes:{name}:{fp}", ttl_secs=self.settings.max_cooldown_secs)
            rest = self.settings.cooldown_secs * 2 ** min(strikes - 1, 20)
        else:
            rest = retry_after
        rest = max(0.001, min(rest, self.settings.max_cooldown_secs))
        until = time.time() + rest
        self._views.setdefault(name, _View()).cool[fp] = until  # this instance rests it even if the store fails
        self.key_events.labels(name, fp, "rested").inc()
        log.info("provider %s key %s rate limited: resting %.1fs", name, fp, rest)
        await self.store.kv_set(f"pool:cool:{name}:{fp}", b"%.3f" % until, ttl_secs=rest)
        return rest

    async def refused(self, slot: KeySlot, status: int) -> None:
        name, fp = slot.provider, slot.fingerprint
        ttl = self.settings.disable_secs
        until = time.time() + ttl
        self._views.setdefault(name, _View()).off[fp] = until
        self.key_events.labels(name, fp, "disabled").inc()
        log.error("provider %s REFUSED key %s (HTTP %d): the key is disabled for %gs on every instance; "
                  "check or replace it", name, fp, status, ttl)
        await self.store.kv_set(f"pool:off:{name}:{fp}", b"%.3f" % until, ttl_secs=ttl)

    async def failed(self, pool: Pool) -> None:
        """A 5xx, timeout or broken connection of this deployment."""
        name = pool.provider.name
        settings = self.settings.breaker
        view = self._views.setdefault(name, _View())
        if view.breaker != CLOSED or await self.store.kv_get(f"brk:half:{name}"):
            await self._trip(name, view)  # the probe failed
            return
        fails = await self.store.kv_incr(f"brk:fails:{name}", ttl_secs=settings.window_secs)
        if fails >= settings.failures:
            await self._trip(name, view)

    async def _trip(self, name: str, view: _View) -> None:
        settings = self.settings.breaker
        await self.store.kv_set(f"brk:open:{name}", b"%.3f" % (time.time() + settings.open_secs), ttl_secs=settings.open_secs)
        await self.store.kv_set(f"brk:half:{name}", b"1", ttl_secs=settings.open_secs + 10 * settings.window_secs)
        await self.store.kv_delete(f"brk:probe:{name}")
        await self.store.kv_delete(f"brk:fails:{name}")
        if view.breaker != OPEN:
            log.warning("provider %s circuit breaker OPEN for %gs (5xx/timeouts)", name, settings.open_secs)
        self._set_breaker(name, view, OPEN)

    async def succeeded(self, pool: Pool, slot: KeySlot) -> None:
        name = pool.provider.name
        view = self._views.get(name)
        if view is not None and view.breaker == HALF_OPEN:
            await self.store.kv_delete(f"brk:half:{name}")
            await self.store.kv_delete(f"brk:probe:{name}")
            log.info("provider %s circuit breaker closed (probe succeeded)", name)
            self._set_breaker(name, view, CLOSED)

    def _set_breaker(self, name: str, view: _View, state: str) -> None:
        if view.breaker != state:
            self.breaker_transitions.labels(name, state).inc()
        view.breaker = state
        self.breaker_state.labels(name).set(_STATE_VALUE[state])


def _time(value: bytes | None) -> float:
    if not value:
        return 0.0
    try:
        return float(value)
    except ValueError:
        return 0.0

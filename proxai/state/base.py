"""The state store: one small async interface, several backends.

Two parts share a backend:

* response records (the Responses API's server-side state): `put`, `get`, `chain`
  (a record and its ancestors, oldest first), `delete`, `list_items`;
* a key-value part with TTL for any feature that needs shared counters or flags
  (retries, cooldowns, leases): `kv_get`, `kv_set` (optionally only if absent),
  `kv_incr`, `kv_cas` (compare-and-set), `kv_delete`.

Records are scoped by tenant (a keyed hash of the client's API key): every read
names the tenant, so one key never reads another key's responses. Every backend
is safe to share between the processes of `--workers N`; `redis` also between
machines.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
import orjson


class StateError(Exception):
    """The backend failed (unreachable, corrupt, full)."""


class RecordTooLarge(StateError):
    def __init__(self, size: int, limit: int):
        super().__init__(f"the response record is {size} bytes, over state.max_record_bytes ({limit})")
        self.size, self.limit = size, limit


class ChainTooDeep(StateError):
    def __init__(self, limit: int):
        super().__init__(f"the conversation is longer than state.max_chain_depth ({limit} responses)")
        self.limit = limit


@dataclass
class ResponseRecord:
    """One stored turn: a delta (its own new input items) linked to its parent."""

    id: str
    tenant: str
    parent_id: str | None
    client_protocol: str
    provider: str
    model: str
    input_items: list  # this turn's new input items, as the client sent them (ids added)
    response: dict  # the rendered client response (GET answers with it; its output is the turn's output)
    created_at: float = field(default_factory=time.time)
    expires_at: float | None = None

    @property
    def output_items(self) -> list:
        output = self.response.get("output")
        return output if isinstance(output, list) else []

    def dumps(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def loads(cls, data: bytes | str) -> "ResponseRecord":
        try:
            doc = orjson.loads(data)
            return cls(**doc)
        except (orjson.JSONDecodeError, TypeError) as exc:
            raise StateError(f"a stored record is corrupt ({type(exc).__name__})") from None

    def expired(self, now: float | None = None) -> bool:
        return self.expires_at is not None and self.expires_at <= (now if now is not None else time.time())


class StateStore:
    """The interface. Backends implement the underscore methods; the public ones add
    limits, expiry and metrics."""

    name = "base"
    # A network service (Redis) may be down for a while and come back: the server starts
    # without it and reconnects. A local store that cannot open is a misconfiguration.
    remote = False

    def __init__(self, *, ttl_secs: float | None = None, max_chain_depth: int = 1000, max_record_bytes: int = 16 * 1024 * 1024):
        self.ttl_secs = ttl_secs
        self.max_chain_depth = max_chain_depth
        self.max_record_bytes = max_record_bytes
        self.observer = None  # callable(op, outcome, seconds), set by the owner for metrics
        # Set by the owner while the backend is known to be down: every operation then fails
        # at once with this reason, rather than each waiting on the backend's timeouts.
        self.outage: str | None = None

    @property
    def location(self) -> str:
        """Where the backend is, for the operator's log (never credentials)."""
        return self.name

    # --- lifecycle ---

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def ping(self) -> None:
        """Raise StateError unless the backend answers; `outage` does not apply."""
        try:
            await self._ping()
        except StateError:
            raise
        except Exception as exc:
            raise StateError(f"the {self.name} state backend failed ({type(exc).__name__})") from exc

    # --- records ---

    async def put(self, record: ResponseRecord, *, only_if_absent: bool = False) -> bool:
        """Write a record; with only_if_absent, not over an existing one (False then)."""
        if record.expires_at is None and self.ttl_secs:
            record.expires_at = record.created_at + self.ttl_secs
        data = record.dumps()
        if len(data) > self.max_record_bytes:
            self._observe("put", "too_large", 0.0)
            raise RecordTooLarge(len(data), self.max_record_bytes)
        return await self._timed("put", self._put(record, data, only_if_absent), misses=only_if_absent)

    async def get(self, tenant: str, response_id: str) -> ResponseRecord | None:
        record = await self._timed("get", self._get(tenant, response_id))
        if record is not None and record.expired():
            return None
        return record

    async def chain(self, tenant: str, response_id: str) -> list[ResponseRecord] | None:
        """The record and its ancestors, oldest first; None when any link is unknown or
        expired; ChainTooDeep past max_chain_depth."""
        records = await self._timed("chain", self._chain(tenant, response_id, self.max_chain_depth))
        if records is None:
            return None
        now = time.time()
        if any(r.expired(now) for r in records):
            return None
        records.reverse()
        return records

    async def delete(self, tenant: str, response_id: str) -> bool:
        return await self._timed("delete", self._delete(tenant, response_id))

    async def list_items(self, tenant: str, response_id: str) -> list | None:
        """A stored response's own input items, in the order sent; None when unknown."""
        record = await self.get(tenant, response_id)
        return None if record is None else list(record.input_items)

    async def sweep(self) -> int:
        """Remove expired records and keys; returns how many went."""
        return await self._timed("sweep", self._sweep(), misses=False)

    # --- key-value with TTL ---

    async def kv_get(self, key: str) -> bytes | None:
        return await self._timed("kv_get", self._kv_get(key))

    async def kv_set(self, key: str, value: bytes, *, ttl_secs: float | None = None, only_if_absent: bool = False) -> bool:
        """Set `key`; with only_if_absent, only when it has no live value. True when written."""
        return await self._timed("kv_set", self._kv_set(key, value, ttl_secs, only_if_absent))

    async def kv_incr(self, key: str, amount: int = 1, *, ttl_secs: float | None = None) -> int:
        """Add to an integer counter (absent = 0) and return the new value; ttl_secs applies
        when the counter is created, so a window starts with its first hit."""
        return await self._timed("kv_incr", self._kv_incr(key, amount, ttl_secs))

    async def kv_cas(self, key: str, expected: bytes | None, value: bytes, *, ttl_secs: float | None = None) -> bool:
        """Set `key` to `value` only if its live value is `expected` (None: absent)."""
        return await self._timed("kv_cas", self._kv_cas(key, expected, value, ttl_secs))

    async def kv_delete(self, key: str) -> bool:
        return await self._timed("kv_delete", self._kv_delete(key))

    # --- helpers ---

    async def _timed(self, op: str, coro, misses: bool = True):
        if self.outage is not None:
            coro.close()
            self._observe(op, "unavailable", 0.0)
            raise StateError(self.outage)
        started = time.perf_counter()
        try:
            result = await coro
        except ChainTooDeep:
            self._observe(op, "too_deep", time.perf_counter() - started)
            raise
        except StateError:
            self._observe(op, "error", time.perf_counter() - started)
            raise
        except Exception as exc:
            self._observe(op, "error", time.perf_counter() - started)
            raise StateError(f"the {self.name} state backend failed ({type(exc).__name__})") from exc
        outcome = "miss" if misses and (result is None or result is False) else "ok"
        self._observe(op, outcome, time.perf_counter() - started)
        return result

    def _observe(self, op: str, outcome: str, seconds: float) -> None:
        if self.observer is not None:
            self.observer(op, outcome, seconds)

    @staticmethod
    def _expiry(ttl_secs: float | None) -> float | None:
        return time.time() + ttl_secs if ttl_secs else None

    # --- backend methods ---

    async def _ping(self) -> None:
        await self._kv_get("state:ping")

    async def _put(self, record: ResponseRecord, data: bytes, only_if_absent: bool) -> bool:
        raise NotImplementedError

    async def _get(self, tenant: str, response_id: str) -> ResponseRecord | None:
        raise NotImplementedError

    async def _chain(self, tenant: str, response_id: str, max_depth: int) -> list[ResponseRecord] | None:
        """Newest first. The default walks parent links with `_get`."""
        out: list[ResponseRecord] = []
        current: str | None = response_id
        while current is not None:
            if len(out) >= max_depth:
                raise ChainTooDeep(max_depth)
            record = await self._get(tenant, current)
            if record is None:
                return None
            out.append(record)
            current = record.parent_id
        return out

    async def _delete(self, tenant: str, response_id: str) -> bool:
        raise NotImplementedError

    async def _sweep(self) -> int:
        return 0

    async def _kv_get(self, key: str) -> bytes | None:
        raise NotImplementedError

    async def _kv_set(self, key: str, value: bytes, ttl_secs: float | None, only_if_absent: bool) -> bool:
        raise NotImplementedError

    async def _kv_incr(self, key: str, amount: int, ttl_secs: float | None) -> int:
        raise NotImplementedError

    async def _kv_cas(self, key: str, expected: bytes | None, value: bytes, ttl_secs: float | None) -> bool:
        raise NotImplementedError

    async def _kv_delete(self, key: str) -> bool:
        raise NotImplementedError

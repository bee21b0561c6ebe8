"""In-process state: demo mode and tests. Lost on restart; not shared between workers."""

from __future__ import annotations

import time

from proxai.state.base import ResponseRecord, StateStore


class MemoryStore(StateStore):
    name = "memory"

    def __init__(self, **limits):
        super().__init__(**limits)
        self._records: dict[tuple[str, str], tuple[bytes, float | None]] = {}  # (tenant, id) -> (record, expiry)
        self._kv: dict[str, tuple[bytes, float | None]] = {}

    async def _put(self, record: ResponseRecord, data: bytes, only_if_absent: bool) -> bool:
        key = (record.tenant, record.id)
        if only_if_absent and key in self._records:
            return False
        self._records[key] = (data, record.expires_at)
        return True

    async def _get(self, tenant: str, response_id: str) -> ResponseRecord | None:
        entry = self._records.get((tenant, response_id))
        return ResponseRecord.loads(entry[0]) if entry is not None else None

    async def _delete(self, tenant: str, response_id: str) -> bool:
        return self._records.pop((tenant, response_id), None) is not None

    async def _sweep(self) -> int:
        now = time.time()
        gone = [k for k, (_, exp) in self._records.items() if exp is not None and exp <= now]
        for k in gone:
            del self._records[k]
        dead = [k for k, (_, exp) in self._kv.items() if exp is not None and exp <= now]
        for k in dead:
            del self._kv[k]
        return len(gone) + len(dead)

    def _live(self, key: str) -> bytes | None:
        entry = self._kv.get(key)
        if entry is None:
            return None
        value, expires = entry
        if expires is not None and expires <= time.time():
            del self._kv[key]
            return None
        return value

    async def _kv_get(self, key: str) -> bytes | None:
        return self._live(key)

    async def _kv_set(self, key, value, ttl_secs, only_if_absent) -> bool:
        if only_if_absent and self._live(key) is not None:
            return False
        self._kv[key] = (bytes(value), self._expiry(ttl_secs))
        return True

    async def _kv_incr(self, key, amount, ttl_secs) -> int:
        current = self._live(key)
        if current is None:
            self._kv[key] = (str(amount).encode(), self._expiry(ttl_secs))
            return amount
        value = int(current) + amount
        self._kv[key] = (str(value).encode(), self._kv[key][1])
        return value

    async def _kv_cas(self, key, expected, value, ttl_secs) -> bool:
        if self._live(key) != expected:
            return False
        self._kv[key] = (bytes(value), self._expiry(ttl_secs))
        return True

    async def _kv_delete(self, key: str) -> bool:
        return self._live(key) is not None and self._kv.pop(key, None) is not None

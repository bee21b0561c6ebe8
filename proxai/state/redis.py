"""Shared state in Redis (`redis.asyncio`): several proxy instances, on several machines,
see the same conversations. Expiry is Redis's own (PEXPIRE); a chain walk is one Lua
script, one round trip however deep the conversation."""

from __future__ import annotations

from urllib.parse import urlsplit

from proxai.state.base import ChainTooDeep, ResponseRecord, StateError, StateStore

DEFAULT_URL = "redis://127.0.0.1:6379/0"
PREFIX = "proxai:"

# KEYS: none (every key shares the prefix given in ARGV). Returns {"ok", data...} newest
# first, {"missing"} or {"deep"}.
_CHAIN = """
local prefix, id, max = ARGV[1], ARGV[2], tonumber(ARGV[3])
local out = {"ok"}
while id do
  if #out > max then return {"deep"} end
  local rec = redis.call("HMGET", prefix .. id, "data", "parent")
  if not rec[1] then return {"missing"} end
  out[#out + 1] = rec[1]
  if rec[2] and rec[2] ~= "" then id = rec[2] else id = nil end
end
return out
"""

# KEYS[1]: the record; ARGV: data, parent id, expiry (unix ms, 0: none), only-if-absent flag.
_PUT = """
if ARGV[4] == "1" and redis.call("EXISTS", KEYS[1]) == 1 then return 0 end
redis.call("DEL", KEYS[1])
redis.call("HSET", KEYS[1], "data", ARGV[1], "parent", ARGV[2])
if tonumber(ARGV[3]) > 0 then redis.call("PEXPIREAT", KEYS[1], ARGV[3]) end
return 1
"""

_INCR = """
local existed = redis.call("EXISTS", KEYS[1])
local v = redis.call("INCRBY", KEYS[1], ARGV[1])
if existed == 0 and tonumber(ARGV[2]) > 0 then redis.call("PEXPIRE", KEYS[1], ARGV[2]) end
return v
"""

_CAS = """
local cur = redis.call("GET", KEYS[1])
if ARGV[1] == "0" then
  if cur then return 0 end
elseif cur ~= ARGV[2] then
  return 0
end
if tonumber(ARGV[4]) > 0 then redis.call("SET", KEYS[1], ARGV[3], "PX", ARGV[4]) else redis.call("SET", KEYS[1], ARGV[3]) end
return 1
"""


class RedisStore(StateStore):
    name = "redis"
    remote = True

    def __init__(self, url: str | None = None, **limits):
        super().__init__(**limits)
        self.url = url or DEFAULT_URL
        self._redis = None

    async def open(self) -> None:
        try:
            import redis.asyncio as aioredis
        except ImportError:
            raise StateError("state.backend redis needs the redis package: pip install 'proxai[redis]'") from None
        self._redis = aioredis.from_url(self.url, socket_connect_timeout=5, socket_timeout=10, health_check_interval=30)
        self._chain_script = self._redis.register_script(_CHAIN)
        self._put_script = self._redis.register_script(_PUT)
        self._incr_script = self._redis.register_script(_INCR)
        self._cas_script = self._redis.register_script(_CAS)
        try:
            await self._redis.ping()
        except Exception as exc:
            await self._redis.aclose()
            raise StateError(f"cannot reach the redis state backend ({type(exc).__name__})") from None

    async def close(self) -> None:
        if self._redis is not None:
            await self._redis.aclose()
            self._redis = None

    @property
    def location(self) -> str:
        parts = urlsplit(self.url)
        if parts.scheme == "unix":
            return parts.path
        try:
            return f"{parts.hostname}:{parts.port or 6379}"
        except ValueError:  # a malformed port: the config names it already
            return "?"

    async def _ping(self) -> None:
        if self._redis is None:
            raise StateError("the redis state backend is not open")
        await self._redis.ping()

    @staticmethod
    def _rkey(tenant: str, response_id: str) -> str:
        return f"{PREFIX}resp:{tenant}:{response_id}"

    @staticmethod
    def _kkey(key: str) -> str:
        return f"{PREFIX}kv:{key}"

    @staticmethod
    def _ms(ttl_secs: float | None) -> int:
        return max(1, int(ttl_secs * 1000)) if ttl_secs else 0

    async def _put(self, record: ResponseRecord, data: bytes, only_if_absent: bool) -> bool:
        key = self._rkey(record.tenant, record.id)
        expires = int(record.expires_at * 1000) if record.expires_at is not None else 0
        return bool(await self._put_script(keys=[key], args=[data, record.parent_id or "", expires, int(only_if_absent)]))

    async def _get(self, tenant: str, response_id: str) -> ResponseRecord | None:
        data = await self._redis.hget(self._rkey(tenant, response_id), "data")
        return ResponseRecord.loads(data) if data is not None else None

    async def _chain(self, tenant: str, response_id: str, max_depth: int) -> list[ResponseRecord] | None:
        result = await self._chain_script(args=[f"{PREFIX}resp:{tenant}:", response_id, max_depth])
        status = result[0].decode() if isinstance(result[0], bytes) else result[0]
        if status == "missing":
            return None
        if status == "deep":
            raise ChainTooDeep(max_depth)
        return [ResponseRecord.loads(data) for data in result[1:]]

    async def _delete(self, tenant: str, response_id: str) -> bool:
        return bool(await self._redis.delete(self._rkey(tenant, response_id)))

    async def _kv_get(self, key: str) -> bytes | None:
        return await self._redis.get(self._kkey(key))

    async def _kv_set(self, key, value, ttl_secs, only_if_absent) -> bool:
        ms = self._ms(ttl_secs)
        done = await self._redis.set(self._kkey(key), bytes(value), px=ms or None, nx=only_if_absent)
        return bool(done)

    async def _kv_incr(self, key, amount, ttl_secs) -> int:
        return int(await self._incr_script(keys=[self._kkey(key)], args=[amount, self._ms(ttl_secs)]))

    async def _kv_cas(self, key, expected, value, ttl_secs) -> bool:
        flag = "0" if expected is None else "1"
        args = [flag, bytes(expected or b""), bytes(value), self._ms(ttl_secs)]
        return bool(await self._cas_script(keys=[self._kkey(key)], args=args))

    async def _kv_delete(self, key: str) -> bool:
        return bool(await self._redis.delete(self._kkey(key)))

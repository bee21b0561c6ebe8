"""The state store interface, the same contract for every backend (memory, sqlite, a real
redis-server): records by tenant, chains, expiry, and the key-value part with TTL."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
import time

import pytest

from proxai.routing.config import StateConfig, load_dict
from proxai.http.errors import ConfigError
from proxai.state import ChainTooDeep, RecordTooLarge, ResponseRecord, StateError, create

BACKENDS = ["memory", "sqlite", "redis"]
PROVIDERS = {"p": {"protocol": "openai_chat_completions", "base_url": "http://127.0.0.1:9/v1", "api_key": "k"}}


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    url = None
    if request.param == "sqlite":
        url = str(tmp_path / "home" / "state.db")
    elif request.param == "redis":
        server = request.getfixturevalue("redis_server")
        server.flush()
        url = server.url
    return create(StateConfig(backend=request.param, url=url, ttl_secs=3600, max_chain_depth=5, max_record_bytes=4096))


def run(store, coro_fn):
    """Open, run, close on one fresh loop (redis connections belong to the loop that made them)."""
    async def go():
        await store.open()
        try:
            return await coro_fn()
        finally:
            await store.close()
    return asyncio.run(go())


def rec(rid: str, parent: str | None = None, tenant: str = "t1", **kw) -> ResponseRecord:
    return ResponseRecord(id=rid, tenant=tenant, parent_id=parent, client_protocol="openai_responses", provider="p",
                          model="m", input_items=[{"type": "message", "id": f"msg_{rid}"}],
                          response={"id": rid, "output": [{"type": "message", "id": f"out_{rid}"}]}, **kw)


def test_records_put_get_chain_delete(store):
    async def go():
        await store.put(rec("r1"))
        await store.put(rec("r2", "r1"))
        await store.put(rec("r3", "r2"))
        got = await store.get("t1", "r2")
        assert got.parent_id == "r1" and got.output_items == [{"type": "message", "id": "out_r2"}]
        assert got.expires_at is not None and got.expires_at > time.time() + 3000  # ttl_secs applied
        assert [r.id for r in await store.chain("t1", "r3")] == ["r1", "r2", "r3"]  # oldest first
        assert await store.list_items("t1", "r2") == [{"type": "message", "id": "msg_r2"}]
        assert await store.list_items("t2", "r2") is None
        assert await store.get("t2", "r2") is None  # another tenant sees nothing
        assert await store.chain("t2", "r3") is None
        assert await store.delete("t1", "r2") is True
        assert await store.delete("t1", "r2") is False
        assert await store.chain("t1", "r3") is None  # a broken link: the whole chain is unknown
    run(store, go)


def test_chain_depth_and_record_size_limits(store):
    async def go():
        parent = None
        for i in range(6):
            await store.put(rec(f"d{i}", parent))
            parent = f"d{i}"
        assert len(await store.chain("t1", "d4")) == 5
        with pytest.raises(ChainTooDeep):
            await store.chain("t1", "d5")
        big = rec("big")
        big.input_items = [{"type": "message", "text": "x" * 5000}]
        with pytest.raises(RecordTooLarge):
            await store.put(big)
        assert await store.get("t1", "big") is None
    run(store, go)


def test_expired_records_are_invisible_then_swept(store):
    async def go():
        await store.put(rec("old", expires_at=time.time() - 1))
        await store.put(rec("child", "old"))
        assert await store.get("t1", "old") is None
        assert await store.chain("t1", "child") is None
        removed = await store.sweep()
        if store.name != "redis":  # Redis expires keys itself
            assert removed == 1
    run(store, go)


def test_kv_set_get_ttl_incr_cas_delete(store):
    async def go():
        assert await store.kv_get("k") is None
        assert await store.kv_set("k", b"v1") is True
        assert await store.kv_set("k", b"v2", only_if_absent=True) is False
        assert await store.kv_get("k") == b"v1"
        assert await store.kv_cas("k", b"wrong", b"v3") is False
        assert await store.kv_cas("k", b"v1", b"v3") is True
        assert await store.kv_get("k") == b"v3"
        assert await store.kv_cas("new", None, b"n1") is True
        assert await store.kv_cas("new", None, b"n2") is False
        assert await store.kv_delete("k") is True
        assert await store.kv_delete("k") is False
        assert await store.kv_incr("c") == 1
        assert await store.kv_incr("c", 5) == 6
        assert await store.kv_set("short", b"x", ttl_secs=0.2) is True
        assert await store.kv_incr("window", ttl_secs=0.2) == 1
        await asyncio.sleep(0.4)
        assert await store.kv_get("short") is None
        assert await store.kv_set("short", b"y", only_if_absent=True) is True  # an expired key is absent
        assert await store.kv_incr("window", ttl_secs=0.2) == 1  # a new window
        assert await store.kv_incr("c") == 7  # no TTL: still there
    run(store, go)


def test_kv_incr_is_atomic_under_concurrency(store):
    async def go():
        await asyncio.gather(*[store.kv_incr("n") for _ in range(50)])
        assert await store.kv_incr("n", 0) == 50
    run(store, go)


def test_sqlite_file_is_owner_only_and_wal(tmp_path):
    path = tmp_path / "home" / "state.db"
    s = create(StateConfig(backend="sqlite", url=str(path)))

    async def go():
        await s.open()
        await s.put(rec("r1"))
        await s.close()
    asyncio.run(go())
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()


def test_sqlite_default_file_is_under_proxai_home(tmp_path, monkeypatch):
    monkeypatch.setenv("PROXAI_HOME", str(tmp_path / "ph"))
    s = create(StateConfig(backend="sqlite"))
    assert s.path == tmp_path / "ph" / "state.db"


def test_two_sqlite_stores_on_one_file_share_records(tmp_path):
    """What `--workers N` relies on: separate connections see each other's commits."""
    path = tmp_path / "state.db"
    a, b = (create(StateConfig(backend="sqlite", url=str(path))) for _ in range(2))

    async def go():
        await a.open()
        await b.open()
        await a.put(rec("r1"))
        assert (await b.get("t1", "r1")).id == "r1"
        await asyncio.gather(*[a.kv_incr("n") for _ in range(20)], *[b.kv_incr("n") for _ in range(20)])
        assert await b.kv_incr("n", 0) == 40
        await a.close()
        await b.close()
    asyncio.run(go())


def test_unreachable_redis_is_a_clear_startup_error():
    pytest.importorskip("redis")
    s = create(StateConfig(backend="redis", url="redis://127.0.0.1:1/0"))
    with pytest.raises(StateError, match="cannot reach the redis state backend"):
        asyncio.run(s.open())


def test_none_backend_has_no_store():
    assert create(StateConfig(backend="none")) is None


@pytest.mark.parametrize("state, path, message", [
    ({"backend": "postgres"}, "state.backend", "must be one of"),
    ({"ttl_secs": 0}, "state.ttl_secs", ""),
    ({"max_chain_depth": 0}, "state.max_chain_depth", ""),
    ({"max_record_bytes": 10}, "state.max_record_bytes", ""),
    ({"colour": "red"}, "state.colour", "unknown key"),
    ({"backend": "redis", "url": "http://x"}, "state.url", "redis://"),
])
def test_state_config_is_validated_with_paths(state, path, message):
    with pytest.raises(ConfigError) as err:
        load_dict({"providers": PROVIDERS, "state": state})
    assert any(p == path and message in m for p, m in err.value.problems), err.value.problems


def test_state_config_defaults_and_values():
    assert load_dict({"providers": PROVIDERS}).state == StateConfig()
    cfg = load_dict({"providers": PROVIDERS, "state": {"backend": "redis", "url": "redis://h:1/2", "ttl_secs": 60,
                                                "max_chain_depth": 10, "max_record_bytes": 2048}})
    assert cfg.state == StateConfig("redis", "redis://h:1/2", 60, 10, 2048)

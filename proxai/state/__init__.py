"""Server-side state behind one async interface (see base.py), chosen by `state.backend`."""

from __future__ import annotations

from proxai.state.base import ChainTooDeep, RecordTooLarge, ResponseRecord, StateError, StateStore

BACKENDS = ("sqlite", "memory", "redis", "none")

__all__ = ["BACKENDS", "ChainTooDeep", "RecordTooLarge", "ResponseRecord", "StateError", "StateStore", "create"]


def create(settings) -> StateStore | None:
    """The store for a StateConfig (not yet opened); None for backend `none`."""
    limits = dict(ttl_secs=settings.ttl_secs, max_chain_depth=settings.max_chain_depth, max_record_bytes=settings.max_record_bytes)
    if settings.backend == "none":
        return None
    if settings.backend == "memory":
        from proxai.state.memory import MemoryStore

        return MemoryStore(**limits)
    if settings.backend == "sqlite":
        from proxai.state.sqlite import SqliteStore, path_from_url

        return SqliteStore(path_from_url(settings.url), **limits)
    if settings.backend == "redis":
        from proxai.state.redis import RedisStore

        return RedisStore(settings.url, **limits)
    raise ValueError(f"unknown state backend {settings.backend!r}")

"""A state store that is down, in-process: startup goes on for a remote store (and stops for
a local one), reconnects back off 0.5 s doubling to 30 s, the log and the gauge change once
per outage, operations fail at once with StateError while it lasts, and a request needing
the tenant key before the store was ever reached is a 503, not a 500. Readiness checks that
are not required show as degraded."""

from __future__ import annotations

import asyncio
import logging

import pytest
from prometheus_client import CollectorRegistry

from proxai.operations.readiness import Readiness
from proxai.endpoints.responses_state import ResponsesState, StateUnavailable
from proxai.state import StateError
from proxai.state.memory import MemoryStore


class FlakyStore(MemoryStore):
    remote = True

    def __init__(self):
        super().__init__()
        self.reachable = False

    async def open(self) -> None:
        if not self.reachable:
            raise StateError("cannot reach the flaky state backend (ConnectionError)")

    async def _ping(self) -> None:
        if not self.reachable:
            raise ConnectionError("refused")


class LocalBroken(MemoryStore):
    async def open(self) -> None:
        raise StateError("cannot open the local state file")


class Request:
    headers = {"Authorization": "Bearer k"}


async def until(predicate) -> None:
    for _ in range(10000):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("never happened")


def gauge(registry) -> float:
    return registry.get_sample_value("proxai_state_store_up", {"backend": "memory"})


def lines(caplog, level: int, words: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "proxai.state" and r.levelno == level and words in r.getMessage()]


def test_an_outage_backs_off_to_the_cap_and_logs_once_each_way(caplog):
    caplog.set_level(logging.INFO, logger="proxai.state")

    async def scenario():
        store = FlakyStore()
        registry = CollectorRegistry()
        state = ResponsesState(store, registry)
        delays: list[float] = []

        async def sleep(delay):
            delays.append(delay)
            if len(delays) == 9:
                store.reachable = True
            await asyncio.sleep(0)

        state._sleep = sleep
        await state.start()  # does not raise
        assert state.up is False and gauge(registry) == 0
        assert "cannot reach" in await state.ready()
        with pytest.raises(StateUnavailable):
            state.tenant(Request())
        with pytest.raises(StateError, match="cannot reach"):
            await store.kv_get("anything")  # at once: the store is known to be down
        await until(lambda: state.up)
        assert delays == [0.5, 1, 2, 4, 8, 16, 30, 30, 30]
        assert gauge(registry) == 1 and await state.ready() is None
        assert len(state.tenant(Request())) == 32
        key = state._key

        store.reachable = False
        state._wake.set()  # as a failed operation does
        await until(lambda: state.up is False)
        assert gauge(registry) == 0
        store.outage = None
        await store.kv_delete("state:tenant-key")  # lost, as by a Redis restarted without persistence
        store.outage = state.reason
        store.reachable = True
        await until(lambda: state.up)
        assert state._key == key  # the key this process held is offered back: tenants keep their records
        await state.stop()

    asyncio.run(scenario())
    assert len(lines(caplog, logging.WARNING, "is down")) == 2
    assert len(lines(caplog, logging.INFO, "is back")) == 2


def test_a_local_store_that_cannot_open_still_stops_startup():
    async def scenario():
        state = ResponsesState(LocalBroken(), CollectorRegistry())
        with pytest.raises(StateError, match="cannot open"):
            await state.start()

    asyncio.run(scenario())


def test_a_turn_that_neither_continues_nor_is_stored_needs_no_store():
    async def scenario():
        state = ResponsesState(FlakyStore(), CollectorRegistry())
        await state.start()
        turn = await state.begin(Request(), {"model": "m", "input": "hi", "store": False}, "chat")
        assert not turn.store
        with pytest.raises(StateUnavailable):
            await state.begin(Request(), {"model": "m", "input": "hi"}, "chat")
        with pytest.raises(StateUnavailable):
            await state.begin(Request(), {"model": "m", "input": "hi", "store": False, "previous_response_id": "resp_1"}, "chat")
        await state.stop()

    asyncio.run(scenario())


def test_an_optional_check_degrades_without_making_the_pod_unready():
    readiness = Readiness()
    readiness.add("rules", lambda: None)
    readiness.add("state_store", lambda: "redis unreachable", required=False)
    assert asyncio.run(readiness.report()) == (True, {"rules": "ok", "state_store": "degraded: redis unreachable"})
    readiness.add("state_store", lambda: "redis unreachable")  # required again
    assert asyncio.run(readiness.report()) == (False, {"rules": "ok", "state_store": "redis unreachable"})

"""bench.idle on a tiny budget: streams held open and idle through the real proxy, then closed."""

from __future__ import annotations

import asyncio

import pytest

from bench import idle

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

N = 50


def test_idle_streams_are_held_open_measured_and_released():
    opts = idle.options(["--counts", str(N), "--cycles", "2", "--silent"])
    result = asyncio.run(idle.run(opts, log=lambda _msg: None))

    assert [r["pair"] for r in result["runs"]] == ["chat->chat", "chat->anthropic"]
    for r in result["runs"]:
        assert not r.get("error"), r.get("error")
        assert r["workers"] == 1 and r["alive"], r["pair"]
        # the limits the bench sets leave room for every stream (no 503, no evicted connection)
        assert r["limits"]["max_concurrent_requests"] >= N and r["limits"]["max_connections"] >= N
        for c in r["cycles"]:
            assert c["opened"] == N and c["errors"] == 0, (r["pair"], c["first_error"])
            assert c["first_event"] == N, r["pair"]  # every stream had a well-formed first event
            # while held: every client connection still open and the proxy holding it and its upstream
            # socket (one stream may reuse the pooled upstream connection of the health check before)
            assert c["still_open_at_health"] == N, r["pair"]
            assert c["held"]["fds"] >= r["before"]["fds"] + idle.FD_PER_STREAM * N - 1, r["pair"]
            assert c["healthy_while_held"]["ok"], c["healthy_while_held"]
            # closed: the proxy let go of both sockets of every stream and still serves
            assert c["fds_after_close"] <= r["before"]["fds"] + 4, r["pair"]
            assert c["healthy_after_close"]["ok"], c["healthy_after_close"]
        assert idle.per_stream(r) is not None and idle.per_stream(r, 1) is not None

    md = idle.markdown(result)
    for pair in ("chat->chat", "chat->anthropic"):
        (row,) = [line for line in md.splitlines() if line.startswith(f"| {pair} | {N} |")]
        cells = [c.strip() for c in row.split("|")]
        assert cells[4] == f"{N}/{N}" and float(cells[7]) == pytest.approx(idle.per_stream(
            next(r for r in result["runs"] if r["pair"] == pair)), abs=0.051)
    assert "KiB/stream RSS" in md

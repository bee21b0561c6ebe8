"""Load: hundreds of concurrent mixed requests over every pair, on loopback only, bounded in
requests and time. Some upstreams fail, some streams break, some clients walk away.

Every request must end with a complete response or a protocol-correct error; afterwards
the in-flight count is back to zero, and across rounds memory stays flat and no file
descriptor leaks. PROXAI_LOAD_REQUESTS / PROXAI_LOAD_ROUNDS scale it up by hand.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import random
import resource
import time

import aiohttp
import pytest

from proxai.mock import Error, Stream, Text, ToolCall, Turn, encode_event, render
from test_stream_integrity import ANTHROPIC, PATH, PROTOCOLS, SHORT, outcome, request_body

pytestmark = pytest.mark.load

REQUESTS = int(os.environ.get("PROXAI_LOAD_REQUESTS", "300"))
ROUNDS = int(os.environ.get("PROXAI_LOAD_ROUNDS", "4"))
TIME_LIMIT = 90.0  # seconds for the whole test: a hang guard, not a speed target (bench/ measures speed)

TEXT = Turn([Text("load test reply", chunks=["load ", "test ", "reply"])])
TOOL = Turn([ToolCall("call_1", "f", '{"a": 1}', chunks=['{"a"', ": 1}"])])
# behaviour -> (what the mock does, what the client must see)
BEHAVIOURS = ["ok", "ok", "ok", "tool", "ok-slow", "err429", "err500", "cut", "reset", "disconnect"]


def mock_reply(rec):
    """Decide from the upstream model name (the route keeps it), since replies are consumed
    in arrival order by concurrent requests."""
    behaviour = (rec.body or {}).get("model", "ok")
    if behaviour == "err429":
        return Error(429, headers={"retry-after": "3"}, message="slow down")
    if behaviour == "err500":
        return Error(500, "<html>boom</html>", content_type="text/html")
    if behaviour == "tool":
        return TOOL
    if behaviour == "cut":
        return Turn(TEXT.blocks, cut_after=3)
    if behaviour == "reset":
        blobs = [encode_event(n, d) for n, d in render(rec.protocol, TEXT, rec.body or {})]
        return Stream(raw=[*blobs[:3], blobs[3][:7], blobs[3][7:]], cut_after=4, abort=True)
    if behaviour in ("ok-slow", "disconnect"):
        return Turn(TEXT.blocks, delay_secs=0.05)
    return TEXT


def check(client: str, behaviour: str, stream: bool, status: int, ctype: str, body: bytes) -> None:
    if behaviour in ("err429", "err500"):
        assert status == (429 if behaviour == "err429" else 500), (behaviour, status, body[:200])
        doc = json.loads(body)
        if client == ANTHROPIC:
            assert doc["type"] == "error" and doc["error"]["message"]
        else:
            assert doc["error"]["message"] and doc["error"]["status"] == status
        return
    if not stream:
        assert status == 200, (behaviour, status, body[:200])
        json.loads(body)
        return
    assert status == 200 and ctype.startswith("text/event-stream"), (behaviour, status, body[:200])
    expected = "error" if behaviour in ("cut", "reset") else "complete"
    assert outcome(client, body) == expected, (client, behaviour, body[-300:])


async def one(session: aiohttp.ClientSession, url: str, client: str, provider: str, behaviour: str,
              stream: bool) -> str:
    body = request_body(client, provider, stream=stream)
    body["model"] = f"{SHORT[provider]}/{behaviour}"
    async with session.post(url + PATH[client], json=body) as resp:
        if behaviour == "disconnect" and stream:
            await resp.content.readany()  # the first bytes, then walk away mid-stream
            resp.close()
            return "disconnected"
        data = await resp.read()
        check(client, behaviour, stream, resp.status, resp.headers.get("Content-Type", ""), data)
        return "checked"


async def round_of(url: str, rng: random.Random) -> list:
    jobs = []
    for _ in range(REQUESTS):
        behaviour = rng.choice(BEHAVIOURS)
        stream = rng.random() < 0.7 or behaviour in ("disconnect", "cut", "reset")
        jobs.append((rng.choice(PROTOCOLS), rng.choice(PROTOCOLS), behaviour, stream))
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=20)) as session:
        return await asyncio.gather(*(one(session, url, *job) for job in jobs), return_exceptions=True)


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _settled_fds(proxy_handle) -> int:
    """Open descriptors once closing sockets have gone, less the idle keep-alive connections the
    proxy pools toward the mock (two descriptors each, both ends live in this process)."""
    last, stable, deadline = -1, 0, time.monotonic() + 3
    while stable < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
        now = _fds()
        stable = stable + 1 if now == last else 0
        last = now
    connector = proxy_handle.proxy.transport.session.connector
    pooled = sum(len(conns) for conns in getattr(connector, "_conns", {}).values())
    return last - 2 * pooled


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _wait_idle(proxy_handle, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while proxy_handle.proxy.active and time.monotonic() < deadline:
        time.sleep(0.01)


def test_concurrent_mixed_load_every_request_ends_cleanly_without_leaks(start_proxy, harness, mock):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = REQUESTS * 6 + 256  # client, proxy and mock ends of two connections per request, all in this process
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(needed, hard), hard))
    cfg = harness.default_config()
    cfg["server"] = {"max_concurrent_requests": REQUESTS * 2}
    p = start_proxy(cfg)
    started = time.monotonic()
    rng = random.Random(1234)
    fds, rss = [], []
    for i in range(ROUNDS):
        mock.reset()
        mock.enqueue(*[mock_reply] * REQUESTS)
        results = asyncio.run(round_of(p.url, rng))
        failures = [r for r in results if isinstance(r, BaseException)]
        assert not failures, f"{len(failures)} requests ended badly, first: {failures[0]!r}"
        assert results.count("checked") > REQUESTS * 0.8
        _wait_idle(p)
        assert p.proxy.active == 0, "in-flight count did not return to zero: a slot leaked"
        gc.collect()
        fds.append(_settled_fds(p))
        rss.append(_rss_kib())
        assert time.monotonic() - started < TIME_LIMIT, f"load test over its time budget after round {i + 1}"
    # The first round warms pools and caches; after that nothing may grow round over round.
    assert max(fds[1:]) <= fds[0] + 4, f"file descriptors grew: {fds}"
    growth_mib = (rss[-1] - rss[1]) / 1024
    assert growth_mib < 16, f"memory grew by {growth_mib:.1f} MiB across rounds: {rss}"

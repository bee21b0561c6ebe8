"""The load driver: its own process, closed-loop HTTP load over keep-alive connections.

    python -m bench.driver      (reads one JSON job per line on stdin, answers one JSON line each)

A job: {"url", "headers", "body" (the request body, a string), "stream", "terminal" (bytes a
complete stream contains), "concurrency", "seconds", "max_requests"}. `concurrency`
workers each send the next request as soon as the previous one finished, until `seconds`
passed or `max_requests` were sent. The answer has counts, requests/s, latency percentiles
(ms), time to first body byte, and the driver's own CPU time per request.
"""

from __future__ import annotations

import asyncio
import sys
import time

import aiohttp
import orjson

TAIL = 256
GIVE_UP_AFTER = 20  # failures in a row with no success: the target is broken, stop the case


def percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    k = (len(sorted_values) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def summary(values: list[float]) -> dict | None:
    if not values:
        return None
    values = sorted(values)
    return {
        "p50": percentile(values, 0.5) * 1000,
        "p90": percentile(values, 0.9) * 1000,
        "p99": percentile(values, 0.99) * 1000,
        "mean": sum(values) / len(values) * 1000,
        "max": values[-1] * 1000,
    }


class Case:
    def __init__(self, job: dict):
        self.url = job["url"]
        self.headers = job.get("headers") or {}
        self.body = job["body"].encode()
        self.stream = bool(job.get("stream"))
        self.terminal = (job.get("terminal") or "").encode()
        self.concurrency = max(1, int(job.get("concurrency", 1)))
        self.seconds = float(job.get("seconds", 1.0))
        self.max_requests = int(job.get("max_requests") or 0) or None
        self.latency: list[float] = []
        self.ttfb: list[float] = []
        self.errors = 0
        self.first_error: str | None = None
        self.sent = 0
        self.failing_run = 0
        self.stop = False

    def fail(self, reason: str) -> None:
        self.errors += 1
        self.failing_run += 1
        if self.first_error is None:
            self.first_error = reason
        if self.failing_run >= GIVE_UP_AFTER and not self.latency:
            self.stop = True

    async def one(self, session: aiohttp.ClientSession) -> None:
        start = time.perf_counter()
        try:
            async with session.post(self.url, data=self.body, headers=self.headers) as resp:
                first = await resp.content.readany()
                ttfb = time.perf_counter() - start
                # The terminal marker may straddle two reads: search each read with the tail before it.
                width = len(self.terminal)
                seen = bool(width) and self.terminal in first
                tail = first[-TAIL:]
                while True:
                    chunk = await resp.content.readany()
                    if not chunk:
                        break
                    if width and not seen:
                        seen = self.terminal in tail[-width:] + chunk
                    tail = (tail + chunk)[-TAIL:]
                end = time.perf_counter()
                if resp.status != 200:
                    self.fail(f"HTTP {resp.status}: {first[:300].decode('utf-8', 'replace')}")
                    return
                if self.stream and width and not seen:
                    self.fail(f"incomplete stream, tail: {tail[-160:].decode('utf-8', 'replace')}")
                    return
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            self.fail(f"{type(exc).__name__}: {exc}")
            return
        self.failing_run = 0
        self.latency.append(end - start)
        self.ttfb.append(ttfb)

    async def worker(self, session: aiohttp.ClientSession, deadline: float) -> None:
        while not self.stop and time.perf_counter() < deadline:
            if self.max_requests is not None and self.sent >= self.max_requests:
                return
            self.sent += 1
            await self.one(session)


async def run(job: dict, sessions: dict) -> dict:
    case = Case(job)
    session = sessions.get(case.concurrency)
    if session is None:
        connector = aiohttp.TCPConnector(limit=case.concurrency, force_close=False, keepalive_timeout=60)
        session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60),
                                        skip_auto_headers=("User-Agent",))
        sessions[case.concurrency] = session
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    deadline = t0 + case.seconds
    await asyncio.gather(*(case.worker(session, deadline) for _ in range(case.concurrency)))
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    done = len(case.latency)
    return {
        "id": job.get("id"),
        "requests": done,
        "errors": case.errors,
        "first_error": case.first_error,
        "elapsed": elapsed,
        "rps": done / elapsed if elapsed > 0 else 0.0,
        "latency_ms": summary(case.latency),
        "ttfb_ms": summary(case.ttfb),
        "driver_cpu_ms_per_req": cpu / max(1, done + case.errors) * 1000,
    }


async def serve_stdin() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=16 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    # One session per concurrency level: its pool is sized for it and stays warm across cases.
    sessions: dict[int, aiohttp.ClientSession] = {}
    try:
        while True:
            line = await reader.readline()
            if not line:
                break
            if not line.strip():
                continue
            job = orjson.loads(line)
            try:
                result = await run(job, sessions)
            except Exception as exc:  # a broken job must not kill the driver
                result = {"id": job.get("id"), "requests": 0, "errors": 1, "first_error": f"driver: {exc!r}"}
            sys.stdout.write(orjson.dumps(result).decode() + "\n")
            sys.stdout.flush()
    finally:
        for session in sessions.values():
            await session.close()


def main() -> int:
    asyncio.run(serve_stdin())
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`python -m bench.faults`: resilient routing under sustained load while providers fail.

A Chat client sends a steady rate of requests (half streamed) to the proxy (its own
process). With `--scenario chain` (the default) the route is a pool and two fallbacks:

    east  (Chat, 4 keys)  ->  west (Chat, 2 keys)  ->  spare (Responses, 1 key: translated)

With `--scenario balanced` the route balances two deployments round robin, then falls
back to the spare:

    providers: [east (Chat, 4 keys), west (Chat, 2 keys)]  ->  spare (Responses, 1 key)

and the mock deployments (in this process) fail on a timeline, as fractions of the run:

* east's keys run out of quota one after another (every request on the key answers 429
  with `Retry-After: 1` during its window): k1 0.10-0.30, k2 0.20-0.45, k3 0.55-0.75,
  k4 0.60-0.80;
* east dies (every request answers 503) from 0.40 to 0.65, then comes back;
* while it is down, both of west's keys run out too (0.50-0.58): spare, a Responses
  provider, serves the Chat client through translation;
* throughout, 2 % of streams are cut after their first event (the commit point passed:
  these must reach the client as an in-stream error, never be retried).

Every request carries a marker in its prompt, so the upstreams know which client request
each attempt belongs to. Reported: the success rate, the latency of requests that needed
a retry against those that did not, and the number of requests an upstream saw again
after one of their attempts had already sent a byte (must be 0).

See bench/README.md ("Fault benchmark").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import aiohttp
import yaml
from aiohttp import web

from bench import payloads
from bench.processes import PYTHON, ROOT, _env, free_port, stop
from bench.upstream import build

RESULTS = Path(__file__).resolve().parent / "results"
MARK = re.compile(rb"\[req (\d+)\]")
SSE = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
JSON = {"Content-Type": "application/json"}

QUOTA_WINDOWS = {"east-k1": (0.10, 0.30), "east-k2": (0.20, 0.45), "east-k3": (0.55, 0.75), "east-k4": (0.60, 0.80),
                 "west-k1": (0.50, 0.58), "west-k2": (0.50, 0.58)}
EAST_DEAD = (0.40, 0.65)
CUT_SHARE = 0.02
LOG_LEVEL = "warning"


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


class Deployments:
    """The three mock deployments and what each request's attempts did."""

    def __init__(self, duration: float, latency_s: float):
        self.duration = duration
        self.latency_s = latency_s
        self.started = time.monotonic()
        self.canned = build(payloads.DEFAULT_DELTAS, 1)
        # marker -> (deployment, key, outcome, phase of the run)
        self.attempts: dict[int, list[tuple[str, str, str, float]]] = defaultdict(list)
        self.committed: set[int] = set()  # markers whose attempt sent a stream byte
        self.after_commit: set[int] = set()  # markers seen again after a byte went out: must stay empty
        self._cut_every = round(1 / CUT_SHARE)
        self._streams = 0

    def phase(self) -> float:
        return (time.monotonic() - self.started) / self.duration

    def app(self, name: str) -> web.Application:
        async def handle(request: web.Request) -> web.StreamResponse:
            return await self.handle(name, request)

        app = web.Application()
        app.router.add_post("/{tail:.*}", handle)
        return app

    async def handle(self, name: str, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        m = MARK.search(raw)
        marker = int(m.group(1)) if m else -1
        if marker in self.committed:
            self.after_commit.add(marker)
        key = request.headers.get("Authorization", "")[7:]
        now = self.phase()
        if name == "east" and EAST_DEAD[0] <= now < EAST_DEAD[1]:
            self.attempts[marker].append((name, key, "503", now))
            return web.Response(status=503, body=b'{"error":{"message":"unavailable","type":"server_error"}}', headers=JSON)
        window = QUOTA_WINDOWS.get(key)
        if window and window[0] <= now < window[1]:
            self.attempts[marker].append((name, key, "429", now))
            return web.Response(status=429, headers={**JSON, "Retry-After": "1"},
                                body=b'{"error":{"message":"quota exceeded","type":"rate_limit_error"}}')
        await asyncio.sleep(self.latency_s)  # the provider's own time to first byte
        body, writes = self.canned[request.path]
        if b'"stream":true' not in raw and b'"stream": true' not in raw:
            self.attempts[marker].append((name, key, "ok", now))
            return web.Response(body=body, headers=JSON)
        self._streams += 1
        cut = self._streams % self._cut_every == 0
        resp = web.StreamResponse(headers=SSE)
        await resp.prepare(request)
        self.attempts[marker].append((name, key, "cut" if cut else "ok", now))
        try:
            for i, blob in enumerate(writes):
                await resp.write(blob)
                if i == 0:
                    self.committed.add(marker)
                if cut and i == 2:
                    request.transport.close()  # the provider dies mid-stream
                    return resp
            await resp.write_eof()
        except ConnectionError:
            pass
        return resp


SCENARIOS = {
    "chain": {"provider": "east", "fallbacks": ["west", "spare"]},
    "balanced": {"providers": ["east", "west"], "strategy": "round_robin", "fallbacks": ["spare"]},
}


def proxy_config(urls: dict[str, str], port: int, scenario: str = "chain") -> dict:
    def chat(url, keys):
        return {"protocol": payloads.CHAT, "base_url": url + "/v1", "api_keys": keys, "read_idle_timeout_secs": 10}

    return {
        "server": {"host": "127.0.0.1", "port": port, "max_concurrent_requests": 4096},
        "providers": {
            "east": chat(urls["east"], ["east-k1", "east-k2", "east-k3", "east-k4"]),
            "west": chat(urls["west"], ["west-k1", "west-k2"]),
            "spare": {"protocol": payloads.RESPONSES, "base_url": urls["spare"] + "/v1", "api_key": "spare-k1"},
        },
        "routing": {"routes": [{"name": "pooled", "model_pattern": "bench-model", **SCENARIOS[scenario]}]},
        "resilience": {"max_attempts": 4, "breaker": {"failures": 5, "window_secs": 5, "open_secs": 2}},
        "state": {"backend": "memory"},
        "logging": {"level": LOG_LEVEL},
    }


async def client(url: str, rate: float, duration: float, concurrency: int) -> list[dict]:
    results: list[dict] = []
    gate = asyncio.Semaphore(concurrency)

    async def one(session: aiohttp.ClientSession, n: int) -> None:
        stream = n % 2 == 1
        body = payloads.request(payloads.CHAT, stream)
        body["messages"][-1]["content"] = f"[req {n}] " + str(body["messages"][-1]["content"])
        started = time.perf_counter()
        status, complete, ttfb = 0, False, None
        try:
            async with session.post(url + "/v1/chat/completions", json=body,
                                    headers={"Authorization": "Bearer bench-client"}) as resp:
                status = resp.status
                data = b""
                async for chunk in resp.content.iter_any():
                    if ttfb is None:
                        ttfb = time.perf_counter() - started
                    data += chunk
                complete = status == 200 and (b"[DONE]" in data if stream else b'"choices"' in data)
                if stream and b'"error"' in data:
                    complete = False
        except aiohttp.ClientError:
            pass
        finally:
            gate.release()
        results.append({"n": n, "stream": stream, "status": status, "complete": complete,
                        "latency": time.perf_counter() - started, "ttfb": ttfb})

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        tasks = []
        start = time.perf_counter()
        n = 0
        while time.perf_counter() - start < duration:
            await gate.acquire()
            tasks.append(asyncio.ensure_future(one(session, n)))
            n += 1
            next_at = start + n / rate
            delay = next_at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        await asyncio.gather(*tasks)
    return results


async def run(duration: float, rate: float, concurrency: int, latency_ms: float, workdir: Path,
              scenario: str = "chain") -> dict:
    deps = Deployments(duration, latency_ms / 1000)
    runners, urls = [], {}
    for name in ("east", "west", "spare"):
        runner = web.AppRunner(deps.app(name), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        urls[name] = f"http://127.0.0.1:{runner.addresses[0][1]}"
    port = free_port()
    config_file = workdir / "faults.yaml"
    config_file.write_text(yaml.safe_dump(proxy_config(urls, port, scenario), sort_keys=False))
    log = open(workdir / "proxy.log", "wb")
    proc = subprocess.Popen([PYTHON, str(ROOT / "server.py"), "--config", str(config_file)], cwd=ROOT, env=_env(),
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as s:
            for _ in range(300):
                try:
                    async with s.get(url + "/healthz") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.05)
            else:
                raise RuntimeError("the proxy did not start: " + (workdir / "proxy.log").read_text()[-2000:])
        deps.started = time.monotonic()
        results = await client(url, rate, duration, concurrency)
        async with aiohttp.ClientSession() as s:
            async with s.get(url + "/metrics") as r:
                metrics = await r.text()
    finally:
        stop(proc)
        log.close()
        for runner in runners:
            await runner.cleanup()
    return summarise(results, deps, metrics)


def summarise(results: list[dict], deps: Deployments, metrics: str) -> dict:
    cut = {n for n, tries in deps.attempts.items() if tries and tries[-1][2] == "cut"}
    retried = {n for n, tries in deps.attempts.items() if len(tries) > 1}
    ok = [r for r in results if r["complete"]]
    plain = [r["latency"] * 1000 for r in ok if r["n"] not in retried]
    again = [r["latency"] * 1000 for r in ok if r["n"] in retried]
    served_by: dict[str, int] = defaultdict(int)
    served_while_east_dead: dict[str, int] = defaultdict(int)
    for n, tries in deps.attempts.items():
        if tries and tries[-1][2] in ("ok", "cut"):
            served_by[tries[-1][0]] += 1
            if EAST_DEAD[0] <= tries[-1][3] < EAST_DEAD[1]:
                served_while_east_dead[tries[-1][0]] += 1
    east_503s = sum(1 for tries in deps.attempts.values() for t in tries if t[2] == "503")
    statuses: dict[str, int] = defaultdict(int)
    for r in results:
        statuses[str(r["status"])] += 1
    breaker_opens = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                        if line.startswith('proxai_breaker_transitions_total{provider="east",state="open"}'))
    total = len(results)
    failed_not_cut = [r for r in results if not r["complete"] and r["n"] not in cut]
    return {
        "requests": total,
        "succeeded": len(ok),
        "success_rate": round(len(ok) / total, 4) if total else None,
        "success_rate_excluding_cut_streams": round(len(ok) / (total - len(cut)), 4) if total > len(cut) else None,
        "cut_after_first_byte": len(cut),
        "failed_other": len(failed_not_cut),
        "client_statuses": dict(statuses),
        "retried_requests": len(retried),
        "upstream_attempts": sum(len(t) for t in deps.attempts.values()),
        "retried_after_first_byte": len(deps.after_commit),
        "served_by": dict(served_by),
        "served_while_east_dead": dict(served_while_east_dead),
        "east_503_attempts": east_503s,
        "east_breaker_opened": breaker_opens,
        "latency_ms_not_retried": {"p50": pct(plain, 0.5), "p99": pct(plain, 0.99)},
        "latency_ms_retried": {"p50": pct(again, 0.5), "p99": pct(again, 0.99)},
        "added_p50_ms": (pct(again, 0.5) - pct(plain, 0.5)) if again and plain else None,
    }


def table(s: dict) -> str:
    def ms(v):
        return "-" if v is None else f"{v:.1f}"

    rows = [
        ("requests", s["requests"]),
        ("succeeded", f"{s['succeeded']} ({s['success_rate']:.2%})"),
        ("succeeded, streams cut after their first byte excluded", f"{s['success_rate_excluding_cut_streams']:.2%}"),
        ("streams cut after their first byte (in-stream error, not retried)", s["cut_after_first_byte"]),
        ("other failures reaching the client", s["failed_other"]),
        ("client statuses", ", ".join(f"{k}: {v}" for k, v in sorted(s["client_statuses"].items()))),
        ("requests that needed a retry or fallback", s["retried_requests"]),
        ("upstream attempts", s["upstream_attempts"]),
        ("requests retried after their first byte", s["retried_after_first_byte"]),
        ("served by", ", ".join(f"{k}: {v}" for k, v in sorted(s["served_by"].items()))),
        ("served while east was dead", ", ".join(f"{k}: {v}" for k, v in sorted(s["served_while_east_dead"].items()))),
        ("attempts east answered 503 (before its breaker opened)", s["east_503_attempts"]),
        ("east breaker opened", f"{s['east_breaker_opened']:g} time(s)"),
        ("latency p50 / p99, not retried (ms)", f"{ms(s['latency_ms_not_retried']['p50'])} / {ms(s['latency_ms_not_retried']['p99'])}"),
        ("latency p50 / p99, retried (ms)", f"{ms(s['latency_ms_retried']['p50'])} / {ms(s['latency_ms_retried']['p99'])}"),
        ("added p50 latency of a retried request (ms)", ms(s["added_p50_ms"])),
    ]
    return "| measure | value |\n|---|---|\n" + "\n".join(f"| {a} | {b} |" for a, b in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="duration of the run (default 30)")
    parser.add_argument("--rate", type=float, default=60.0, help="requests started per second (default 60)")
    parser.add_argument("--concurrency", type=int, default=64, help="at most this many in flight (default 64)")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="each deployment's time to first byte (default 20)")
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="chain",
                        help="chain: east -> west -> spare; balanced: east and west round robin, then spare")
    parser.add_argument("--json", help="where to write the results (default bench/results/faults-<time>.json)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        summary = asyncio.run(run(args.seconds, args.rate, args.concurrency, args.latency_ms, Path(tmp), args.scenario))
    out = Path(args.json) if args.json else RESULTS / f"faults-{args.scenario}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "summary": summary}, indent=2))
    print(table(summary))
    print(f"\nresults: {out}", file=sys.stderr)
    return 0 if summary["retried_after_first_byte"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

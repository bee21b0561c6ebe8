"""The published gateway method: a mock upstream answering after 20 ms, added p50 / p99 latency at
concurrency 1 and sustained req/s, CPU pinned, for 1 and 2 workers, the floor relay alongside.

Its own upstream (`--upstream-latency-ms`), proxies and floors, so the main rounds keep theirs.
"""

from __future__ import annotations

from pathlib import Path

from bench import placement
from bench.payloads import CHAT, PROTOCOLS, SHORT
from bench.processes import Floor, Proxy, Upstream

PAIRS = ("chat->chat", "chat->anthropic")
WORKERS = (1, 2)


def _targets(target_cls) -> list:
    chosen = [p for p in PROTOCOLS if f"{SHORT[CHAT]}->{SHORT[p]}" in PAIRS]
    return [target_cls("direct", CHAT, CHAT, False), target_cls("floor", CHAT, CHAT, False)] + \
        [target_cls("proxy", CHAT, p, False) for p in chosen]


def run(driver, target_cls, rotate, workdir: Path, opts, log) -> dict:
    upstream = Upstream(opts.deltas, cpus=placement.choose(opts.pin).load, latency_ms=opts.upstream_latency_ms)
    servers: dict[int, tuple[Proxy, Floor]] = {}
    out: dict = {"upstream_latency_ms": opts.upstream_latency_ms, "concurrency": opts.published_concurrency,
                 "latency_requests": opts.published_requests, "placements": {}, "latency": [], "rps": []}
    try:
        for w in WORKERS:
            where = placement.choose(opts.pin, proxy_cores=w)
            out["placements"][str(w)] = where.describe()
            wd = workdir / f"published-{w}"
            wd.mkdir(exist_ok=True)
            args = f"{opts.proxy_args} --workers {w}".strip() if w > 1 else opts.proxy_args
            servers[w] = (Proxy(upstream.url, wd, opts.proxy_log_level, args, cpus=where.proxy),
                          Floor(upstream.url, cpus=where.proxy, processes=w))
        log(opts, f"published method: upstream answering after {opts.upstream_latency_ms:g} ms, 1 and 2 workers")
        targets = _targets(target_cls)
        latency = {t.name: {"name": t.name, "kind": t.kind, "pair": t.pair, "runs": []} for t in targets}
        rps = {(t.name, w): {"name": t.name, "kind": t.kind, "pair": t.pair, "workers": w, "runs": []}
               for t in targets if t.kind != "direct" for w in WORKERS}
        for r in range(opts.rounds):
            proxy, floor = servers[1]
            for t in rotate(targets, r):  # latency at c=1, one worker: more workers cannot change it
                job = {**t.job(upstream.url, proxy.url, floor.url), "concurrency": 1, "seconds": 60,
                       "max_requests": opts.published_requests}
                latency[t.name]["runs"].append(driver.run(job))
            for w in rotate(list(WORKERS), r):
                proxy, floor = servers[w]
                for t in rotate([t for t in targets if t.kind != "direct"], r):
                    job = {**t.job(upstream.url, proxy.url, floor.url), "concurrency": opts.published_concurrency,
                           "seconds": opts.seconds * 2, "max_requests": opts.requests}
                    rps[(t.name, w)]["runs"].append(driver.run(job))
        out["latency"], out["rps"] = list(latency.values()), list(rps.values())
    finally:
        for proxy, floor in servers.values():
            floor.close()
            proxy.close()
        upstream.close()
    return out


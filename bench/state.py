"""`python -m bench.state`: what the Responses state store costs per stateful turn.

Two measurements, for each backend (sqlite, and redis against a real redis-server):

* **end to end**: a Responses client talks to the proxy (a separate process) whose
  provider is the bench's Chat mock upstream. Each turn of a conversation runs twice,
  back to back and in alternating order: once stateful (`previous_response_id`, stored)
  and once stateless (`store: false`, the client resending the same history itself). The
  provider sees the same payload either way, so the difference is the store: walking the
  chain, rebuilding the input, writing the record. Reported as p50 / p99 of each and the
  added p50 / p99 (stateful minus stateless).
* **store alone**: in this process, the two operations a stateful turn makes (`chain` of
  the previous response at depth d, then `put` of the new record of a realistic size),
  timed together.

See bench/README.md ("State store") for how to read it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from bench.processes import Proxy, Upstream
from bench.redis_server import RedisServer

RESULTS = Path(__file__).resolve().parent / "results"


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def _post(session: aiohttp.ClientSession, url: str, body: dict) -> tuple[float, dict]:
    started = time.perf_counter()
    async with session.post(url, json=body, headers={"Authorization": "Bearer bench-client"}) as resp:
        data = await resp.read()
        elapsed = time.perf_counter() - started
        if resp.status != 200:
            raise RuntimeError(f"proxy answered {resp.status}: {data[:300]!r}")
    return elapsed, json.loads(data)


def _next_input(output: list, turn: int) -> list:
    """Results for the previous answer's tool calls, then a new user message."""
    items = [{"type": "function_call_output", "call_id": item["call_id"], "output": "{\"ok\": true}"}
             for item in output if item.get("type") == "function_call"]
    items.append({"role": "user", "content": f"Turn {turn}: carry on with the next step of the task, please."})
    return items


async def end_to_end(proxy_url: str, conversations: int, turns: int) -> dict:
    url = proxy_url + "/v1/responses"
    stateful: list[float] = []
    stateless: list[float] = []
    base = {"model": "chat/bench-model", "instructions": "You are a careful coding agent.",
            "tools": [{"type": "function", "name": "read_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}]}
    async with aiohttp.ClientSession() as session:
        await _post(session, url, {**base, "input": "warm up", "store": False})
        for c in range(conversations):
            previous = None
            history: list = []
            output: list = []
            for t in range(turns):
                new = _next_input(output, t)
                with_state = {**base, "input": new, **({"previous_response_id": previous} if previous else {})}
                without = {**base, "input": history + new, "store": False}
                order = [("stateful", with_state), ("stateless", without)]
                if (c + t) % 2:
                    order.reverse()
                for kind, body in order:
                    elapsed, answer = await _post(session, url, body)
                    if kind == "stateful":
                        stateful.append(elapsed)
                        previous = answer["id"]
                        output = answer["output"]
                    else:
                        stateless.append(elapsed)
                history += new + output
    return {
        "turns": len(stateful),
        "stateful_p50_ms": pct(stateful, 0.5) * 1000, "stateful_p99_ms": pct(stateful, 0.99) * 1000,
        "stateless_p50_ms": pct(stateless, 0.5) * 1000, "stateless_p99_ms": pct(stateless, 0.99) * 1000,
        "added_p50_ms": (pct(stateful, 0.5) - pct(stateless, 0.5)) * 1000,
        "added_p99_ms": (pct(stateful, 0.99) - pct(stateless, 0.99)) * 1000,
    }


async def store_alone(backend: str, url: str | None, depth: int, samples: int) -> dict:
    from proxai.routing.config import StateConfig
    from proxai.state import ResponseRecord, create

    store = create(StateConfig(backend=backend, url=url))
    await store.open()
    try:
        item = {"type": "message", "role": "assistant", "status": "completed", "id": "msg_x",
                "content": [{"type": "output_text", "text": "x" * 900, "annotations": []}]}

        def record(rid: str, parent: str | None) -> ResponseRecord:
            return ResponseRecord(id=rid, tenant="bench", parent_id=parent, client_protocol="openai_responses",
                                  provider="chat", model="m", input_items=[dict(item, role="user")],
                                  response={"id": rid, "object": "response", "status": "completed", "output": [item]})

        tag = f"{time.time_ns()}"
        parent = None
        for i in range(depth):
            rid = f"resp_{tag}_{i}"
            await store.put(record(rid, parent))
            parent = rid
        times = []
        for i in range(samples):
            started = time.perf_counter()
            chain = await store.chain("bench", parent)
            await store.put(record(f"resp_{tag}_s{i}", parent))
            times.append(time.perf_counter() - started)
            assert chain is not None and len(chain) == depth
    finally:
        await store.close()
    return {"depth": depth, "samples": samples, "p50_ms": pct(times, 0.5) * 1000, "p99_ms": pct(times, 0.99) * 1000}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.state", description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="sqlite,redis")
    parser.add_argument("--conversations", type=int, default=20)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--depths", default="1,10,100")
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 3 conversations of 4 turns")
    parser.add_argument("--json", type=Path, help="where to write the results")
    args = parser.parse_args(argv)
    if args.quick:
        args.conversations, args.turns, args.samples, args.depths = 3, 4, 30, "1,10"
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    depths = [int(d) for d in args.depths.split(",")]
    results: dict = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "backends": {}}
    with tempfile.TemporaryDirectory(prefix="proxai-bench-state-") as tmp:
        work = Path(tmp)
        upstream = Upstream(deltas=8)
        redis = None
        try:
            for backend in backends:
                url = None
                if backend == "redis":
                    if RedisServer.available() is None:
                        print("redis-server is not installed: skipping the redis backend", file=sys.stderr)
                        continue
                    redis = redis or RedisServer(work / "redis").start()
                    url = redis.url
                elif backend == "sqlite":
                    url = str(work / f"state-{backend}.db")
                print(f"bench.state: {backend} end to end", file=sys.stderr)
                wd = work / f"proxy-{backend}"
                wd.mkdir()
                proxy = Proxy(upstream.url, wd, log_level="warning", state={"backend": backend, **({"url": url} if url else {})})
                try:
                    e2e = asyncio.run(end_to_end(proxy.url, args.conversations, args.turns))
                finally:
                    proxy.close()
                print(f"bench.state: {backend} store alone", file=sys.stderr)
                alone = [asyncio.run(store_alone(backend, url, d, args.samples)) for d in depths]
                results["backends"][backend] = {"end_to_end": e2e, "store_alone": alone}
        finally:
            upstream.close()
            if redis is not None:
                redis.stop()
    print(table(results))
    out = args.json or RESULTS / f"state-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"\nresults: {out}", file=sys.stderr)
    return 0


def table(results: dict) -> str:
    lines = ["| backend | turns | stateful p50 / p99 ms | stateless p50 / p99 ms | added p50 / p99 ms |",
             "|---|---:|---:|---:|---:|"]
    for name, r in results["backends"].items():
        e = r["end_to_end"]
        lines.append(f"| {name} | {e['turns']} | {e['stateful_p50_ms']:.2f} / {e['stateful_p99_ms']:.2f} | "
                     f"{e['stateless_p50_ms']:.2f} / {e['stateless_p99_ms']:.2f} | "
                     f"{e['added_p50_ms']:+.2f} / {e['added_p99_ms']:+.2f} |")
    lines += ["", "| backend | chain depth | chain + put p50 ms | p99 ms |", "|---|---:|---:|---:|"]
    for name, r in results["backends"].items():
        for a in r["store_alone"]:
            lines.append(f"| {name} | {a['depth']} | {a['p50_ms']:.3f} | {a['p99_ms']:.3f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

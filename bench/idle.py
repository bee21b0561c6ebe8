"""Memory per open idle stream: N streams held open through the proxy, its RSS before and after.

    python -m bench.idle [--counts 1000,10000] [--pairs chat->chat,chat->anthropic] [--tracemalloc]

The mock upstream (bench/upstream.py --hold-after) sends each stream's first events and then
nothing, no EOF either. For each pair and count N a fresh proxy (server.py, generated config)
is started; a warm-up opens and closes a few streams; then N streaming requests are opened
(a bounded number connecting at a time) and each waits for its first event. With every
stream holding its first event, the proxy's memory is read from /proc (VmRSS, and Pss and
anonymous memory from smaps_rollup, summed over the proxy and its workers), it is asked
/healthz and a complete non-streaming request, then every stream is closed and the proxy
must drop back to its file descriptors of before. A second cycle opens N again: memory
that was released for reuse gives the same figure, a leak grows it.

Limits: one proxy process holds a client and an upstream socket per stream, so with the
open-file limit of `ulimit -n` it holds about half that many streams; a count beyond what
one worker can hold runs with more `--workers` (SO_REUSEPORT; said in the report). This
process holds every client socket and the upstream every upstream socket.
See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import math
import os
import resource
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson

from bench import payloads, procstat, report
from bench.payloads import ANTHROPIC, CHAT, PATHS, PROTOCOLS, SHORT
from bench.processes import BENCH_KEY, Proxy, Upstream, proxy_config

RESULTS = Path(__file__).resolve().parent / "results"
GOAL_KIB = 64  # the goal per idle open stream
HOLD_AFTER = 6  # upstream writes before the stream goes quiet: a few text deltas in
HOLD_SECS = 3600  # idle timeouts for the bench: an idle stream must not be cut while measured
FD_PER_STREAM = 2  # a proxy worker holds the client's socket and the provider's
FD_RESERVE = 200  # listening sockets, the state store, logs, pipes; and the imbalance between workers
CONNECTING = 200  # streams connecting at a time: the listen backlog must not overflow
SETTLE_S = 1.0


def by_name(name: str) -> tuple[str, str]:
    short = {v: k for k, v in SHORT.items()}
    client, _, provider = name.partition("->")
    if client not in short or provider not in short:
        raise argparse.ArgumentTypeError(f"unknown pair {name!r}: use e.g. chat->chat, chat->anthropic")
    return short[client], short[provider]


def open_file_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def workers_for(n: int, fd_limit: int) -> int:
    """Workers needed for n streams when each holds FD_PER_STREAM descriptors per stream."""
    per_worker = max(1, (fd_limit - FD_RESERVE) // FD_PER_STREAM)
    return max(1, math.ceil(n / per_worker))


def idle_config(upstream_url: str, n: int, workers: int, fd_limit: int) -> dict:
    """proxy_config with the limits opened for n idle streams (docs/configuration.md "Configuration"):
    - max_concurrent_requests: a held stream is a request in flight; above the per-worker share;
    - max_connections: each stream is a client connection; kept under what the open-file limit
      leaves after the upstream sockets, so the proxy does not lower it with a warning;
    - read_idle_timeout_secs and tool_calls.timeout_secs: by default 120 s of provider silence
      ends a stream; opening 10,000 streams on a busy machine takes longer than that, so both
      are an hour.
    The heartbeat (server.stream_heartbeat_secs, 15 s) stays on: it is the product default,
    and its timer is part of what a held translated stream costs."""
    config = proxy_config(upstream_url, 0, "info")
    per_worker = math.ceil(n / workers)
    # twice the even share when it fits: the kernel's spread of connections over workers is uneven
    cap = max(per_worker + FD_RESERVE, min(2 * per_worker, (fd_limit - FD_RESERVE) // FD_PER_STREAM))
    config["server"].update(max_concurrent_requests=cap, max_connections=cap)
    for provider in config["providers"].values():
        provider["read_idle_timeout_secs"] = HOLD_SECS
    config["tool_calls"] = {"timeout_secs": HOLD_SECS}
    return config


# --- /proc ----------------------------------------------------------------------------------


@dataclass
class Memory:
    rss_kb: int
    pss_kb: int
    anon_kb: int
    fds: int

    def as_dict(self) -> dict:
        return {"rss_kb": self.rss_kb, "pss_kb": self.pss_kb, "anon_kb": self.anon_kb, "fds": self.fds}


def memory(pid: int) -> Memory:
    rss = pss = anon = fds = 0
    for p in procstat.tree(pid):
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                key, _, rest = line.partition(":")
                if key == "Rss":
                    rss += int(rest.split()[0])
                elif key == "Pss":
                    pss += int(rest.split()[0])
                elif key == "Anonymous":
                    anon += int(rest.split()[0])
            fds += len(os.listdir(f"/proc/{p}/fd"))
        except (OSError, ValueError, IndexError):
            continue
    return Memory(rss, pss, anon, fds)


# --- the streams ----------------------------------------------------------------------------


class HeldStream:
    """One streaming request over a raw connection: sent, read up to its first SSE data event, then held."""

    def __init__(self):
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.first: bytes | None = None
        self.error: str | None = None

    async def open(self, port: int, path: str, head: bytes, body: bytes, timeout: float) -> None:
        try:
            self.reader, self.writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
            self.writer.write(head + body)
            self.first = await asyncio.wait_for(_first_event(self.reader), timeout)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
            self.error = f"{type(exc).__name__}: {exc}"[:300]

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def _first_event(reader: asyncio.StreamReader) -> bytes:
    """Reads the status line and headers, then chunked body bytes until one whole `data:` event."""
    status = await reader.readline()
    if b" 200 " not in status:
        rest = await asyncio.wait_for(reader.read(600), 2)
        raise ValueError(f"HTTP answer {status.strip().decode(errors='replace')}: {rest[-300:].decode(errors='replace')}")
    chunked = False
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b""):
            break
        if line.lower().startswith(b"transfer-encoding:") and b"chunked" in line.lower():
            chunked = True
    body = b""
    while True:
        if chunked:
            size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                raise ValueError("the stream ended before its first event")
            body += (await reader.readexactly(size + 2))[:-2]
        else:
            data = await reader.read(65536)
            if not data:
                raise ValueError("the stream ended before its first event")
            body += data
        for event in body.replace(b"\r\n", b"\n").split(b"\n\n")[:-1]:
            if any(line.startswith(b"data:") for line in event.split(b"\n")):
                return event


def request_bytes(client: str, provider: str, port: int) -> tuple[str, bytes, bytes]:
    body = orjson.dumps(payloads.request(client, True, f"{SHORT[provider]}/{payloads.MODEL}"))
    path = PATHS[client]
    auth = (f"x-api-key: {BENCH_KEY}\r\nanthropic-version: 2023-06-01\r\n" if client == ANTHROPIC
            else f"Authorization: Bearer {BENCH_KEY}\r\n")
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream\r\n{auth}Content-Length: {len(body)}\r\n\r\n").encode()
    return path, head, body


async def open_streams(n: int, port: int, client: str, provider: str, timeout: float) -> list[HeldStream]:
    path, head, body = request_bytes(client, provider, port)
    gate = asyncio.Semaphore(CONNECTING)
    streams = [HeldStream() for _ in range(n)]

    async def one(s: HeldStream) -> None:
        async with gate:
            await s.open(port, path, head, body, timeout)

    await asyncio.gather(*(one(s) for s in streams))
    return streams


async def close_streams(streams: list[HeldStream]) -> None:
    for s in streams:
        s.close()
    await asyncio.sleep(0)


async def wait_fds(pid: int, target: int, timeout: float) -> int:
    """Waits until the proxy holds at most `target` descriptors; returns what it holds."""
    deadline = time.monotonic() + timeout
    while True:
        fds = memory(pid).fds
        if fds <= target or time.monotonic() > deadline:
            return fds
        await asyncio.sleep(0.2)


async def healthy(session: aiohttp.ClientSession, proxy_url: str, client: str, provider: str) -> dict:
    """/healthz, and one complete non-streaming request through the proxy."""
    out: dict = {}
    try:
        async with session.get(proxy_url + "/healthz") as resp:
            out["healthz"] = resp.status
        body = payloads.request(client, False, f"{SHORT[provider]}/{payloads.MODEL}")
        headers = ({"x-api-key": BENCH_KEY, "anthropic-version": "2023-06-01"} if client == ANTHROPIC
                   else {"Authorization": f"Bearer {BENCH_KEY}"})
        async with session.post(proxy_url + PATHS[client], json=body, headers=headers) as resp:
            answer = await resp.read()
            out["request"] = resp.status
            if resp.status != 200:
                out["error"] = answer[:300].decode(errors="replace")
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    out["ok"] = out.get("healthz") == 200 and out.get("request") == 200
    return out


def _first_event_ok(client: str, event: bytes) -> bool:
    data = b"".join(line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:"))
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    if client == CHAT:
        return doc.get("object") == "chat.completion.chunk"
    return isinstance(doc.get("type"), str)


async def cycle(proxy: Proxy, client: str, provider: str, n: int, base_fds: int, timeout: float,
                session: aiohttp.ClientSession, probe: "Probe | None" = None) -> dict:
    t0 = time.perf_counter()
    streams = await open_streams(n, proxy.port, client, provider, timeout)
    opened_s = time.perf_counter() - t0
    errors = [s.error for s in streams if s.error]
    ok = sum(1 for s in streams if s.first is not None and _first_event_ok(client, s.first))
    await asyncio.sleep(SETTLE_S)
    held = memory(proxy.pid)
    tm = probe.take() if probe is not None else None
    health = await healthy(session, proxy.url, client, provider)
    # held open: the proxy did not end the stream nor close the connection
    still_open = sum(1 for s in streams if s.writer is not None and not s.writer.transport.is_closing()
                     and not s.reader.at_eof())
    await close_streams(streams)
    fds_after = await wait_fds(proxy.pid, base_fds + 4, 60)
    await asyncio.sleep(SETTLE_S)
    after = memory(proxy.pid)
    out = {
        "opened": n - len(errors), "first_event": ok, "errors": len(errors), "first_error": errors[0] if errors else None,
        "open_s": opened_s, "held": held.as_dict(), "healthy_while_held": health, "still_open_at_health": still_open,
        "fds_after_close": fds_after, "after_close": after.as_dict(),
        "healthy_after_close": await healthy(session, proxy.url, client, provider),
    }
    if tm is not None:
        out["tracemalloc"] = tm
    return out


class Probe:
    """The proxy's tracemalloc probe (bench/memprobe.py): SIGUSR1, then the report file it writes."""

    def __init__(self, proxy: Proxy, out: Path):
        self.proxy, self.out, self.k = proxy, out, 0

    def baseline(self) -> None:
        os.kill(self.proxy.pid, signal.SIGUSR1)
        time.sleep(0.5)

    def take(self) -> dict | None:
        self.k += 1
        os.kill(self.proxy.pid, signal.SIGUSR1)
        path = self.out / f"tracemalloc-{self.proxy.pid}-{self.k}.json"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if path.exists():
                return orjson.loads(path.read_bytes())
            time.sleep(0.2)
        return None


async def measure(upstream: Upstream, workdir: Path, client: str, provider: str, n: int, workers: int,
                  cycles: int, timeout: float, tracemalloc_frames: int = 0, log=print) -> dict:
    fd_limit = open_file_limit()
    config = idle_config(upstream.url, n, workers, fd_limit)
    wrapper = None
    if tracemalloc_frames:
        wrapper = ["-X", f"tracemalloc={tracemalloc_frames}", "-m", "bench.memprobe", "--out", str(workdir)]
    proxy = Proxy(upstream.url, workdir, extra_args=f"--workers {workers}" if workers > 1 else "", config=config,
                  wrapper=wrapper, startup_timeout=180 if tracemalloc_frames else 30)
    record: dict = {"pair": f"{SHORT[client]}->{SHORT[provider]}", "client": client, "provider": provider, "n": n,
                    "workers": workers, "tracemalloc": bool(tracemalloc_frames),
                    "limits": {k: config["server"][k] for k in ("max_concurrent_requests", "max_connections")},
                    "startup_s": proxy.startup_s}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            await asyncio.sleep(0.3)  # workers: every one listening
            start = memory(proxy.pid)
            warm = await open_streams(min(50, n), proxy.port, client, provider, timeout)
            warm_errors = [s.error for s in warm if s.error]
            if warm_errors:
                raise RuntimeError(f"warm-up streams failed: {warm_errors[0]}\n{proxy.log_tail()}")
            await close_streams(warm)
            await healthy(session, proxy.url, client, provider)
            await wait_fds(proxy.pid, start.fds + 4, 30)
            await asyncio.sleep(SETTLE_S)
            before = memory(proxy.pid)
            record.update(start=start.as_dict(), before=before.as_dict())
            probe = None
            if tracemalloc_frames:
                probe = Probe(proxy, workdir)
                probe.baseline()
            record["cycles"] = []
            for k in range(cycles):
                log(f"  {record['pair']} N={n} workers={workers}{' tracemalloc' if probe else ''}: cycle {k + 1}/{cycles}")
                record["cycles"].append(await cycle(proxy, client, provider, n, before.fds, timeout, session,
                                                    probe if k == 0 else None))
            record["alive"] = proxy.alive()
    finally:
        proxy.close()  # it drains and logs on the way out
        record["log_tail"] = [line for line in proxy.log_file.read_text(errors="replace").splitlines()
                              if " WARNING " in line or " ERROR " in line or "Traceback" in line][-10:]
    return record


def per_stream(record: dict, cycle: int = 0, key: str = "rss_kb") -> float | None:
    cycles = record.get("cycles") or []
    if len(cycles) <= cycle or not cycles[cycle]["first_event"]:
        return None
    return (cycles[cycle]["held"][key] - record["before"][key]) / record["n"]


# --- report ---------------------------------------------------------------------------------


def markdown(result: dict) -> str:
    lines = [
        "# ProxAI idle open streams",
        "",
        *report.run_lines(result, f"; open-file limit {result['fd_limit']}"),
        f"- each stream: a ~1 KB streaming request; the upstream sends {HOLD_AFTER} writes (its first events) "
        f"and then holds the stream open without a byte more; every stream had its first event before memory was read",
        f"- proxy limits set for the bench: server.max_concurrent_requests and server.max_connections above the "
        f"streams per worker, providers' read_idle_timeout_secs and tool_calls.timeout_secs {HOLD_SECS} s "
        f"(default 120: idle streams would be cut), heartbeat at its default",
        f"- memory summed over the proxy's processes from /proc/<pid>/smaps_rollup; KiB per stream = "
        f"(held - before) / N; goal <= {GOAL_KIB} KiB per idle open stream",
        "",
        "| pair | N | workers | first events | RSS before MiB | RSS held MiB | KiB/stream RSS | KiB/stream anon "
        "| KiB/stream 2nd cycle | RSS after close MiB | healthy held / after (every cycle) | open s | verdict |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    for r in result["runs"]:
        if r.get("error"):
            lines.append(f"| {r['pair']} | {r['n']} | {r['workers']} | | | | | | | | | | ERROR: {_cell(r['error'])} |")
            continue
        if r["tracemalloc"]:
            continue
        c0 = r["cycles"][0]
        kib = per_stream(r)
        second = per_stream(r, 1) if len(r["cycles"]) > 1 else None
        verdict = "not measured" if kib is None or c0["first_event"] < r["n"] else \
            ("met" if kib <= GOAL_KIB else f"**missed** by {kib - GOAL_KIB:.1f} KiB")
        health = "/".join("yes" if all(c[k]["ok"] for c in r["cycles"]) else "**no**"
                          for k in ("healthy_while_held", "healthy_after_close"))
        lines.append(
            f"| {r['pair']} | {r['n']:,} | {r['workers']} | {c0['first_event']:,}/{r['n']:,} | "
            f"{r['before']['rss_kb'] / 1024:.1f} | {c0['held']['rss_kb'] / 1024:.1f} | {_f(kib)} | "
            f"{_f(per_stream(r, 0, 'anon_kb'))} | {_f(second)} | {c0['after_close']['rss_kb'] / 1024:.1f} | {health} | "
            f"{c0['open_s']:.1f} | {verdict} |")
    lines.append("")
    errors = [(r["pair"], r["n"], c["first_error"]) for r in result["runs"] for c in r.get("cycles", []) if c["errors"]]
    for pair, n, err in errors:
        lines.append(f"- {pair} N={n}: streams failed, first: {_cell(err)}")
    warned = [(r["pair"], r["n"], line) for r in result["runs"] for line in r.get("log_tail", [])]
    for pair, n, line in warned[:6]:
        lines.append(f"- {pair} N={n} proxy log: {_cell(line)}")
    tm = [r for r in result["runs"] if r.get("tracemalloc") and r.get("cycles") and r["cycles"][0].get("tracemalloc")]
    for r in tm:
        t = r["cycles"][0]["tracemalloc"]
        n = r["n"]
        lines += ["", f"## Where it goes: {r['pair']}, N={n} (tracemalloc, Python allocations alive while held)", "",
                  f"{t['total_kib'] / n:.1f} KiB and {t['total_blocks'] / n:.0f} blocks per stream traced by tracemalloc "
                  f"(RSS per stream in this traced run: {_f(per_stream(r))} KiB; tracing itself adds to RSS).", "",
                  "| file | KiB/stream | blocks/stream |", "|---|---:|---:|"]
        lines += [f"| {s['where'].rsplit(':', 1)[0]} | {s['kib'] / n:.2f} | {s['blocks'] / n:.1f} |"
                  for s in t["by_file"][:15] if s["kib"] / n >= 0.05]
        lines += ["", "| line | KiB/stream | blocks/stream |", "|---|---:|---:|"]
        lines += [f"| {s['where']} | {s['kib'] / n:.2f} | {s['blocks'] / n:.1f} |"
                  for s in t["by_line"][:20] if s["kib"] / n >= 0.05]
        if t.get("by_traceback"):
            lines += ["", "Largest by call stack (innermost frame first):", ""]
            lines += [f"- {s['kib'] / n:.2f} KiB/stream: {' <- '.join(reversed(s['frames']))}"
                      for s in t["by_traceback"][:10] if s["kib"] / n >= 0.05]
    return "\n".join(lines) + "\n"


def _f(v) -> str:
    return f"{v:.1f}" if isinstance(v, (int, float)) else "-"


def _cell(text) -> str:
    return str(text or "").replace("|", "\\|").replace("\n", " ")[:200]


# --- main -----------------------------------------------------------------------------------


async def run(opts: argparse.Namespace, log) -> dict:
    from bench.run import _commit

    fd_limit = open_file_limit()
    result = {"date": dt.datetime.now().astimezone().isoformat(timespec="seconds"), "machine": procstat.machine(),
              "commit": _commit(), "fd_limit": fd_limit, "options": {k: v for k, v in vars(opts).items() if k != "pairs"},
              "pairs": [f"{SHORT[c]}->{SHORT[p]}" for c, p in opts.pairs], "runs": []}
    need = max(opts.counts) + FD_RESERVE
    if need > fd_limit:
        raise SystemExit(f"{max(opts.counts)} streams need {need} open files in this process (it holds every "
                         f"client socket); the limit is {fd_limit}")
    workdir = Path(tempfile.mkdtemp(prefix="proxai-idle-"))
    upstream = Upstream(opts.deltas, hold_after=HOLD_AFTER)
    try:
        plan = [(c, p, n, False) for n in opts.counts for c, p in opts.pairs]
        if opts.tracemalloc:
            plan += [(c, p, min(opts.counts), True) for c, p in opts.pairs]
        for client, provider, n, traced in plan:
            workers = opts.workers or workers_for(n, fd_limit)
            if traced:
                workers = 1
            try:
                result["runs"].append(await measure(upstream, workdir, client, provider, n, workers, 1 if traced else opts.cycles,
                                                    opts.timeout, opts.tracemalloc_frames if traced else 0, log))
            except Exception as exc:  # one failing case is a row, the others still run
                result["runs"].append({"pair": f"{SHORT[client]}->{SHORT[provider]}", "n": n, "workers": workers,
                                       "tracemalloc": traced, "error": f"{type(exc).__name__}: {exc}"[:600]})
                log(f"  ERROR {exc}")
    finally:
        upstream.close()
    return result


def options(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.idle", description=__doc__.splitlines()[0])
    p.add_argument("--counts", type=lambda s: [int(x) for x in s.split(",") if x.strip()], default=[1000, 10000],
                   help="open streams per case (default 1000,10000)")
    p.add_argument("--pairs", type=lambda s: [by_name(x.strip()) for x in s.split(",") if x.strip()],
                   default=[(CHAT, CHAT), (CHAT, ANTHROPIC)], help="client->provider pairs (default chat->chat,chat->anthropic)")
    p.add_argument("--workers", type=int, default=0,
                   help="proxy workers (default: 1, or as many as the open-file limit needs for N)")
    p.add_argument("--cycles", type=int, default=2, help="open-hold-close cycles per case (default 2)")
    p.add_argument("--deltas", type=int, default=payloads.DEFAULT_DELTAS, help="deltas of the upstream's stream")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds a stream may take to its first event")
    p.add_argument("--tracemalloc", action="store_true",
                   help="also run each pair at the smallest count under tracemalloc and say where the memory goes")
    p.add_argument("--tracemalloc-frames", type=int, default=1, help="frames per traced allocation (default 1)")
    p.add_argument("--json", help="where to write the results (default bench/results/idle-<time>.json)")
    p.add_argument("--silent", action="store_true")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    opts = options(argv)

    def log(message: str) -> None:
        if not opts.silent:
            print(message, file=sys.stderr, flush=True)

    result = asyncio.run(run(opts, log))
    result["markdown"] = markdown(result)
    RESULTS.mkdir(exist_ok=True)
    path = Path(opts.json) if opts.json else RESULTS / f"idle-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
    path.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(result["markdown"])
    print(f"Results: {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What an idle open stream keeps of its request: N streams held in one process, tracemalloc by traceback.

    python -m bench.idle_streams [--streams 200] [--pairs chat->chat,chat->anthropic] [--frames 30]

The mock upstream (bench/upstream.py's handler with a hold) and the proxy (build_app on the
bench's generated config) run in this process, on one event loop; N streaming requests go
through the proxy and each is read up to its first event, then held. tracemalloc starts
after a warm-up (so the rules' compilation is not traced) and a snapshot is taken before
the N streams open and another while they are all held. Every allocation still alive is
given to the proxy when a frame of its traceback is in proxai/ or engine/ (or a compiled
rule), else to the upstream or the client of this process; the proxy's are then grouped
by what they are a copy of (the request's bytes, its parsed body, the translated request,
the answer's rewriter) and by the innermost proxy frame that allocated them.

It says *what* is held; bench.idle (a server process, its RSS) says how much memory a
stream costs. Tracing makes everything slower: no timings here. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gc
import re
import sys
import tracemalloc
from pathlib import Path

import orjson
from aiohttp import web

from bench import idle, payloads, procstat, report, upstream
from bench.payloads import SHORT
from bench.processes import proxy_config

RESULTS = Path(__file__).resolve().parent / "results"
WARM = 5

# What an allocation is a copy of, by a frame of its traceback: (kind, path fragment, function).
# The first kind whose frame appears wins; the order puts the specific before the general.
KINDS = [
    ("client request bytes", "aiohttp/web_request.py", "read"),
    ("upstream request bytes", "/proxai/http/surface.py", "dump_json"),
    ("answer model rewriter", "/proxai/http/response_model.py", "rewriter"),
    ("parsed client body", "/proxai/http/ingress.py", "decode"),
    ("translated request (IR, provider body)", "request.decode.yaml", None),
    ("translated request (IR, provider body)", "request.encode.yaml", None),
    ("translated request (IR, provider body)", "/proxai/endpoints/server_tools.py", "prepare"),
]
PROXY_MARKERS = ("/proxai/", "/engine/", ".yaml")
REQUEST_KINDS = {k for k, _, _ in KINDS}


def _is_proxy(frame: tracemalloc.Frame) -> bool:
    return any(m in frame.filename for m in PROXY_MARKERS) and "/bench/" not in frame.filename


def _kind(tb: tracemalloc.Traceback) -> str | None:
    for kind, where, func in KINDS:
        for frame in tb:
            if where in frame.filename and (func is None or _function(frame) == func):
                return kind
    return None


_FUNCTIONS: dict[tuple[str, int], str] = {}


def _function(frame: tracemalloc.Frame) -> str:
    """The function a traced frame is in (tracemalloc keeps file and line only)."""
    key = (frame.filename, frame.lineno)
    if key not in _FUNCTIONS:
        name = ""
        try:
            import linecache
            for lineno in range(frame.lineno, 0, -1):
                text = linecache.getline(frame.filename, lineno).lstrip()
                if text.startswith(("def ", "async def ")):
                    name = text.split("def ", 1)[1].split("(", 1)[0]
                    break
        except Exception:
            pass
        _FUNCTIONS[key] = name
    return _FUNCTIONS[key]


def _short(path: str) -> str:
    for marker in ("site-packages/", "/proxai/", "/engine/", "/bench/", "lib/python3"):
        at = path.find(marker)
        if at >= 0:
            return path[at:].removeprefix("site-packages/").lstrip("/")
    return path


def attribute(before: tracemalloc.Snapshot, held: tracemalloc.Snapshot, n: int) -> dict:
    """The allocations that grew between the snapshots, per stream: the proxy's total, by kind
    of request copy and by the innermost proxy frame; the rest (upstream, client) as one figure."""
    proxy_total = other_total = 0
    kinds: dict[str, list[int]] = {}
    frames: dict[str, list[int]] = {}
    for stat in held.compare_to(before, "traceback"):
        if stat.size_diff <= 0:
            continue
        tb = stat.traceback
        inner = next((f for f in reversed(tb) if _is_proxy(f)), None)  # tracebacks run oldest first
        if inner is None:
            other_total += stat.size_diff
            continue
        proxy_total += stat.size_diff
        kind = _kind(tb) or "other"
        acc = kinds.setdefault(kind, [0, 0])
        acc[0] += stat.size_diff
        acc[1] += stat.count_diff
        where = f"{_short(inner.filename)}:{inner.lineno}"
        acc = frames.setdefault(where, [0, 0])
        acc[0] += stat.size_diff
        acc[1] += stat.count_diff

    def per(table: dict[str, list[int]], top: int | None = None) -> list[dict]:
        rows = sorted(table.items(), key=lambda kv: -kv[1][0])[:top]
        return [{"where": k, "bytes": round(v[0] / n), "blocks": round(v[1] / n, 1)} for k, v in rows]

    by_kind = per(kinds)
    return {
        "proxy_bytes": round(proxy_total / n),
        "request_copy_bytes": sum(r["bytes"] for r in by_kind if r["where"] in REQUEST_KINDS),
        "other_bytes": round(other_total / n),
        "by_kind": by_kind,
        "by_frame": per(frames, 25),
    }


async def _serve(app_or_server, **kw) -> tuple[web.BaseRunner, int]:
    runner = web.AppRunner(app_or_server, **kw) if isinstance(app_or_server, web.Application) \
        else web.ServerRunner(app_or_server, **kw)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, runner.addresses[0][1]


def repeated(client: str, provider: str, port: int, turns: int) -> tuple[str, bytes, bytes]:
    """bench.idle's request with its exchange (user, tool call, tool result) said `turns` times: a longer conversation."""
    path, head, body = idle.request_bytes(client, provider, port)
    if turns <= 1:
        return path, head, body
    doc = orjson.loads(body)
    system = [m for m in doc["messages"] if m.get("role") == "system"]
    doc["messages"] = system + [m for m in doc["messages"] if m.get("role") != "system"] * turns
    body = orjson.dumps(doc)
    head = re.sub(rb"Content-Length: \d+", b"Content-Length: %d" % len(body), head)
    return path, head, body


async def hold(n: int, port: int, request: tuple[str, bytes, bytes], timeout: float) -> list[idle.HeldStream]:
    path, head, body = request
    gate = asyncio.Semaphore(idle.CONNECTING)
    streams = [idle.HeldStream() for _ in range(n)]

    async def one(s: idle.HeldStream) -> None:
        async with gate:
            await s.open(port, path, head, body, timeout)

    await asyncio.gather(*(one(s) for s in streams))
    return streams


async def measure(client: str, provider: str, n: int, frames: int, turns: int = 1) -> dict:
    from proxai.http.app import build_app, make_runner  # the proxy's own runner (its handler factory)
    from proxai.routing.config import load_dict

    mock = web.Server(upstream.make_handler(upstream.build(payloads.DEFAULT_DELTAS, 1), hold_after=idle.HOLD_AFTER),
                      access_log=None, handler_cancellation=True)
    up_runner, up_port = await _serve(mock, handle_signals=False)
    config = idle.idle_config(f"http://127.0.0.1:{up_port}", n + WARM, 1, idle.open_file_limit())
    config["logging"] = {"level": "warning"}
    runner = make_runner(build_app(load_dict(config, {})))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    request = repeated(client, provider, port, turns)
    streams: list[idle.HeldStream] = []
    record: dict = {"pair": f"{SHORT[client]}->{SHORT[provider]}", "n": n, "frames": frames,
                    "request_bytes": len(request[2])}
    try:
        warm = await hold(WARM, port, request, 60)
        if any(s.error for s in warm):
            raise RuntimeError(f"warm-up stream failed: {next(s.error for s in warm if s.error)}")
        await idle.close_streams(warm)
        await asyncio.sleep(0.3)
        tracemalloc.start(frames)
        try:
            gc.collect()
            before = tracemalloc.take_snapshot()
            streams = await hold(n, port, request, 120)
            errors = [s.error for s in streams if s.error]
            record.update(opened=n, first_event=sum(1 for s in streams if s.first), errors=len(errors),
                          first_error=errors[0] if errors else None)
            await asyncio.sleep(0.2)
            gc.collect()
            held = tracemalloc.take_snapshot()
            await idle.close_streams(streams)
            streams = []
            await asyncio.sleep(0.5)  # the proxy sees each disconnect and ends its handler
            gc.collect()
            closed = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
        record.update(attribute(before, held, n))
        # what is still alive once every stream has ended: caches, or a leak if it grows with N
        record["after_close"] = {k: v for k, v in attribute(before, closed, n).items() if k != "by_frame"}
    finally:
        await idle.close_streams(streams)  # an error above: no stream may be left for the shutdown to wait on
        await runner.cleanup()
        await up_runner.cleanup()
    return record


async def run(opts: argparse.Namespace, log=print) -> dict:
    from bench.run import _commit

    result = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "commit": _commit(),
              "machine": procstat.machine(), "options": {"streams": opts.streams, "frames": opts.frames, "turns": opts.turns}, "runs": []}
    for client, provider in opts.pairs:
        log(f"  {SHORT[client]}->{SHORT[provider]} N={opts.streams}")
        result["runs"].append(await measure(client, provider, opts.streams, opts.frames, opts.turns))
    return result


def markdown(result: dict) -> str:
    lines = ["# ProxAI: what an idle open stream keeps of its request", "", *report.run_lines(result),
             f"- {result['options']['streams']} streams per pair held after their first event, in one process "
             "with the upstream and the client; Python allocations alive while held (tracemalloc, "
             f"{result['options']['frames']} frames), per stream; the proxy's are those with a proxai/engine frame",
             "", "| pair | N | request bytes | first events | proxy B/stream | request copies B/stream | upstream+client B/stream |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in result["runs"]:
        lines.append(f"| {r['pair']} | {r['n']} | {r['request_bytes']} | {r['first_event']}/{r['n']} | {r['proxy_bytes']} | "
                     f"{r['request_copy_bytes']} | {r['other_bytes']} |")
    for r in result["runs"]:
        lines += ["", f"## {r['pair']}: the proxy's allocations by kind", "", "| kind | B/stream | blocks/stream |",
                  "|---|---:|---:|"]
        lines += [f"| {k['where']} | {k['bytes']} | {k['blocks']} |" for k in r["by_kind"]]
        lines += ["", f"## {r['pair']}: by the innermost proxy frame", "", "| where | B/stream | blocks/stream |",
                  "|---|---:|---:|"]
        lines += [f"| {k['where']} | {k['bytes']} | {k['blocks']} |" for k in r["by_frame"]]
    return "\n".join(lines) + "\n"


def options(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.idle_streams", description=__doc__.split("\n")[0])
    p.add_argument("--streams", type=int, default=200, help="idle streams held per pair (default 200)")
    p.add_argument("--pairs", type=lambda s: [idle.by_name(x.strip()) for x in s.split(",") if x.strip()],
                   default=[idle.by_name("chat->chat"), idle.by_name("chat->anthropic")])
    p.add_argument("--turns", type=int, default=1,
                   help="the request's exchange said this many times: a longer conversation (default 1, ~1 KB)")
    p.add_argument("--frames", type=int, default=30, help="frames per traced allocation (default 30)")
    p.add_argument("--json", help="where to write the results (default bench/results/idle-streams-<time>.json)")
    p.add_argument("--silent", action="store_true")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    opts = options(argv)
    result = asyncio.run(run(opts, log=(lambda _m: None) if opts.silent else print))
    out = Path(opts.json) if opts.json else RESULTS / f"idle-streams-{dt.datetime.now():%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    if not opts.silent:
        print(markdown(result))
        print(f"Results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

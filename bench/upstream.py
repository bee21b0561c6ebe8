"""The bench's mock upstream: its own process, serving the Chat, Responses and Anthropic
protocols from bytes built once.

    python -m bench.upstream [--port 0] [--deltas 64] [--events-per-write 1] [--gap-ms 0] [--hold-after N]
                             [--latency-ms MS]

Prints `PORT <n>` on stdout once it listens. POST /v1/chat/completions, /v1/responses and
/v1/messages answer the canned turn of bench/payloads.py in exact wire format, as a stream
when the request body has `"stream":true`; POST or GET /ping answers `{}` (the load driver's
ceiling). The handler only looks at the path and that one flag, so the upstream costs next
to nothing per request. With `--hold-after N` a stream sends its first N writes and then
nothing more, no EOF either, until the other side closes the connection (bench/idle.py:
streams held open and idle). With `--latency-ms MS` every canned answer waits MS before its
first byte, like a model's time to answer (the published gateway method uses 20 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

import orjson
from aiohttp import web

from bench import payloads
from proxai.mock import encode_event

JSON_HEADERS = {"Content-Type": "application/json"}
SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}


def build(deltas: int, events_per_write: int) -> dict[str, tuple[bytes, list[bytes]]]:
    """path -> (non-streaming body, stream as a list of writes)."""
    out = {}
    for protocol, path in payloads.PATHS.items():
        body = orjson.dumps(payloads.reply(protocol, False, deltas))
        events = [encode_event(e, d) for e, d in payloads.reply(protocol, True, deltas)]
        step = max(1, events_per_write)
        writes = [b"".join(events[i:i + step]) for i in range(0, len(events), step)]
        out[path] = (body, writes)
    return out


def make_handler(canned: dict[str, tuple[bytes, list[bytes]]], gap_s: float = 0.0, hold_after: int = 0,
                 latency_s: float = 0.0):
    """`hold_after` > 0: streams stop after that many writes and stay open until the peer goes
    away (the server must cancel handlers on disconnect: web.Server(handler_cancellation=True))."""
    ping = b"{}"

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        raw = await request.read()
        entry = canned.get(request.path)
        if entry is None:
            if request.path in ("/ping", "/healthz"):
                return web.Response(body=ping, headers=JSON_HEADERS)
            return web.Response(status=404, body=b'{"error":{"message":"not found","type":"not_found"}}',
                                headers=JSON_HEADERS)
        body, writes = entry
        if latency_s:
            await asyncio.sleep(latency_s)
        if b'"stream":true' not in raw and b'"stream": true' not in raw:
            return web.Response(body=body, headers=JSON_HEADERS)
        resp = web.StreamResponse(headers=SSE_HEADERS)
        await resp.prepare(request)
        try:
            for i, blob in enumerate(writes):
                if hold_after and i == hold_after:
                    await asyncio.Event().wait()  # idle until the handler is cancelled by the disconnect
                if gap_s and i:
                    await asyncio.sleep(gap_s)
                await resp.write(blob)
            await resp.write_eof()
        except ConnectionError:
            pass
        return resp

    return handle


async def serve(host: str, port: int, deltas: int, events_per_write: int, gap_ms: float = 0.0,
                hold_after: int = 0, backlog: int = 1024, latency_ms: float = 0.0) -> None:
    server = web.Server(make_handler(build(deltas, events_per_write), gap_ms / 1000, hold_after, latency_ms / 1000),
                        access_log=None,
                        handler_cancellation=bool(hold_after))
    runner = web.ServerRunner(server, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=backlog)
    await site.start()
    print(f"PORT {runner.addresses[0][1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.upstream", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--deltas", type=int, default=payloads.DEFAULT_DELTAS, help="content deltas per stream")
    parser.add_argument("--events-per-write", type=int, default=1, help="SSE events per socket write")
    parser.add_argument("--gap-ms", type=float, default=0.0, help="pause between stream writes, like token pacing")
    parser.add_argument("--hold-after", type=int, default=0,
                        help="streams send this many writes, then hold the connection open without EOF (0: off)")
    parser.add_argument("--backlog", type=int, default=1024, help="listen backlog")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="wait this long before each canned answer")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.host, args.port, args.deltas, args.events_per_write, args.gap_ms, args.hold_after,
                      args.backlog, args.latency_ms))
    return 0


if __name__ == "__main__":
    sys.exit(main())

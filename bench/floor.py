"""The floor target: the least a relay on this stack (aiohttp, uvloop when installed) can cost.

    python -m bench.floor --upstream http://127.0.0.1:PORT [--port 0] [--reuse-port]

Prints `PORT <n>` once it listens. Every request is posted, body as received, to the
upstream at the same path through one ClientSession, and the answer is relayed as read,
one write per read: no parsing, logging, metrics or auth. The bench measures it beside
the proxy, on the proxy's CPU, and reports the proxy's figures as ratios to its.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from aiohttp import ClientSession, ClientTimeout, TCPConnector, web


async def serve(upstream: str, host: str, port: int, reuse_port: bool = False) -> None:
    session = ClientSession(connector=TCPConnector(limit=0), timeout=ClientTimeout(total=None),
                            auto_decompress=False, skip_auto_headers=("User-Agent", "Content-Type"))

    async def relay(request: web.BaseRequest) -> web.StreamResponse:
        body = await request.read()
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
        async with session.post(upstream + request.path_qs, data=body, headers=headers) as up:
            out = web.StreamResponse(status=up.status, headers={"Content-Type": up.headers.get("Content-Type", "")})
            await out.prepare(request)
            async for chunk in up.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
            return out

    runner = web.ServerRunner(web.Server(relay, access_log=None), handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, host, port, reuse_port=reuse_port or None).start()
    print(f"PORT {runner.addresses[0][1]}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()
    await session.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="base URL the requests are posted to")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--reuse-port", action="store_true", help="SO_REUSEPORT, so several processes share --port")
    args = parser.parse_args(argv)
    coro = serve(args.upstream.rstrip("/"), args.host, args.port, args.reuse_port)
    try:
        import uvloop
    except ImportError:
        asyncio.run(coro)
    else:
        uvloop.run(coro)
    return 0


if __name__ == "__main__":
    sys.exit(main())

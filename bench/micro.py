"""Engine-only micro benchmarks (no network): what translation itself costs.

    python -m bench.micro [--seconds 0.3] [--deltas 64] [--pairs chat->anthropic,...] [--cpu] [--best]

Per translated pair: request translation (µs per request, Context creation included, as the
proxy builds one per request), non-streaming response translation (µs per response), and a
whole stream fed event by event (µs per upstream event, events/s). Pass-through pairs get
the stream row only: the relay's observer (proxai/http/relay.py) is all they run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Callable

import orjson

from bench import payloads
from bench.payloads import PROTOCOLS, SHORT

REPEATS = 5
#: how `timed` measures: the clock (perf_counter: wall; process_time: this process's CPU,
#: steadier on a shared machine) and the statistic over the batches (median, or min: the
#: least disturbed batch). main() sets them from --cpu and --best.
CLOCK: Callable[[], float] = time.perf_counter
STAT: Callable[[list], float] = statistics.median


def timed(fn: Callable[[], object], seconds: float) -> float:
    """Seconds per call of fn (median or min, see STAT) over REPEATS timed batches that fill `seconds` together."""
    clock = CLOCK
    fn()
    t0 = clock()
    fn()
    once = max(clock() - t0, 1e-7)
    per_batch = max(1, int(seconds / REPEATS / once))
    results = []
    for _ in range(REPEATS):
        t0 = clock()
        for _ in range(per_batch):
            fn()
        results.append((clock() - t0) / per_batch)
    return STAT(results)


def sse_events(protocol: str, deltas: int) -> list:
    from proxai.http.sse import SSEEvent

    return [SSEEvent(e, d if isinstance(d, str) else json.dumps(d, ensure_ascii=False, separators=(",", ":")))
            for e, d in payloads.reply(protocol, True, deltas)]


def bench_pair(eng, client: str, provider: str, seconds: float, deltas: int) -> dict:
    import engine

    row: dict = {"pair": f"{SHORT[client]}->{SHORT[provider]}", "client": client, "provider": provider}
    events = sse_events(provider, deltas)
    row["stream_events"] = len(events)
    if client == provider:
        from proxai.http.relay import Relay

        stream_request = orjson.loads(orjson.dumps(payloads.request(client, True)))

        def passthrough_stream():
            relay = Relay(client, eng, engine.Context(client_protocol=client, provider_protocol=provider,
                                                      provider_name="bench", upstream_model=payloads.MODEL,
                                                      client_body=stream_request))
            for ev in events:
                relay.feed(ev)
            relay.eof()
            if relay.outcome is None or not relay.outcome.complete:
                raise RuntimeError(f"the relayed stream did not complete ({relay.outcome})")

        return _measure(row, {"stream": passthrough_stream}, seconds, len(events))

    request_body = orjson.loads(orjson.dumps(payloads.request(client, False)))
    stream_request = orjson.loads(orjson.dumps(payloads.request(client, True)))
    upstream_body = orjson.loads(orjson.dumps(payloads.reply(provider, False, deltas)))

    def context(body: dict):
        return engine.Context(client_protocol=client, provider_protocol=provider, provider_name="bench",
                              upstream_model=payloads.MODEL, client_body=body)

    def request():
        eng.translate_request(context(request_body), request_body)

    def response():
        eng.translate_response(context(request_body), upstream_body)

    def stream():
        translator = eng.open_stream(context(stream_request))
        for ev in events:
            translator.feed(ev)
        if not translator.complete:
            raise RuntimeError("the translated stream did not complete" + (" (it failed)" if translator.failed else ""))

    return _measure(row, {"request": request, "response": response, "stream": stream}, seconds, len(events))


def _measure(row: dict, fns: dict, seconds: float, n_events: int) -> dict:
    for name, fn in fns.items():
        try:
            per_call = timed(fn, seconds)
        except Exception as exc:  # a pair that does not translate yet is a row, not a crash
            row[f"{name}_error"] = f"{type(exc).__name__}: {exc}"[:300]
            continue
        if name == "stream":
            row["stream_us_per_event"] = per_call / n_events * 1e6
            row["stream_events_per_s"] = n_events / per_call
            row["stream_us_per_stream"] = per_call * 1e6
        else:
            row[f"{name}_us"] = per_call * 1e6
    return row


def startup(config_file: str | None = None) -> dict:
    """Engine.load() and config loading, in this process (the modules are already imported)."""
    import engine

    out: dict = {}
    t0 = time.perf_counter()
    try:
        engine.Engine.load()
        out["engine_load_ms"] = (time.perf_counter() - t0) * 1000
    except Exception as exc:
        out["engine_load_error"] = f"{type(exc).__name__}: {exc}"[:300]
    if config_file:
        from proxai.routing.config import load_file

        t0 = time.perf_counter()
        load_file(config_file)
        out["config_load_ms"] = (time.perf_counter() - t0) * 1000
    return out


def run(seconds: float = 0.3, deltas: int = payloads.DEFAULT_DELTAS, pairs: list[tuple[str, str]] | None = None,
        config_file: str | None = None) -> dict:
    result: dict = {"startup": startup(config_file), "pairs": []}
    try:
        import engine

        eng = engine.Engine.load()
    except Exception as exc:
        result["error"] = f"engine failed to load: {type(exc).__name__}: {exc}"[:300]
        eng = None
    for client, provider in pairs or [(c, p) for c in PROTOCOLS for p in PROTOCOLS]:
        if eng is None:
            result["pairs"].append({"pair": f"{SHORT[client]}->{SHORT[provider]}", "client": client,
                                    "provider": provider, "error": result["error"]})
            continue
        result["pairs"].append(bench_pair(eng, client, provider, seconds, deltas))
    return result


def table(result: dict) -> str:
    def us(v):
        return f"{v:.1f}" if isinstance(v, (int, float)) else "-"

    lines = [
        "| pair | request µs | response µs | stream µs/event | stream events/s | µs/stream (events) | error |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in result["pairs"]:
        err = "; ".join(f"{k.removesuffix('_error')}: {v}" for k, v in r.items() if k.endswith("error"))
        eps = r.get("stream_events_per_s")
        per_stream = r.get("stream_us_per_stream")
        eps_cell = f"{eps:,.0f}" if eps else "-"
        stream_cell = f"{per_stream:,.0f} ({r.get('stream_events')})" if per_stream else "-"
        lines.append(
            f"| {r['pair']} | {us(r.get('request_us'))} | {us(r.get('response_us'))} | "
            f"{us(r.get('stream_us_per_event'))} | {eps_cell} | {stream_cell} | {_cell(err)} |"
        )
    s = result.get("startup") or {}
    parts = [f"engine load {s['engine_load_ms']:.0f} ms" if "engine_load_ms" in s else f"engine load: {s.get('engine_load_error')}"]
    if "config_load_ms" in s:
        parts.append(f"config load {s['config_load_ms']:.1f} ms")
    lines.append("")
    lines.append("In-process startup: " + ", ".join(parts) + ".")
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:160]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.micro", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.3, help="time per measurement")
    parser.add_argument("--deltas", type=int, default=payloads.DEFAULT_DELTAS)
    parser.add_argument("--pairs", help="comma-separated client->provider pairs (short names, e.g. chat->anthropic); default all")
    parser.add_argument("--cpu", action="store_true", help="time this process's CPU (process_time), not the wall clock")
    parser.add_argument("--best", action="store_true", help="report the fastest batch, not the median")
    args = parser.parse_args(argv)
    global CLOCK, STAT
    CLOCK = time.process_time if args.cpu else time.perf_counter
    STAT = min if args.best else statistics.median
    pairs = None
    if args.pairs:
        by_short = {v: k for k, v in SHORT.items()}
        try:
            pairs = [tuple(by_short[name.strip()] for name in item.split("->")) for item in args.pairs.split(",")]
        except KeyError as err:
            parser.error(f"unknown protocol {err} in --pairs (known: {', '.join(SHORT.values())})")
        if any(len(p) != 2 for p in pairs):
            parser.error("--pairs takes client->provider items, e.g. chat->anthropic")
    print(table(run(args.seconds, args.deltas, pairs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

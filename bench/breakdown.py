"""Where the proxy's CPU goes, component by component, beside the floor relay's.

    python -m bench.breakdown [--pairs chat->chat,chat->anthropic] [--modes json,stream]
                              [--requests N] [--json FILE]

For each chosen pair and mode, at concurrency 1 and with the bench's placement (the relay
under test on the last CPU), the proxy and the floor (`bench/floor.py`, same client
protocol) each serve N requests twice: once plain, timed by their CPU time from /proc,
and once under the py-spy sampling profiler (1,000 samples a second, only while the
process runs, without pausing it). Each sample goes to a component: the innermost frame
that names one in COMPONENTS, else what the innermost frame is (the relay's own code,
aiohttp's server or client, the event loop's C code). A component's share of the samples
times the plain run's CPU per request is its cost per request, so the floor's column says
what the stack itself costs and the proxy's what it adds, in the same run.

py-spy is not a dependency of the project: `pip install py-spy` (it reads the process
from outside, so it needs ptrace permission, which a container's root has). A sample is
of Python frames: time in C code (orjson, the regex engine, syscalls) counts for the
Python frame that called it; the event loop's own C work (uvloop's run loop, the
callbacks it runs without a Python frame) is "event loop".
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from bench import placement, procstat
from bench.payloads import PROTOCOLS, SHORT
from bench.processes import Driver, Floor, Proxy, Upstream
from bench.run import RESULTS, Target

# (component, pattern over a frame as "function (path)"). A sample is the stack's (aiohttp, the
# event loop) when its innermost frame of either kind is the stack's; else it goes to the
# innermost frame naming a component here, rules-engine frames passing it on to their caller's:
# a log line written from the middleware is the log line's, and a template run by a codec is
# the translation's.
COMPONENTS: tuple[tuple[str, str], ...] = (
    ("request log line", r"log_request|\(logging/|observability/logs\.py"),
    ("metrics", r"Metrics\.|prometheus_client/"),
    ("tracing", r"observability/tracing\.py|opentelemetry/"),
    ("usage and stop (summary rules)", r"Engine\.summary|Descriptor\.summarise"),
    ("answer model rewrite", r"http/response_model\.py"),
    ("request body: read and checks", r"http/ingress\.py"),
    ("routing", r"Proxy\.route |routing/"),
    ("browser guard (Origin, Host)", r"_refuse_foreign_pages|http/origin\.py"),
    ("response headers", r"json_response|preserved_headers|http/requestid\.py"),
    ("translation: request and response", r"Engine\.translate_(request|response)|engine/codec\.py"),
    ("stream: SSE parse", r"http/sse\.py"),
    ("stream: rules (translation, or the pass-through watch)", r"http/relay\.py|engine/stream\.py|TranslatedStream"),
    ("stream: read/write loop", r"http/streaming\.py"),
    ("upstream request setup", r"http/transport\.py"),
)
#: rules-engine frames: what they cost is their caller's component
ENGINE = re.compile(r"\(engine/(template|codegen|scope|expr|tables|context|hooks/)|<template|<transition|<conditions|"
                    r"\(rules/")
OWN = re.compile(r"\((proxai|engine|rules)/|\(bench/floor\.py|<template|<transition|<conditions")
ROOTS = re.compile(r"tools/cli\.py|\(server\.py|^(main|serve) \(bench/floor\.py")
STACK = re.compile(r"\((aiohttp|yarl|multidict|asyncio|uvloop)/")
CLIENT = re.compile(r"\(aiohttp/(client|client_reqrep|client_proto|connector)\.py")
LOOP = re.compile(r"Runner\.run |\(uvloop/")


def classify(frames: list[str]) -> str:
    """The component of one sample, frames from the outermost to the innermost."""
    if LOOP.search(frames[-1]):
        return "event loop (C)"
    inner = reversed(frames)
    for frame in inner:
        if STACK.search(frame):
            return "aiohttp client" if any(CLIENT.search(f) for f in frames) else "aiohttp server"
        if OWN.search(frame) and not ROOTS.search(frame):
            break
    else:
        return "aiohttp server"
    engine = False
    for frame in reversed(frames):
        if ROOTS.search(frame):
            break
        if ENGINE.search(frame):
            engine = True
            continue
        for name, pattern in COMPONENTS:
            if re.search(pattern, frame):
                return name
    return "rules engine, other" if engine else "the relay's own code, other"


def _short(frame: str) -> str:
    """`fn (/abs/site-packages/aiohttp/web.py:12)` -> `fn (aiohttp/web.py:12)`; the repository's own
    paths from their top folder."""
    frame = re.sub(r"\(\S*/(site-packages|lib/python3\.\d+)/", "(", frame)
    return re.sub(r"\(\S*?/((proxai|engine|rules|bench)/)", r"(\1", frame)


def shares(raw_profile: Path) -> tuple[collections.Counter, int]:
    """py-spy's raw output (`frame;frame;... count` lines) -> samples per component."""
    counts: collections.Counter = collections.Counter()
    total = 0
    for line in raw_profile.read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = [_short(f) for f in stack.split(";")]
        counts[classify(frames)] += int(n)
        total += int(n)
    return counts, total


def _run(driver: Driver, job: dict, requests: int) -> dict:
    return driver.run({**job, "concurrency": 1, "seconds": 600, "max_requests": requests})


def measure(driver: Driver, pid_of, job: dict, requests: int, spy: str, out: Path) -> dict:
    """CPU per request of the relay (plain run), then its samples by component (profiled run)."""
    _run(driver, job, max(50, requests // 10))  # warm-up
    before = procstat.sample(pid_of()).cpu_s
    res = _run(driver, job, requests)
    n = max(1, res.get("requests", 0))
    cpu_ms = (procstat.sample(pid_of()).cpu_s - before) / n * 1000
    prof = subprocess.Popen([spy, "record", "--rate", "1000", "--format", "raw", "--output", str(out),
                             "--pid", str(pid_of()), "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)  # py-spy attaches
    profiled = _run(driver, job, requests)
    prof.send_signal(signal.SIGINT)
    _, err = prof.communicate(timeout=60)
    if not out.exists():
        raise RuntimeError(f"py-spy wrote no profile: {err.decode(errors='replace')[-500:]}")
    counts, total = shares(out)
    return {"cpu_ms_per_request": cpu_ms, "requests": n, "errors": res.get("errors", 0) + profiled.get("errors", 0),
            "samples": total, "components": {k: v / total * cpu_ms * 1000 for k, v in counts.items()} if total else {}}


def table(case: str, proxy: dict, floor: dict) -> list[str]:
    lines = [f"### {case}", "",
             f"CPU per request: proxy {proxy['cpu_ms_per_request']:.3f} ms, floor {floor['cpu_ms_per_request']:.3f} ms "
             f"({proxy['cpu_ms_per_request'] / floor['cpu_ms_per_request']:.2f}×); "
             f"{proxy['samples']:,} and {floor['samples']:,} samples", "",
             "| component | proxy µs | floor µs | proxy − floor µs |", "|---|---:|---:|---:|"]
    names = sorted(set(proxy["components"]) | set(floor["components"]),
                   key=lambda k: -(proxy["components"].get(k, 0)))
    for name in names:
        p, f = proxy["components"].get(name, 0.0), floor["components"].get(name, 0.0)
        lines.append(f"| {name} | {p:.0f} | {f:.0f} | {p - f:+.0f} |")
    return lines + [""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.breakdown", description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", default="chat->chat,chat->anthropic", help="client->provider pairs (short names)")
    ap.add_argument("--modes", default="json,stream")
    ap.add_argument("--requests", type=int, default=4000, help="requests per run (each target runs twice)")
    ap.add_argument("--deltas", type=int, default=190)
    ap.add_argument("--pin", action=argparse.BooleanOptionalAction, default=None)
    ap.add_argument("--json", type=Path, default=None)
    opts = ap.parse_args(argv)
    spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if spy is None:
        print("bench.breakdown needs py-spy: pip install py-spy", file=sys.stderr)
        return 2
    names = {SHORT[p]: p for p in PROTOCOLS}
    pairs = [tuple(p.split("->")) for p in opts.pairs.split(",") if p]
    for pair in pairs:
        if len(pair) != 2 or not all(name in names for name in pair):
            ap.error(f"unknown pair {'->'.join(pair)!r}; pairs are like chat->anthropic ({', '.join(names)})")
    modes = [m for m in opts.modes.split(",") if m]
    where = placement.choose(opts.pin)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_file = opts.json or RESULTS / f"breakdown-{stamp}.json"
    result = {"placement": where.describe(), "requests": opts.requests, "cases": {}}
    report = [f"# Where the CPU goes ({time.strftime('%Y-%m-%d')}, {where.describe()})", ""]
    with tempfile.TemporaryDirectory(prefix="proxai-breakdown-") as tmp:
        tmp = Path(tmp)
        upstream = Upstream(opts.deltas, cpus=where.load)
        proxy = floor = driver = None
        try:
            proxy = Proxy(upstream.url, tmp, cpus=where.proxy)
            floor = Floor(upstream.url, cpus=where.proxy)
            driver = Driver(cpus=where.load)
            for mode in modes:
                for client, provider in pairs:
                    case = f"{client}->{provider} ({mode}, c=1)"
                    print(f"  {case}", file=sys.stderr)
                    stream = mode == "stream"
                    pt = Target("proxy", names[client], names[provider], stream)
                    ft = Target("floor", names[client], names[client], stream)
                    p = measure(driver, lambda: proxy.pid, pt.job(upstream.url, proxy.url, floor.url), opts.requests,
                                spy, tmp / f"proxy-{len(result['cases'])}.txt")
                    f = measure(driver, lambda: floor.pid, ft.job(upstream.url, proxy.url, floor.url), opts.requests,
                                spy, tmp / f"floor-{len(result['cases'])}.txt")
                    result["cases"][case] = {"proxy": p, "floor": f}
                    report += table(case, p, f)
        finally:
            for proc in (driver, floor, proxy):
                if proc is not None:
                    proc.close()
            upstream.close()
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print("\n".join(report))
    print(f"(written to {out_file})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

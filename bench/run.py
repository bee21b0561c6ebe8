"""The benchmark run: direct vs proxy for every pair, interleaved over rounds, medians reported.

    python -m bench [--quick] [--rounds N] [--concurrency 1,16,64] [--pairs GLOB,...] ...

See bench/README.md for what is measured and how to read the table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import fnmatch
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from bench import micro, payloads, placement, procstat, published, report, startup
from bench.payloads import ANTHROPIC, PATHS, PROTOCOLS, SHORT, TERMINAL
from bench.processes import BENCH_KEY, ROOT, Driver, Floor, Proxy, Upstream

RESULTS = Path(__file__).resolve().parent / "results"
MODES = ("json", "stream")
# The --workers scaling case: these pairs, 1 worker on one CPU against 2 workers on two.
SCALING_PAIRS = ("chat->chat", "chat->anthropic")
SCALING_WORKERS = 2
# The stream targets are for 200-event streams: 190 deltas make upstream streams of
# 196 (Chat), 204 (Responses) and 200 (Anthropic) events.
STREAM_DELTAS = 190


@dataclass
class Target:
    kind: str  # direct | floor (bench/floor.py, the bare relay) | proxy
    client: str
    provider: str
    stream: bool
    error: str | None = None
    runs: dict = field(default_factory=dict)  # concurrency -> [per-round result]

    @property
    def mode(self) -> str:
        return "stream" if self.stream else "json"

    @property
    def pair(self) -> str:
        return f"{SHORT[self.client]}->{SHORT[self.provider]}"

    @property
    def name(self) -> str:
        what = f"{self.kind} {SHORT[self.client]}" if self.kind != "proxy" else self.pair
        return f"{what} ({self.mode})"

    @property
    def passthrough(self) -> bool:
        return self.kind == "proxy" and self.client == self.provider

    def job(self, upstream_url: str, proxy_url: str, floor_url: str = "") -> dict:
        if self.kind != "proxy":
            base = upstream_url if self.kind == "direct" else floor_url
            url, body = base + PATHS[self.client], payloads.request(self.client, self.stream)
        else:
            model = f"{SHORT[self.provider]}/{payloads.MODEL}"
            url, body = proxy_url + PATHS[self.client], payloads.request(self.client, self.stream, model)
        headers = {"Content-Type": "application/json"}
        if self.client == ANTHROPIC:
            headers.update({"x-api-key": BENCH_KEY, "anthropic-version": "2023-06-01"})
        else:
            headers["Authorization"] = f"Bearer {BENCH_KEY}"
        return {"url": url, "headers": headers, "body": orjson.dumps(body).decode(), "stream": self.stream,
                "terminal": TERMINAL[self.client].decode() if self.stream else ""}


def targets(pairs: list[str], modes: list[str]) -> list[list[Target]]:
    """Groups of targets sharing a client protocol and mode: direct, the floor relay, then each proxied pair."""
    groups = []
    for mode in modes:
        for client in PROTOCOLS:
            chosen = [p for p in PROTOCOLS if any(fnmatch.fnmatch(f"{SHORT[client]}->{SHORT[p]}", g) for g in pairs)]
            if not chosen:
                continue
            group = [Target("direct", client, client, mode == "stream"), Target("floor", client, client, mode == "stream")]
            group += [Target("proxy", client, p, mode == "stream") for p in chosen]
            groups.append(group)
    return groups


def rotate(items: list, k: int) -> list:
    if not items:
        return items
    k %= len(items)
    return items[k:] + items[:k]


def run(opts: argparse.Namespace) -> dict:
    started = time.time()
    RESULTS.mkdir(exist_ok=True)
    groups = targets(opts.pairs, opts.modes)
    workdir = Path(tempfile.mkdtemp(prefix="proxai-bench-"))
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    profile_to = RESULTS / f"profile-{stamp}.pyisession" if opts.profile else None
    result: dict = {
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": procstat.machine(),
        "commit": _commit(),
        "options": {k: v for k, v in vars(opts).items()},
        "memory_rounds": [],
    }
    where = placement.choose(opts.pin)
    result["placement"] = where.as_dict()
    result["calibration_ms"] = [placement.calibrate(where.proxy)]
    if not opts.no_micro:
        log(opts, "micro benchmarks (engine only)")
        result["micro"] = micro.run(opts.micro_seconds, opts.deltas)
    upstream = driver = proxy = floor = None
    try:
        upstream = Upstream(opts.deltas, opts.events_per_write, opts.gap_ms, cpus=where.load)
        driver = Driver(cpus=where.load)
        if opts.startup_runs:
            log(opts, f"startup with the rules cache off, cold and warm ({opts.startup_runs} runs)")
            result["startup"] = startup.measure(upstream.url, opts.startup_runs, where.proxy)
        log(opts, f"starting the proxy {opts.proxy_args or ''}".rstrip() + f"; {where.describe()}")
        proxy = Proxy(upstream.url, workdir, opts.proxy_log_level, opts.proxy_args, profile_to, cpus=where.proxy)
        floor = Floor(upstream.url, cpus=where.proxy)
        result["proxy"] = {"startup_s": proxy.startup_s, "args": opts.proxy_args, "log_level": opts.proxy_log_level}
        if "micro" in result:
            result["micro"]["startup"].update(micro.startup(str(proxy.config_file)))
        before = procstat.sample(proxy.pid)
        result["proxy"]["rss_kb_at_start"] = before.rss_kb
        ceiling_runs: dict[int, list] = {}
        result["stream_events"] = {p: len(payloads.reply(p, True, opts.deltas)) for p in PROTOCOLS}
        probe(driver, upstream, proxy, floor, groups, opts)
        for r in range(opts.rounds):
            log(opts, f"round {r + 1}/{opts.rounds}")
            for c in opts.concurrency:
                ceiling_runs.setdefault(c, []).append(ceiling(driver, upstream, c, opts))
                for group in rotate(groups, r):
                    for target in rotate(group, r):
                        if target.error is None:
                            measure(driver, upstream, proxy, floor, target, c, opts)
                if not proxy.alive():
                    raise RuntimeError(f"the proxy died:\n{proxy.log_tail()}")
                if not floor.alive():
                    raise RuntimeError("the floor relay died")
            s = procstat.sample(proxy.pid)
            result["memory_rounds"].append({"round": r + 1, "rss_kb": s.rss_kb, "hwm_kb": s.hwm_kb})
        result["ceiling"] = [{"concurrency": c, "runs": runs} for c, runs in ceiling_runs.items()]
        end = procstat.sample(proxy.pid)
        result["proxy"].update(cpu_s_total=end.cpu_s - before.cpu_s, rss_kb_at_end=end.rss_kb, peak_rss_kb=end.hwm_kb)
        result["calibration_ms"].append(placement.calibrate(where.proxy))
        if opts.scaling and "--workers" not in opts.proxy_args:
            result["scaling"] = scaling(driver, upstream, proxy, groups, workdir, opts)
        if opts.published:
            result["published"] = published.run(driver, Target, rotate, workdir, opts, log)
    finally:
        for p in (driver, floor, proxy, upstream):
            if p is not None:
                p.close()
    result["targets"] = [target_record(t) for g in groups for t in g]
    result["wall_s"] = time.time() - started
    if profile_to is not None and profile_to.exists():
        result["profile"] = render_profile(profile_to)
    result["markdown"] = report.markdown(result)
    path = Path(opts.json) if opts.json else RESULTS / f"bench-{stamp}.json"
    path.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    result["json_path"] = str(path)
    return result


def scaling(driver: Driver, upstream: Upstream, proxy: Proxy, groups: list[list[Target]], workdir: Path, opts) -> dict:
    """1 worker (the proxy of the main rounds, on its CPU) against SCALING_WORKERS workers on as many
    CPUs, interleaved over rounds, at the high concurrency levels."""
    where = placement.choose(opts.pin, proxy_cores=SCALING_WORKERS)
    chosen = [t for g in groups for t in g if t.kind == "proxy" and t.pair in SCALING_PAIRS and t.error is None]
    levels = [c for c in opts.concurrency if c >= 16] or [max(opts.concurrency)]
    out: dict = {"workers": SCALING_WORKERS, "placement": where.as_dict(), "levels": levels, "cases": []}
    if not chosen:
        return out
    log(opts, f"--workers scaling: 1 worker against {SCALING_WORKERS}; {where.describe()}")
    wd = workdir / "scaling"
    wd.mkdir(exist_ok=True)
    args = f"{opts.proxy_args} --workers {SCALING_WORKERS}".strip()
    many = Proxy(upstream.url, wd, opts.proxy_log_level, args, cpus=where.proxy)
    try:
        cases = {(t.name, c): {"name": t.name, "pair": t.pair, "mode": t.mode, "c": c, "runs": {"1": [], str(SCALING_WORKERS): []}}
                 for t in chosen for c in levels}
        for r in range(opts.rounds):
            for c in levels:
                for t in rotate(chosen, r):
                    for workers, p in rotate([(1, proxy), (SCALING_WORKERS, many)], r):
                        job = {**t.job(upstream.url, p.url), "concurrency": c, "seconds": opts.seconds,
                               "max_requests": opts.requests}
                        p0 = procstat.sample(p.pid)
                        res = driver.run(job)
                        p1 = procstat.sample(p.pid)
                        n = max(1, res.get("requests", 0) + res.get("errors", 0))
                        res["proxy_cpu_ms_per_req"] = (p1.cpu_s - p0.cpu_s) / n * 1000
                        cases[(t.name, c)]["runs"][str(workers)].append(res)
            if not many.alive():
                raise RuntimeError(f"the {SCALING_WORKERS}-worker proxy died:\n{many.log_tail()}")
        out["cases"] = list(cases.values())
    finally:
        many.close()
    return out


def ceiling(driver: Driver, upstream: Upstream, c: int, opts) -> dict:
    """The driver against the upstream's empty `{}` answer: the most this driver can measure."""
    return driver.run({"url": upstream.url + "/ping", "body": "{}", "concurrency": c, "seconds": opts.seconds,
                       "max_requests": opts.requests})


def probe(driver: Driver, upstream: Upstream, proxy: Proxy, floor: Floor, groups: list[list[Target]], opts) -> None:
    """A couple of requests per target; a failing target becomes an error row and is skipped."""
    for group in groups:
        for t in group:
            res = driver.run({**t.job(upstream.url, proxy.url, floor.url), "concurrency": 1, "seconds": 5,
                              "max_requests": 2})
            if res.get("errors") or not res.get("requests"):
                t.error = res.get("first_error") or "no successful request"
                log(opts, f"  {t.name}: ERROR {t.error[:200]}")


def measure(driver: Driver, upstream: Upstream, proxy: Proxy, floor: Floor, t: Target, c: int, opts) -> None:
    """One case; `proxy_cpu_ms_per_req` is the CPU of the relay under test: the proxy's, or the floor's."""
    job = {**t.job(upstream.url, proxy.url, floor.url), "concurrency": c, "seconds": opts.seconds,
           "max_requests": opts.requests}
    relay = floor if t.kind == "floor" else proxy
    p0, u0 = relay.sample(), procstat.sample(upstream.pid)
    res = driver.run(job)
    p1, u1 = relay.sample(), procstat.sample(upstream.pid)
    n = max(1, res.get("requests", 0) + res.get("errors", 0))
    res["proxy_cpu_ms_per_req"] = (p1.cpu_s - p0.cpu_s) / n * 1000 if t.kind != "direct" else None
    res["upstream_cpu_ms_per_req"] = (u1.cpu_s - u0.cpu_s) / n * 1000
    res["proxy_rss_kb"] = p1.rss_kb
    t.runs.setdefault(c, []).append(res)


def target_record(t: Target) -> dict:
    return {"name": t.name, "kind": t.kind, "client": t.client, "provider": t.provider, "mode": t.mode,
            "pair": t.pair, "passthrough": t.passthrough, "error": t.error,
            "runs": {str(c): runs for c, runs in t.runs.items()}}


def render_profile(session: Path) -> list[str]:
    """The profile as a call tree and as a flat list of the functions where time is spent."""
    files = []
    for suffix, extra in ((".txt", []), (".flat.txt", ["-p", "flat", "--show-all"])):
        out = session.with_suffix(suffix)
        subprocess.run([sys.executable, "-m", "pyinstrument", "--load", str(session), "-r", "text", "--no-color",
                        *extra, "-o", str(out)], check=False, timeout=120)
        if out.exists():
            files.append(str(out.relative_to(ROOT)))
    return files


def _commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=5)
        return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "") if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def log(opts, message: str) -> None:
    if not opts.silent:
        print(message, file=sys.stderr, flush=True)


def _csv_ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description="ProxAI benchmark: proxy vs direct, every pair.")
    p.add_argument("--quick", action="store_true", help="smoke run in about a minute (1 round, concurrency 1,16, short cases)")
    p.add_argument("--rounds", type=int, help="interleaved rounds; medians are over rounds (default 3, quick 1)")
    p.add_argument("--concurrency", type=_csv_ints, help="comma-separated concurrency levels (default 1,16,64; quick 1,16)")
    p.add_argument("--seconds", type=float, help="duration of each case (default 0.75, quick 0.4)")
    p.add_argument("--requests", type=int, default=0, help="also stop each case after this many requests (0: no cap)")
    p.add_argument("--pairs", type=_csv, default=["*"], help="client->provider globs, e.g. 'chat->*,*->anthropic' (default all)")
    p.add_argument("--modes", type=_csv, default=list(MODES), help="json, stream or both (default json,stream)")
    p.add_argument("--deltas", type=int, default=STREAM_DELTAS,
                   help=f"content deltas per upstream stream (default {STREAM_DELTAS}: ~200 events)")
    p.add_argument("--pin", action=argparse.BooleanOptionalAction, default=None,
                   help="pin the proxy to one CPU and the load driver + mock upstream to the others "
                        "(default: on with 2+ CPUs)")
    p.add_argument("--events-per-write", type=int, default=1, help="upstream SSE events per socket write (default 1)")
    p.add_argument("--gap-ms", type=float, default=0.0,
                   help="upstream pause between stream writes (default 0: as fast as possible)")
    p.add_argument("--scaling", action=argparse.BooleanOptionalAction, default=True,
                   help=f"also run {', '.join(SCALING_PAIRS)} with 1 worker on one CPU against {SCALING_WORKERS} "
                        f"workers on {SCALING_WORKERS} CPUs (default on)")
    p.add_argument("--published", action=argparse.BooleanOptionalAction, default=True,
                   help="also run the published gateway method: added p50/p99 at c=1 and sustained req/s against "
                        "an upstream answering after --upstream-latency-ms, 1 and 2 workers (default on)")
    p.add_argument("--upstream-latency-ms", type=float, default=20.0,
                   help="the published method's upstream latency (default 20)")
    p.add_argument("--published-concurrency", type=int,
                   help="concurrency of the published method's req/s (default 64, quick 16)")
    p.add_argument("--published-requests", type=int,
                   help="requests per round of the published method's latency at c=1 (default 200, quick 40)")
    p.add_argument("--startup-runs", type=int,
                   help="spawn-to-healthy runs with the compiled-rules cache off, cold and warm (default 3, quick 1; 0: none)")
    p.add_argument("--micro-seconds", type=float, help="time per micro measurement (default 0.3, quick 0.1)")
    p.add_argument("--no-micro", action="store_true", help="skip the engine micro benchmarks")
    p.add_argument("--proxy-args", default="", help="extra arguments for server.py, e.g. '--workers 2'")
    p.add_argument("--proxy-log-level", default="info", choices=["debug", "info", "warning", "error"],
                   help="the proxy's logging.level (default info, the product default: one line per request)")
    p.add_argument("--profile", action="store_true",
                   help="run the proxy under pyinstrument (must be installed) and save its report next to the results; "
                        "timings of a profiled run are not comparable")
    p.add_argument("--json", help="where to write the results JSON (default bench/results/bench-<time>.json)")
    p.add_argument("--silent", action="store_true", help="no progress lines on stderr")
    return p


def options(argv: list[str] | None = None) -> argparse.Namespace:
    opts = parser().parse_args(argv)
    quick = opts.quick
    opts.rounds = opts.rounds or (1 if quick else 3)
    opts.concurrency = opts.concurrency or ([1, 16] if quick else [1, 16, 64])
    opts.seconds = opts.seconds or (0.4 if quick else 0.75)
    opts.micro_seconds = opts.micro_seconds or (0.1 if quick else 0.3)
    if opts.startup_runs is None:
        opts.startup_runs = 1 if quick else 3
    opts.published_concurrency = opts.published_concurrency or (16 if quick else 64)
    opts.published_requests = opts.published_requests or (40 if quick else 200)
    bad = [m for m in opts.modes if m not in MODES]
    if bad:
        parser().error(f"unknown mode {bad[0]!r}; use json and/or stream")
    return opts


def main(argv: list[str] | None = None) -> int:
    opts = options(argv)
    if opts.profile:
        try:
            import pyinstrument  # noqa: F401
        except ImportError:
            print("--profile needs pyinstrument: pip install pyinstrument", file=sys.stderr)
            return 2
    result = run(opts)
    print(result["markdown"])
    print(f"\nResults: {result['json_path']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a request's time to first event goes: the proxy and the floor relay, stage by stage.

    python -m bench.timeline [--pairs chat->chat,chat->anthropic] [--modes stream,json] [--requests N]
                             [--rounds R] [--pin/--no-pin] [--overhead] [--json FILE]

At concurrency 1, the proxy and the floor relay (same client protocol) each run under
bench/timeline_probe.py, interleaved over rounds, placed as in the main bench. Every request
gets a timestamp at each stage; a round's figure for a stage is the median over its
requests (the first fifth of each round is warm-up, not counted), the table's the median
over rounds. See bench/README.md, "Where the first event's time goes".
"""

from __future__ import annotations

import argparse
import datetime as dt
import fnmatch
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson

from bench import placement, procstat
from bench.payloads import PROTOCOLS, SHORT
from bench.processes import PYTHON, Driver, Floor, Proxy, Upstream, spawn_listening, stop
from bench.run import RESULTS, STREAM_DELTAS, Target, _commit

PROBE = ["-m", "bench.timeline_probe"]

# Each stage's figure is the time from the target's previous stage in its list to this one.
PROXY_STAGES = {
    "stream": ["received", "handler", "body_read", "serve", "upstream_send", "upstream_headers", "stream_setup",
               "first_read", "first_event", "prepared", "first_write", "end", "observed"],
    # After the handler: the log line and metrics, and the whole answer sent, in the order the
    # code does them (the records say which).
    "json": ["received", "handler", "body_read", "serve", "upstream_send", "upstream_headers", "end",
             "prepared", "answer_sent", "observed"],
}
FLOOR_STAGES = ["received", "handler", "upstream_send", "upstream_headers", "prepared", "first_write", "end"]
# The first body byte leaves the relay when this stage is done.
FIRST_BYTE = {("proxy", "stream"): "first_write", ("proxy", "json"): "answer_sent",
              ("floor", "stream"): "first_write", ("floor", "json"): "first_write"}

LABELS = {
    "handler": "handler (Proxy.handle; the floor's relay)",
    "body_read": "body read (admit)",
    "serve": "serve starts",
    "upstream_send": "upstream send starts",
    "upstream_headers": "upstream headers in",
    "stream_setup": "stream set up (prime starts)",
    "first_read": "first upstream read returns",
    "first_event": "first event decoded (primed)",
    "prepared": "response prepared",
    "first_write": "first write done",
    "end": "end (handler returns)",
    "answer_sent": "tail: whole answer sent",
    "observed": "tail: log line + metrics (Metrics.observe returns)",
    "idle": "idle gap to the next request's bytes",
}


def stages(kind: str, mode: str) -> list[str]:
    return PROXY_STAGES[mode] if kind == "proxy" else FLOOR_STAGES


# --- the probed processes ------------------------------------------------------------------------

class Probed:
    """A process under the probe: `collect()` has it write the records since the last collect."""

    def __init__(self, pid: int, out: Path):
        self.pid, self.out, self.k = pid, out, 0

    def collect(self, timeout: float = 15.0) -> list[dict]:
        self.k += 1
        path = self.out / f"timeline-{self.pid}-{self.k}.json"
        os.kill(self.pid, signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while not path.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the timeline probe of process {self.pid} wrote nothing within {timeout:g}s")
            time.sleep(0.01)
        return orjson.loads(path.read_bytes())


class ProbedFloor:
    """bench/floor.py under the probe, pinned like the proxy."""

    def __init__(self, upstream_url: str, out: Path, cpus: tuple[int, ...] | None):
        cmd = [PYTHON, *PROBE, "floor", "--out", str(out), "--upstream", upstream_url]
        self.proc, port = spawn_listening(cmd, cpus, "the probed floor relay")
        self.url = f"http://127.0.0.1:{port}"
        self.pid = self.proc.pid

    def close(self) -> None:
        stop(self.proc)


# --- one case ------------------------------------------------------------------------------------

def _us(values: list[int]) -> float | None:
    return statistics.median(values) / 1000 if values else None


def summarize(records: list[dict], kind: str, mode: str, driver: dict) -> dict:
    """A round's medians (µs) for one target from its probe's records and the driver's answer."""
    names = stages(kind, mode)
    whole = [r for r in records if r.get("received") and all(s in r for s in names)]
    if whole:  # the stages in the order they happened (the tail's order is the code's)
        names = sorted(names, key=lambda s: statistics.median(r[s] - r["received"] for r in whole))
    out: dict = {"requests": len(records), "complete": len(whole), "order": names, "stages": {}, "from_received": {}}
    for prev, stage in zip(names, names[1:]):
        out["stages"][stage] = _us([r[stage] - r[prev] for r in whole])
        out["from_received"][stage] = _us([r[stage] - r["received"] for r in whole])
    last = names[-1]
    out["stages"]["idle"] = _us([b["received"] - a[last] for a, b in zip(records, records[1:])
                                 if last in a and b.get("received") and b["received"] > a[last]])
    first = FIRST_BYTE[(kind, mode)]
    out["first_byte_written"] = out["from_received"][first]
    ttfb = (driver.get("ttfb_ms") or {}).get("p50")
    out["ttfb"] = ttfb * 1000 if ttfb is not None else None
    out["outside"] = out["ttfb"] - out["first_byte_written"] if None not in (out["ttfb"], out["first_byte_written"]) else None
    out["driver"] = {k: driver.get(k) for k in ("requests", "errors", "first_error", "ttfb_ms", "latency_ms")}
    return out


def measure(driver: Driver, job: dict, requests: int, probe: Probed | None) -> tuple[list[dict], dict]:
    warmup = requests // 5
    if warmup:
        driver.run({**job, "max_requests": warmup})
    if probe is not None:
        probe.collect()  # the warm-up's records, dropped
    result = driver.run({**job, "max_requests": requests - warmup})
    if result.get("errors"):
        raise RuntimeError(f"{result['errors']} failed requests; the first: {result.get('first_error')}")
    return (probe.collect() if probe is not None else []), result


def cases(pair_globs: list[str], modes: list[str]) -> list[tuple[str, str, str]]:
    chosen = []
    for client in PROTOCOLS:
        for provider in PROTOCOLS:
            if any(fnmatch.fnmatch(f"{SHORT[client]}->{SHORT[provider]}", g) for g in pair_globs):
                chosen += [(client, provider, mode) for mode in modes]
    return chosen


def run(opts: argparse.Namespace) -> dict:
    RESULTS.mkdir(exist_ok=True)
    where = placement.choose(opts.pin)
    chosen = cases(opts.pairs, opts.modes)
    if not chosen:
        raise SystemExit(f"no pair matches {','.join(opts.pairs)}")
    result: dict = {
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": procstat.machine(), "commit": _commit(), "options": vars(opts),
        "placement": where.as_dict(), "calibration_ms": [placement.calibrate(where.proxy)], "rounds": [],
    }
    workdir = Path(tempfile.mkdtemp(prefix="proxai-timeline-"))
    started: list = []
    try:
        upstream = Upstream(STREAM_DELTAS, cpus=where.load)
        started.append(upstream)
        driver = Driver(cpus=where.load)
        started.append(driver)
        log(opts, f"starting the probed proxy and floor; {where.describe()}")
        proxy = Proxy(upstream.url, workdir, "info", cpus=where.proxy,
                      wrapper=[*PROBE, "proxy", "--out", str(workdir / "proxy")])
        started.append(proxy)
        floor = ProbedFloor(upstream.url, workdir / "floor", where.proxy)
        started.append(floor)
        relays = {"proxy": (proxy.url, Probed(proxy.pid, workdir / "proxy")),
                  "floor": (floor.url, Probed(floor.pid, workdir / "floor"))}
        if opts.overhead:  # the same relays without the probe, for its cost
            bare_dir = workdir / "bare"
            bare_dir.mkdir()
            bare_proxy = Proxy(upstream.url, bare_dir, "info", cpus=where.proxy)
            started.append(bare_proxy)
            bare_floor = Floor(upstream.url, cpus=where.proxy)
            started.append(bare_floor)
            relays.update({"proxy_bare": (bare_proxy.url, None), "floor_bare": (bare_floor.url, None)})
        for r in range(opts.rounds):
            log(opts, f"round {r + 1}/{opts.rounds}")
            for client, provider, mode in chosen:
                pair = f"{SHORT[client]}->{SHORT[provider]}"
                order = list(relays)
                order = order[r % len(order):] + order[:r % len(order)]  # A B, then B A, ...
                for name in order:
                    url, probe = relays[name]
                    kind = name.split("_")[0]
                    target = Target(kind, client, provider if kind == "proxy" else client, mode == "stream")
                    job = {**target.job(upstream.url, url, url), "concurrency": 1, "seconds": 600}
                    try:
                        records, answer = measure(driver, job, opts.requests, probe)
                    except RuntimeError as exc:
                        raise RuntimeError(f"{name} {pair} ({mode}): {exc}") from None
                    row = {"round": r + 1, "pair": pair, "mode": mode, "target": name}
                    if probe is None:
                        ttfb = (answer.get("ttfb_ms") or {}).get("p50")
                        row.update(ttfb=ttfb * 1000 if ttfb is not None else None, driver=answer)
                    else:
                        row.update(summarize(records, kind, mode, answer))
                    result["rounds"].append(row)
        result["calibration_ms"].append(placement.calibrate(where.proxy))
    finally:
        for p in reversed(started):
            p.close()
    result["summary"] = summary(result["rounds"])
    result["markdown"] = markdown(result)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = Path(opts.json) if opts.json else RESULTS / f"timeline-{stamp}.json"
    path.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    result["json_path"] = str(path)
    return result


# --- medians over rounds and the report ----------------------------------------------------------

def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summary(rounds: list[dict]) -> list[dict]:
    """Per pair, mode and target: the median over rounds of each per-round median."""
    groups: dict[tuple, list[dict]] = {}
    for row in rounds:
        groups.setdefault((row["pair"], row["mode"], row["target"]), []).append(row)
    out = []
    for (pair, mode, target), rows in groups.items():
        entry: dict = {"pair": pair, "mode": mode, "target": target, "rounds": len(rows),
                       "ttfb": _median([r.get("ttfb") for r in rows])}
        if "stages" in rows[0]:
            entry["order"] = rows[0]["order"]
            for key in ("stages", "from_received"):
                entry[key] = {s: _median([r[key].get(s) for r in rows]) for s in rows[0][key]}
            for key in ("first_byte_written", "outside"):
                entry[key] = _median([r.get(key) for r in rows])
        out.append(entry)
    return out


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def _diff(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None else f"{a - b:+,.1f}"


def _previous(order: list[str], stage: str) -> str | None:
    if stage == "idle":
        return order[-1]
    return order[order.index(stage) - 1] if stage in order[1:] else None


def _rows(proxy: list[str], floor: list[str]) -> list[str]:
    """The proxy's stages in order, each of the floor's own after the floor stage before it."""
    rows = list(proxy)
    for prev, stage in zip(floor, floor[1:]):
        if stage not in rows:
            rows.insert(rows.index(prev) + 1, stage)
    return rows[1:] + ["idle"]


def table(pair: str, mode: str, proxy: dict, floor: dict) -> str:
    lines = [f"### {pair} ({mode}), µs", "",
             "| stage | proxy | floor | proxy − floor | proxy from received | floor from received | proxy − floor from received |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for stage in _rows(proxy["order"], floor["order"]):
        p, f = proxy["stages"].get(stage), floor["stages"].get(stage)
        # a difference only where both targets time the same interval
        same = _previous(proxy["order"], stage) == _previous(floor["order"], stage)
        pr, fr = proxy["from_received"].get(stage), floor["from_received"].get(stage)
        lines.append(f"| {LABELS[stage]} | {_fmt(p)} | {_fmt(f)} | {_diff(p, f) if same else '-'} "
                     f"| {_fmt(pr)} | {_fmt(fr)} | {_diff(pr, fr)} |")
    for label, key in (("**TTFB p50 (driver)**", "ttfb"), ("relay: received to first body byte written", "first_byte_written"),
                       ("outside the relay (TTFB − the above)", "outside")):
        lines.append(f"| {label} | {_fmt(proxy.get(key))} | {_fmt(floor.get(key))} | {_diff(proxy.get(key), floor.get(key))} | | | |")
    return "\n".join(lines)


def markdown(result: dict) -> str:
    by = {(e["pair"], e["mode"], e["target"]): e for e in result["summary"]}
    rounds = max((e["rounds"] for e in result["summary"]), default=0)
    cal = result["calibration_ms"]
    out = ["## Where the first event's time goes", "",
           f"Concurrency 1, {result['options']['requests']} requests a round (the first fifth warm-up), "
           f"median over {rounds} round(s); {result['placement']['description']}; "
           f"CPU speed check {' → '.join(f'{c:.1f}' for c in cal)} ms. Each stage: the time from the "
           "target's previous stage."]
    seen = []
    for e in result["summary"]:
        if (e["pair"], e["mode"]) not in seen:
            seen.append((e["pair"], e["mode"]))
    for pair, mode in seen:
        proxy, floor = by.get((pair, mode, "proxy")), by.get((pair, mode, "floor"))
        if proxy and floor:
            out += ["", table(pair, mode, proxy, floor)]
    bare = [(k, e) for k, e in by.items() if k[2].endswith("_bare")]
    if bare:
        out += ["", "Probe overhead, TTFB p50 µs (probed / without the probe):", ""]
        for (pair, mode, name), e in bare:
            probed = by.get((pair, mode, name.removesuffix("_bare")))
            out.append(f"- {name.removesuffix('_bare')} {pair} ({mode}): {_fmt(probed and probed['ttfb'])} / "
                       f"{_fmt(e['ttfb'])} ({_diff(probed and probed['ttfb'], e['ttfb'])})")
    return "\n".join(out)


def log(opts, message: str) -> None:
    if not opts.silent:
        print(message, file=sys.stderr, flush=True)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.timeline", description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=lambda s: [x for x in s.split(",") if x], default=["chat->chat", "chat->anthropic"],
                   help="client->provider pairs (globs), default chat->chat,chat->anthropic")
    p.add_argument("--modes", type=lambda s: [x for x in s.split(",") if x], default=["stream", "json"],
                   help="stream, json or both (default both)")
    p.add_argument("--requests", type=int, default=2000, help="requests per target and round (default 2000)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument("--pin", action=argparse.BooleanOptionalAction, default=None,
                   help="the main bench's placement (default: on with 2 or more CPUs)")
    p.add_argument("--overhead", action="store_true",
                   help="also run the proxy and the floor without the probe, for the probe's cost on TTFB")
    p.add_argument("--json", help="where to write the results (default bench/results/timeline-<time>.json)")
    p.add_argument("--silent", action="store_true", help="no progress lines on stderr")
    return p


def main(argv: list[str] | None = None) -> int:
    opts = parser().parse_args(argv)
    bad = [m for m in opts.modes if m not in PROXY_STAGES]
    if bad:
        parser().error(f"unknown mode {bad[0]!r}; use stream and/or json")
    if opts.requests < 5:
        parser().error("--requests must be at least 5")
    result = run(opts)
    print(result["markdown"])
    print(f"\nResults: {result['json_path']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

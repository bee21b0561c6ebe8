"""Startup with and without the compiled-rules cache: spawn to a healthy /healthz.

    python -m bench.startup [--runs N]

Each run spawns server.py (the bench's generated config, the shipped rules) and times
it until /healthz answers 200, in three settings, interleaved: `off`
(PROXAI_RULES_CACHE=off: every process reads, checks and compiles the rules), `cold`
(an empty cache directory: the same compile, plus writing the entry) and `warm` (the
entry the cold run wrote: the rules load from it). Reports the median and range of
the wall time and of the proxy's CPU time until then (user + system from /proc: on a
busy machine the wall time waits for other work, the CPU time much less).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from bench import placement
from bench.processes import Proxy, Upstream

SETTINGS = ("off", "cold", "warm")


@contextmanager
def _cache_env(value: str):
    saved = os.environ.get("PROXAI_RULES_CACHE")
    os.environ["PROXAI_RULES_CACHE"] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PROXAI_RULES_CACHE", None)
        else:
            os.environ["PROXAI_RULES_CACHE"] = saved


def _spawn(upstream_url: str, workdir: Path, cache: str, cpus) -> tuple[float, float]:
    with _cache_env(cache):
        proxy = Proxy(upstream_url, workdir, "warning", cpus=cpus, startup_timeout=60)
    try:
        return proxy.startup_s, proxy.sample().cpu_s
    finally:
        proxy.close()


def measure(upstream_url: str, runs: int = 3, cpus=None) -> dict:
    """{setting: [seconds, ...], setting_cpu: [seconds, ...]} over ``runs`` interleaved
    rounds of off, cold, warm."""
    out: dict = {k: [] for s in SETTINGS for k in (s, f"{s}_cpu")}
    with tempfile.TemporaryDirectory(prefix="proxai-startup-") as tmp:
        tmp = Path(tmp)
        for r in range(runs):
            cache_dir = tmp / f"cache-{r}"
            for setting, cache in (("off", "off"), ("cold", str(cache_dir)), ("warm", str(cache_dir))):
                wall, cpu = _spawn(upstream_url, tmp, cache, cpus)
                out[setting].append(wall)
                out[f"{setting}_cpu"].append(cpu)
    return out


def summary(figures: dict) -> str:
    """One line: each setting's median (range) in seconds."""
    def spread(values):
        return f"{statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})"

    parts = []
    for setting in SETTINGS:
        if figures.get(setting):
            cpu = figures.get(f"{setting}_cpu")
            parts.append(f"{setting} {spread(figures[setting])}" + (f", CPU {spread(cpu)}" if cpu else ""))
    return "startup, spawn to healthy /healthz, rules cache " + "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="interleaved rounds of off, cold, warm")
    parser.add_argument("--pin", action=argparse.BooleanOptionalAction, default=None,
                        help="pin the proxy to one CPU as the bench does (default: on with 2 or more CPUs)")
    args = parser.parse_args(argv)
    where = placement.choose(args.pin)
    upstream = Upstream(8, 1, 0, cpus=where.load)
    try:
        started = time.time()
        figures = measure(upstream.url, args.runs, where.proxy)
    finally:
        upstream.close()
    print(summary(figures) + f"; {args.runs} runs, {time.time() - started:.0f} s in all.")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The bench's CPU placement, the issue's target table and the --workers scaling case."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from bench import placement, procstat, report, run
from bench.processes import Proxy, Upstream

pytestmark = pytest.mark.timeout(120)

two_cpus = pytest.mark.skipif(len(placement.available()) < 2, reason="pinning needs two CPUs")


def test_placement_defaults_to_pinning_with_two_cpus_and_keeps_proxy_and_load_apart():
    cpus = placement.available()
    assert placement.choose(False) == placement.Placement()
    assert not placement.choose(False).pinned and "not pinned" in placement.choose(False).describe()
    auto = placement.choose(None)
    assert auto.pinned == (len(cpus) >= 2)
    if len(cpus) >= 2:
        assert len(auto.proxy) == 1 and not set(auto.proxy) & set(auto.load)
        assert set(auto.proxy) | set(auto.load) == set(cpus)
        assert f"pinned to CPU {auto.proxy[0]}" in auto.describe()
        wide = placement.choose(True, proxy_cores=len(cpus))
        assert set(wide.proxy) == set(cpus) and "sharing CPU" in wide.describe()


@two_cpus
def test_pinned_processes_and_forked_workers_run_only_on_their_cpus():
    where = placement.choose(True)
    upstream = Upstream(8, cpus=where.load)
    try:
        assert os.sched_getaffinity(upstream.pid) == set(where.load)
        proxy = Proxy(upstream.url, Path(tempfile.mkdtemp(prefix="proxai-bench-test-")), "warning", "--workers 2",
                      cpus=where.proxy)
        try:
            pids = procstat.tree(proxy.pid)
            assert len(pids) >= 3  # the supervisor and its two workers
            for pid in pids:
                assert os.sched_getaffinity(pid) == set(where.proxy), pid
        finally:
            proxy.close()
    finally:
        upstream.close()


@two_cpus
@pytest.mark.slow
def test_pinned_run_reports_placement_every_goal_and_the_scaling_case(tmp_path):
    opts = run.options(["--rounds", "1", "--concurrency", "1,16", "--requests", "20", "--seconds", "5", "--no-micro",
                        "--pairs", "chat->chat,chat->anthropic", "--proxy-log-level", "warning", "--silent",
                        "--json", str(tmp_path / "bench.json")])
    assert opts.pin is None and opts.deltas == run.STREAM_DELTAS and opts.scaling
    result = run.run(opts)

    assert result["placement"]["proxy"] and result["placement"]["load"]
    assert 190 <= min(result["stream_events"].values()) and max(result["stream_events"].values()) <= 210
    md = result["markdown"]
    assert f"- placement: {result['placement']['description']}" in md
    table = {t["target"]: t for t in report.targets(result)}
    goals = {
        "translated non-streaming: proxy CPU per request (c=1)": "<= 0.40 ms",
        "translated non-streaming: added p50 latency, c=1": "<= 0.6 ms over direct",
        "translated non-streaming: throughput at c=16": ">= 2,500 req/s",
        "translated stream: proxy CPU per stream (c=1)": "<= 2.5 ms per 200 events (12.5 µs/event)",
        "pass-through stream: proxy CPU per stream (c=1)": "<= 1.5 ms per 200 events (7.5 µs/event)",
        "streams: added time to first event, c=1": "<= 0.5 ms over direct",
        "pass-through non-streaming: proxy CPU per request (c=1)": "<= 0.30 ms",
    }
    for name, goal in goals.items():
        t = table[name]
        assert t["goal"] == goal and t["value"] is not None, name
        assert t["verdict"] == "met" or t["verdict"].startswith("**missed** by"), (name, t["verdict"])
        assert f"| {name} | {goal} | {t['measured']} | {t['verdict']} |" in md
    assert "µs per event" in table["translated stream: proxy CPU per stream (c=1)"]["measured"]

    cases = {(c["name"], c["c"]): c for c in result["scaling"]["cases"]}
    assert set(cases) == {(f"{p} ({m})", 16) for p in run.SCALING_PAIRS for m in ("json", "stream")}
    for case in cases.values():
        for workers in ("1", "2"):
            (res,) = case["runs"][workers]
            assert res["requests"] == 20 and res["errors"] == 0, (case["name"], workers, res.get("first_error"))
    assert "## `--workers` scaling" in md and "N cores about N times that" in md


def test_verdicts_say_by_how_much_a_goal_is_missed():
    assert report._verdict(0.3, 0.4) == "met"
    assert report._verdict(0.5, 0.4) == "**missed** by 0.10 ms (25%)"
    assert report._verdict(2600, 2500, "req/s", at_least=True) == "met"
    assert report._verdict(2000, 2500, "req/s", at_least=True) == "**missed** by 500 req/s (20%)"
    assert report._verdict(None, 0.4) == "not measured"

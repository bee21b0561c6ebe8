"""The benchmark suite on a tiny budget, so the instrument keeps working as the proxy changes."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import orjson
import pytest

from bench import micro, payloads, report, run
from bench.payloads import PROTOCOLS, SHORT

pytestmark = pytest.mark.timeout(60)


def test_micro_benchmarks_measure_every_pair_or_say_why_not():
    result = micro.run(seconds=0.005, deltas=8)
    pairs = {r["pair"]: r for r in result["pairs"]}
    assert set(pairs) == {f"{SHORT[c]}->{SHORT[p]}" for c in PROTOCOLS for p in PROTOCOLS}
    for protocol in PROTOCOLS:
        row = pairs[f"{SHORT[protocol]}->{SHORT[protocol]}"]
        # pass-through streams only run the terminal watcher
        assert row["stream_us_per_event"] > 0
        assert row["stream_events"] == len(payloads.reply(protocol, True, 8))
    for row in result["pairs"]:
        if row["client"] == row["provider"]:
            continue
        for kind in ("request", "response", "stream"):
            measured = row.get("stream_us_per_event") if kind == "stream" else row.get(f"{kind}_us")
            assert measured or row.get(f"{kind}_error") or row.get("error"), (row["pair"], kind)
    table = micro.table(result)
    assert table.count("\n| ") >= 9 and "stream µs/event" in table


def test_orchestrator_runs_every_target_and_writes_results(tmp_path):
    out = tmp_path / "bench.json"
    opts = run.options(["--rounds", "1", "--concurrency", "1", "--requests", "3", "--seconds", "5",
                        "--published-requests", "3", "--published-concurrency", "2",
                        "--no-micro", "--deltas", "8", "--proxy-log-level", "warning", "--silent", "--json", str(out),
                        "--startup-runs", "1"])
    result = run.run(opts)

    saved = json.loads(out.read_text())
    assert saved["machine"]["nproc"] >= 1 and saved["machine"]["python"]
    assert 0 < saved["proxy"]["startup_s"] < 30
    assert saved["memory_rounds"][0]["rss_kb"] > 1000
    assert saved["ceiling"][0]["runs"][0]["requests"] == 3
    targets = {t["name"]: t for t in saved["targets"]}
    assert len(targets) == 2 * (3 + 3 + 9)
    for protocol in PROTOCOLS:
        for mode in ("json", "stream"):
            for name in (f"direct {SHORT[protocol]} ({mode})", f"floor {SHORT[protocol]} ({mode})",
                         f"{SHORT[protocol]}->{SHORT[protocol]} ({mode})"):
                t = targets[name]
                assert t["error"] is None, (name, t["error"])
                (res,) = t["runs"]["1"]
                assert res["requests"] == 3 and res["errors"] == 0, name
                assert res["latency_ms"]["p50"] > 0 and res["ttfb_ms"]["p50"] <= res["latency_ms"]["p50"]
            assert targets[f"{SHORT[protocol]}->{SHORT[protocol]} ({mode})"]["runs"]["1"][0]["proxy_cpu_ms_per_req"] >= 0
            # the floor relay's own CPU, read from its process like the proxy's
            assert targets[f"floor {SHORT[protocol]} ({mode})"]["runs"]["1"][0]["proxy_cpu_ms_per_req"] >= 0
    for t in saved["targets"]:  # a translated pair either ran or carries its error
        assert t["error"] or t["runs"]["1"][0]["requests"] == 3, t["name"]

    # startup with the compiled-rules cache off, then cold (compile, write the entry), then warm (load it)
    assert {k: len(v) for k, v in saved["startup"].items()} == {
        k: 1 for s in ("off", "cold", "warm") for k in (s, f"{s}_cpu")}
    assert all(0 < v[0] < 30 for v in saved["startup"].values())

    md = result["markdown"]
    assert "rules cache off " in md and "; warm " in md
    assert "## Targets" in md and "## Load driver ceiling" in md and "## Against the floor" in md
    assert "| CPU × floor | p50 × floor | p99 × floor |" in md and "| TTFB × floor |" in md
    for name in targets:
        assert f"| {name} |" in md
    assert md == report.markdown(saved)

    # the published method: its own upstream answering after 20 ms, 1 and 2 workers, the floor alongside
    pub = saved["published"]
    assert pub["upstream_latency_ms"] == 20
    for case in pub["latency"]:
        (res,) = case["runs"]
        assert res["requests"] == 3 and res["errors"] == 0, case["name"]
        assert res["latency_ms"]["p50"] >= 20, case["name"]  # the upstream's wait is in every answer
    assert {(c["kind"], c["workers"]) for c in pub["rps"]} == {(k, w) for k in ("floor", "proxy") for w in (1, 2)}
    assert all(c["runs"][0]["requests"] == 3 and c["runs"][0]["errors"] == 0 for c in pub["rps"])
    assert "## Published method (mock upstream answering after 20 ms)" in md and "| 2 / 1 |" in md


def test_floor_relays_the_body_to_the_same_path_and_the_stream_as_read(tmp_path):
    """bench/floor.py: the request body reaches the upstream at the request's path, the answer comes back whole."""
    from bench.processes import Floor, Upstream

    upstream = Upstream(deltas=8)
    floor = None
    try:
        floor = Floor(upstream.url)
        for protocol in PROTOCOLS:
            for stream in (False, True):
                body = json.dumps(payloads.request(protocol, stream)).encode()
                req = urllib.request.Request(floor.url + payloads.PATHS[protocol], data=body,
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=10) as resp:
                    got = resp.read()
                    assert resp.status == 200
                if stream:
                    assert payloads.TERMINAL[protocol] in got, protocol
                else:
                    expected = payloads.reply(protocol, False, 8)  # its ids are fresh each time
                    assert json.loads(got).keys() == expected.keys() and len(got) == len(orjson.dumps(expected))
        missing = urllib.request.Request(floor.url + "/nowhere", data=b"{}")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(missing, timeout=10)
        assert err.value.code == 404  # the upstream's status, relayed
        assert floor.alive() and floor.sample().cpu_s >= 0
    finally:
        if floor is not None:
            floor.close()
        upstream.close()

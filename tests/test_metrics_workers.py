"""One /metrics for `--workers 2`: every scrape, whichever worker answers it, counts the
requests of both, counters never go back, and a worker that dies keeps its counts."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from harness import default_config
from proxai.mock import Text, Turn, Usage
from server_process import ServerProcess

REQUESTS = 400
CONCURRENCY = 8
PER_CONNECTION = 5  # new connections often, so the kernel spreads them over both workers
BODY = {"model": "anthropic/m", "messages": [{"role": "user", "content": "hi"}]}
TOTAL = "proxai_requests_total"
ROOT = Path(__file__).resolve().parent.parent


def parse(text: str) -> dict[tuple, float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def total(samples: dict, name: str, **labels) -> float:
    want = set(labels.items())
    return sum(v for (n, lbl), v in samples.items() if n == name and want <= set(lbl))


def pids(samples: dict) -> set[str]:
    return {dict(lbl)["pid"] for (n, lbl) in samples if n == "process_resident_memory_bytes"}


def scrape(server: ServerProcess) -> dict[tuple, float]:
    return parse(server.get("/metrics").decode())


def metrics_dir(pid: str) -> str:
    """The directory a worker writes its metric files to, from the files it has mapped."""
    for line in open(f"/proc/{pid}/maps").read().splitlines():
        path = line.split(maxsplit=5)[-1]
        if path.endswith(f"/counter_{pid}.db"):
            return os.path.dirname(path)
    raise AssertionError(f"worker {pid} maps no metric file")


def served_by(directory: str, pid: str) -> float:
    """proxai_requests_total as worker `pid` alone counted it."""
    from prometheus_client.mmap_dict import MmapedDict

    return sum(value for key, value, _, _ in MmapedDict.read_all_values_from_file(f"{directory}/counter_{pid}.db")
               if json.loads(key)[1] == TOTAL)


def load(server: ServerProcess, count: int, worker: int) -> list[int]:
    statuses = []
    sent = 0
    while sent < count:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        for _ in range(min(PER_CONNECTION, count - sent)):
            stream = (sent + worker) % 2 == 0
            conn.request("POST", "/v1/chat/completions", body=json.dumps({**BODY, "stream": stream}),
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            statuses.append(resp.status)
            sent += 1
        conn.close()
    return statuses


def run_load(server: ServerProcess, count: int) -> list[int]:
    statuses: list[int] = []
    share = [count // CONCURRENCY + (i < count % CONCURRENCY) for i in range(CONCURRENCY)]
    threads = [threading.Thread(target=lambda n=n, i=i: statuses.extend(load(server, n, i))) for i, n in enumerate(share)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return statuses


def test_two_workers_serve_one_monotonic_metrics_endpoint(harness, mock, tmp_path):
    mock.responder = lambda request: Turn([Text("ok")], usage=Usage(input_tokens=3, output_tokens=2))
    server = ServerProcess(tmp_path, default_config(harness.mock_url), workers=2)
    try:
        seen: list[dict] = []
        done = threading.Event()

        def scraper() -> None:
            while not done.is_set():
                seen.append(scrape(server))

        watcher = threading.Thread(target=scraper)
        watcher.start()
        statuses = run_load(server, REQUESTS)
        done.set()
        watcher.join(30)
        after = [scrape(server) for _ in range(8)]
        assert statuses == [200] * REQUESTS

        assert len(seen) >= 5
        for a, b in zip(seen + after, (seen + after)[1:]):
            for key, v in a.items():
                if key[0].endswith(("_total", "_count", "_sum", "_bucket")) and not key[0].startswith("process_"):
                    assert b.get(key, 0) >= v, (key, v, b.get(key))
        for s in after:
            assert total(s, TOTAL) == REQUESTS
            assert total(s, TOTAL, outcome="complete") == REQUESTS // 2
            assert total(s, TOTAL, outcome="none", status="200") == REQUESTS // 2
            assert total(s, "proxai_request_duration_seconds_count") == REQUESTS
            assert total(s, "proxai_tokens_total", kind="input") == 3 * REQUESTS
            assert total(s, "proxai_requests_in_flight") == 0
            assert not any(name.endswith("_created") for name, _ in s)
            assert len(pids(s)) == 2 and total(s, "process_open_fds") > 0
        # both workers served: the scrapes above, whichever worker answered, counted them all
        workers = pids(after[0])
        directory = metrics_dir(min(workers))
        shares = {pid: served_by(directory, pid) for pid in workers}
        assert all(shares.values()) and sum(shares.values()) == REQUESTS, shares
        assert len(server.request_records()) == REQUESTS
    finally:
        mock.responder = None
        server.stop()
    assert not os.path.exists(directory)  # the supervisor removes it at exit


def test_a_killed_worker_keeps_its_counts_and_leaves_the_process_metrics(harness, mock, tmp_path):
    mock.responder = lambda request: Turn([Text("ok")])
    server = ServerProcess(tmp_path, default_config(harness.mock_url), workers=2)
    try:
        assert run_load(server, 80) == [200] * 80
        before = scrape(server)
        workers = pids(before)
        assert len(workers) == 2
        directory = metrics_dir(min(workers))
        victim = int(min(workers))
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 20
        now: set[str] = set()
        while time.monotonic() < deadline:  # the supervisor starts another after a pause
            try:
                now = pids(scrape(server))
            except OSError:  # a connection the dead worker's socket had queued
                continue
            if len(now) == 2 and str(victim) not in now:
                break
            time.sleep(0.2)
        assert len(now) == 2 and str(victim) not in now, now
        for _ in range(6):
            assert total(scrape(server), TOTAL) == 80
        assert served_by(directory, str(victim)) > 0  # its counts are in the 80
        assert not os.path.exists(f"{directory}/gauge_livesum_{victim}.db")  # its in-flight gauge left the sum
        assert run_load(server, 40) == [200] * 40
        assert total(scrape(server), TOTAL) == 120
    finally:
        mock.responder = None
        server.stop()



def test_a_gauge_without_a_multiprocess_mode_shows_only_live_workers(tmp_path):
    """prometheus_client reports such a gauge once per pid, dead pids included; /metrics keeps the live."""
    from prometheus_client import CollectorRegistry, generate_latest

    from proxai.observability import metrics
    worker = ("import sys; from prometheus_client import Gauge; from proxai.observability import metrics\n"
              "metrics.share(sys.argv[1]); m = metrics.Metrics(in_flight=lambda: 0)\n"
              "Gauge('x_up', 'a plain gauge', registry=m.registry).set(1)\n")
    for _ in range(2):  # two "workers", one after the other: each leaves its files
        subprocess.run([sys.executable, "-c", worker, str(tmp_path)], check=True, cwd=ROOT)
    written = sorted(name.split("_")[-1][:-3] for name in os.listdir(tmp_path) if name.startswith("gauge_livesum_"))
    assert len(written) == 2
    metrics.mark_dead(str(tmp_path), int(written[0]))
    registry = CollectorRegistry()
    registry.register(metrics._Workers(str(tmp_path)))
    samples = parse(generate_latest(registry).decode())
    assert [dict(lbl)["pid"] for (name, lbl) in samples if name == "x_up"] == [written[1]]
    assert total(samples, "proxai_requests_in_flight") == 0

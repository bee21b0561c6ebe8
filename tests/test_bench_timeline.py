"""bench.timeline on a tiny budget: every stage is timed for the proxy and the floor, and the
probe refuses clearly when what it wraps was renamed."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench import timeline, timeline_probe

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.timeout(120)


def _rows(markdown: str, heading: str) -> dict[str, list[str]]:
    section = markdown.split(heading, 1)[1].split("\n### ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and not line.startswith("| stage") and len(cells) == 7:
            rows[cells[0]] = cells[1:]
    return rows


def _number(cell: str) -> float:
    assert re.fullmatch(r"[+-]?[\d,]+\.\d", cell), cell
    return float(cell.replace(",", ""))


@pytest.mark.slow
def test_timeline_times_every_stage_of_the_proxy_and_the_floor(tmp_path):
    out = tmp_path / "timeline.json"
    done = subprocess.run([sys.executable, "-m", "bench.timeline", "--pairs", "chat->chat", "--modes", "stream,json",
                           "--requests", "60", "--rounds", "1", "--no-pin", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stderr[-3000:]
    saved = json.loads(out.read_text())

    for mode in ("stream", "json"):
        rows = _rows(done.stdout, f"### chat->chat ({mode})")
        for kind, column in (("proxy", 0), ("floor", 1)):
            names = timeline.stages(kind, mode)
            for stage in [*names[1:], "idle"]:
                assert _number(rows[timeline.LABELS[stage]][column]) > 0, (mode, kind, stage)
            (entry,) = [r for r in saved["rounds"] if r["target"] == kind and r["mode"] == mode]
            assert set(entry["stages"]) == {*names[1:], "idle"}
            assert all(v > 0 for v in entry["stages"].values()), entry["stages"]
            # every measured request (60 minus the warm-up fifth) carried every stamp
            assert entry["requests"] == entry["complete"] == 48
            assert entry["driver"]["requests"] == 48 and entry["driver"]["errors"] == 0
            # The stamp follows the write's return: on a loaded machine the client may read the
            # bytes before the relay stamps them, so the two medians are close, not ordered.
            assert 0 < entry["first_byte_written"] < 2 * entry["ttfb"]
            for label in ("**TTFB p50 (driver)**", "relay: received to first body byte written"):
                assert _number(rows[label][column]) > 0
        # stages the floor does not have are the proxy's alone
        assert rows[timeline.LABELS["body_read"]][1] == "-"
    assert saved["summary"] and saved["markdown"] == done.stdout.strip()


def test_the_probe_names_what_it_cannot_find(monkeypatch):
    import proxai.http.app as app
    import proxai.http.streaming as streaming

    monkeypatch.delattr(app.Proxy, "admit")
    original_prime = streaming.StreamLoop.prime
    tl = timeline_probe.Timeline()
    with pytest.raises(timeline_probe.ProbeError, match=r"proxai\.http\.app\.Proxy\.admit.*renamed") as refused:
        timeline_probe.install(timeline_probe.proxy_patches(tl))
    assert "body_read" in str(refused.value)
    # nothing was wrapped: the check comes before the first patch
    assert streaming.StreamLoop.prime is original_prime


def test_a_probed_request_is_one_record_from_its_first_bytes_to_its_metrics():
    tl = timeline_probe.Timeline()
    tl.received()
    tl.begin()
    tl.received()  # its body, not the next request
    assert tl.pending is None
    tl.first("first_write")
    first = tl.current["first_write"]
    tl.first("first_write")
    tl.finish()
    tl.idle()
    (record,) = tl.take()
    assert record["first_write"] == first
    assert 0 < record["received"] <= record["handler"] <= record["end"]
    assert tl.pending is None and tl.take() == []

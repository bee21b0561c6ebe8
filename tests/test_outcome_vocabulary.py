"""One outcome vocabulary: the request log, the metrics, the capture summary and the inspector
name how a request ended with the same word (docs/architecture.md#stream-observers-and-outcomes)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from proxai.mock import Text, Turn
from proxai.http.streaming import Outcome
from test_capture import summary as capture_summary
from test_inspector import detail_of, requests_list
from test_metrics import scrape
from test_observability import LogCapture, summary as log_summary
from test_passthrough_e2e import MESSAGES, raw_post


@pytest.mark.parametrize("stream, reply, expected", [
    (True, Turn([Text("one two three")]), Outcome.COMPLETE.value),
    (True, Turn([Text("one two three four", chunks=["one ", "two ", "three ", "four"])], cut_after=2), Outcome.EOF.value),
    (True, Turn([Text("one two three four")], stall_after=2, stall_secs=2), Outcome.IDLE_TIMEOUT.value),
    (False, Turn([Text("whole")]), None),  # not streamed: no outcome; the status says how it went
])
def test_log_metrics_capture_and_inspector_say_the_same(harness, start_proxy, mock, stream, reply, expected):
    cfg = harness.default_config()
    cfg["providers"]["anthropic"]["read_idle_timeout_secs"] = 0.3
    cfg["server"] = {"inspector": {"enabled": True}}
    cfg["capture"] = {"inbound_request": True}
    p = start_proxy(cfg)
    mock.enqueue(reply)
    rid = f"vocab-{expected or 'none'}".replace(":", "-")
    with LogCapture("json") as cap:
        status, _, _ = raw_post(p.url, "/v1/chat/completions", {"model": "anthropic/x", "stream": stream, "messages": MESSAGES},
                                {"x-request-id": rid})
        line = log_summary(cap, rid)
    assert status == 200
    assert line.get("outcome") == expected
    assert capture_summary(Path(os.environ["PROXAI_HOME"]), rid).get("outcome") == expected
    row = next(r for r in requests_list(p) if r["request_id"] == rid)
    assert row["outcome"] == expected
    if stream:
        assert detail_of(p, rid)["timeline"]["end"]["outcome"] == expected
    labels = {dict(lbl)["outcome"] for name, lbl in scrape(p.url) if name == "proxai_requests_total"}
    assert labels == {expected or "none"}

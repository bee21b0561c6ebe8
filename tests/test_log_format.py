"""The log an operator reads: in the human format every line starts with the local time
to the millisecond with its UTC offset, the level, and the logger with the worker's pid;
the request line names the client (never its key) and the upstream attempts. The JSON
format keeps its keys and adds `pid`. Checked on a real server process."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path

import yaml

from harness import default_config
from proxai.observability import logs
from server_process import ServerProcess, free_port

ROOT = Path(__file__).resolve().parent.parent
HUMAN_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d) (DEBUG|INFO|WARNING|ERROR|CRITICAL) +"
                        r"([\w.]+)\[(\d+)\]: ")
CHAT = {"model": "chat/m", "messages": [{"role": "user", "content": "hi"}]}


def get(url: str, headers: dict | None = None, body: dict | None = None) -> bytes:
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Connection": "close", "Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=15) as resp:
        return resp.read()


def serve_human(tmp_path: Path, config: dict, env: dict) -> tuple[subprocess.Popen, str, Path]:
    port = free_port()
    cfg = tmp_path / "human.yaml"
    cfg.write_text(yaml.safe_dump(config))
    log_path = tmp_path / "human.log"
    with open(log_path, "w") as out:
        proc = subprocess.Popen([sys.executable, str(ROOT / "server.py"), "--config", str(cfg), "--port", str(port),
                                 "--log-format", "human"], cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "PROXAI_HOME": str(tmp_path), **env})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            get(url + "/healthz")
            return proc, url, log_path
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"server did not start: {log_path.read_text()}")
            time.sleep(0.1)


def test_human_lines_carry_milliseconds_the_utc_offset_and_the_pid(harness, mock, tmp_path):
    # A POSIX TZ string (no tz database needed): UTC+05:30, so the offset is not the trivial one.
    proc, url, log_path = serve_human(tmp_path, default_config(harness.mock_url), {"TZ": "PXT-5:30"})
    try:
        pid = json.loads(get(url + "/healthz"))["pid"]
        get(url + "/v1/chat/completions", {"x-request-id": "fmt-human"}, CHAT)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    lines = [line for line in log_path.read_text().splitlines() if line]
    headed = [HUMAN_LINE.match(line) for line in lines]
    assert headed and all(headed), lines
    for match in headed:
        stamp = datetime.fromisoformat(match.group(1))
        assert stamp.utcoffset() == timedelta(hours=5, minutes=30)
        assert abs(stamp - datetime.now(timezone.utc)) < timedelta(minutes=5)
        assert int(match.group(4)) == pid
    (request,) = [line for line in lines if "request_id=fmt-human" in line]
    assert HUMAN_LINE.match(request).group(3) == "proxai.request"
    assert " attempts=1 " in request  # a route of one key makes one attempt, and says so


def test_json_lines_add_the_pid_and_keep_their_keys(harness, mock, tmp_path):
    srv = ServerProcess(tmp_path, default_config(harness.mock_url))
    try:
        pid = json.loads(srv.get("/healthz"))["pid"]
        get(srv.url + "/v1/chat/completions", {"x-request-id": "fmt-json"}, CHAT)
    finally:
        srv.stop()
    records = srv.records()
    assert records and all(r.get("pid") == pid for r in records), records
    (request,) = [r for r in srv.request_records() if r.get("request_id") == "fmt-json"]
    assert {"ts", "level", "logger", "msg", "status", "provider", "duration_ms"} <= set(request)
    assert request["msg"] == "request" and request["attempts"] == 1 and request["status"] == 200


def _summary(fmt: str, **fields) -> str:
    out = io.StringIO()
    handler = logs.make_handler(fmt, out)
    logs.request_log.addHandler(handler)
    level = logs.request_log.level
    logs.request_log.setLevel(logging.INFO)
    try:
        logs.log_request(request_id="req_1", method="POST", path="/v1/messages", status=200, **fields)
    finally:
        logs.request_log.removeHandler(handler)
        logs.request_log.setLevel(level)
    return out.getvalue()


def test_the_client_name_is_logged_when_known():
    human = _summary("human", client="team-a", provider="anthropic", attempts=3)
    assert " client=team-a " in human and " attempts=3 " in human
    record = json.loads(_summary("json", client="team-a", provider="anthropic"))
    assert record["client"] == "team-a" and record["attempts"] == 1
    assert "client=" not in _summary("human", provider="anthropic")


def test_attempts_are_not_invented():
    # Refused before routing: no provider, no attempt. A pooled route counts its own attempts
    # (proxai/routing/retry.py); one that gave up before any attempt shows none.
    assert "attempts" not in _summary("human")
    assert "attempts" not in _summary("human", provider="p", _pooled=True)

"""Capture phases: exact bytes per request and phase, credentials redacted, off by default; `proxai capture`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import CLIENT_KEY, PROVIDER_KEYS
from proxai.observability import capture
from proxai.mock import Text, ToolCall, Turn
from test_passthrough_e2e import MESSAGES, raw_post

ROOT = Path(__file__).resolve().parent.parent
ALL = dict.fromkeys(capture.PHASES, True)


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("PROXAI_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def start(harness, start_proxy, phases: dict):
    doc = harness.default_config()
    doc["capture"] = phases
    return start_proxy(doc)


def read(home: Path, rid: str, phase: str) -> capture.Captured:
    return capture.Captured(phase, (home / "captures" / f"{rid}.{phase}.http").read_bytes())


def sse_data(body: bytes) -> list[dict]:
    out = []
    for block in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        for line in block.split(b"\n"):
            if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
                out.append(json.loads(line[5:]))
    return out



def summary(home: Path, request_id: str) -> dict:
    """A request's summary file, once written whole: it follows the response's last byte,
    which the client may have read a moment before."""
    path, deadline = home / "captures" / f"{request_id}.summary.json", time.monotonic() + 3
    while True:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)

def test_off_by_default_writes_nothing(home, proxy, mock):
    assert proxy.proxy.recorder is None
    status, _, _ = raw_post(proxy.url, "/v1/chat/completions", {"model": "anthropic/m", "messages": MESSAGES})
    assert status == 200
    assert not home.exists()


def test_translated_non_streaming_all_phases(home, harness, start_proxy, mock):
    p = start(harness, start_proxy, ALL)
    mock.enqueue(Turn([Text("Bonjour")], headers={"request-id": "req_up_1"}))
    sent = json.dumps({"model": "anthropic/claude-x", "messages": MESSAGES, "max_tokens": 50}).encode()
    status, headers, body = raw_post(p.url, "/v1/chat/completions", sent,
                                     {"Authorization": f"Bearer {CLIENT_KEY}", "x-request-id": "cap-ns"})
    assert status == 200
    files = sorted(f.name for f in (home / "captures").iterdir())
    assert files == sorted([f"cap-ns.{phase}.http" for phase in capture.PHASES] + ["cap-ns.summary.json"])
    doc = summary(home, "cap-ns")
    assert doc["method"] == "POST" and doc["model"] == "anthropic/claude-x" and doc["status"] == 200
    assert set(doc) <= set(capture.SUMMARY_FIELDS)  # no bodies, no headers

    inbound = read(home, "cap-ns", "inbound_request")
    assert inbound.start_line == "POST /v1/chat/completions HTTP/1.1"
    assert inbound.body == sent  # exact bytes
    assert inbound.header("authorization") == "[redacted]"

    provider = read(home, "cap-ns", "provider_request")
    assert provider.start_line.startswith("POST http://127.0.0.1:") and provider.start_line.endswith("/v1/messages HTTP/1.1")
    assert provider.header("x-api-key") == "[redacted]"
    assert provider.body == mock.requests[-1].raw  # exactly what the provider received
    assert json.loads(provider.body)["model"] == "claude-x"

    upstream = read(home, "cap-ns", "upstream_response")
    assert upstream.start_line == "HTTP/1.1 200 OK"
    assert json.loads(upstream.body)["type"] == "message"  # the provider's own (Anthropic) shape
    assert upstream.header("request-id") == "req_up_1"

    outbound = read(home, "cap-ns", "outbound_response")
    assert outbound.body == body  # exactly what the client received
    assert json.loads(outbound.body)["object"] == "chat.completion"
    assert outbound.header("x-proxai-request-id") == "cap-ns"
    assert outbound.header("x-request-id") == "req_up_1"  # the provider's id, where the OpenAI SDK reads it

    for phase in capture.PHASES:
        raw = (home / "captures" / f"cap-ns.{phase}.http").read_bytes()
        assert CLIENT_KEY.encode() not in raw and PROVIDER_KEYS["anthropic"].encode() not in raw
        assert os.stat(home / "captures" / f"cap-ns.{phase}.http").st_mode & 0o077 == 0


def test_translated_stream_all_phases(home, harness, start_proxy, mock):
    p = start(harness, start_proxy, ALL)
    mock.enqueue(Turn([Text("Hello world", chunks=["Hello ", "world"]), ToolCall("call_1", "f", '{"a": 1}')]))
    status, _, body = raw_post(p.url, "/v1/messages",
                               {"model": "responses/gpt-x", "max_tokens": 50, "stream": True, "messages": MESSAGES},
                               {"x-api-key": CLIENT_KEY, "x-request-id": "cap-st"})
    assert status == 200
    provider = read(home, "cap-st", "provider_request")
    assert provider.body == mock.requests[-1].raw
    assert json.loads(provider.body)["stream"] is True and "input" in json.loads(provider.body)  # Responses wire

    upstream = read(home, "cap-st", "upstream_response")
    assert upstream.is_stream
    upstream_events = [e["type"] for e in sse_data(upstream.body)]
    assert upstream_events[0] == "response.created" and upstream_events[-1] == "response.completed"
    assert "response.function_call_arguments.delta" in upstream_events

    outbound = read(home, "cap-st", "outbound_response")
    assert outbound.is_stream and outbound.body == body  # byte for byte what the client got
    client_events = [e["type"] for e in sse_data(outbound.body)]
    assert client_events[0] == "message_start" and client_events[-1] == "message_stop"
    assert "input_json_delta" in json.dumps(sse_data(outbound.body))
    assert read(home, "cap-st", "inbound_request").header("x-api-key") == "[redacted]"


def test_pass_through_stream_is_captured_identically_on_both_sides(home, harness, start_proxy, mock):
    p = start(harness, start_proxy, {"upstream_response": True, "outbound_response": True})
    mock.enqueue(Turn([Text("same bytes", chunks=["same ", "bytes"])]))
    # A model no route renames (a renamed one is answered under the client's name).
    status, _, body = raw_post(p.url, "/v1/chat/completions",
                               {"model": "m", "stream": True, "messages": MESSAGES}, {"x-request-id": "cap-pt"})
    assert status == 200
    assert read(home, "cap-pt", "upstream_response").body == body == read(home, "cap-pt", "outbound_response").body
    names = {f.name for f in (home / "captures").iterdir()} - {"cap-pt.summary.json"}
    assert names == {"cap-pt.upstream_response.http", "cap-pt.outbound_response.http"}
    assert summary(home, "cap-pt")["status"] == 200


@pytest.mark.parametrize("phase", capture.PHASES)
def test_each_phase_switches_alone(home, harness, start_proxy, mock, phase):
    p = start(harness, start_proxy, {phase: True})
    for stream in (False, True):
        rid = f"one-{phase}-{stream}"
        status, _, _ = raw_post(p.url, "/v1/responses", {"model": "anthropic/c", "input": "hi", "stream": stream},
                                {"x-request-id": rid})
        assert status == 200
        names = sorted(f.name for f in (home / "captures").iterdir()
                       if f.name.startswith(rid + ".") and f.name.endswith(capture.SUFFIX))
        assert names == [f"{rid}.{phase}.http"]
        assert read(home, rid, phase).body


def test_upstream_error_and_rejected_request_are_captured(home, harness, start_proxy, mock):
    from proxai.mock import Error

    p = start(harness, start_proxy, ALL)
    mock.enqueue(Error(503, message="busy"))
    status, _, body = raw_post(p.url, "/v1/chat/completions", {"model": "anthropic/c", "messages": MESSAGES},
                               {"x-request-id": "cap-err"})
    assert status == 503
    assert read(home, "cap-err", "upstream_response").start_line.startswith("HTTP/1.1 503")
    assert b"busy" in read(home, "cap-err", "upstream_response").body
    assert read(home, "cap-err", "outbound_response").body == body

    status, _, body = raw_post(p.url, "/v1/chat/completions", b"{not json", {"x-request-id": "cap-bad"})
    assert status == 400
    assert read(home, "cap-bad", "inbound_request").body == b"{not json"
    assert read(home, "cap-bad", "outbound_response").body == body
    assert not (home / "captures" / "cap-bad.provider_request.http").exists()


def test_unrouted_requests_are_captured_and_listed(home, harness, start_proxy, mock, capsys):
    p = start(harness, start_proxy, ALL)
    status, _, body = raw_post(p.url, "/v1/chat/completion", {"model": "m", "messages": MESSAGES},
                               {"x-request-id": "cap-404"})
    assert status == 404
    inbound = read(home, "cap-404", "inbound_request")
    assert inbound.start_line == "POST /v1/chat/completion HTTP/1.1" and json.loads(inbound.body)["model"] == "m"
    assert read(home, "cap-404", "outbound_response").body == body
    assert not (home / "captures" / "cap-404.provider_request.http").exists()
    from proxai.tools import cli
    assert cli.main(["capture", "list"]) == 0
    row = next(line.split() for line in capsys.readouterr().out.splitlines() if "cap-404" in line)
    assert row[3:5] == ["POST", "/v1/chat/completion"] and "404" in row


def test_redaction_and_phase_parsing():
    head = capture.head("GET / HTTP/1.1", [("Authorization", "Bearer s"), ("X-Api-Key", "s"), ("x-goog-api-key", "s"),
                                           ("Cookie", "s"), ("Content-Type", "application/json")])
    assert b"s\r\n" not in head.replace(b"json", b"")
    assert head.count(b"[redacted]") == 4 and b"Content-Type: application/json" in head
    assert capture.parse_phases("all") == ALL
    assert capture.parse_phases("none") == dict.fromkeys(capture.PHASES, False)
    assert capture.parse_phases("inbound_request, outbound_response") == {
        "inbound_request": True, "provider_request": False, "upstream_response": False, "outbound_response": True}
    with pytest.raises(ValueError, match="unknown capture phase 'bogus'"):
        capture.parse_phases("inbound_request,bogus")


def test_home_directory_rule(monkeypatch, tmp_path):
    monkeypatch.setenv("PROXAI_HOME", str(tmp_path))
    assert capture.directory() == tmp_path / "captures"
    monkeypatch.delenv("PROXAI_HOME")
    assert capture.directory() == Path.home() / ".proxai" / "captures"


# --- the CLI ----------------------------------------------------------------------------------


def run_cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PROXAI_HOME": str(home), "COLUMNS": "100"}
    return subprocess.run([sys.executable, "-m", "proxai.tools.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=30)


def test_capture_show_and_list(home, harness, start_proxy, mock):
    p = start(harness, start_proxy, ALL)
    mock.enqueue(Turn([Text("Hello world", chunks=["Hello ", "world"])]))
    raw_post(p.url, "/v1/chat/completions", {"model": "anthropic/c", "stream": True, "messages": MESSAGES},
             {"x-request-id": "show-1"})
    raw_post(p.url, "/v1/chat/completions", {"model": "anthropic/c", "messages": MESSAGES}, {"x-request-id": "show-2"})

    listed = run_cli(home, "capture", "list")
    assert listed.returncode == 0
    ids = [line.split()[2] for line in listed.stdout.splitlines()]
    assert set(ids) == {"show-1", "show-2"}
    assert all(" ".join(capture.PHASES) in line for line in listed.stdout.splitlines())

    stacked = run_cli(home, "capture", "show", "show-1", "--layout", "stacked")
    assert stacked.returncode == 0, stacked.stderr
    out = stacked.stdout
    positions = [out.index(f"== {phase} ") for phase in capture.PHASES]
    assert positions == sorted(positions)
    assert "#1 message_start {" in out  # upstream events numbered, with their names
    assert '#1 {"id":"chatcmpl-' in out  # client chunks
    assert '"content":"Hello "' in out and '"text":"Hello "' in out

    side = run_cli(home, "capture", "show", "show-1", "--layout", "side", "--width", "160")
    lines = side.stdout.splitlines()
    row = next(line for line in lines if "== upstream_response" in line)
    assert "| == outbound_response" in row
    first = next(line for line in lines if line.startswith("#1 message_start"))
    assert "| #1 {" in first  # both streams start on the same line
    assert all(len(line) <= 160 for line in lines)

    raw = run_cli(home, "capture", "show", "show-2", "--raw", "provider_request")
    assert raw.stdout.startswith("POST http://") and "x-api-key: [redacted]" in raw.stdout

    rows = {line.split()[2]: line.split() for line in listed.stdout.splitlines()}
    assert rows["show-1"][3:7] == ["POST", "/v1/chat/completions", "anthropic/c", "200"]
    assert rows["show-2"][7].endswith("ms") and float(rows["show-2"][7][:-2]) > 0

    missing = run_cli(home, "capture", "show", "nope")
    assert missing.returncode == 1 and "no capture for request nope" in missing.stderr


def test_serve_capture_flag(tmp_path, harness):
    import re
    import signal
    import yaml

    home = tmp_path / "home"
    cfg = tmp_path / "proxai.yaml"
    cfg.write_text(yaml.safe_dump(harness.default_config()))
    env = {**os.environ, "PROXAI_HOME": str(home)}
    proc = subprocess.Popen([sys.executable, "-m", "proxai.tools.cli", "serve", "--config", str(cfg), "--port", "0",
                             "--capture", "inbound_request,outbound_response"],
                            cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        url = None
        for _ in range(5):
            line = proc.stderr.readline()
            m = re.search(r"on (http://\S+)", line)
            if m:
                url = m.group(1)
                break
        assert url
        status, _, _ = raw_post(url, "/v1/chat/completions", {"model": "m", "messages": MESSAGES}, {"x-request-id": "flag-1"})
        assert status == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=10)
    assert sorted(f.name for f in (home / "captures").iterdir()) == ["flag-1.inbound_request.http",
                                                                      "flag-1.outbound_response.http",
                                                                      "flag-1.summary.json"]
    bad = run_cli(home, "serve", "--capture", "everything")
    assert bad.returncode == 2 and "unknown capture phase" in bad.stderr

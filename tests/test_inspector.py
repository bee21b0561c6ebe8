"""The translation inspector's server side: config, access, the JSON API, the recorded
phases and stream timelines (in memory and from capture files), and the engine's
record of which upstream event produced which client events."""

from __future__ import annotations

import base64
import http.client
import json
from types import SimpleNamespace
from urllib.parse import urlsplit

import orjson
import pytest

import engine
from harness import CLIENT_KEY, PROVIDER_KEYS
from proxai.routing.config import ConfigError, load_dict
from proxai.observability.inspector import view
from proxai.observability.inspector.web import InspectorWeb
from proxai.mock import Stream, Text, ToolCall, Turn, Usage
from proxai.mock import render_chat
from proxai.http.sse import SSEEvent, SSEParser
from test_observability import LogCapture, summary

SECRETS = [CLIENT_KEY, *PROVIDER_KEYS.values()]


@pytest.fixture(autouse=True)
def _own_captures_dir(tmp_path, monkeypatch):
    """The inspector also lists captures on disk: never the machine's own."""
    monkeypatch.setenv("PROXAI_HOME", str(tmp_path))


def inspector_config(harness, **inspector) -> dict:
    cfg = harness.default_config()
    cfg["server"] = {"inspector": {"enabled": True, **inspector}}
    return cfg


def call(p, method: str, path: str, json_body=None, headers: dict | None = None) -> SimpleNamespace:
    """One plain HTTP exchange (no redirects followed); the whole body is read."""
    u = urlsplit(p.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    data = None if json_body is None else json.dumps(json_body).encode()
    conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return SimpleNamespace(status_code=resp.status, headers={k.lower(): v for k, v in resp.getheaders()},
                           text=body.decode("utf-8", "replace"), json=lambda: json.loads(body))


def get(p, path: str, headers: dict | None = None) -> SimpleNamespace:
    return call(p, "GET", path, headers=headers)


def post(p, path: str, body, headers: dict | None = None) -> SimpleNamespace:
    return call(p, "POST", path, body, headers)


def requests_list(p) -> list[dict]:
    r = get(p, "/_proxai/api/requests")
    assert r.status_code == 200, r.text
    return r.json()["requests"]


def detail_of(p, request_id: str) -> dict:
    row = next(r for r in requests_list(p) if r["request_id"] == request_id)
    r = get(p, f"/_proxai/api/requests/{row['key']}")
    assert r.status_code == 200, r.text
    return r.json()


def client_text(events: list[dict]) -> str:
    """The text a Chat client received in these timeline events."""
    out = ""
    for ev in events:
        data = ev["data"]
        if isinstance(data, dict):
            for choice in data.get("choices") or []:
                out += (choice.get("delta") or {}).get("content") or ""
    return out


# --- config ---------------------------------------------------------------------------


def test_off_by_default(start_proxy):
    p = start_proxy()
    assert get(p, "/_proxai/").status_code == 404
    assert get(p, "/_proxai/api/requests").status_code == 404
    assert p.proxy.inspector is None  # nothing recorded, no observer wrapped


def test_config_keys_and_checks():
    base = {"providers": {"a": {"protocol": "anthropic_messages", "base_url": "http://127.0.0.1:1", "api_key": "k"}}}
    cfg = load_dict({**base, "server": {"inspector": {"enabled": True, "max_requests": 7}}})
    assert cfg.server.inspector.enabled and cfg.server.inspector.loopback_only and cfg.server.inspector.max_requests == 7
    assert not load_dict(base).server.inspector.enabled
    with pytest.raises(ConfigError) as err:
        load_dict({**base, "server": {"inspector": {"enabled": True, "loopback_only": False}}})
    assert "server.inspector.loopback_only" in str(err.value)
    load_dict({**base, "server": {"api_keys": ["x"], "inspector": {"enabled": True, "loopback_only": False}}})
    with pytest.raises(ConfigError) as err:
        load_dict({**base, "server": {"inspector": {"enabled": True, "colour": "blue"}}})
    assert "server.inspector.colour" in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_dict({**base, "server": {"inspector": {"max_requests": 0}}})
    assert "server.inspector.max_requests" in str(err.value)


# --- the page and access ------------------------------------------------------------------


def test_page_and_static_files(harness, start_proxy):
    p = start_proxy(inspector_config(harness))
    page = get(p, "/_proxai/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"
    assert 'src="static/inspector.js"' in page.text
    js = get(p, "/_proxai/static/inspector.js")
    assert js.status_code == 200 and "EventSource" in js.text
    assert get(p, "/_proxai/static/inspector.css").status_code == 200
    assert get(p, "/_proxai/static/..%2Fweb.py").status_code == 404
    assert get(p, "/_proxai/static/index.html").status_code == 404
    assert get(p, "/_proxai").status_code == 302


def test_api_keys_guard_the_inspector(harness, start_proxy):
    cfg = inspector_config(harness)
    cfg["server"]["api_keys"] = ["inspect-me"]
    p = start_proxy(cfg)
    r = get(p, "/_proxai/")
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Basic")
    assert get(p, "/_proxai/api/requests", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert get(p, "/_proxai/api/requests", headers={"Authorization": "Bearer inspect-me"}).status_code == 200
    assert get(p, "/_proxai/api/requests", headers={"x-api-key": "inspect-me"}).status_code == 200
    basic = base64.b64encode(b"anyone:inspect-me").decode()
    assert get(p, "/_proxai/", headers={"Authorization": f"Basic {basic}"}).status_code == 200
    bad = base64.b64encode(b"anyone:nope").decode()
    assert get(p, "/_proxai/", headers={"Authorization": f"Basic {bad}"}).status_code == 401


def test_loopback_only_refuses_other_clients_and_foreign_host_names(harness, start_proxy):
    p = start_proxy(inspector_config(harness))
    # DNS rebinding: a page served under another name that resolves to 127.0.0.1.
    assert get(p, "/_proxai/api/requests", headers={"Host": "attacker.example"}).status_code == 404
    assert get(p, "/_proxai/api/requests", headers={"Host": "localhost:1234"}).status_code == 200
    web = InspectorWeb(p.proxy, p.proxy.inspector.ring)

    def fake(remote: str, host: str = "127.0.0.1:1"):
        return SimpleNamespace(remote=remote, host=host, headers={}, path="/_proxai/")

    assert web._denied(fake("127.0.0.1")) is None
    assert web._denied(fake("::1", "[::1]:8080")) is None
    assert web._denied(fake("10.1.2.3")).status == 404
    assert web._denied(fake("192.168.0.9", "localhost")).status == 404


# --- recorded requests ------------------------------------------------------------------------


def test_translated_stream_phases_and_linked_timeline(harness, start_proxy, mock):
    p = start_proxy(inspector_config(harness))
    mock.enqueue(Turn(blocks=[Text("Hello there", chunks=["Hel", "lo ", "there"])], usage=Usage(7, 3)))
    client = p.openai()
    stream = client.chat.completions.create(
        model="anthropic/claude-x", stream=True, messages=[{"role": "user", "content": "hi"}],
        metadata={"k": "v"}, extra_headers={"x-request-id": "insp-stream-1"})
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "Hello there"
    assert mock.requests[-1].body["model"] == "claude-x"

    row = next(r for r in requests_list(p) if r["request_id"] == "insp-stream-1")
    assert row["client_protocol"] == "openai_chat_completions" and row["provider_protocol"] == "anthropic_messages"
    assert row["provider"] == "anthropic" and row["model"] == "anthropic/claude-x" and row["status"] == 200
    assert row["outcome"] == "complete" and row["mode"] == "translated" and row["ttfb_ms"] is not None
    assert (row["input_tokens"], row["output_tokens"]) == (7, 3)

    d = detail_of(p, "insp-stream-1")
    phases = d["phases"]
    assert set(phases) == {"inbound_request", "provider_request", "upstream_response", "outbound_response"}
    assert phases["inbound_request"]["json"]["model"] == "anthropic/claude-x"
    assert phases["provider_request"]["json"]["model"] == "claude-x"
    assert phases["provider_request"]["json"]["max_tokens"] == 4096
    headers = dict((k.lower(), v) for k, v in phases["provider_request"]["headers"])
    assert headers["x-api-key"] == "[redacted]"
    assert dict((k.lower(), v) for k, v in phases["inbound_request"]["headers"])["authorization"] == "[redacted]"
    assert phases["upstream_response"]["stream"] and phases["outbound_response"]["stream"]
    assert any("metadata" in t for t in d["traces"])

    tl = d["timeline"]
    assert tl["linked"] and tl["end"]["outcome"] == "complete"
    by_event = {}
    for row in tl["rows"]:
        by_event.setdefault(row["event"], []).append(row)
    deltas = by_event["content_block_delta"]
    assert [r["data"]["delta"]["text"] for r in deltas] == ["Hel", "lo ", "there"]
    # each text delta produced exactly the Chat chunk carrying that text
    assert [client_text(r["client"]) for r in deltas] == ["Hel", "lo ", "there"]
    assert by_event["ping"][0]["client"] == []
    assert by_event["message_stop"][0]["client"][-1]["data"] == "[DONE]"
    ts = [r["t_ms"] for r in tl["rows"]]
    assert ts == sorted(ts) and ts[0] > 0
    # the client events in the timeline are exactly what the client was sent
    sent = [ev for row in tl["rows"] for ev in row["client"]] + tl["tail"]
    assert [e["data"] for e in sent] == [e["data"] for e in phases["outbound_response"]["events"]]
    body = json.dumps(d)
    for secret in SECRETS:
        assert secret not in body


def test_pass_through_stream_timeline_relays_each_event(harness, start_proxy, mock):
    p = start_proxy(inspector_config(harness))
    client = p.anthropic()
    with client.messages.stream(model="claude-x", max_tokens=50, messages=[{"role": "user", "content": "hi"}],
                                extra_headers={"x-request-id": "insp-pass-1"}) as s:
        s.get_final_message()
    d = detail_of(p, "insp-pass-1")
    assert d["summary"]["mode"] == "pass-through"
    rows = d["timeline"]["rows"]
    assert rows and all(len(r["client"]) == 1 and r["client"][0]["relayed"] for r in rows)
    assert rows[-1]["event"] == "message_stop" and d["timeline"]["end"]["outcome"] == "complete"


# The log's outcome names (docs/architecture.md#stream-observers-and-outcomes), as the log line has them.
@pytest.mark.parametrize("reply, reason", [
    (Turn(blocks=[Text("one two three four")], cut_after=4), "incomplete:eof"),
    (Stream(raw=[b'event: message_start\ndata: {"type":"message_start","message":{"id":"m","type":"message","role":"assistant",'
                 b'"model":"x","content":[],"stop_reason":null,"usage":{"input_tokens":1,"output_tokens":0}}}\n\n',
                 b"event: content_block_start\ndata: {not json\n\n"]), "incomplete:malformed"),
    (Turn(blocks=[Text("one two three four")], stall_after=3, stall_secs=3), "incomplete:idle_timeout"),
])
def test_stream_end_reasons(harness, start_proxy, mock, reply, reason):
    cfg = inspector_config(harness)
    cfg["providers"]["anthropic"]["read_idle_timeout_secs"] = 0.3
    p = start_proxy(cfg)
    mock.enqueue(reply)
    with LogCapture("json") as cap:
        post(p, "/v1/chat/completions", {"model": "anthropic/x", "stream": True,
                                         "messages": [{"role": "user", "content": "hi"}]}, {"x-request-id": "insp-end"})
        line = summary(cap, "insp-end")
    row = next(r for r in requests_list(p) if r["request_id"] == "insp-end")
    assert row["outcome"] == line["outcome"] == reason
    d = detail_of(p, "insp-end")
    end = d["timeline"]["end"]
    assert end["outcome"] == reason and end["after_event"] == len(d["timeline"]["rows"])
    assert end["message"]  # the in-stream error the client got
    if reason == "incomplete:malformed":  # the error replaced the bad event: linked to it
        assert "error" in d["timeline"]["rows"][-1]["client"][-1]["data"]
    else:  # the error the proxy added when the upstream broke off has no upstream event of its own
        assert "error" in d["timeline"]["tail"][-1]["data"]


def test_stream_translation_error_names_its_rule(harness, start_proxy, mock):
    p = start_proxy(inspector_config(harness))
    mock.enqueue(Stream(events=[
        ("message_start", {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "model": "x",
                                                                "content": [], "stop_reason": None,
                                                                "usage": {"input_tokens": 1, "output_tokens": 0}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "hologram_delta"}}),
    ]))
    post(p, "/v1/chat/completions", {"model": "anthropic/x", "stream": True, "messages": [{"role": "user", "content": "hi"}]}, {"x-request-id": "insp-rule"})
    d = detail_of(p, "insp-rule")
    assert d["summary"]["outcome"] == "incomplete:malformed"
    assert d["error"]["translation"] == "stream"
    assert "anthropic_messages/stream.decode.yaml:" in d["error"]["rule"]
    bad = d["timeline"]["rows"][2]
    assert bad["event"] == "content_block_delta" and "error" in bad["client"][0]["data"]


def test_rejected_request_names_its_rule(harness, start_proxy):
    p = start_proxy(inspector_config(harness))
    r = post(p, "/v1/chat/completions", headers={"x-request-id": "insp-400"}, body={"model": "anthropic/x", "n": 2, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400
    d = detail_of(p, "insp-400")
    assert d["summary"]["status"] == 400
    assert d["error"]["translation"] == "request" and "n > 1" in d["error"]["message"] and d["error"]["param"] == "n"
    assert "anthropic_messages/request.encode.yaml:" in d["error"]["rule"]
    assert "provider_request" not in d["phases"]


def test_ring_is_bounded(harness, start_proxy):
    p = start_proxy(inspector_config(harness, max_requests=3))
    client = p.openai()
    for i in range(5):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                       extra_headers={"x-request-id": f"ring-{i}"})
    rows = [r for r in requests_list(p) if r["source"] == "memory"]
    assert [r["request_id"] for r in rows] == ["ring-4", "ring-3", "ring-2"]


def test_live_events_stream(harness, start_proxy):
    p = start_proxy(inspector_config(harness))

    async def watch():
        import aiohttp

        async with aiohttp.ClientSession() as session:
            async with session.get(p.url + "/_proxai/api/events") as resp:
                assert resp.headers["Content-Type"].startswith("text/event-stream")
                await resp.content.readuntil(b"\n\n")  # retry:
                async with session.post(p.url + "/v1/chat/completions", headers={"x-request-id": "live-1"},
                                        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}) as r:
                    await r.read()
                parser, seen = SSEParser(), []
                while len(seen) < 2:
                    seen += parser.feed(await resp.content.readany())
                return [orjson.loads(e.data) for e in seen]

    first, last = harness.loop.run(watch())
    assert first["request_id"] == last["request_id"] == "live-1"
    assert first["in_flight"] and not last["in_flight"] and last["status"] == 200


def test_inspector_requests_are_not_logged_or_recorded(harness, start_proxy, caplog):
    p = start_proxy(inspector_config(harness))
    with caplog.at_level("INFO", logger="proxai.request"):
        get(p, "/_proxai/api/requests")
        get(p, "/_proxai/")
    assert not [r for r in caplog.records if r.name == "proxai.request"]
    assert requests_list(p) == []


# --- from captures on disk ------------------------------------------------------------------


def test_capture_to_disk_is_shared_and_old_captures_are_listed(harness, start_proxy, mock, tmp_path, monkeypatch):
    monkeypatch.setenv("PROXAI_HOME", str(tmp_path))
    cfg = harness.default_config()
    cfg["capture"] = dict.fromkeys(("inbound_request", "provider_request", "upstream_response", "outbound_response"), True)
    earlier = start_proxy(cfg)  # a run without the inspector: only files remain
    mock.enqueue(Turn(blocks=[Text("Hello there", chunks=["Hel", "lo ", "there"])]))
    post(earlier, "/v1/chat/completions", {"model": "anthropic/x", "stream": True, "messages": [{"role": "user", "content": "hi"}]}, {"x-request-id": "from-disk"})
    earlier.stop()

    cfg["server"] = {"inspector": {"enabled": True}}
    p = start_proxy(cfg)
    p.openai().chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                       extra_headers={"x-request-id": "both"})
    rows = {r["request_id"]: r for r in requests_list(p)}
    assert rows["both"]["source"] == "memory" and rows["from-disk"]["source"] == "disk"
    assert rows["from-disk"]["client_protocol"] == "openai_chat_completions"
    assert rows["from-disk"]["provider_protocol"] == "anthropic_messages"
    assert rows["from-disk"]["status"] == 200 and rows["from-disk"]["model"] == "anthropic/x"
    # captured to disk while inspecting: the phases are read back from the files, not held twice
    entry = p.proxy.inspector.ring.by_request_id()["both"]
    assert set(entry.phases.values()) == {"disk"}
    assert detail_of(p, "both")["phases"]["provider_request"]["json"]["model"] == "m"

    d = get(p, "/_proxai/api/requests/disk:from-disk").json()
    assert d["phases"]["inbound_request"]["json"]["model"] == "anthropic/x"
    tl = d["timeline"]
    assert tl["linked"] and tl["end"]["outcome"] == "complete" and tl["end"]["replayed"]
    deltas = [r for r in tl["rows"] if r["event"] == "content_block_delta"]
    assert [client_text(r["client"]) for r in deltas] == ["Hel", "lo ", "there"]
    assert get(p, "/_proxai/api/requests/disk:..%2Fetc").status_code == 404
    assert get(p, "/_proxai/api/requests/disk:nope").status_code == 404


# --- the translate dry run ------------------------------------------------------------------


def test_translate_endpoint(harness, start_proxy):
    p = start_proxy(inspector_config(harness))
    body = {"model": "m", "metadata": {"user_id": "u"}, "messages": [{"role": "user", "content": "hi"}]}
    r = post(p, "/_proxai/api/translate", {
        "kind": "request", "from": "openai_chat_completions", "to": "anthropic_messages", "body": json.dumps(body)})
    doc = r.json()
    assert doc["ok"] and json.loads(doc["output"])["max_tokens"] == 4096
    assert any("metadata" in t for t in doc["traces"])
    r = post(p, "/_proxai/api/translate", {
        "kind": "request", "from": "openai_chat_completions", "to": "anthropic_messages",
        "body": json.dumps({**body, "n": 3})})
    doc = r.json()
    assert not doc["ok"] and doc["error"]["param"] == "n" and "request.encode.yaml:" in doc["error"]["rule"]
    r = post(p, "/_proxai/api/translate", {
        "kind": "request", "from": "openai_chat_completions", "to": "anthropic_messages", "body": "{nope"})
    assert not r.json()["ok"] and "not valid JSON" in r.json()["error"]["message"]
    r = post(p, "/_proxai/api/translate", {"kind": "request", "from": "x", "to": "y", "body": "{}"})
    assert r.status_code == 400 and "from must be one of" in r.json()["error"]["message"]


# --- the engine's links ------------------------------------------------------------------------


def test_held_back_blocks_keep_their_source_event():
    """Chat upstream, parallel tool calls with interleaved argument fragments, Anthropic client:
    the second call is held back until the first closes, yet each of its deltas is linked to
    the upstream chunk that carried it."""
    turn = Turn(blocks=[ToolCall("call_a", "alpha", '{"a": 1, "b": 2}', chunks=['{"a": 1,', ' "b": 2}']),
                        ToolCall("call_b", "beta", '{"c": 3, "d": 4}', chunks=['{"c": 3,', ' "d": 4}'])],
                interleave_tools=True)
    events = render_chat.events(turn, {"stream": True})
    eng = engine.Engine.load()
    translator = eng.open_stream(engine.Context(client_protocol="anthropic_messages", provider_protocol="openai_chat_completions"))
    links = translator.inspect()
    upstream = []
    for name, data in events:
        sse = SSEEvent(name, data if isinstance(data, str) else json.dumps(data))
        upstream.append(sse)
        translator.feed(sse)
    assert translator.complete
    fragments = 0
    for source, blob in links:
        for ev in SSEParser().feed(blob):
            payload = json.loads(ev.data)
            if payload.get("type") == "content_block_delta" and payload["delta"]["type"] == "input_json_delta":
                carried = json.loads(upstream[source - 1].data)["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
                assert carried == payload["delta"]["partial_json"]
                fragments += 1
    assert fragments == 4
    # beta's block went out after alpha's closed (at the finish chunk), linked to earlier chunks:
    # in emission order the sources go back in time, which they could not without the origins
    sources = [s for s, _ in links if s is not None]
    assert sources != sorted(sources)


def test_links_are_off_unless_asked():
    eng = engine.Engine.load()
    translator = eng.open_stream(engine.Context(client_protocol="openai_chat_completions", provider_protocol="anthropic_messages"))
    translator.feed(SSEEvent("ping", '{"type":"ping"}'))
    assert translator.links is None and translator._origins == {}


def test_start_lines_are_redacted():
    assert view.redact_start_line("POST https://u:sk-1@host/v1/x?api-key=sk-2&x=1 HTTP/1.1") == \
        "POST https://[redacted]@host/v1/x?api-key=%5Bredacted%5D&x=1 HTTP/1.1"
    assert view.redact_start_line("HTTP/1.1 200 OK") == "HTTP/1.1 200 OK"


def test_client_gone_mid_stream(harness, start_proxy, mock):
    p = start_proxy(inspector_config(harness))
    mock.enqueue(Turn(blocks=[Text("abcdef", chunks=list("abcdef"))], delay_secs=0.3))

    async def leave_early():
        import aiohttp

        async with aiohttp.ClientSession() as session:
            async with session.post(p.url + "/v1/chat/completions", headers={"x-request-id": "insp-gone"},
                                    json={"model": "anthropic/x", "stream": True,
                                          "messages": [{"role": "user", "content": "hi"}]}) as resp:
                await resp.content.readany()
            # leaving the block closes the connection mid-stream

    harness.loop.run(leave_early())
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        row = next(r for r in requests_list(p) if r["request_id"] == "insp-gone")
        if not row["in_flight"]:
            break
        time.sleep(0.05)
    assert row["outcome"] == "client_disconnected"
    assert detail_of(p, "insp-gone")["timeline"]["end"]["outcome"] == "client_disconnected"


def test_server_py_inspector_flag():
    from test_cli import ServerProcess

    server = ServerProcess(["--inspector"])
    try:
        assert f"inspector at {server.url}/_proxai/" in server.proc.stderr.readline()
        server.post("/v1/chat/completions", {"model": "anthropic/demo", "messages": [{"role": "user", "content": "hi"}]})
        u = urlsplit(server.url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
        conn.request("GET", "/_proxai/api/requests")
        rows = json.loads(conn.getresponse().read())["requests"]
        conn.close()
    finally:
        code, err = server.stop()
    assert code == 0
    assert [r["provider_protocol"] for r in rows] == ["anthropic_messages"]
    assert "path=/_proxai" not in err  # the page's own requests are not request log lines


def test_ring_has_a_byte_budget(harness, start_proxy, monkeypatch):
    from proxai.observability.inspector import record

    monkeypatch.setattr(record, "MAX_RING_BYTES", 20000)
    p = start_proxy(inspector_config(harness))
    client = p.openai()
    for i in range(6):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x" * 1500}],
                                       extra_headers={"x-request-id": f"big-{i}"})
    ring = p.proxy.inspector.ring
    assert 0 < ring.bytes <= 20000 and len(ring.entries) < 6
    assert ring.bytes == sum(e.size for e in ring.entries.values())
    assert "big-5" in ring.by_request_id() and "big-0" not in ring.by_request_id()

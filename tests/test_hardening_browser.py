"""A web page must not drive a proxy that asks for no key (docs/security.md "Security").

The attacks run against the real server (server.py in a child process) on loopback: a
page on another site POSTing a CORS "simple" request (`Content-Type: text/plain`, no
preflight), and a page under a name re-pointed at 127.0.0.1 (DNS rebinding, seen as a
foreign `Host`). Each is a 403 in the client protocol's own error shape naming the header,
and the provider (the mock upstream) receives nothing.
"""

from __future__ import annotations

import http.client
import json
import shutil

import pytest

from harness import CLIENT_KEY
from proxai.http import origin
from proxai.routing.config import ServerConfig
from server_process import ServerProcess

EVIL = "http://evil.example"
TEXT_PLAIN = {"Content-Type": "text/plain"}

CHAT_BODY = {"model": "chat/m", "messages": [{"role": "user", "content": "hi"}]}
RESPONSES_BODY = {"model": "chat/m", "input": "hi"}
ANTHROPIC_BODY = {"model": "chat/m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
GEMINI_BODY = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}

# (method, path, body, the error shape's family)
ENDPOINTS = [
    pytest.param("POST", "/v1/chat/completions", CHAT_BODY, "openai", id="chat"),
    pytest.param("POST", "/chat/completions", CHAT_BODY, "openai", id="chat-unprefixed"),
    pytest.param("POST", "/v1/responses", RESPONSES_BODY, "openai", id="responses"),
    pytest.param("POST", "/v1/messages", ANTHROPIC_BODY, "anthropic", id="messages"),
    pytest.param("POST", "/v1/messages/count_tokens", ANTHROPIC_BODY, "anthropic", id="count_tokens"),
    pytest.param("POST", "/v1beta/models/chat/m:generateContent", GEMINI_BODY, "gemini", id="gemini"),
    pytest.param("GET", "/v1/models", None, "openai", id="models"),
]


def _config(harness, **server) -> dict:
    cfg = harness.default_config()
    cfg["routing"]["default_providers"]["gemini_generate_content"] = "chat"
    cfg["state"] = {"backend": "memory"}
    if server:
        cfg["server"] = server
    return cfg


def _start(harness, tmp_path_factory, **server) -> ServerProcess:
    return ServerProcess(tmp_path_factory.mktemp("browser"), _config(harness, **server))


@pytest.fixture(scope="module")
def keyless(harness, tmp_path_factory):
    """The default local setup: loopback, no server.api_keys."""
    proc = _start(harness, tmp_path_factory)
    yield proc
    proc.stop()


def send(proc: ServerProcess, method: str, path: str, body=None, headers: dict | None = None):
    """One request on a fresh connection; headers given here (Host included) go out as they are."""
    conn = http.client.HTTPConnection("127.0.0.1", proc.port, timeout=10)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        raw = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, raw
    finally:
        conn.close()


def assert_refused(status: int, raw: bytes, family: str, header: str) -> None:
    assert status == 403, raw[:300]
    doc = json.loads(raw)
    if family == "gemini":
        assert doc["error"]["code"] == 403 and doc["error"]["status"] == "PERMISSION_DENIED"
    elif family == "anthropic":
        assert doc["type"] == "error" and doc["error"]["type"] == "permission_error"
    else:
        assert doc["error"]["type"] == "permission_error"
    message = doc["error"]["message"]
    assert f"{header} header" in message
    assert "server.api_keys" in message  # and how to allow it


# --- the attacks -------------------------------------------------------------------------------


@pytest.mark.parametrize("method,path,body,family", ENDPOINTS)
def test_a_page_on_another_site_is_refused_before_the_provider(keyless, mock, method, path, body, family):
    headers = {"Origin": EVIL, **(TEXT_PLAIN if body is not None else {})}
    status, _headers, raw = send(keyless, method, path, body, headers)
    assert_refused(status, raw, family, "Origin")
    assert "server.allowed_origins" in json.loads(raw)["error"]["message"]
    assert mock.requests == []


@pytest.mark.parametrize("method,path,body,family", ENDPOINTS)
def test_a_dns_rebinding_page_is_refused_before_the_provider(keyless, mock, method, path, body, family):
    # The page's own origin is evil.example:PORT, so a same-origin GET carries no Origin: the Host tells.
    status, _headers, raw = send(keyless, method, path, body, {"Host": f"evil.example:{keyless.port}"})
    assert_refused(status, raw, family, "Host")
    assert "server.allowed_hosts" in json.loads(raw)["error"]["message"]
    assert mock.requests == []


def test_a_stored_response_cannot_be_read_or_deleted_by_a_foreign_page(keyless, mock):
    status, _headers, raw = send(keyless, "POST", "/v1/responses", RESPONSES_BODY)
    assert status == 200, raw[:300]
    stored = json.loads(raw)
    answer = stored["output"][0]["content"][0]["text"]
    path = f"/v1/responses/{stored['id']}"
    for headers in ({"Host": f"evil.example:{keyless.port}"}, {"Origin": EVIL}):
        for method in ("GET", "DELETE"):
            status, _headers, raw = send(keyless, method, path, headers=headers)
            assert_refused(status, raw, "openai", next(iter(headers)))
            assert answer.encode() not in raw
    status, _headers, raw = send(keyless, "GET", path)
    assert status == 200 and json.loads(raw)["id"] == stored["id"]  # still there


def test_the_refusal_is_logged_like_any_request(keyless, mock):
    send(keyless, "POST", "/v1/chat/completions", CHAT_BODY, {"Origin": EVIL, "x-request-id": "browser-refused-1"})
    records = [r for r in keyless.request_records() if r.get("request_id") == "browser-refused-1"]
    assert len(records) == 1
    assert records[0]["status"] == 403 and records[0]["error"] == "forbidden"


def test_a_preflight_gets_no_cors_grant(keyless, mock):
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}
    for page, expected in ((EVIL, 403), ("http://localhost:3000", 405)):
        status, headers, _raw = send(keyless, "OPTIONS", "/v1/chat/completions", headers={"Origin": page, **preflight})
        assert status == expected
        assert not [name for name in headers if name.startswith("access-control-")], headers
    assert mock.requests == []


# --- what still works --------------------------------------------------------------------------


LOCAL_PAGES = [
    pytest.param({}, id="no-origin"),
    pytest.param({"Origin": "http://localhost:3000"}, id="origin-localhost"),
    pytest.param({"Origin": "http://127.0.0.1:5173"}, id="origin-127"),
    pytest.param({"Origin": "http://[::1]:8080"}, id="origin-ipv6"),
    pytest.param({"Origin": "https://app.localhost"}, id="origin-dot-localhost"),
    pytest.param({"Host": "127.0.0.1:{port}"}, id="host-127"),
    pytest.param({"Host": "localhost:{port}"}, id="host-localhost"),
    pytest.param({"Host": "[::1]:{port}"}, id="host-ipv6"),
    pytest.param({"Host": "localhost"}, id="host-without-port"),
]


@pytest.mark.parametrize("headers", LOCAL_PAGES)
def test_local_clients_and_local_pages_are_served(keyless, mock, headers):
    headers = {k: v.format(port=keyless.port) for k, v in headers.items()}
    status, _headers, raw = send(keyless, "POST", "/v1/chat/completions", CHAT_BODY, headers)
    assert status == 200, raw[:300]
    assert len(mock.requests) == 1


@pytest.mark.parametrize("method,path,body,family", ENDPOINTS)
def test_every_endpoint_serves_a_page_on_this_machine(keyless, mock, method, path, body, family):
    headers = {"Origin": "http://localhost:3000", "Host": f"localhost:{keyless.port}"}
    status, _headers, raw = send(keyless, method, path, body, headers)
    assert status == 200, raw[:300]


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_probes_are_answered_whatever_the_host(keyless, path):
    status, _headers, raw = send(keyless, "GET", path, headers={"Host": "10.1.2.3:18080"})
    assert status == 200, raw[:300]


def test_metrics_are_not_for_foreign_pages(keyless):
    status, _headers, _raw = send(keyless, "GET", "/metrics", headers={"Host": "evil.example"})
    assert status == 403
    status, _headers, _raw = send(keyless, "GET", "/metrics", headers={"Host": f"localhost:{keyless.port}"})
    assert status == 200


def test_with_api_keys_a_foreign_host_or_origin_with_a_key_is_served(harness, tmp_path_factory, mock):
    proc = _start(harness, tmp_path_factory, api_keys=[CLIENT_KEY])
    try:
        foreign = {"Host": f"proxai.example.internal:{proc.port}", "Origin": EVIL}
        status, _headers, raw = send(proc, "POST", "/v1/chat/completions", CHAT_BODY,
                                     {**foreign, "Authorization": f"Bearer {CLIENT_KEY}"})
        assert status == 200, raw[:300]
        status, _headers, raw = send(proc, "POST", "/v1/chat/completions", CHAT_BODY, foreign)
        assert status == 401  # the key decides, as for any client
        assert len(mock.requests) == 1
    finally:
        proc.stop()


@pytest.mark.slow
def test_a_listener_on_every_address_takes_any_host_but_no_foreign_page(harness, tmp_path_factory, mock):
    proc = _start(harness, tmp_path_factory, host="0.0.0.0")
    try:
        # Reached by whatever name the network gives it (a pod IP, a service name).
        status, _headers, raw = send(proc, "POST", "/v1/chat/completions", CHAT_BODY, {"Host": f"proxai.internal:{proc.port}"})
        assert status == 200, raw[:300]
        status, _headers, raw = send(proc, "POST", "/v1/chat/completions", CHAT_BODY, {"Origin": EVIL, **TEXT_PLAIN})
        assert_refused(status, raw, "openai", "Origin")
        assert len(mock.requests) == 1
    finally:
        proc.stop()


@pytest.mark.slow
def test_allowed_origins_and_hosts_admit_the_listed_ones_only(harness, tmp_path_factory, mock):
    proc = _start(harness, tmp_path_factory, allowed_origins=["https://chat.example.internal"],
                  allowed_hosts=["proxai.test"])
    try:
        for headers in ({"Origin": "https://chat.example.internal"}, {"Host": f"proxai.test:{proc.port}"},
                        {"Host": "PROXAI.test"}):
            status, _headers, raw = send(proc, "POST", "/v1/chat/completions", CHAT_BODY, headers)
            assert status == 200, (headers, raw[:300])
        for headers, named in (({"Origin": "http://chat.example.internal"}, "Origin"), ({"Origin": EVIL}, "Origin"),
                               ({"Host": f"evil.example:{proc.port}"}, "Host")):
            status, _headers, raw = send(proc, "POST", "/v1/chat/completions", CHAT_BODY, headers)
            assert_refused(status, raw, "openai", named)
        assert len(mock.requests) == 3
    finally:
        proc.stop()


# --- the rule itself ---------------------------------------------------------------------------


@pytest.mark.parametrize("page", ["http://localhost", "http://localhost:3000", "https://127.0.0.1:8443",
                                  "http://127.0.0.2", "http://[::1]:3000", "http://dev.localhost:5173",
                                  "HTTP://LOCALHOST:3000"])
def test_loopback_origins(page):
    assert origin.loopback_origin(page)


@pytest.mark.parametrize("page", ["null", "", "http://evil.example", "http://localhost.evil.example",
                                  "http://127.0.0.1.nip.io", "http://localhost@evil.example",
                                  "http://evil.example/localhost", "file://", "chrome-extension://abc",
                                  "ftp://localhost", "http://[::ffff:10.0.0.1]", "http://0.0.0.0:3000"])
def test_foreign_origins(page):
    assert not origin.loopback_origin(page)


def test_allowed_hosts_turn_the_host_rule_on_for_any_listener():
    open_listener = ServerConfig(host="0.0.0.0")
    assert origin.refusal({"Host": "pod-ip:1"}, "/v1/models", open_listener) is None
    guarded = ServerConfig(host="0.0.0.0", allowed_hosts=("proxai.internal",))
    assert origin.refusal({"Host": "proxai.internal:18080"}, "/v1/models", guarded) is None
    assert origin.refusal({"Host": "localhost:18080"}, "/v1/models", guarded) is None
    assert origin.refusal({"Host": "evil.example"}, "/v1/models", guarded).status == 403
    assert origin.refusal({"Host": "evil.example"}, "/healthz", guarded) is None
    with_keys = ServerConfig(api_keys=("k",))
    assert origin.refusal({"Host": "evil.example", "Origin": EVIL}, "/v1/models", with_keys) is None


# --- in a real browser -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chromium():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')")
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("no chromium browser on PATH: install Debian's package (apt-get install -y chromium)")
    # evil.example resolves to this machine, as it would for a DNS-rebinding attacker.
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
            "--host-resolver-rules=MAP evil.example 127.0.0.1"]
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=path, args=args)
        yield browser
        browser.close()


FETCH = """async ([url, init]) => {
    try {
        const r = await fetch(url, init);
        return {status: r.status, type: r.type, body: r.type === "opaque" ? "" : await r.text()};
    } catch (e) {
        return {error: String(e)};
    }
}"""


@pytest.mark.slow
def test_a_page_in_chromium_can_neither_spend_nor_read(chromium, keyless, mock):
    page = chromium.new_page()
    try:
        page.goto(f"http://evil.example:{keyless.port}/healthz")  # any page under the attacker's name
        body = json.dumps(CHAT_BODY)
        simple = {"method": "POST", "mode": "no-cors", "headers": {"Content-Type": "text/plain"}, "body": body}
        sent = page.evaluate(FETCH, [f"http://127.0.0.1:{keyless.port}/v1/chat/completions", simple])
        assert sent["type"] == "opaque"  # the browser sent it and shows the page nothing
        cors = page.evaluate(FETCH, [f"http://127.0.0.1:{keyless.port}/v1/chat/completions",
                                     {"method": "POST", "headers": {"Content-Type": "application/json"}, "body": body}])
        assert "error" in cors  # the preflight granted nothing
        # DNS rebinding: the page's own origin now reaches the proxy, and may read what comes back.
        # A same-origin GET carries no Origin (the Host tells); Chromium's same-origin POST does.
        for path, init, named in (("/v1/models", {}, "Host"), ("/v1/chat/completions", {"method": "POST", "body": body}, "Origin")):
            answer = page.evaluate(FETCH, [path, init])
            assert answer["status"] == 403, answer
            assert "permission_error" in answer["body"] and f"{named} header" in answer["body"]
    finally:
        page.close()
    assert mock.requests == []
    refused = [r for r in keyless.request_records() if r.get("path") == "/v1/chat/completions" and r.get("status") == 403]
    assert refused

"""Attacks on the real server process, on loopback: forwarded Responses ids and Gemini model
names that try to leave their path segment with the provider's key, provider-held responses
read across tenants, a redirect or a gzip bomb on the forwarded path, keys that are not
UTF-8, per-tenant prompt cache keys, fresh ids for unstored turns, and /readyz reasons
without the server's file layout."""

from __future__ import annotations

import gzip
import http.client
import json
import socket

import pytest
from aiohttp import web

from gemini_helpers import GEMINI_KEY, gemini_config
from harness import PROVIDER_KEYS, _serve, default_config
from server_process import ServerProcess

RESPONSES_KEY = PROVIDER_KEYS["responses"]


class Upstream:
    """A provider on loopback that records every request line it gets (the raw, still
    escaped path) and answers each with what `answer(request)` returns (default: 200 JSON)."""

    def __init__(self, harness, answer=None):
        self.harness = harness
        self.seen: list[dict] = []
        self.answer = answer

        async def handle(request: web.Request) -> web.StreamResponse:
            body = await request.read()
            self.seen.append({"method": request.method, "raw_path": request.raw_path, "path": request.path,
                              "headers": dict(request.headers), "body": body})
            if self.answer is not None:
                return await self.answer(request)
            return web.json_response({"id": "resp_upstream", "object": "response", "leaked": request.raw_path})

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handle)
        self.served = harness.loop.run(_serve(web.AppRunner(app, handle_signals=False, access_log=None)))
        self.url = self.served.url

    def close(self) -> None:
        self.harness.loop.run(self.served.runner.cleanup())


@pytest.fixture
def upstream(harness):
    made: list[Upstream] = []

    def make(answer=None) -> Upstream:
        made.append(Upstream(harness, answer))
        return made[-1]

    yield make
    for u in made:
        u.close()


@pytest.fixture
def server(start_server):
    return start_server


def responses_config(harness, url: str, **server) -> dict:
    cfg = default_config(harness.mock_url)
    cfg["providers"]["responses"]["base_url"] = url + "/v1"
    if server:
        cfg["server"] = server
    return cfg


def gemini_to(url: str, mock_url: str) -> dict:
    """Gemini clients' default provider: a Gemini provider at `url`."""
    cfg = gemini_config(mock_url)
    cfg["providers"]["gemini"]["base_url"] = url
    cfg["routing"]["default_providers"]["gemini_generate_content"] = "gemini"
    return cfg


def request(srv: ServerProcess, method: str, path: str, body: bytes | None = None,
            headers: dict | None = None) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    # skip_host / encoding: the path goes out byte for byte, as an attacker writes it
    conn.putrequest(method, path, skip_accept_encoding=True)
    for name, value in {"Content-Type": "application/json", **(headers or {})}.items():
        conn.putheader(name, value)
    if body is not None:
        conn.putheader("Content-Length", str(len(body)))
    conn.endheaders(body)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data


# --- 1. forwarded Responses ids stay one segment of the provider's shape ------------------

TRAVERSALS = [
    "..%2Ffiles%2Ffile-abc123",
    "..%2Forganization%2Fusers%3Flimit%3D100",
    "resp_1%3Fafter%3Dx",
    "resp_1%2F..%2F..%2Fmodels",
    "resp_1%23frag",
    "resp_1%00",
    "resp_%E2%98%83",
    "%2e%2e",
    "resp_1%0d%0aX-Injected:%201",
]


@pytest.mark.parametrize("method, suffix", [("GET", ""), ("DELETE", ""), ("GET", "/input_items")])
def test_a_forwarded_response_id_never_leaves_its_path_segment(harness, upstream, server, method, suffix):
    up = upstream()
    srv = server(responses_config(harness, up.url))
    for rid in TRAVERSALS:
        status, _, body = request(srv, method, f"/v1/responses/{rid}{suffix}")
        assert status == 404, (rid, status, body)
        error = json.loads(body)["error"]
        assert error["type"] == "invalid_request_error" and "not found" in error["message"]
    assert up.seen == []  # not one reached the provider, with its key or otherwise
    # An id of the provider's own shape still goes to the provider, as the one segment it is.
    status, _, body = request(srv, method, f"/v1/responses/resp_abc123{suffix}?limit=5&extra=1")
    assert status == 200
    got = up.seen[-1]
    assert (got["method"], got["raw_path"].split("?")[0]) == (method, f"/v1/responses/resp_abc123{suffix}")
    assert got["headers"]["Authorization"] == "Bearer " + RESPONSES_KEY
    if suffix:  # only the endpoint's own query parameters go on
        assert got["raw_path"].endswith("?limit=5")
    else:
        assert "?" not in got["raw_path"]


# --- 5. the forwarded path has generation's protections ---------------------------------


def test_a_redirect_on_the_forwarded_path_is_not_followed(harness, upstream, server):
    target = upstream()  # must receive nothing

    async def redirect(request: web.Request) -> web.Response:
        return web.Response(status=307, headers={"Location": target.url + "/v1/files/file-abc123"})

    srv = server(responses_config(harness, upstream(redirect).url))
    for method in ("GET", "DELETE"):
        status, _, body = request(srv, method, "/v1/responses/resp_abc123")
        assert status == 502, body
        assert "redirect" in json.loads(body)["error"]["message"]
    assert target.seen == []


def test_a_gzip_bomb_on_the_forwarded_path_is_a_502(harness, upstream, server):
    bomb = gzip.compress(b'{"id":"resp_abc123","pad":"' + b"0" * (64 << 20) + b'"}', 9)

    async def answer(request: web.Request) -> web.Response:
        return web.Response(body=bomb, headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})

    srv = server(responses_config(harness, upstream(answer).url, max_upstream_body_bytes=1 << 20))
    before = srv.status("VmHWM")
    status, _, body = request(srv, "GET", "/v1/responses/resp_abc123")
    assert status == 502
    assert "larger than server.max_upstream_body_bytes" in json.loads(body)["error"]["message"]
    assert srv.status("VmHWM") - before < 32 << 20  # the cap, not the 64 MB inflated


# --- 2. the Gemini model is one path segment ---------------------------------------------

MODELS = [
    "g%2F..%2F..%2Fv1beta%2FtunedModels%2Fx",
    "g%3Fkey%3Dstolen",
    "g%23",
    "g%00",
    "g%0d%0aX-Injected:%201",
    "caf%C3%A9",
    "..",
    "%2e%2e%2f%2e%2e",
    "models%2F..%2F..%2Ffiles",
]


@pytest.mark.parametrize("method", ["generateContent", "streamGenerateContent", "countTokens"])
def test_a_gemini_model_never_leaves_its_path_segment(harness, upstream, server, method):
    up = upstream()
    srv = server(gemini_to(up.url, harness.mock_url))
    body = json.dumps({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}).encode()
    refused = 0
    for model in MODELS:
        status, _, data = request(srv, "POST", f"/v1beta/models/{model}:{method}", body)
        assert status < 500 or status == 502, (model, status, data)  # never the proxy's own 500
        assert b"Traceback" not in data and b"internal error" not in data
        refused += status in (400, 404)  # a CR LF in the path matches no route
    for got in up.seen:
        path, _, query = got["raw_path"].partition("?")
        segment = path.removeprefix("/v1beta/models/")
        assert path.startswith("/v1beta/models/") and "/" not in segment, got["raw_path"]
        assert segment.endswith(":" + method) and segment.count(":") == 1, got["raw_path"]
        assert query in ("", "alt=sse"), got["raw_path"]
        assert got["headers"]["x-goog-api-key"] == GEMINI_KEY
    assert len(up.seen) == len(MODELS) - refused >= len(MODELS) - 1  # the others went, each as one segment


# --- 6. a key that is not UTF-8 on the state paths ---------------------------------------


@pytest.mark.parametrize("header", [b"x-api-key: \xff\xfe", b"Authorization: Bearer \xc3\x28"])
@pytest.mark.parametrize("path", [b"/v1/responses/resp_abc123", b"/v1/responses/resp_abc123/input_items"])
def test_a_key_that_is_not_utf8_on_the_state_paths_is_a_401(harness, upstream, server, header, path):
    up = upstream()
    srv = server(responses_config(harness, up.url))
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
        sock.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" + header + b"\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 401"), answer[:200]
    assert json.loads(body)["error"]["type"] == "authentication_error" or "API key" in json.loads(body)["error"]["message"]
    assert up.seen == []
    assert not [r for r in srv.records() if "Traceback" in r.get("msg", "") or r.get("levelname") == "ERROR"]


# --- 7. tenancy of provider-held responses, prompt cache keys, unstored ids -------------

TENANTS = {"alice": "sk-client-alice", "bob": "sk-client-bob"}


def _create(srv, key: str, stream: bool, store: bool | None = None) -> str:
    body = {"model": "responses/m", "input": "hi", "stream": stream}
    if store is not None:
        body["store"] = store
    status, _, data = request(srv, "POST", "/v1/responses", json.dumps(body).encode(), {"Authorization": "Bearer " + key})
    assert status == 200, data
    if not stream:
        return json.loads(data)["id"]
    created = next(line for line in data.split(b"\n") if line.startswith(b"data: ") and b"response.created" in line)
    return json.loads(created[6:])["response"]["id"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_provider_held_response_is_forwarded_only_for_the_tenant_that_created_it(harness, server, mock, stream):
    from proxai.mock import Text, Turn

    cfg = default_config(harness.mock_url)
    cfg["server"] = {"api_keys": list(TENANTS.values())}
    srv = server(cfg)
    mock.enqueue(Turn([Text("alice's")], id="resp_alice1"))
    rid = _create(srv, TENANTS["alice"], stream)
    assert rid == "resp_alice1"
    n = len(mock.requests)
    for method, suffix in (("GET", ""), ("GET", "/input_items"), ("DELETE", "")):
        status, _, body = request(srv, method, f"/v1/responses/{rid}{suffix}", headers={"x-api-key": TENANTS["bob"]})
        assert status == 404, body
    assert len(mock.requests) == n  # bob's reads never reached the provider
    # An id nobody created through this proxy is not forwarded either, with several tenants.
    assert request(srv, "GET", "/v1/responses/resp_elsewhere", headers={"x-api-key": TENANTS["alice"]})[0] == 404
    assert len(mock.requests) == n
    # alice's own read goes to the provider (the mock keeps nothing: its own 404).
    status, _, _ = request(srv, "GET", f"/v1/responses/{rid}", headers={"x-api-key": TENANTS["alice"]})
    assert status == 404 and len(mock.requests) == n + 1
    assert (mock.requests[-1].method, mock.requests[-1].path) == ("GET", f"/v1/responses/{rid}")


def test_derived_prompt_cache_keys_differ_between_tenants(harness, server, mock):
    from proxai.mock import Text, Turn

    cfg = default_config(harness.mock_url)
    cfg["server"] = {"api_keys": list(TENANTS.values())}
    srv = server(cfg)
    body = json.dumps({"model": "chat/gpt", "max_tokens": 10, "system": "You are a careful agent.",
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    keys = []
    for key in (TENANTS["alice"], TENANTS["alice"], TENANTS["bob"]):
        mock.enqueue(Turn([Text("ok")]))
        status, _, data = request(srv, "POST", "/v1/messages", body, {"x-api-key": key, "anthropic-version": "2023-06-01"})
        assert status == 200, data
        keys.append(mock.requests[-1].body["prompt_cache_key"])
    assert keys[0] == keys[1] and keys[0] != keys[2]
    assert all(k.startswith("pck_") for k in keys)


def test_a_start_without_continuation_secret_warns(harness, server):
    srv = server(default_config(harness.mock_url))
    assert any("continuation.secret is not set" in r.get("msg", "") for r in srv.records())
    cfg = default_config(harness.mock_url)
    cfg["continuation"] = {"secret": "s3cret-for-tests"}
    srv = server(cfg)
    assert not any("continuation.secret is not set" in r.get("msg", "") for r in srv.records())


@pytest.mark.parametrize("stream", [False, True])
def test_an_unstored_answer_never_carries_a_stored_responses_id(harness, server, mock, stream):
    from proxai.mock import Text, Turn

    srv = server(default_config(harness.mock_url))
    # The provider repeats its message id; the derived Responses ids would be the same.
    mock.enqueue(Turn([Text("first")], id="msg_repeated"), Turn([Text("second")], id="msg_repeated"))
    body = {"model": "anthropic/claude", "input": "hi", "stream": stream}
    stored = _create_raw(srv, {**body, "store": True}, stream)
    unstored = _create_raw(srv, {**body, "store": False}, stream)
    assert stored != unstored
    status, _, data = request(srv, "GET", f"/v1/responses/{stored}")
    assert status == 200 and json.loads(data)["output"][0]["content"][0]["text"] == "first"
    assert request(srv, "GET", f"/v1/responses/{unstored}")[0] == 404


def _create_raw(srv, body: dict, stream: bool) -> str:
    status, _, data = request(srv, "POST", "/v1/responses", json.dumps(body).encode())
    assert status == 200, data
    if not stream:
        return json.loads(data)["id"]
    ids = {json.loads(line[6:])["response"]["id"] for line in data.split(b"\n")
           if line.startswith(b"data: ") and b'"response":' in line}
    assert len(ids) == 1  # every snapshot of one stream names the same id
    return ids.pop()


@pytest.mark.parametrize("break_it", ["yaml", "rules_dir"])
def test_readyz_shows_a_failed_reload_without_the_servers_paths(harness, server, tmp_path, break_it):
    import signal
    import time

    srv = server(default_config(harness.mock_url))
    config_file = next(tmp_path.glob("proxai-*.yaml"))
    if break_it == "yaml":
        config_file.write_text("providers: [\n")
    else:
        doc = default_config(harness.mock_url)
        doc["rules_dir"] = str(tmp_path / "no-such-rules")
        config_file.write_text(json.dumps(doc))
    srv.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 20
    ready: dict = {}
    while time.monotonic() < deadline and "last_reload_error" not in ready:
        time.sleep(0.1)
        ready = json.loads(srv.get("/readyz"))
    reason = ready["last_reload_error"]
    assert str(tmp_path) not in reason and len(reason) <= 200
    assert (config_file.name if break_it == "yaml" else "no-such-rules") in reason
    logged = [r["msg"] for r in srv.records() if "reload failed" in r.get("msg", "")]
    assert logged and str(tmp_path) in logged[0]  # the whole reason, path included, is in the log

"""Hostile or broken input: a clear 4xx in the client's protocol, never a 500 or a traceback,
never forwarded upstream. Inbound auth, and secrets kept out of logs, error bodies and
capture file names."""

from __future__ import annotations

import json
import logging

import pytest

from harness import CLIENT_KEY, PROVIDER_KEYS
from proxai.http import ingress
from proxai.mock import Error, Text, ToolCall, Turn
from test_passthrough_e2e import raw_post
from test_stream_integrity import ANTHROPIC, CHAT, PATH, PROTOCOLS, RESPONSES, SHORT, request_body

CLIENTS = [pytest.param(c, id=SHORT[c]) for c in PROTOCOLS]


def assert_client_error(client: str, status: int, headers: dict, body: bytes, expected: int = 400) -> dict:
    assert status == expected, body[:300]
    assert headers["content-type"].startswith("application/json")
    text = body.decode("utf-8")
    assert "Traceback" not in text and 'File "' not in text
    doc = json.loads(body)
    if client == ANTHROPIC:
        assert doc["type"] == "error" and doc["status"] == expected
        assert doc["error"]["type"] == {400: "invalid_request_error", 401: "authentication_error",
                                        413: "request_too_large"}[expected]
        return {"message": doc["error"]["message"], "param": None}
    assert set(doc["error"]) == {"message", "type", "param", "code", "status"}
    assert doc["error"]["status"] == expected
    return doc["error"]


def send(url: str, client: str, body, headers=None):
    return raw_post(url, PATH[client], body, headers=headers)


# --- malformed bodies ------------------------------------------------------------------------------


MALFORMED = {
    "truncated": b'{"model": "m", "messages": [',
    "trailing garbage": b'{"model": "m"} {"x": 1}',
    "nan": b'{"model": "m", "temperature": NaN, "messages": [{"role": "user", "content": "x"}], "input": "x", "max_tokens": 5}',
    "infinity": b'{"model": "m", "top_p": -Infinity, "messages": [{"role": "user", "content": "x"}], "max_tokens": 5}',
    "invalid utf-8": b'{"model": "m", "messages": [{"role": "user", "content": "\xff\xfe bad"}], "input": "x", "max_tokens": 5}',
    "lone surrogate": b'{"model": "m", "messages": [{"role": "user", "content": "\\ud800"}], "input": "\\udfff", "max_tokens": 5}',
    "top-level array": b'[{"model": "m"}]',
    "top-level string": b'"model"',
    "whitespace": b"   \n\t ",
    "form-encoded": b"model=m&messages=hi",
    "deep nesting": b'{"model": "m", "max_tokens": 5, "input": "x", "messages": [{"role": "user", "content": '
                    + b"[" * 5000 + b"]" * 5000 + b"}]}",
}


@pytest.mark.parametrize("case", list(MALFORMED))
@pytest.mark.parametrize("client", CLIENTS)
def test_malformed_body_is_400_and_not_forwarded(proxy, mock, client, case):
    status, headers, body = send(proxy.url, client, MALFORMED[case])
    err = assert_client_error(client, status, headers, body)
    assert err["message"]
    assert mock.requests == []


def _nested(depth: int):
    value: object = "leaf"
    for _ in range(depth):
        value = {"x": value}
    return value


@pytest.mark.parametrize("client", CLIENTS)
def test_nesting_is_bounded_but_reasonable_depth_is_fine(proxy, mock, client):
    for provider in PROTOCOLS:  # translated pairs walk the body: depth must be bounded for them too
        body = request_body(client, provider, stream=False, metadata={"deep": _nested(ingress.MAX_DEPTH + 5)})
        status, headers, raw = send(proxy.url, client, body)
        assert "nested more than" in assert_client_error(client, status, headers, raw)["message"]
        ok = request_body(client, provider, stream=False, metadata={"deep": _nested(20)})
        status, _, _ = send(proxy.url, client, ok)
        assert status < 500
    assert all("deep" in (r.body or {}).get("metadata", {}) for r in mock.requests[:1] if r.protocol == client)


# --- wrong types and absurd values ------------------------------------------------------------------


COMMON_BAD = [
    ("model", 5), ("model", ""), ("model", None), ("model", "m" * 5000), ("model", ["m"]),
    ("stream", "yes"), ("stream", 1), ("temperature", "hot"), ("tools", {"a": 1}), ("metadata", "x"),
]
BAD = {
    CHAT: COMMON_BAD + [
        ("messages", {"role": "user"}), ("messages", "hello"), ("messages", []),
        ("max_tokens", "10"), ("max_tokens", 0), ("max_tokens", -1), ("max_tokens", 10**12), ("max_tokens", True),
        ("max_tokens", 10**30), ("max_completion_tokens", 1.5), ("n", 0), ("n", 100000), ("n", "2"),
        ("stop", 5), ("stream_options", "on"),
    ],
    RESPONSES: COMMON_BAD + [
        ("input", 5), ("input", {"role": "user"}), ("max_output_tokens", -5), ("max_output_tokens", 10**15),
        ("instructions", ["a"]), ("previous_response_id", 7),
    ],
    ANTHROPIC: COMMON_BAD + [
        ("messages", {"role": "user"}), ("messages", []), ("max_tokens", None), ("max_tokens", 0),
        ("max_tokens", "1024"), ("max_tokens", 10**12), ("system", 5), ("stop_sequences", "STOP"), ("top_k", -1),
    ],
}
CASES = [pytest.param(c, f, v, id=f"{SHORT[c]}-{f}-{str(v)[:20]}") for c in PROTOCOLS for f, v in BAD[c]]


@pytest.mark.parametrize("client, field, value", CASES)
def test_wrong_type_or_absurd_value_is_400_naming_the_field(proxy, mock, client, field, value):
    body = request_body(client, client, stream=False)
    body[field] = value
    status, headers, raw = send(proxy.url, client, body)
    err = assert_client_error(client, status, headers, raw)
    assert field in err["message"]
    if client != ANTHROPIC:
        assert err["param"].startswith(field)
    if isinstance(value, str) and len(value) > 100:
        assert value not in err["message"]  # the value itself is never echoed
    assert mock.requests == []


@pytest.mark.parametrize("client, field", [(CHAT, "messages"), (CHAT, "model"), (RESPONSES, "model"),
                                           (ANTHROPIC, "messages"), (ANTHROPIC, "max_tokens")])
def test_missing_required_field_is_400(proxy, mock, client, field):
    body = request_body(client, client, stream=False)
    del body[field]
    status, headers, raw = send(proxy.url, client, body)
    assert f"{field} is required" in assert_client_error(client, status, headers, raw)["message"]
    assert mock.requests == []


@pytest.mark.parametrize("client", CLIENTS)
def test_items_of_the_wrong_type_are_refused_by_the_translator_not_forwarded(proxy, mock, client):
    # ingress checks the container only; a translated pair must still refuse bad items with a 4xx
    for provider in PROTOCOLS:
        if provider == client:
            continue
        body = request_body(client, provider, stream=False)
        body["messages" if client != RESPONSES else "input"] = [1, "two", None]
        status, headers, raw = send(proxy.url, client, body)
        assert_client_error(client, status, headers, raw)
    assert mock.requests == []


def test_error_message_never_echoes_prompt_text(proxy, mock):
    secret = "PROMPT-TEXT-" + "z" * 50
    for client in PROTOCOLS:
        body = request_body(client, client, stream=False)
        body["messages" if client != RESPONSES else "input"] = 12345 if client == RESPONSES else secret
        status, _, raw = send(proxy.url, client, body)
        assert status == 400 and secret.encode() not in raw


# --- accepted input ---------------------------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_null_optional_fields_big_prompts_and_big_integers_in_unknown_fields_pass(proxy, mock, client):
    body = request_body(client, client, stream=None, temperature=None, top_p=None, metadata=None,
                        x_custom={"counter": 2**70})
    body["messages" if client != RESPONSES else "input"] = (
        [{"role": "user", "content": "y" * 1_000_000}] if client != RESPONSES else "y" * 1_000_000)
    status, _, raw = send(proxy.url, client, body)
    assert status == 200, raw[:300]
    assert mock.requests[-1].body["x_custom"] == {"counter": 2**70}


@pytest.mark.parametrize("client", CLIENTS)
def test_unknown_fields_pass_through_but_are_not_translated(proxy, mock, client):
    for provider in PROTOCOLS:
        status, _, raw = send(proxy.url, client, request_body(client, provider, stream=False,
                                                              vendor_extension={"a": 1}))
        assert status == 200, raw[:300]
        upstream = mock.requests[-1].body
        if provider == client:
            assert upstream["vendor_extension"] == {"a": 1}  # the provider decides
        else:
            assert "vendor_extension" not in upstream


@pytest.mark.parametrize("client", CLIENTS)
def test_content_type_is_not_enforced_but_non_json_still_fails(proxy, mock, client):
    body = json.dumps(request_body(client, client, stream=False)).encode()
    status, _, _ = send(proxy.url, client, body, headers={"Content-Type": "text/plain"})
    assert status == 200  # curl -d sends form-encoded; the body decides
    form = b'--b\r\nContent-Disposition: form-data; name="model"\r\n\r\nm\r\n--b--\r\n'
    status, headers, raw = send(proxy.url, client, form, headers={"Content-Type": "multipart/form-data; boundary=b"})
    assert_client_error(client, status, headers, raw)


@pytest.mark.parametrize("client", CLIENTS)
def test_oversized_body_is_413_in_the_clients_shape(start_proxy, harness, mock, client):
    cfg = harness.default_config()
    cfg["server"] = {"max_request_body_bytes": 4096}
    p = start_proxy(cfg)
    for provider in PROTOCOLS:
        body = request_body(client, provider, stream=False, padding="p" * 10_000)
        status, headers, raw = send(p.url, client, body)
        assert_client_error(client, status, headers, raw, expected=413)
    assert mock.requests == []


# --- inbound auth ---------------------------------------------------------------------------------------

PROXY_KEYS = ["pk-inbound-SECRET-one", "pk-inbound-SECRET-two"]


@pytest.mark.parametrize("client", CLIENTS)
def test_inbound_auth_is_401_in_the_clients_shape_and_never_echoes_keys(start_proxy, harness, mock, client):
    cfg = harness.default_config()
    cfg["server"] = {"api_keys": PROXY_KEYS}
    p = start_proxy(cfg)
    body = request_body(client, CHAT, stream=False)
    wrong = [None, {"Authorization": "Bearer pk-inbound-SECRET-on"}, {"x-api-key": "pk-inbound-SECRET-one-plus"},
             {"Authorization": "Basic " + PROXY_KEYS[0]}, {"x-api-key": ""}, {"Authorization": "Bearer "}]
    for headers in wrong:
        status, resp_headers, raw = send(p.url, client, body, headers=headers)
        assert_client_error(client, status, resp_headers, raw, expected=401)
        assert b"SECRET" not in raw and not any("SECRET" in v for v in resp_headers.values())
    assert mock.requests == []
    for headers in ({"Authorization": f"Bearer {PROXY_KEYS[1]}"}, {"x-api-key": PROXY_KEYS[0]}):
        status, _, _ = send(p.url, client, body, headers=headers)
        assert status == 200
    assert all("pk-inbound" not in json.dumps(r.headers) for r in mock.requests)


def test_keys_and_prompts_never_reach_logs_error_bodies_or_capture_names(start_proxy, harness, mock, caplog,
                                                                        tmp_path, monkeypatch):
    """A workload over every pair and failure kind with every logger at DEBUG: grep it all."""
    monkeypatch.setenv("PROXAI_HOME", str(tmp_path))
    caplog.set_level(logging.DEBUG)
    prompt = "PROMPT-SECRET-6f1d"
    cfg = harness.default_config()
    cfg["server"] = {"api_keys": PROXY_KEYS}
    cfg["capture"] = {"inbound_request": True, "provider_request": True, "upstream_response": True,
                      "outbound_response": True}
    p = start_proxy(cfg)
    bodies: list[bytes] = []
    auth = {"Authorization": f"Bearer {PROXY_KEYS[0]}"}
    for client in PROTOCOLS:
        for provider in PROTOCOLS:
            for stream in (False, True):
                def req(**extra):
                    body = request_body(client, provider, stream=stream, **extra)
                    if client == RESPONSES:
                        body["input"] = prompt
                    else:
                        body["messages"] = [{"role": "user", "content": prompt}]
                    return body

                mock.enqueue(Turn([Text("ok"), ToolCall("call_1", "f", json.dumps({"q": prompt}))]))
                bodies.append(send(p.url, client, req(), headers=auth)[2])
                mock.enqueue(Error(400, message=f"bad request near {prompt}"))
                bodies.append(send(p.url, client, req(), headers=auth)[2])
                mock.enqueue(Turn([Text(prompt)], cut_after=3))
                bodies.append(send(p.url, client, req(), headers=auth)[2])
                bodies.append(send(p.url, client, req(), headers={"x-api-key": PROXY_KEYS[0] + "x"})[2])
                bodies.append(send(p.url, client, req(max_tokens="x", temperature=prompt), headers=auth)[2])
    secrets = [*PROXY_KEYS, CLIENT_KEY, *PROVIDER_KEYS.values(), prompt]
    log_text = caplog.text + "\n".join(str(r.__dict__) for r in caplog.records)
    for secret in secrets:
        assert secret not in log_text, secret
    for body in bodies:  # the proxy's own error bodies; an upstream's message is relayed as the upstream sent it
        for secret in [*PROXY_KEYS, *PROVIDER_KEYS.values()]:
            assert secret.encode() not in body
    names = [str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*")]
    assert len(list(tmp_path.rglob("*.http"))) > 9 * 2 * 4  # captures were written, so their names are checked
    for name in names:
        for secret in secrets:
            assert secret not in name
    for path in tmp_path.rglob("*.http"):
        data = path.read_bytes()
        for secret in [*PROXY_KEYS, *PROVIDER_KEYS.values()]:
            assert secret.encode() not in data, (path.name, secret)


def test_the_proxy_listens_on_loopback_unless_told_otherwise(harness):
    from proxai.routing.config import ServerConfig, load_dict

    assert ServerConfig().host == "127.0.0.1"
    assert load_dict(harness.default_config(), {}).server.host == "127.0.0.1"

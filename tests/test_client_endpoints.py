"""The endpoints real clients call besides generation: token counting and model listing,
through the official SDKs, toward each provider protocol; paths without /v1; errors in
the shape of the path's API; the query string kept in pass-through."""

from __future__ import annotations

import copy
import json

import anthropic
import httpx2 as httpx
import openai
import pytest

from harness import CLIENT_KEY, PROVIDER_KEYS
from proxai.mock import Error, Json
from proxai.endpoints.token_estimate import estimate

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
TOOLS = [{
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}]
RESPONSES_TOOLS = [{
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}]


def count_requests(mock):
    return [r for r in mock.requests if r.path in ("/v1/messages/count_tokens", "/v1/responses/input_tokens")]


# --- POST /v1/messages/count_tokens ------------------------------------------------------------


def test_anthropic_count_tokens_forwarded_to_anthropic(anthropic_client, mock):
    mock.enqueue(Json({"input_tokens": 321}))
    result = anthropic_client.messages.count_tokens(
        model="anthropic/claude-test", system="Be brief.", messages=MESSAGES, tools=TOOLS,
        # the obsolete token-counting beta is not sent on (rules/tables/anthropic_betas.yaml)
        extra_headers={"anthropic-beta": "token-counting-2024-11-01,context-1m-2025-08-07"},
    )
    assert type(result).__name__ == "MessageTokensCount" and result.input_tokens == 321
    (rec,) = count_requests(mock)
    assert rec.path == "/v1/messages/count_tokens"
    assert rec.body == {"model": "claude-test", "system": "Be brief.", "messages": MESSAGES, "tools": TOOLS}
    assert rec.headers["x-api-key"] == PROVIDER_KEYS["anthropic"]
    assert rec.headers["anthropic-beta"] == "context-1m-2025-08-07"
    assert CLIENT_KEY.encode() not in rec.raw and CLIENT_KEY not in json.dumps(rec.headers)


def test_anthropic_count_tokens_translated_to_responses_input_tokens(anthropic_client, mock):
    mock.enqueue(Json({"object": "response.input_tokens", "input_tokens": 77}))
    result = anthropic_client.messages.count_tokens(
        model="responses/gpt-test", system="Be brief.", messages=MESSAGES, tools=TOOLS,
    )
    assert result.input_tokens == 77
    (rec,) = count_requests(mock)
    assert rec.path == "/v1/responses/input_tokens"
    assert rec.headers["authorization"] == f"Bearer {PROVIDER_KEYS['responses']}"
    body = rec.body
    assert body["model"] == "gpt-test"
    assert body["instructions"] == "Be brief."
    assert body["input"][0]["role"] == "user"
    assert body["tools"][0]["type"] == "function" and body["tools"][0]["name"] == "get_weather"
    assert body["tools"][0]["parameters"] == TOOLS[0]["input_schema"]
    # a counting request: no output limit, stream flag or sampling goes upstream
    assert not {"max_output_tokens", "stream", "temperature", "store"} & set(body)


def test_anthropic_count_tokens_toward_chat_is_a_local_estimate(anthropic_client, mock):
    body = {"model": "chat/gpt-test", "system": "Be brief.", "messages": MESSAGES, "tools": TOOLS}
    raw = anthropic_client.messages.with_raw_response.count_tokens(**body)
    assert raw.headers["proxai-token-count"] == "estimate"
    result = raw.parse()
    assert result.input_tokens == estimate(body) > 0
    assert mock.requests == []


def test_count_tokens_estimate_grows_with_content(anthropic_client):
    small = anthropic_client.messages.count_tokens(model="chat/m", messages=MESSAGES).input_tokens
    bigger = anthropic_client.messages.count_tokens(model="chat/m", messages=MESSAGES, tools=TOOLS).input_tokens
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo" * 1000}}
    with_image = anthropic_client.messages.count_tokens(
        model="chat/m", messages=[{"role": "user", "content": [image, {"type": "text", "text": "What is it?"}]}],
    ).input_tokens
    assert 0 < small < bigger
    assert with_image == 1600 + 4 + 3  # one image, one message, "What is it?" (11 chars)


def test_count_tokens_falls_back_to_the_estimate_when_the_provider_has_no_endpoint(anthropic_client, mock):
    mock.enqueue(Error(404, message="no such endpoint"))
    raw = anthropic_client.messages.with_raw_response.count_tokens(model="responses/gpt-test", messages=MESSAGES)
    assert raw.headers["proxai-token-count"] == "estimate"
    assert raw.parse().input_tokens == estimate({"messages": MESSAGES})
    assert len(count_requests(mock)) == 1


def test_count_tokens_upstream_error_keeps_status_in_anthropic_shape(anthropic_client, mock):
    mock.enqueue(Error(429, message="slow down", headers={"retry-after": "3"}))
    with pytest.raises(anthropic.RateLimitError) as exc_info:
        anthropic_client.messages.count_tokens(model="responses/gpt-test", messages=MESSAGES)
    assert exc_info.value.body["type"] == "error"
    assert "slow down" in exc_info.value.body["error"]["message"]


def test_count_tokens_bad_request_is_anthropic_shaped(proxy, mock):
    r = httpx.post(proxy.url + "/v1/messages/count_tokens", json={"model": "anthropic/x"},
                   headers={"x-api-key": CLIENT_KEY, "anthropic-version": "2023-06-01"})
    assert r.status_code == 400
    doc = r.json()
    assert doc["type"] == "error" and doc["error"]["type"] == "invalid_request_error"
    assert "messages" in doc["error"]["message"]
    assert count_requests(mock) == []


def test_count_tokens_query_string_kept_in_passthrough(proxy, mock):
    mock.enqueue(Json({"input_tokens": 5}))
    r = httpx.post(proxy.url + "/v1/messages/count_tokens?beta=true",
                   json={"model": "anthropic/claude-test", "messages": MESSAGES},
                   headers={"x-api-key": CLIENT_KEY, "anthropic-version": "2023-06-01"})
    assert r.status_code == 200 and r.json() == {"input_tokens": 5}
    assert mock.requests[-1].path == "/v1/messages/count_tokens"
    assert mock.requests[-1].query == "beta=true"


# --- POST /v1/responses/input_tokens ------------------------------------------------------------


def test_responses_input_tokens_forwarded_to_responses(openai_client, mock):
    mock.enqueue(Json({"object": "response.input_tokens", "input_tokens": 42}))
    result = openai_client.responses.input_tokens.count(
        model="responses/gpt-test", input="Hello there", instructions="Be brief.", tools=RESPONSES_TOOLS,
    )
    assert type(result).__name__ == "InputTokenCountResponse"
    assert result.input_tokens == 42 and result.object == "response.input_tokens"
    (rec,) = count_requests(mock)
    assert rec.path == "/v1/responses/input_tokens"
    assert rec.body == {"model": "gpt-test", "input": "Hello there", "instructions": "Be brief.", "tools": RESPONSES_TOOLS}
    assert rec.headers["authorization"] == f"Bearer {PROVIDER_KEYS['responses']}"


def test_responses_input_tokens_translated_to_anthropic_count_tokens(openai_client, mock):
    mock.enqueue(Json({"input_tokens": 99}))
    result = openai_client.responses.input_tokens.count(
        model="anthropic/claude-test", input="Hello there", instructions="Be brief.", tools=RESPONSES_TOOLS,
    )
    assert result.input_tokens == 99 and result.object == "response.input_tokens"
    (rec,) = count_requests(mock)
    assert rec.path == "/v1/messages/count_tokens"
    assert rec.headers["x-api-key"] == PROVIDER_KEYS["anthropic"] and rec.headers["anthropic-version"]
    body = rec.body
    assert body["model"] == "claude-test"
    assert body["messages"][0]["role"] == "user"
    assert "Be brief." in json.dumps(body["system"])
    assert body["tools"][0]["name"] == "get_weather"
    assert body["tools"][0]["input_schema"] == RESPONSES_TOOLS[0]["parameters"]
    # Anthropic's counting endpoint rejects generation-only fields
    assert not {"max_tokens", "stream", "temperature", "metadata"} & set(body)


def test_responses_input_tokens_toward_chat_is_a_local_estimate(openai_client, mock):
    raw = openai_client.responses.input_tokens.with_raw_response.count(model="chat/gpt-test", input="Hello there")
    assert raw.headers["proxai-token-count"] == "estimate"
    assert raw.parse().input_tokens == estimate({"input": "Hello there"}) == 3
    assert mock.requests == []


def test_responses_input_tokens_error_is_openai_shaped(openai_client, mock):
    with pytest.raises(openai.BadRequestError) as exc_info:
        openai_client.responses.input_tokens.count(model="anthropic/claude-test", input=[{"role": "user", "content": 5}])
    assert exc_info.value.body["type"] == "invalid_request_error"
    assert count_requests(mock) == []


# --- GET /v1/models ----------------------------------------------------------------------------


def catalog_config(harness):
    cfg = copy.deepcopy(harness.default_config())
    cfg["providers"]["anthropic"]["models"] = ["claude-opus-4-5", "claude-haiku-4-5"]
    cfg["providers"]["anthropic"]["max_output_tokens"] = 64000
    cfg["providers"]["responses"]["models"] = ["gpt-5", "gpt-4.1", "claude-not-routed-here"]
    cfg["routing"]["routes"] = [
        {"name": "fast", "model_pattern": "fast", "provider": "anthropic", "upstream_model": "claude-haiku-4-5",
         "max_output_tokens": 8192},
        {"name": "claude", "model_pattern": "claude-*", "provider": "anthropic"},
        {"name": "gpt", "model_pattern": "gpt-*", "provider": "responses"},
        {"name": "local", "model_pattern": "qwen-coder", "provider": "chat",
         "request_protocol": "openai_chat_completions"},
    ]
    cfg["routing"]["default_providers"] = {}  # only the routes serve
    return cfg


def test_openai_models_list(start_proxy, harness, mock):
    p = start_proxy(catalog_config(harness))
    models = list(p.openai().models.list())
    ids = [m.id for m in models]
    assert ids == ["fast", "claude-haiku-4-5", "qwen-coder", "gpt-5", "gpt-4.1", "claude-opus-4-5"]
    assert all(m.object == "model" and isinstance(m.created, int) for m in models)
    assert {m.id: m.owned_by for m in models}["gpt-5"] == "responses"
    assert {m.id: m.owned_by for m in models}["fast"] == "anthropic"
    assert mock.requests == []  # answered from the configuration


def test_anthropic_models_list(start_proxy, harness, mock):
    p = start_proxy(catalog_config(harness))
    page = p.anthropic().models.list()
    models = list(page)
    ids = [m.id for m in models]
    # qwen-coder is routed only for Chat requests: not an Anthropic client's model
    assert ids == ["fast", "claude-haiku-4-5", "gpt-5", "gpt-4.1", "claude-opus-4-5"]
    first = models[0]
    assert type(first).__name__ == "ModelInfo"
    assert first.type == "model" and first.display_name == "fast" and first.lifecycle == "active"
    assert first.created_at.year == 1970
    # the output ceiling the config gives the model (route over provider), when it gives one
    assert [m.max_tokens for m in models] == [8192, 64000, None, None, 64000]
    assert page.first_id == "fast" and page.last_id == "claude-opus-4-5" and page.has_more is False
    assert mock.requests == []


def test_anthropic_models_list_paginates(start_proxy, harness):
    p = start_proxy(catalog_config(harness))
    client = p.anthropic()
    first = client.models.list(limit=2)
    assert [m.id for m in first.data] == ["fast", "claude-haiku-4-5"] and first.has_more
    # the SDK's auto-pagination follows after_id to the end
    assert [m.id for m in client.models.list(limit=2)] == ["fast", "claude-haiku-4-5", "gpt-5", "gpt-4.1", "claude-opus-4-5"]
    before = client.models.list(limit=2, before_id="claude-opus-4-5")
    assert [m.id for m in before.data] == ["gpt-5", "gpt-4.1"]
    with pytest.raises(anthropic.BadRequestError) as exc_info:
        client.models.list(limit=0)
    assert "limit" in exc_info.value.body["error"]["message"]


def test_models_list_by_bearer_token_with_anthropic_version_is_anthropic(start_proxy, harness):
    # Claude Code with ANTHROPIC_AUTH_TOKEN: a bearer token, but anthropic-version says who it is
    p = start_proxy(catalog_config(harness))
    r = httpx.get(p.url + "/v1/models?limit=1000",
                  headers={"authorization": f"Bearer {CLIENT_KEY}", "anthropic-version": "2023-06-01"})
    doc = r.json()
    assert r.status_code == 200 and doc["has_more"] is False and doc["data"][0]["type"] == "model"
    r = httpx.get(p.url + "/models", headers={"authorization": f"Bearer {CLIENT_KEY}"})
    assert r.json()["object"] == "list"


def test_models_retrieve(start_proxy, harness):
    p = start_proxy(catalog_config(harness))
    oa, an = p.openai(), p.anthropic()
    assert oa.models.retrieve("gpt-5").owned_by == "responses"
    assert an.models.retrieve("claude-opus-4-5").display_name == "claude-opus-4-5"
    # not listed, but a glob route serves it
    assert an.models.retrieve("claude-sonnet-4-5").id == "claude-sonnet-4-5"
    assert oa.models.retrieve("gpt-5-codex").owned_by == "responses"
    with pytest.raises(anthropic.NotFoundError) as exc_info:
        an.models.retrieve("llama-3")
    assert exc_info.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(openai.NotFoundError) as exc_info:
        oa.models.retrieve("llama-3")
    assert exc_info.value.body["code"] == "model_not_found" and exc_info.value.body["param"] == "model"


def test_models_without_routes_lists_nothing_but_default_serves(proxy):
    assert list(proxy.openai().models.list()) == []
    assert proxy.anthropic().models.retrieve("anything").id == "anything"


def test_models_config_key_is_validated(harness):
    from proxai.routing.config import load_dict
    from proxai.http.errors import ConfigError

    cfg = catalog_config(harness)
    cfg["providers"]["anthropic"]["models"] = "claude-opus-4-5"
    with pytest.raises(ConfigError) as exc_info:
        load_dict(cfg, {})
    assert exc_info.value.problems[0][0] == "providers.anthropic.models"


def test_models_endpoint_honours_inbound_auth(start_proxy, harness):
    cfg = catalog_config(harness)
    cfg["server"] = {"api_keys": ["proxy-key"]}
    p = start_proxy(cfg)
    with pytest.raises(anthropic.AuthenticationError):
        p.anthropic(api_key="wrong").models.list()
    assert [m.id for m in p.openai(api_key="proxy-key").models.list()][0] == "fast"
    with pytest.raises(anthropic.AuthenticationError):
        p.anthropic(api_key="wrong").messages.count_tokens(model="fast", messages=MESSAGES)
    with pytest.raises(openai.AuthenticationError):
        p.openai(api_key="wrong").responses.input_tokens.count(model="gpt-5", input="hi")


# --- paths without /v1, errors on Anthropic paths --------------------------------------------


def test_paths_without_v1_prefix(proxy, mock):
    headers = {"x-api-key": CLIENT_KEY, "anthropic-version": "2023-06-01"}
    r = httpx.post(proxy.url + "/messages", headers=headers,
                   json={"model": "anthropic/claude-test", "max_tokens": 10, "messages": MESSAGES})
    assert r.status_code == 200 and r.json()["type"] == "message"
    assert mock.requests[-1].path == "/v1/messages"
    r = httpx.post(proxy.url + "/messages/count_tokens", headers=headers,
                   json={"model": "chat/x", "messages": MESSAGES})
    assert r.status_code == 200 and r.json()["input_tokens"] > 0
    client = openai.OpenAI(base_url=proxy.url, api_key=CLIENT_KEY, max_retries=0)  # no /v1
    assert client.chat.completions.create(model="chat/m", messages=MESSAGES).choices[0].message.content
    assert client.responses.create(model="responses/m", input="hi").output_text
    assert mock.requests[-1].path == "/v1/responses"


@pytest.mark.parametrize("path", ["/v1/messages/batches", "/v1/messages/count_tokens/x", "/messages/nope"])
def test_unknown_anthropic_paths_are_anthropic_404s(proxy, path):
    r = httpx.post(proxy.url + path, json={})
    assert r.status_code == 404
    doc = r.json()
    assert doc["type"] == "error" and doc["error"]["type"] == "not_found_error"


def test_wrong_method_on_anthropic_paths_is_an_anthropic_405(proxy):
    r = httpx.get(proxy.url + "/v1/messages/count_tokens")
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert r.json()["type"] == "error"
    r = httpx.post(proxy.url + "/v1/models", json={}, headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 405 and "GET" in r.headers["allow"]
    assert r.json()["type"] == "error" and r.json()["error"]["type"]
    r = httpx.post(proxy.url + "/v1/models", json={})
    assert r.status_code == 405 and r.json()["error"]["status"] == 405


def test_unknown_path_with_anthropic_headers_is_anthropic_shaped(proxy):
    r = httpx.get(proxy.url + "/v1/organizations/me", headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 404 and r.json()["type"] == "error"


ANTHROPIC_HEADERS = {"x-api-key": CLIENT_KEY, "anthropic-version": "2023-06-01"}


@pytest.mark.parametrize("stream", [False, True])
def test_messages_query_string_kept_in_passthrough(proxy, mock, stream):
    # Claude Code calls /v1/messages?beta=true
    r = httpx.post(proxy.url + "/v1/messages?beta=true&x=%2F", headers=ANTHROPIC_HEADERS,
                   json={"model": "anthropic/claude-test", "max_tokens": 10, "messages": MESSAGES, "stream": stream})
    assert r.status_code == 200
    rec = mock.requests[-1]
    assert rec.path == "/v1/messages" and rec.query == "beta=true&x=%2F"


def test_query_string_not_sent_to_a_translated_provider(proxy, mock):
    r = httpx.post(proxy.url + "/v1/messages?beta=true", headers=ANTHROPIC_HEADERS,
                   json={"model": "responses/gpt-test", "max_tokens": 10, "messages": MESSAGES})
    assert r.status_code == 200 and r.json()["type"] == "message"
    rec = mock.requests[-1]
    assert rec.path == "/v1/responses" and rec.query == ""


def test_count_tokens_passthrough_forwards_the_body_unchanged(proxy, mock):
    # no model rewrite (the default provider): the client's bytes go upstream as sent
    raw = b'{"model": "claude-x",  "messages": [{"role": "user", "content": "hi"}], "n": 123456789012345678901234567890}'
    mock.enqueue(Json({"input_tokens": 8}))
    r = httpx.post(proxy.url + "/v1/messages/count_tokens", content=raw, headers={**ANTHROPIC_HEADERS, "content-type": "application/json"})
    assert r.status_code == 200 and r.json() == {"input_tokens": 8}
    assert count_requests(mock)[0].raw == raw


def test_demo_mode_lists_its_models(harness):
    p = harness.start_demo()
    try:
        assert [m.id for m in p.openai().models.list()] == ["demo", "chat/demo", "responses/demo", "anthropic/demo", "gemini/demo",
                                                           "interactions/demo"]
        # "demo" is the Anthropic default provider's, listed where that provider names it
        assert [m.id for m in p.anthropic().models.list()] == ["chat/demo", "responses/demo", "demo", "anthropic/demo", "gemini/demo",
                                                              "interactions/demo"]
        assert p.anthropic().messages.count_tokens(model="anthropic/demo", messages=MESSAGES).input_tokens > 0
    finally:
        p.stop()


def test_the_model_list_is_the_descriptors_models_rules(start_proxy, harness, tmp_path):
    # A rules_dir that names only models.item changes the list the SDK reads (the list
    # shape and not_found_code still come from the built-in file): the shape is data.
    (tmp_path / "openai_chat_completions").mkdir()
    (tmp_path / "openai_chat_completions" / "protocol.yaml").write_text(
        "kind: protocol\nprotocol: openai_chat_completions\n"
        "models:\n  item: {id: id, object: !lit model, created: 7, owned_by: !lit the-proxy}\n")
    cfg = catalog_config(harness)
    cfg["rules_dir"] = str(tmp_path)
    client = start_proxy(cfg).openai()
    models = list(client.models.list())
    assert [m.id for m in models][:2] == ["fast", "claude-haiku-4-5"]
    assert {(m.created, m.owned_by) for m in models} == {(7, "the-proxy")}
    assert client.models.retrieve("gpt-5").owned_by == "the-proxy"
    with pytest.raises(openai.NotFoundError) as err:
        client.models.retrieve("nope")
    assert err.value.body["code"] == "model_not_found" and err.value.body["param"] == "model"

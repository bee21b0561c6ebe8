"""Token counting and the model list are captured like generation requests."""

from __future__ import annotations

import json

from harness import PROVIDER_KEYS
from test_capture import ALL, home, read, start, summary  # noqa: F401 (fixture)


def test_anthropic_count_tokens_all_phases(home, harness, start_proxy, mock):  # noqa: F811
    p = start(harness, start_proxy, ALL)
    client = p.anthropic(default_headers={"x-request-id": "cap-count"})
    result = client.messages.count_tokens(model="anthropic/claude-x", messages=[{"role": "user", "content": "Hi there"}])
    assert result.input_tokens > 0
    inbound = read(home, "cap-count", "inbound_request")
    assert inbound.start_line.startswith("POST /v1/messages/count_tokens ")
    assert json.loads(inbound.body)["model"] == "anthropic/claude-x"
    provider = read(home, "cap-count", "provider_request")
    assert json.loads(provider.body)["model"] == "claude-x"  # the route's rewrite, as sent
    assert provider.header("x-api-key") == "[redacted]" and PROVIDER_KEYS["anthropic"] not in str(provider.headers)
    assert read(home, "cap-count", "upstream_response").start_line.startswith("HTTP/1.1 200")
    outbound = read(home, "cap-count", "outbound_response")
    assert json.loads(outbound.body)["input_tokens"] == result.input_tokens
    doc = summary(home, "cap-count")
    assert doc["path"] == "/v1/messages/count_tokens" and doc["status"] == 200 and doc["model"] == "anthropic/claude-x"


def test_responses_input_tokens_estimate_is_captured(home, harness, start_proxy, mock):  # noqa: F811
    p = start(harness, start_proxy, ALL)
    client = p.openai(default_headers={"x-request-id": "cap-input"})
    client.responses.input_tokens.count(model="chat/gpt-x", input="Hello")  # Chat has no counting endpoint
    assert json.loads(read(home, "cap-input", "inbound_request").body)["input"] == "Hello"
    assert "input_tokens" in json.loads(read(home, "cap-input", "outbound_response").body)
    assert not (home / "captures" / "cap-input.provider_request.http").exists()  # nothing went upstream


def test_model_list_and_retrieve_are_captured(home, harness, start_proxy, mock):  # noqa: F811
    p = start(harness, start_proxy, ALL)
    client = p.openai(default_headers={"x-request-id": "cap-models"})
    client.models.list()
    inbound = read(home, "cap-models", "inbound_request")
    assert inbound.start_line.startswith("GET /v1/models ")
    assert json.loads(read(home, "cap-models", "outbound_response").body)["object"] == "list"
    assert summary(home, "cap-models")["path"] == "/v1/models"
    anthropic = p.anthropic(default_headers={"x-request-id": "cap-model"})
    anthropic.models.retrieve("anthropic/claude-x")
    assert read(home, "cap-model", "inbound_request").start_line.startswith("GET /v1/models/anthropic%2Fclaude-x ")  # as the SDK sent it
    assert json.loads(read(home, "cap-model", "outbound_response").body)["id"] == "anthropic/claude-x"

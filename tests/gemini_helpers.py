"""Shared by the Gemini provider tests: a config with a Gemini provider on the mock,
and checks that what the mock sent or received is Gemini's exact wire format
(google.genai.types models forbid unknown fields)."""
from __future__ import annotations

import re

from google.genai import types

from harness import default_config

GEMINI_KEY = "gm-provider-gemini-SECRET"
# The model the proxy names in the upstream path (the route strips "gemini/").
UPSTREAM_MODEL = "gemini-3-pro-preview"
MODEL = "gemini/" + UPSTREAM_MODEL


def gemini_config(mock_url: str, **provider) -> dict:
    config = default_config(mock_url)
    config["providers"]["gemini"] = {"protocol": "gemini_generate_content", "base_url": mock_url,
                                     "api_key": GEMINI_KEY, "read_idle_timeout_secs": 10, **provider}
    config["routing"]["routes"].append(
        {"name": "gemini", "model_pattern": "^gemini/(.+)$", "provider": "gemini", "upstream_model": "$1"})
    return config


_SNAKE = re.compile(r"[a-z0-9]_[a-z]")
# Keys inside free-form JSON (function args, schemas, responses) are the caller's own.
_FREE = frozenset({"args", "response", "parametersJsonSchema", "responseJsonSchema"})


def assert_camel(value, where="") -> None:
    """Every protocol key is camelCase, as the Gemini REST API spells it."""
    if isinstance(value, dict):
        for key, item in value.items():
            assert not _SNAKE.search(key), f"snake_case key {where}.{key}"
            if key not in _FREE:
                assert_camel(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            assert_camel(item, f"{where}[{i}]")


def check_request(body: dict) -> None:
    """A generateContent request body: each part validates as the SDK's own type."""
    assert set(body) <= {"contents", "systemInstruction", "tools", "toolConfig", "generationConfig",
                         "safetySettings", "cachedContent"}, sorted(body)
    assert_camel(body)
    for content in body["contents"]:
        types.Content.model_validate(content)
        assert content["role"] in ("user", "model") and content["parts"]
    if "systemInstruction" in body:
        types.Content.model_validate(body["systemInstruction"])
    for tool in body.get("tools") or ():
        types.Tool.model_validate(tool)
    if "toolConfig" in body:
        types.ToolConfig.model_validate(body["toolConfig"])
    if "generationConfig" in body:
        types.GenerationConfig.model_validate(body["generationConfig"])


def check_response(body: dict) -> None:
    types.GenerateContentResponse.model_validate(body)
    assert_camel(body)


def sent(mock, stream: bool = False) -> dict:
    """The last request the Gemini mock received: its path, method, auth and body checked."""
    assert mock.requests, "the provider received nothing"
    record = mock.requests[-1]
    method = "streamGenerateContent" if stream else "generateContent"
    assert record.path == f"/v1beta/models/{UPSTREAM_MODEL}:{method}", record.path
    assert record.query == ("alt=sse" if stream else ""), record.query
    assert record.headers["x-goog-api-key"] == GEMINI_KEY
    assert "authorization" not in record.headers and "x-api-key" not in record.headers
    check_request(record.body)
    return record.body

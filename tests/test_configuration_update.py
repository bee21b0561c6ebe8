"""The `configuration_update` input item (Codex sends one when the session's reasoning effort
changes), with the official openai SDK through the real server toward Chat, Anthropic and
Gemini mocks: the last update's reasoning effort and text format are the request's, over
the request's own settings; a Responses provider gets the item itself."""

from __future__ import annotations

import json

import pytest

from gemini_helpers import gemini_config
from proxai.mock import Text, Turn

HISTORY = [{"role": "user", "content": "plan the refactor"},
           {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Plan: ..."}]}]
SCHEMA = {"type": "json_schema", "name": "plan", "strict": True,
          "schema": {"type": "object", "properties": {"steps": {"type": "array", "items": {"type": "string"}}},
                     "required": ["steps"], "additionalProperties": False}}


@pytest.fixture
def client(harness, start_proxy, mock):
    c = start_proxy(gemini_config(harness.mock_url)).openai()
    yield c
    c.close()


def send(client, mock, route: str, *updates, **kw) -> dict:
    mock.enqueue(Turn([Text('{"steps": []}')]))
    client.responses.create(model=f"{route}/up-model", store=False, **kw,
                            input=[*HISTORY, *({"type": "configuration_update", **u} for u in updates),
                                   {"role": "user", "content": "go on"}])
    return mock.requests[-1].body


def test_the_last_update_sets_the_reasoning_effort_toward_chat(client, mock):
    body = send(client, mock, "chat", {"reasoning": {"effort": "low"}}, {"reasoning": {"effort": "high"}},
                reasoning={"effort": "medium"})
    assert body["reasoning_effort"] == "high"
    assert "configuration_update" not in json.dumps(body)


def test_an_update_without_the_request_setting_it(client, mock):
    body = send(client, mock, "chat", {"reasoning": {"effort": "minimal"}})
    assert body["reasoning_effort"] == "minimal"


def test_a_text_format_update_toward_chat(client, mock):
    body = send(client, mock, "chat", {"text": {"format": SCHEMA}})
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["name"] == "plan"


@pytest.mark.parametrize("route", ["anthropic", "gemini"])
def test_the_update_reaches_anthropic_and_gemini_as_their_effort(client, mock, route):
    updated = send(client, mock, route, {"reasoning": {"effort": "high"}}, reasoning={"effort": "low"})
    asked_high = send(client, mock, route, reasoning={"effort": "high"})
    asked_low = send(client, mock, route, reasoning={"effort": "low"})
    assert asked_high != asked_low  # the effort shows in the provider's request
    assert updated == asked_high  # the update, not the request's own setting, decided
    assert "configuration_update" not in json.dumps(updated)


def test_a_responses_provider_gets_the_item(client, mock):
    body = send(client, mock, "responses", {"reasoning": {"effort": "high"}})
    assert [i for i in body["input"] if i.get("type") == "configuration_update"] == [
        {"type": "configuration_update", "reasoning": {"effort": "high"}}]

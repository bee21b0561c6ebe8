"""End to end: the official OpenAI (Chat and Responses) and Anthropic SDKs as clients,
the real proxy, a Gemini generateContent provider (the mock upstream speaking Gemini's
wire format, checked against google.genai.types). Every test also checks what the
provider received: path, key, and a body that validates as the SDK's own types."""
from __future__ import annotations

import base64
import json

import anthropic
import openai
import pytest

from gemini_clients import CLIENTS
from gemini_helpers import MODEL, check_response, gemini_config, sent
from proxai.mock import Error, Json, Reasoning, Refusal, Stream, Text, ToolCall, Turn, Usage

UNICODE = "héllo wörld — 日本語 🎉🚀 ok"
WEATHER = {"name": "get_weather", "description": "Weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
NOW = {"name": "get_time", "description": "The time now", "parameters": None}
HI = [("user", "hi")]

STREAMS = [pytest.param(False, id="json"), pytest.param(True, id="stream")]
CLIENT_NAMES = ["chat", "responses", "anthropic"]


@pytest.fixture(scope="module")
def gemini_proxy(harness):
    p = harness.start_proxy(gemini_config(harness.mock_url))
    yield p
    p.stop()


@pytest.fixture(params=CLIENT_NAMES)
def client(request, gemini_proxy, mock):
    return CLIENTS[request.param](gemini_proxy)


def turn(*blocks, **kw) -> Turn:
    """A scripted Gemini answer; its wire form is checked against the SDK's types first."""
    from proxai.mock import render_gemini

    t = Turn(list(blocks), **kw)
    check_response(render_gemini.body(t, {"model": "m"}))
    for _, chunk in render_gemini.events(t, {"model": "m", "stream": True}):
        if "error" not in chunk:
            check_response(chunk)
    return t


# --- text, system, sampling -------------------------------------------------------------


@pytest.mark.parametrize("stream", STREAMS)
def test_text_with_system_and_settings(client, mock, stream):
    mock.enqueue(turn(Text(UNICODE), usage=Usage(input_tokens=30, output_tokens=7), split_bytes=3))
    r = client.ask(MODEL, HI, stream=stream, system="be brief", max_tokens=256, temperature=0.3,
                   **({"stop": ["STOP"]} if client.name == "chat" else {}))
    assert r.text == UNICODE and r.stop == "end_turn"
    assert r.usage["input"] == 30 and r.usage["output"] == 7
    body = sent(mock, stream)
    assert body["systemInstruction"] == {"parts": [{"text": "be brief"}]}
    assert body["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]
    config = body["generationConfig"]
    assert config["maxOutputTokens"] == 256 and config["temperature"] == 0.3
    if client.name == "chat":
        assert config["stopSequences"] == ["STOP"]
    assert "model" not in body and "stream" not in body


@pytest.mark.parametrize("stream", STREAMS)
def test_multi_turn_roles(client, mock, stream):
    mock.enqueue(turn(Text("first answer")))
    first = client.ask(MODEL, [("user", "one")], stream=stream)
    mock.enqueue(turn(Text("third")))
    r = client.ask(MODEL, [("user", "one"), ("assistant", first), ("user", "three")], stream=stream)
    assert r.text == "third"
    assert sent(mock, stream)["contents"] == [
        {"role": "user", "parts": [{"text": "one"}]},
        {"role": "model", "parts": [{"text": "first answer"}]},
        {"role": "user", "parts": [{"text": "three"}]}]

"""End to end: the official OpenAI (Chat and Responses), Anthropic and google-genai
(generateContent) SDKs as clients, the real proxy, a Gemini Interactions provider (the mock
upstream speaking the Interactions wire format, checked against the SDK's own types). Every
test also checks what the provider received: path, key, and a body that validates as the
SDK's CreateModelInteraction."""
from __future__ import annotations

import base64
import json

import anthropic
import openai
import pytest
from google.genai import errors as genai_errors

from gemini_clients import CLIENTS, StreamFailed
from interactions_clients import MODEL, GenerateContent, interactions_config, sent, steps_of
from proxai.mock import Error, Reasoning, Text, ToolCall, Turn, Usage

UNICODE = "héllo wörld — 日本語 🎉🚀 ok"
WEATHER = {"name": "get_weather", "description": "Weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
NOW = {"name": "get_time", "description": "The time now", "parameters": None}
HI = [("user", "hi")]
USER_HI = {"type": "user_input", "content": [{"type": "text", "text": "hi"}]}

STREAMS = [pytest.param(False, id="json"), pytest.param(True, id="stream")]
ADAPTERS = {**CLIENTS, "gemini": GenerateContent}
FAILURES = (openai.APIError, anthropic.APIError, genai_errors.APIError, StreamFailed)


@pytest.fixture(scope="module")
def interactions_proxy(harness):
    p = harness.start_proxy(interactions_config(harness.mock_url))
    yield p
    p.stop()


@pytest.fixture(params=list(ADAPTERS))
def client(request, interactions_proxy, mock):
    return ADAPTERS[request.param](interactions_proxy)


def turn(*blocks, **kw) -> Turn:
    """A scripted Interactions answer."""
    return Turn(list(blocks), **kw)


def steps(body, kind):
    return [s for s in steps_of(body) if s["type"] == kind]


# --- text, system, settings, history -----------------------------------------------------


@pytest.mark.parametrize("stream", STREAMS)
def test_text_with_system_and_settings(client, mock, stream):
    mock.enqueue(turn(Text(UNICODE), usage=Usage(input_tokens=30, output_tokens=7), split_bytes=3))
    r = client.ask(MODEL, HI, stream=stream, system="be brief", max_tokens=256, temperature=0.3)
    assert r.text == UNICODE and r.stop == "end_turn"
    assert r.usage["input"] == 30 and r.usage["output"] == 7
    body = sent(mock, stream)
    assert body["system_instruction"] == "be brief"
    assert steps_of(body) == [USER_HI]
    config = body["generation_config"]
    assert config["max_output_tokens"] == 256 and config["temperature"] == 0.3
    # The proxy keeps the conversation; the provider is not asked to store it.
    assert body.get("store") is False


@pytest.mark.parametrize("stream", STREAMS)
def test_multi_turn_history_goes_as_steps(client, mock, stream):
    mock.enqueue(turn(Text("first answer")))
    first = client.ask(MODEL, [("user", "one")], stream=stream)
    mock.enqueue(turn(Text("third")))
    r = client.ask(MODEL, [("user", "one"), ("assistant", first), ("user", "three")], stream=stream)
    assert r.text == "third"
    assert [s for s in steps_of(sent(mock, stream)) if s["type"] != "thought"] == [
        {"type": "user_input", "content": [{"type": "text", "text": "one"}]},
        {"type": "model_output", "content": [{"type": "text", "text": "first answer"}]},
        {"type": "user_input", "content": [{"type": "text", "text": "three"}]}]


# --- tools ------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", STREAMS)
def test_single_tool_call_and_its_result_linked_by_id(client, mock, stream):
    mock.enqueue(turn(ToolCall("fc_1", "get_weather", '{"city": "Paris"}', chunks=['{"ci', 'ty": "Pa', 'ris"}'])))
    r = client.ask(MODEL, HI, stream=stream, tools=[WEATHER])
    assert r.stop == "tool_use"
    assert r.calls == [("fc_1", "get_weather", {"city": "Paris"})]
    body = sent(mock, stream)
    assert body["tools"] == [{"type": "function", **WEATHER}]

    mock.enqueue(turn(Text("Sunny in Paris.")))
    r2 = client.ask(MODEL, HI + [("assistant", r), ("tool", "fc_1", "sunny")], stream=stream, tools=[WEATHER])
    assert r2.text == "Sunny in Paris." and r2.stop == "end_turn"
    body = sent(mock, stream)
    assert steps(body, "function_call") == [
        {"type": "function_call", "id": "fc_1", "name": "get_weather", "arguments": {"city": "Paris"}}]
    (result,) = steps(body, "function_result")
    assert result["call_id"] == "fc_1" and "sunny" in json.dumps(result["result"])
    assert result.get("name") in (None, "get_weather")


@pytest.mark.parametrize("stream", STREAMS)
def test_parallel_calls_answered_out_of_order(client, mock, stream):
    mock.enqueue(turn(Text("Checking both."), ToolCall("fc_a", "get_weather", '{"city": "Paris"}'),
                      ToolCall("fc_b", "get_weather", '{"city": "Rome"}'), ToolCall("fc_c", "get_time", "{}")))
    r = client.ask(MODEL, HI, stream=stream, tools=[WEATHER, NOW])
    assert r.stop == "tool_use" and r.text == "Checking both."
    assert r.calls == [("fc_a", "get_weather", {"city": "Paris"}), ("fc_b", "get_weather", {"city": "Rome"}),
                       ("fc_c", "get_time", {})]
    mock.enqueue(turn(Text("Paris sunny, Rome rainy, noon.")))
    history = HI + [("assistant", r), ("tool", "fc_b", "rainy"), ("tool", "fc_a", "sunny"), ("tool", "fc_c", "12:00")]
    r2 = client.ask(MODEL, history, stream=stream, tools=[WEATHER, NOW])
    assert r2.text == "Paris sunny, Rome rainy, noon."
    body = sent(mock, stream)
    assert [(s["id"], s["name"], s["arguments"]) for s in steps(body, "function_call")] == [
        ("fc_a", "get_weather", {"city": "Paris"}), ("fc_b", "get_weather", {"city": "Rome"}), ("fc_c", "get_time", {})]
    results = steps(body, "function_result")
    assert [s["call_id"] for s in results] == ["fc_b", "fc_a", "fc_c"]
    assert ["rainy" in json.dumps(results[0]["result"]), "12:00" in json.dumps(results[2]["result"])] == [True, True]
    # The steps keep the conversation's order: the calls' turn, then its results.
    kinds = [s["type"] for s in steps_of(body) if s["type"] != "thought"]
    assert kinds == ["user_input", "model_output", "function_call", "function_call", "function_call",
                     "function_result", "function_result", "function_result"]


@pytest.mark.parametrize("stream", STREAMS)
def test_no_argument_tool(client, mock, stream):
    mock.enqueue(turn(ToolCall("fc_t", "get_time", "{}")))
    r = client.ask(MODEL, HI, stream=stream, tools=[NOW])
    assert r.stop == "tool_use" and r.calls == [("fc_t", "get_time", {})]
    (declaration,) = sent(mock, stream)["tools"]
    assert declaration["type"] == "function" and declaration["name"] == "get_time"
    # No parameters (Chat, Responses, Gemini) or an empty object schema (Anthropic's input_schema).
    assert declaration.get("parameters") in (None, {"type": "object", "properties": {}})


@pytest.mark.parametrize("choice,expected", [
    ("required", "any"), ("none", "none"), ("auto", "auto"),
    (("tool", "get_weather"), {"allowed_tools": {"mode": "any", "tools": ["get_weather"]}}),
], ids=["required", "none", "auto", "named"])
def test_tool_choice(client, mock, choice, expected):
    mock.enqueue(turn(Text("ok")))
    client.ask(MODEL, HI, tools=[WEATHER, NOW], tool_choice=choice)
    assert sent(mock)["generation_config"]["tool_choice"] == expected


# --- the output limit --------------------------------------------------------------------------


@pytest.mark.parametrize("stream", STREAMS)
def test_output_limit_reached(client, mock, stream):
    mock.enqueue(turn(Text("cut off mid"), stop="incomplete"))
    r = client.ask(MODEL, HI, stream=stream, max_tokens=3)
    assert r.text == "cut off mid" and r.stop == "max_tokens"
    assert sent(mock, stream)["generation_config"]["max_output_tokens"] == 3


# --- reasoning and thought signatures ----------------------------------------------------

# Opaque bytes as standard base64 with + / and padding: any re-encoding would show.
SIG_THOUGHT = base64.b64encode(b"\xfb\xef\xbe interactions thought signature \xff\xfe").decode()
assert all(c in SIG_THOUGHT for c in "+/=")


@pytest.mark.parametrize("stream", STREAMS)
def test_thought_signature_comes_back_byte_identical_on_its_thought_step(client, mock, stream):
    mock.enqueue(turn(Reasoning("I should look up the weather.", signature=SIG_THOUGHT),
                      ToolCall("fc_1", "get_weather", '{"city": "Paris"}'),
                      usage=Usage(input_tokens=20, output_tokens=30, reasoning_tokens=18)))
    r = client.ask(MODEL, HI, stream=stream, tools=[WEATHER], effort="high")
    assert r.stop == "tool_use" and r.calls == [("fc_1", "get_weather", {"city": "Paris"})]
    assert r.reasoning and r.reasoning[0].startswith("I should look up the weather.")
    config = sent(mock, stream)["generation_config"]
    if client.name != "anthropic":  # Anthropic asks by budget: the level is the table's
        assert config["thinking_level"] == "high"
    raw = r.raw if isinstance(r.raw, dict) else r.raw.model_dump(mode="json")
    assert SIG_THOUGHT not in json.dumps(raw)  # carried in the envelope, never echoed raw

    mock.enqueue(turn(Text("Sunny.")))
    r2 = client.ask(MODEL, HI + [("assistant", r), ("tool", "fc_1", "sunny")], stream=stream, tools=[WEATHER],
                    effort="high")
    assert r2.text == "Sunny."
    body = sent(mock, stream)
    (thought,) = steps(body, "thought")
    assert thought["signature"] == SIG_THOUGHT
    kinds = [s["type"] for s in steps_of(body)]
    assert kinds.index("thought") < kinds.index("function_call") < kinds.index("function_result")


def test_foreign_signatures_never_reach_the_interactions_provider(interactions_proxy, mock):
    """An Anthropic thinking signature is another family's state: it is left out."""
    mock.enqueue(turn(Text("ok")))
    interactions_proxy.anthropic().messages.create(
        model=MODEL, max_tokens=100, tools=[{"name": "get_time", "input_schema": {"type": "object"}}],
        messages=[{"role": "user", "content": "time?"},
                  {"role": "assistant", "content": [
                      {"type": "thinking", "thinking": "Let me see.", "signature": "ErUBanthropicSIG=="},
                      {"type": "tool_use", "id": "toolu_1", "name": "get_time", "input": {}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "noon"}]}])
    body = sent(mock)
    assert "anthropicSIG" not in mock.requests[-1].raw.decode()
    assert all("signature" not in s for s in steps(body, "thought"))
    assert steps(body, "function_call") == [{"type": "function_call", "id": "toolu_1", "name": "get_time", "arguments": {}}]
    assert steps(body, "function_result")[0]["call_id"] == "toolu_1"


# --- usage, media, structured output ----------------------------------------------------


@pytest.mark.parametrize("stream", STREAMS)
def test_usage_with_cached_and_thought_tokens(client, mock, stream):
    mock.enqueue(turn(Reasoning("hm", signature=SIG_THOUGHT), Text("ok"),
                      usage=Usage(input_tokens=100, output_tokens=30, cached_tokens=40, reasoning_tokens=12)))
    r = client.ask(MODEL, HI, stream=stream)
    assert r.text == "ok"
    assert r.usage["input"] == 100 and r.usage["cached"] == 40
    if client.name == "gemini":  # candidatesTokenCount leaves the thoughts out
        assert r.usage["output"] == 18 and r.usage["reasoning"] == 12
    else:
        assert r.usage["output"] == 30
        if client.name != "anthropic" or r.usage["reasoning"] is not None:
            assert r.usage["reasoning"] == 12
    sent(mock, stream)


RAW_IMAGE = b"\x89PNG\r\n\x1a\n\xfb\xff\xfe\xfa"
STANDARD = base64.b64encode(RAW_IMAGE).decode()
URLSAFE = base64.urlsafe_b64encode(RAW_IMAGE).decode().rstrip("=")


@pytest.mark.parametrize("stream", STREAMS)
def test_image_input_goes_as_image_content(client, mock, stream):
    mock.enqueue(turn(Text("A tiny PNG.")))
    data = URLSAFE if client.name in ("chat", "responses") else STANDARD  # URL-safe from the OpenAI side
    r = client.ask(MODEL, [("user", [{"type": "text", "text": "what is it?"},
                                     {"type": "image", "media_type": "image/png", "data": data}])], stream=stream)
    assert r.text == "A tiny PNG."
    (user,) = steps(sent(mock, stream), "user_input")
    assert user["content"] == [{"type": "text", "text": "what is it?"},
                               {"type": "image", "mime_type": "image/png", "data": STANDARD}]


SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "temp": {"type": "number"}},
          "required": ["city", "temp"], "additionalProperties": False}


@pytest.mark.parametrize("stream", STREAMS)
def test_structured_output(client, mock, stream):
    answer = json.dumps({"city": "Paris", "temp": 18.5})
    mock.enqueue(turn(Text(answer, chunks=[answer[:7], answer[7:19], answer[19:]])))
    r = client.ask(MODEL, HI, stream=stream, schema=SCHEMA)
    assert json.loads(r.text) == {"city": "Paris", "temp": 18.5}
    body = sent(mock, stream)
    formats = body["response_format"] if isinstance(body["response_format"], list) else [body["response_format"]]
    assert formats == [{"type": "text", "mime_type": "application/json", "schema": SCHEMA}]


# --- upstream errors, broken and stalled streams ---------------------------------------------

ERROR_CLASSES = {400: "BadRequestError", 404: "NotFoundError", 429: "RateLimitError", 500: "InternalServerError"}


@pytest.mark.parametrize("stream", STREAMS)
@pytest.mark.parametrize("status", [400, 500, pytest.param(404, marks=pytest.mark.slow),
                                    pytest.param(429, marks=pytest.mark.slow)])
def test_upstream_errors_keep_status_and_message_in_the_clients_shape(client, mock, stream, status):
    mock.enqueue(Error(status, message=f"interactions says {status}"))
    with pytest.raises(FAILURES) as err:
        client.ask(MODEL, HI, stream=stream)
    e = err.value
    assert f"interactions says {status}" in str(e)
    if client.name == "gemini":
        assert isinstance(e, genai_errors.APIError) and e.code == status
    else:
        sdk = openai if client.name in ("chat", "responses") else anthropic
        assert isinstance(e, getattr(sdk, ERROR_CLASSES[status])) and e.status_code == status
        if client.name == "anthropic":
            assert e.body["type"] == "error" and e.body["error"]["message"].endswith(f"interactions says {status}")
    sent(mock, stream)


def test_in_stream_error_event_fails_the_stream(client, mock):
    mock.enqueue(turn(Text("partial answer", chunks=["partial", " answer"]), error_after=3))
    with pytest.raises(FAILURES) as err:
        client.ask(MODEL, HI, stream=True)
    assert "The model is overloaded." in str(err.value)  # the provider's own message
    sent(mock, True)


@pytest.mark.parametrize("cut", [2, 4], ids=["after-created", "mid-text"])
def test_stream_cut_short_is_never_a_normal_end(client, mock, cut):
    mock.enqueue(turn(Text("partial answer here", chunks=["partial", " answer", " here"]), cut_after=cut))
    with pytest.raises(FAILURES) as err:
        client.ask(MODEL, HI, stream=True)
    assert "Interactions stream ended before interaction.completed" in str(err.value)
    sent(mock, True)


@pytest.mark.slow  # waits out the idle timeout
@pytest.mark.parametrize("name", list(ADAPTERS))
def test_stalled_stream_ends_with_an_error(harness, mock, name):
    p = harness.start_proxy(interactions_config(harness.mock_url, read_idle_timeout_secs=0.5))
    try:
        mock.enqueue(turn(Text("slow answer", chunks=["slow", " answer"]), stall_after=3, stall_secs=3))
        with pytest.raises(FAILURES) as err:
            ADAPTERS[name](p).ask(MODEL, HI, stream=True)
        assert "sent nothing for 0.5s" in str(err.value)
        sent(mock, True)
    finally:
        p.stop()

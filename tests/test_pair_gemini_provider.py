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

from gemini_clients import CLIENTS, StreamFailed
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


# --- tools --------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", STREAMS)
def test_single_tool_call_with_gemini_id(client, mock, stream):
    mock.enqueue(turn(ToolCall("fc_1", "get_weather", '{"city": "Paris"}')))
    r = client.ask(MODEL, HI, stream=stream, tools=[WEATHER])
    assert r.stop == "tool_use"
    assert r.calls == [("fc_1", "get_weather", {"city": "Paris"})]
    body = sent(mock, stream)
    assert body["tools"] == [{"functionDeclarations": [
        {"name": "get_weather", "description": "Weather for a city", "parametersJsonSchema": WEATHER["parameters"]}]}]
    # The tool result names the call's function and keeps Gemini's own id.
    mock.enqueue(turn(Text("Sunny in Paris.")))
    r2 = client.ask(MODEL, HI + [("assistant", r), ("tool", "fc_1", "sunny")], stream=stream, tools=[WEATHER])
    assert r2.text == "Sunny in Paris."
    contents = sent(mock, stream)["contents"]
    assert contents[1]["role"] == "model"
    calls = [p["functionCall"] for p in contents[1]["parts"] if "functionCall" in p]
    assert calls == [{"id": "fc_1", "name": "get_weather", "args": {"city": "Paris"}}]
    assert contents[2] == {"role": "user", "parts": [
        {"functionResponse": {"id": "fc_1", "name": "get_weather", "response": {"output": "sunny"}}}]}


@pytest.mark.parametrize("stream", STREAMS)
def test_parallel_same_name_calls_without_ids(client, mock, stream):
    """Gemini sends several calls whole in one chunk, with no ids: the client gets
    distinct minted ids, and each result goes back to the call it answers, in order,
    linked by name (minted ids never reach Gemini)."""
    mock.enqueue(turn(Text("Checking both."), ToolCall("", "get_weather", '{"city": "Paris"}'),
                      ToolCall("", "get_weather", '{"city": "Rome"}'), ToolCall("", "get_time", "{}"),
                      id="resp-abc"))
    r = client.ask(MODEL, HI, stream=stream, tools=[WEATHER, NOW])
    assert r.stop == "tool_use" and r.text == "Checking both."
    assert [(name, args) for _, name, args in r.calls] == [
        ("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"}), ("get_time", {})]
    ids = [i for i, _, _ in r.calls]
    assert len(set(ids)) == 3 and all(i.startswith("gcall_resp-abc_") for i in ids)
    # Answer in a different order than asked: linking is by id on the client's side.
    mock.enqueue(turn(Text("Paris sunny, Rome rainy, noon.")))
    history = HI + [("assistant", r), ("tool", ids[1], "rainy"), ("tool", ids[0], "sunny"), ("tool", ids[2], "12:00")]
    r2 = client.ask(MODEL, history, stream=stream, tools=[WEATHER, NOW])
    assert r2.text == "Paris sunny, Rome rainy, noon."
    contents = sent(mock, stream)["contents"]
    model_parts = contents[1]["parts"]
    assert model_parts[0] == {"text": "Checking both."}
    assert [p["functionCall"] for p in model_parts[1:]] == [
        {"name": "get_weather", "args": {"city": "Paris"}}, {"name": "get_weather", "args": {"city": "Rome"}},
        {"name": "get_time", "args": {}}]
    responses = [p["functionResponse"] for p in contents[2]["parts"]]
    assert responses == [{"name": "get_weather", "response": {"output": "rainy"}},
                         {"name": "get_weather", "response": {"output": "sunny"}},
                         {"name": "get_time", "response": {"output": "12:00"}}]
    assert "gcall_" not in mock.requests[-1].raw.decode()


def test_minted_ids_are_the_same_streaming_or_not(gemini_proxy, mock):
    client = CLIENTS["chat"](gemini_proxy)
    calls = [ToolCall("", "get_weather", '{"city": "Paris"}'), ToolCall("", "get_weather", '{"city": "Rome"}')]
    mock.enqueue(turn(*calls, id="same-response"), turn(*calls, id="same-response"))
    a = client.ask(MODEL, HI, tools=[WEATHER])
    b = client.ask(MODEL, HI, stream=True, tools=[WEATHER])
    assert a.calls == b.calls and a.calls[0][0] != a.calls[1][0]
    assert [r.path.rsplit(":", 1)[1] for r in mock.requests] == ["generateContent", "streamGenerateContent"]


@pytest.mark.parametrize("stream", STREAMS)
def test_no_argument_tool(client, mock, stream):
    mock.enqueue(turn(ToolCall("", "get_time", "{}")))
    r = client.ask(MODEL, HI, stream=stream, tools=[NOW])
    assert r.stop == "tool_use" and [(n, a) for _, n, a in r.calls] == [("get_time", {})]
    (declaration,) = sent(mock, stream)["tools"][0]["functionDeclarations"]
    assert declaration["name"] == "get_time"
    # No parameters (Chat, Responses) or an empty object schema (Anthropic's input_schema).
    assert declaration.get("parametersJsonSchema") in (None, {"type": "object", "properties": {}})


@pytest.mark.parametrize("choice,config", [
    ("required", {"mode": "ANY"}),
    ("none", {"mode": "NONE"}),
    ("auto", {"mode": "AUTO"}),
    (("tool", "get_weather"), {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}),
], ids=["required", "none", "auto", "named"])
def test_tool_choice(client, mock, choice, config):
    mock.enqueue(turn(Text("ok")))
    client.ask(MODEL, HI, tools=[WEATHER, NOW], tool_choice=choice)
    assert sent(mock)["toolConfig"] == {"functionCallingConfig": config}


def test_tool_result_for_an_unknown_call_is_a_400_naming_the_field(gemini_proxy, mock):
    client = gemini_proxy.openai()
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=[
            {"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "call_x", "content": "?"}])
    assert "function name" in str(err.value) and err.value.body["param"].startswith("messages[1]")
    assert mock.requests == []


# --- reasoning and thought signatures ----------------------------------------------------

# Gemini's bytes come as standard base64 with + / and padding: any re-encoding would show.
SIG_THOUGHT = base64.b64encode(b"\xfb\xef\xbe thought signature \xff\xfe").decode()
SIG_CALL = base64.b64encode(b"\xfa\xfb\xfc call signature \xfd\xfe\xff!").decode()
SIG_TEXT = base64.b64encode(b"\xf8\xff text signature \xbf").decode()
assert all(c in SIG_THOUGHT + SIG_CALL + SIG_TEXT for c in "+/=")


@pytest.mark.parametrize("stream", STREAMS)
def test_thought_signatures_come_back_byte_identical_on_their_parts(client, mock, stream):
    mock.enqueue(turn(Reasoning("I should look up the weather.", signature=SIG_THOUGHT),
                      ToolCall("", "get_weather", '{"city": "Paris"}', thought_signature=SIG_CALL),
                      ToolCall("", "get_weather", '{"city": "Rome"}'),
                      usage=Usage(input_tokens=20, output_tokens=30, reasoning_tokens=18)))
    r = client.ask(MODEL, HI, stream=stream, tools=[WEATHER], effort="high")
    assert r.stop == "tool_use" and len(r.calls) == 2
    assert r.reasoning and r.reasoning[0].startswith("I should look up the weather.")
    body = sent(mock, stream)
    thinking = body["generationConfig"]["thinkingConfig"]
    if client.name != "anthropic":
        assert thinking["thinkingLevel"] == "HIGH"
    if client.name == "responses":  # a summary was asked for
        assert thinking["includeThoughts"] is True
    raw = json.dumps(r.raw if isinstance(r.raw, dict) else r.raw.model_dump())
    assert SIG_CALL not in raw and SIG_THOUGHT not in raw  # carried in the envelope, never echoed

    mock.enqueue(turn(Text("Sunny and rainy.", thought_signature=SIG_TEXT)))
    a, b = r.calls[0][0], r.calls[1][0]
    r2 = client.ask(MODEL, HI + [("assistant", r), ("tool", a, "sunny"), ("tool", b, "rainy")],
                    stream=stream, tools=[WEATHER], effort="high")
    assert r2.text == "Sunny and rainy."
    model_parts = sent(mock, stream)["contents"][1]["parts"]
    assert model_parts == [
        {"text": "I should look up the weather.", "thought": True, "thoughtSignature": SIG_THOUGHT},
        {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": SIG_CALL},
        {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}},
    ]

    # The text part's signature returns on the text part, one turn later still.
    mock.enqueue(turn(Text("Bye.")))
    history = HI + [("assistant", r), ("tool", a, "sunny"), ("tool", b, "rainy"), ("assistant", r2), ("user", "thanks")]
    client.ask(MODEL, history, stream=stream, tools=[WEATHER], effort="high")
    contents = sent(mock, stream)["contents"]
    assert contents[1]["parts"] == model_parts
    assert contents[3] == {"role": "model", "parts": [{"text": "Sunny and rainy.", "thoughtSignature": SIG_TEXT}]}


def test_streamed_signature_on_a_trailing_empty_part_returns_as_one(gemini_proxy, mock):
    """Gemini often streams the signature last, on an empty text part: it comes back the same way."""
    chunks = [{"candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}, "index": 0}]},
              {"candidates": [{"content": {"role": "model", "parts": [{"text": "lo."}]}, "index": 0}]},
              {"candidates": [{"content": {"role": "model", "parts": [{"text": "", "thoughtSignature": SIG_TEXT}]},
                               "finishReason": "STOP", "index": 0}],
               "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 2, "totalTokenCount": 5}}]
    for c in chunks:
        check_response(c)
    mock.enqueue(Stream(events=[(None, c) for c in chunks]))
    client = CLIENTS["anthropic"](gemini_proxy)
    r = client.ask(MODEL, HI, stream=True)
    assert r.text == "Hello." and r.stop == "end_turn"
    mock.enqueue(turn(Text("ok")))
    client.ask(MODEL, HI + [("assistant", r), ("user", "more")])
    assert sent(mock)["contents"][1] == {"role": "model", "parts": [
        {"text": "Hello."}, {"text": "", "thoughtSignature": SIG_TEXT}]}


def test_foreign_signatures_never_reach_gemini(gemini_proxy, mock):
    """An Anthropic thinking signature in the history is another family's state: left
    out; the call it stood with gets Google's documented skip value instead."""
    client = gemini_proxy.anthropic()
    mock.enqueue(turn(Text("ok")))
    client.messages.create(model=MODEL, max_tokens=100, tools=[{"name": "get_time", "input_schema": {"type": "object"}}],
                           messages=[{"role": "user", "content": "time?"},
                                     {"role": "assistant", "content": [
                                         {"type": "thinking", "thinking": "Let me see.", "signature": "ErUBanthropicSIG=="},
                                         {"type": "tool_use", "id": "toolu_1", "name": "get_time", "input": {}}]},
                                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "noon"}]}])
    body = sent(mock)
    assert "anthropicSIG" not in mock.requests[-1].raw.decode()
    assert body["contents"][1] == {"role": "model", "parts": [
        {"functionCall": {"id": "toolu_1", "name": "get_time", "args": {}}, "thoughtSignature": "skip_thought_signature_validator"}]}
    assert body["contents"][2]["parts"][0]["functionResponse"] == {
        "id": "toolu_1", "name": "get_time", "response": {"output": "noon"}}


def test_thinking_budget_mode(harness, mock):
    p = harness.start_proxy(gemini_config(harness.mock_url, thinking_mode="budget"))
    try:
        mock.enqueue(turn(Text("ok")))
        p.openai().chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], reasoning_effort="low")
        assert sent(mock)["generationConfig"]["thinkingConfig"] == {"includeThoughts": True, "thinkingBudget": 1024}
    finally:
        p.stop()


# --- stops: every finish reason, safety blocks ------------------------------------------

import yaml  # noqa: E402

from engine.ruleset import BUILTIN_RULES  # noqa: E402

FINISH_REASONS = yaml.safe_load((BUILTIN_RULES / "tables" / "enums.yaml").read_text())["enums"][
    "gemini_generate_content.finish_reason"]
_TABLE = {t["name"]: t["map"] for t in yaml.safe_load(
    (BUILTIN_RULES / "tables" / "gemini_generate_content.yaml").read_text())["tables"]}[
    "gemini_generate_content.finish_reason->ir.stop"]
# What a client sees of each canonical stop (incomplete: cut short, as max_tokens).
SEEN = {"end_turn": "end_turn", "max_tokens": "max_tokens", "refusal": "refusal", "incomplete": "max_tokens"}


@pytest.mark.parametrize("stream", STREAMS)
@pytest.mark.parametrize("reason", FINISH_REASONS)
def test_every_finish_reason(client, mock, reason, stream):
    mock.enqueue(turn(Text("partial"), stop={"gemini_generate_content": reason}))
    expected = _TABLE[reason]
    if expected in SEEN:
        r = client.ask(MODEL, HI, stream=stream)
        assert r.stop == SEEN[expected]
        if expected != "refusal":
            assert r.text == "partial"
    else:  # failed or protocol_error: an error, never a normal end
        with pytest.raises((openai.APIError, anthropic.APIError, StreamFailed)) as err:
            client.ask(MODEL, HI, stream=stream)
        # The Responses encoder words every failed answer alike; the others keep Gemini's reason.
        if expected == "failed" and not (client.name == "responses" and not stream):
            assert reason in str(err.value) or reason in json.dumps(getattr(err.value, "body", None) or {})
    sent(mock, stream)


@pytest.mark.parametrize("stream", STREAMS)
def test_safety_stop_with_no_content_is_a_refusal(client, mock, stream):
    mock.enqueue(turn(Refusal("", explanation="Blocked for dangerous content.")))
    r = client.ask(MODEL, HI, stream=stream)
    assert r.stop == "refusal" and r.text == ""
    if client.name == "anthropic":
        assert r.raw.stop_details.category == "general_harms"
        assert r.raw.stop_details.explanation == "Blocked for dangerous content."
    sent(mock, stream)


BLOCKED = {"promptFeedback": {"blockReason": "PROHIBITED_CONTENT", "blockReasonMessage": "The prompt was blocked.",
                              "safetyRatings": [{"category": "HARM_CATEGORY_HARASSMENT", "probability": "HIGH"}]},
           "usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 9}, "modelVersion": "gemini-3-pro-preview",
           "responseId": "blocked-1"}


@pytest.mark.parametrize("stream", STREAMS)
def test_blocked_prompt_is_a_refusal(client, mock, stream):
    check_response(BLOCKED)
    mock.enqueue(Stream(events=[(None, BLOCKED)]) if stream else Json(BLOCKED))
    r = client.ask(MODEL, HI, stream=stream)
    assert r.stop == "refusal" and r.text == "" and not r.calls
    assert r.usage["input"] == 9
    if client.name == "anthropic":
        assert r.raw.stop_details.category == "general_harms"
    sent(mock, stream)


# --- usage, media, structured output ------------------------------------------------------


@pytest.mark.parametrize("stream", STREAMS)
def test_usage_with_cached_and_thought_tokens(client, mock, stream):
    mock.enqueue(turn(Reasoning("hm"), Text("ok"),
                      usage=Usage(input_tokens=100, output_tokens=30, cached_tokens=40, reasoning_tokens=12)))
    r = client.ask(MODEL, HI, stream=stream)
    assert r.usage["input"] == 100 and r.usage["output"] == 30 and r.usage["cached"] == 40
    if client.name != "anthropic" or r.usage["reasoning"] is not None:
        assert r.usage["reasoning"] == 12
    sent(mock, stream)


RAW_IMAGE = b"\x89PNG\r\n\x1a\n\xfb\xff\xfe\xfa"
STANDARD = base64.b64encode(RAW_IMAGE).decode()
URLSAFE = base64.urlsafe_b64encode(RAW_IMAGE).decode().rstrip("=")


@pytest.mark.parametrize("stream", STREAMS)
def test_image_goes_as_standard_base64_inline_data(client, mock, stream):
    mock.enqueue(turn(Text("A tiny PNG.")))
    data = STANDARD if client.name == "anthropic" else URLSAFE  # URL-safe from the OpenAI side
    r = client.ask(MODEL, [("user", [{"type": "text", "text": "what is it?"},
                                     {"type": "image", "media_type": "image/png", "data": data}])], stream=stream)
    assert r.text == "A tiny PNG."
    parts = sent(mock, stream)["contents"][0]["parts"]
    assert parts == [{"text": "what is it?"}, {"inlineData": {"mimeType": "image/png", "data": STANDARD}}]
    assert base64.b64decode(parts[1]["inlineData"]["data"]) == RAW_IMAGE


def test_image_url_goes_as_file_data(gemini_proxy, mock):
    mock.enqueue(turn(Text("A cat.")))
    gemini_proxy.openai().chat.completions.create(model=MODEL, messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}}]}])
    assert sent(mock)["contents"][0]["parts"] == [{"fileData": {"mimeType": "image/jpeg", "fileUri": "https://example.com/cat.jpg"}}]


SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "temp": {"type": "number"}},
          "required": ["city", "temp"], "additionalProperties": False}


@pytest.mark.parametrize("stream", STREAMS)
def test_structured_output(client, mock, stream):
    answer = json.dumps({"city": "Paris", "temp": 18.5})
    mock.enqueue(turn(Text(answer, chunks=[answer[:7], answer[7:19], answer[19:]])))
    r = client.ask(MODEL, HI, stream=stream, schema=SCHEMA)
    assert json.loads(r.text) == {"city": "Paris", "temp": 18.5}
    config = sent(mock, stream)["generationConfig"]
    assert config["responseMimeType"] == "application/json" and config["responseJsonSchema"] == SCHEMA


# --- upstream errors, broken and stalled streams -----------------------------------------

RATE_LIMITED = {"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).",
                          "status": "RESOURCE_EXHAUSTED",
                          "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "36.5s"}]}}


@pytest.mark.parametrize("stream", STREAMS)
def test_rate_limit_with_retry_info_becomes_retry_after(client, mock, stream):
    mock.enqueue(Error(429, body=RATE_LIMITED))
    with pytest.raises((openai.RateLimitError, anthropic.RateLimitError)) as err:
        client.ask(MODEL, HI, stream=stream)
    assert err.value.response.headers["retry-after"] == "37"
    assert "Resource has been exhausted" in str(err.value)
    sent(mock, stream)


def test_upstream_retry_after_header_is_kept(gemini_proxy, mock):
    mock.enqueue(Error(429, body=RATE_LIMITED, headers={"Retry-After": "5"}))
    with pytest.raises(anthropic.RateLimitError) as err:
        gemini_proxy.anthropic().messages.create(model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "x"}])
    assert err.value.response.headers["retry-after"] == "5"
    assert err.value.body["error"]["type"] == "rate_limit_error"


@pytest.mark.parametrize("status,cls", [(400, "BadRequestError"), (403, "PermissionDeniedError"),
                                        (404, "NotFoundError"), (500, "InternalServerError")])
def test_upstream_errors_keep_status_and_message(gemini_proxy, mock, status, cls):
    mock.enqueue(Error(status, message=f"gemini says {status}"))
    with pytest.raises(getattr(openai, cls)) as err:
        gemini_proxy.openai().chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}])
    assert f"gemini says {status}" in str(err.value)
    assert err.value.status_code == status
    sent(mock)


def test_in_stream_error_chunk_fails_the_stream(client, mock):
    mock.enqueue(turn(Text("partial answer", chunks=["partial", " answer"]), error_after=1))
    with pytest.raises((openai.APIError, anthropic.APIError, StreamFailed)) as err:
        client.ask(MODEL, HI, stream=True)
    assert "overloaded" in str(err.value)
    sent(mock, True)


@pytest.mark.parametrize("cut", [1, 2], ids=["after-first-chunk", "before-finish"])
def test_stream_cut_short_is_never_a_normal_end(client, mock, cut):
    mock.enqueue(turn(Text("partial answer here", chunks=["partial", " answer", " here"]), cut_after=cut))
    with pytest.raises((openai.APIError, anthropic.APIError, StreamFailed)) as err:
        client.ask(MODEL, HI, stream=True)
    assert "Gemini stream ended before a chunk carried finishReason" in str(err.value)
    sent(mock, True)


def test_stalled_stream_ends_with_an_error(harness, mock):
    p = harness.start_proxy(gemini_config(harness.mock_url, read_idle_timeout_secs=0.5))
    try:
        mock.enqueue(turn(Text("slow answer", chunks=["slow", " answer"]), stall_after=1, stall_secs=3))
        with pytest.raises(anthropic.APIError) as err:
            CLIENTS["anthropic"](p).ask(MODEL, HI, stream=True)
        assert "sent nothing for 0.5s" in str(err.value)
        sent(mock, True)
    finally:
        p.stop()


def test_malformed_chunk_is_an_upstream_protocol_error(gemini_proxy, mock):
    mock.enqueue(Stream(raw=[b'data: {"candidates": [{"content": {"parts": [{"text": "hi"}]}}]}\n\n', b"data: {not json\n\n"]))
    with pytest.raises(openai.APIError) as err:
        CLIENTS["chat"](gemini_proxy).ask(MODEL, HI, stream=True)
    assert "not JSON" in str(err.value)
    sent(mock, True)


# --- requests Gemini cannot take, and tool results with media --------------------------------


@pytest.mark.parametrize("field,value", [("logprobs", True), ("n", 2), ("logit_bias", {"50256": -100})])
def test_unrepresentable_fields_are_400_before_upstream(gemini_proxy, mock, field, value):
    with pytest.raises(openai.BadRequestError) as err:
        gemini_proxy.openai().chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}],
                                                      **{field: value})
    assert err.value.body["param"] == field and "Gemini" in err.value.body["message"]
    assert mock.requests == []


def test_sampling_and_penalties_go_to_generation_config(gemini_proxy, mock):
    mock.enqueue(turn(Text("ok")))
    gemini_proxy.openai().chat.completions.create(
        model=MODEL, messages=[{"role": "developer", "content": "rules"}, {"role": "user", "content": "x"}],
        top_p=0.9, seed=7, presence_penalty=0.5, frequency_penalty=0.25, parallel_tool_calls=False,
        tools=[{"type": "function", "function": {"name": "f"}}])
    body = sent(mock)
    assert body["systemInstruction"] == {"parts": [{"text": "rules"}]}
    assert body["generationConfig"] == {"topP": 0.9, "seed": 7, "presencePenalty": 0.5, "frequencyPenalty": 0.25}


def test_tool_result_images_ride_in_function_response_parts(gemini_proxy, mock):
    mock.enqueue(turn(Text("A chart.")))
    gemini_proxy.anthropic().messages.create(model=MODEL, max_tokens=50, messages=[
        {"role": "user", "content": "plot"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_9", "name": "plot", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "is_error": False, "content": [
            {"type": "text", "text": "done"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": STANDARD}}]}]}],
        tools=[{"name": "plot", "input_schema": {"type": "object"}}])
    assert sent(mock)["contents"][2] == {"role": "user", "parts": [{"functionResponse": {
        "id": "toolu_9", "name": "plot", "response": {"output": "done"},
        "parts": [{"inlineData": {"mimeType": "image/png", "data": STANDARD}}]}}]}


def test_tool_error_result_uses_the_error_key(gemini_proxy, mock):
    mock.enqueue(turn(Text("Sorry.")))
    gemini_proxy.anthropic().messages.create(model=MODEL, max_tokens=50, messages=[
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True, "content": "boom"}]}],
        tools=[{"name": "f", "input_schema": {"type": "object"}}])
    assert sent(mock)["contents"][2]["parts"][0]["functionResponse"]["response"] == {"error": "boom"}


@pytest.mark.parametrize("stream", STREAMS)
def test_custom_tool_is_a_function_and_its_call_comes_back_custom(gemini_proxy, mock, stream):
    """A Responses free-form tool has no Gemini form: it goes as a function with one
    string parameter, and the call returns to the client as a custom tool call."""
    mock.enqueue(turn(ToolCall("", "apply_patch", json.dumps({"input": "*** Begin Patch"}))))
    kw = dict(model=MODEL, input="patch it", tools=[{"type": "custom", "name": "apply_patch", "description": "Patch"},
                                                       {"type": "web_search"}])
    client = gemini_proxy.openai()
    if stream:
        with client.responses.stream(**kw) as s:
            r = s.get_final_response()
    else:
        r = client.responses.create(**kw)
    (call,) = [i for i in r.output if i.type == "custom_tool_call"]
    assert call.name == "apply_patch" and call.input == "*** Begin Patch"
    (declaration,) = sent(mock, stream)["tools"][0]["functionDeclarations"]  # web_search left out
    assert declaration["name"] == "apply_patch"
    assert declaration["parametersJsonSchema"]["properties"]["input"]["type"] == "string"


def test_audio_input_is_inline_data(gemini_proxy, mock):
    mock.enqueue(turn(Text("A beep.")))
    gemini_proxy.openai().chat.completions.create(model=MODEL, messages=[{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": URLSAFE, "format": "wav"}}]}])
    assert sent(mock)["contents"][0]["parts"] == [{"inlineData": {"mimeType": "audio/wav", "data": STANDARD}}]


def test_error_in_a_json_array_keeps_its_message(gemini_proxy, mock):
    array = [{"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}]
    mock.enqueue(Error(503, body=json.dumps(array).encode(), content_type="application/json"))
    with pytest.raises(anthropic.APIStatusError) as err:
        gemini_proxy.anthropic().messages.create(model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert err.value.status_code == 503 and "The model is overloaded." in str(err.value)
    assert err.value.body["error"]["type"] == "overloaded_error"
    sent(mock)

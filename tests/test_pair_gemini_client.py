"""End to end: the official google-genai SDK as the client, a Chat Completions, Responses
or Anthropic Messages provider behind the proxy (the mock upstream). Every test also
checks what the provider received."""
from __future__ import annotations

import base64
import json

import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from harness import CLIENT_KEY
from proxai.mock import Error, Reasoning, RedactedReasoning, Refusal, Text, ToolCall, Turn, Usage

CHAT, RESP, ANTH = "chat/gpt-up", "responses/resp-up", "anthropic/claude-up"
PROVIDERS = [pytest.param(CHAT, id="chat"), pytest.param(RESP, id="responses"), pytest.param(ANTH, id="anthropic")]
STREAMS = pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
UNICODE = "héllo wörld — 日本語 🎉🚀 ok"
WEATHER = types.FunctionDeclaration(
    name="get_weather", description="Weather for a city",
    parameters_json_schema={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
TIME = types.FunctionDeclaration(name="get_time", description="The time now")  # no parameters
TOOLS = [types.Tool(function_declarations=[WEATHER, TIME])]
TOOL_STOP = {"openai_chat_completions": "tool_calls", "openai_responses": "completed", "anthropic_messages": "tool_use"}


def kind(model: str) -> str:
    return model.split("/", 1)[0]


@pytest.fixture
def gclient(proxy):
    return genai.Client(api_key=CLIENT_KEY, http_options=types.HttpOptions(base_url=proxy.url))


def sent(mock) -> dict:
    assert mock.requests, "the provider received nothing"
    return mock.requests[-1].body


def generate(client, model, stream, contents="hi", **config):
    cfg = types.GenerateContentConfig(**config) if config else None
    if not stream:
        return client.models.generate_content(model=model, contents=contents, config=cfg)
    chunks = list(client.models.generate_content_stream(model=model, contents=contents, config=cfg))
    assert chunks, "no chunks"
    return chunks


def parts_of(result, stream):
    """All parts of the answer: one response, or every chunk's in order."""
    responses = result if stream else [result]
    return [p for r in responses if r.candidates for p in (r.candidates[0].content.parts or [])]


def last(result, stream):
    return result[-1] if stream else result


def text_of(result, stream):
    return "".join(p.text for p in parts_of(result, stream) if p.text and not p.thought)


def user_messages(body, model):
    """The provider's turns as (role, text) pairs."""
    if kind(model) == "responses":
        return body["input"]
    return body["messages"]


@STREAMS
@pytest.mark.parametrize("model", PROVIDERS)
class TestPairs:
    def test_text_system_usage(self, mock, gclient, model, stream):
        mock.enqueue(Turn([Text(UNICODE)], split_bytes=3,
                          usage=Usage(input_tokens=30, output_tokens=9, cached_tokens=12, reasoning_tokens=4)))
        extra = {} if kind(model) == "responses" else {"stop_sequences": ["STOP"]}  # Responses has none
        result = generate(gclient, model, stream, contents="hi", system_instruction="be brief",
                          temperature=0.3, top_p=0.9, max_output_tokens=256, **extra)
        assert text_of(result, stream) == UNICODE
        final = last(result, stream)
        assert final.candidates[0].finish_reason == types.FinishReason.STOP
        u = final.usage_metadata
        assert u.prompt_token_count == 30 and u.cached_content_token_count == 12
        assert u.thoughts_token_count == 4 and u.candidates_token_count == 5 and u.total_token_count == 39
        body = sent(mock)
        assert body["temperature"] == 0.3 and body["top_p"] == 0.9
        assert body.get("stream", False) == stream
        if kind(model) == "chat":
            assert body["model"] == "gpt-up"
            assert body["messages"][0] == {"role": "system", "content": "be brief"}
            assert body["messages"][1]["role"] == "user"
            assert body["stop"] in (["STOP"], "STOP")
        elif kind(model) == "responses":
            assert body["model"] == "resp-up" and body["instructions"] == "be brief"
            assert body["max_output_tokens"] == 256
        else:
            assert body["model"] == "claude-up" and body["max_tokens"] == 256
            assert body["system"][0]["text"] == "be brief" if isinstance(body["system"], list) else body["system"] == "be brief"
            assert body["stop_sequences"] == ["STOP"]
        # the client's key never goes upstream
        headers = mock.requests[-1].headers
        assert CLIENT_KEY not in json.dumps(headers)

    def test_parallel_tool_calls(self, mock, gclient, model, stream):
        mock.enqueue(Turn([Text("Checking."),
                           ToolCall("call_1", "get_weather", '{"city": "Paris"}', chunks=['{"ci', 'ty": "Pa', 'ris"}']),
                           ToolCall("call_2", "get_weather", '{"city": "Oslo"}', chunks=['{"city"', ': "Oslo"}']),
                           ToolCall("call_3", "get_time", "{}")],
                          stop=TOOL_STOP, interleave_tools=True))
        result = generate(gclient, model, stream, contents="weather?", tools=TOOLS,
                          tool_config=types.ToolConfig(function_calling_config=types.FunctionCallingConfig(mode="AUTO")))
        calls = [p.function_call for p in parts_of(result, stream) if p.function_call]
        assert [(c.id, c.name, c.args) for c in calls] == [
            ("call_1", "get_weather", {"city": "Paris"}), ("call_2", "get_weather", {"city": "Oslo"}),
            ("call_3", "get_time", {})]
        assert last(result, stream).candidates[0].finish_reason == types.FinishReason.STOP
        body = sent(mock)
        if kind(model) == "chat":
            assert body["tools"][0]["function"]["parameters"] == WEATHER.parameters_json_schema
            assert body["tools"][1]["function"]["name"] == "get_time"
            assert body["tool_choice"] == "auto"
        elif kind(model) == "responses":
            assert body["tools"][0]["parameters"] == WEATHER.parameters_json_schema
            assert body["tool_choice"] == "auto"
        else:
            assert body["tools"][0]["input_schema"] == WEATHER.parameters_json_schema
            assert body["tools"][1]["input_schema"]["type"] == "object"  # the no-arg tool
            assert body["tool_choice"]["type"] == "auto"

    def test_tool_results_without_ids(self, mock, gclient, model, stream):
        """The SDK's history may drop call ids: each response answers the earliest open call
        of its name, and the provider sees matching minted ids."""
        mock.enqueue(Turn([Text("Sunny and rainy.")]))
        contents = [
            types.Content(role="user", parts=[types.Part(text="weather?")]),
            types.Content(role="model", parts=[
                types.Part(function_call=types.FunctionCall(name="get_weather", args={"city": "Paris"})),
                types.Part(function_call=types.FunctionCall(name="get_weather", args={"city": "Oslo"}))]),
            types.Content(role="user", parts=[
                types.Part(function_response=types.FunctionResponse(name="get_weather", response={"output": "sunny"})),
                types.Part(function_response=types.FunctionResponse(name="get_weather", response={"output": "rainy"}))]),
        ]
        result = generate(gclient, model, stream, contents=contents, tools=TOOLS)
        assert text_of(result, stream) == "Sunny and rainy."
        body = sent(mock)
        calls, answers = _calls_and_answers(body, model)
        assert [c[1] for c in calls] == [{"city": "Paris"}, {"city": "Oslo"}]
        assert [a[0] for a in answers] == [c[0] for c in calls]
        assert len(set(c[0] for c in calls)) == 2
        assert [json.loads(a[1]) for a in answers] == [{"output": "sunny"}, {"output": "rainy"}]
        # stable: the same history mints the same ids
        mock.enqueue(Turn([Text("again")]))
        generate(gclient, model, stream, contents=contents, tools=TOOLS)
        assert [c[0] for c in _calls_and_answers(sent(mock), model)[0]] == [c[0] for c in calls]

    def test_tool_results_with_ids(self, mock, gclient, model, stream):
        mock.enqueue(Turn([Text("ok")]))
        contents = [
            types.Content(role="user", parts=[types.Part(text="weather?")]),
            types.Content(role="model", parts=[
                types.Part(function_call=types.FunctionCall(id="toolu_a", name="get_weather", args={"city": "Paris"})),
                types.Part(function_call=types.FunctionCall(id="toolu_b", name="get_time", args={}))]),
            types.Content(role="user", parts=[
                types.Part(function_response=types.FunctionResponse(id="toolu_b", name="get_time", response={"output": "noon"})),
                types.Part(function_response=types.FunctionResponse(id="toolu_a", name="get_weather", response={"error": "down"}))]),
        ]
        generate(gclient, model, stream, contents=contents, tools=TOOLS)
        calls, answers = _calls_and_answers(sent(mock), model)
        assert [c[0] for c in calls] == ["toolu_a", "toolu_b"]
        assert [a[0] for a in answers] == ["toolu_b", "toolu_a"]
        if kind(model) == "anthropic":
            results = [b for m in sent(mock)["messages"] for b in (m["content"] if isinstance(m["content"], list) else [])
                       if b.get("type") == "tool_result"]
            assert results[1].get("is_error") is True

    def test_media_and_structured_output(self, mock, gclient, model, stream):
        png = b"\x89PNG\r\n\x1a\n\xff\xfe\xfd"
        mock.enqueue(Turn([Text('{"color": "red"}')]))
        schema = {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]}
        result = generate(gclient, model, stream,
                          contents=[types.Content(role="user", parts=[
                              types.Part(text="what color?"),
                              types.Part(inline_data=types.Blob(mime_type="image/png", data=png))])],
                          response_mime_type="application/json", response_json_schema=schema)
        assert json.loads(text_of(result, stream)) == {"color": "red"}
        body = sent(mock)
        standard = base64.b64encode(png).decode()  # the SDK sent URL-safe base64
        assert "-" in base64.urlsafe_b64encode(png).decode() or "_" in base64.urlsafe_b64encode(png).decode()
        if kind(model) == "chat":
            image = body["messages"][-1]["content"][1]
            assert image["image_url"]["url"] == f"data:image/png;base64,{standard}"
            assert body["response_format"]["json_schema"]["schema"] == schema
        elif kind(model) == "responses":
            image = body["input"][-1]["content"][1]
            assert image["image_url"] == f"data:image/png;base64,{standard}"
            assert body["text"]["format"]["schema"] == schema
        else:
            image = body["messages"][-1]["content"][1]
            assert image["source"] == {"type": "base64", "media_type": "image/png", "data": standard}
            assert body["output_config"]["format"]["schema"] == schema

    def test_max_tokens_and_refusal(self, mock, gclient, model, stream):
        mock.enqueue(Turn([Text("cut")], stop={"openai_chat_completions": "length",
                                               "openai_responses": "incomplete:max_output_tokens",
                                               "anthropic_messages": "max_tokens"}))
        result = generate(gclient, model, stream)
        assert last(result, stream).candidates[0].finish_reason == types.FinishReason.MAX_TOKENS
        assert sent(mock)["model"] == model.split("/", 1)[1] and sent(mock).get("stream", False) == stream
        mock.enqueue(Turn([Refusal("I can't help with that.", explanation="policy")]))
        result = generate(gclient, model, stream)
        assert last(result, stream).candidates[0].finish_reason == types.FinishReason.SAFETY

    def test_upstream_error_with_retry_after(self, mock, gclient, model, stream):
        mock.enqueue(Error(429, headers={"Retry-After": "7"}, message="slow down"))
        with pytest.raises(genai_errors.ClientError) as info:
            generate(gclient, model, stream)
        err = info.value
        assert err.code == 429 and err.status == "RESOURCE_EXHAUSTED"
        assert "slow down" in err.message
        assert err.response.headers.get("retry-after") == "7"
        assert len(mock.requests) == 1 and sent(mock)["model"] == model.split("/", 1)[1]


def _calls_and_answers(body, model):
    """[(id, args)] of the assistant's calls and [(call id, text)] of the results, as the provider got them."""
    calls, answers = [], []
    if kind(model) == "chat":
        for m in body["messages"]:
            for c in m.get("tool_calls") or []:
                calls.append((c["id"], json.loads(c["function"]["arguments"])))
            if m["role"] == "tool":
                answers.append((m["tool_call_id"], m["content"] if isinstance(m["content"], str) else m["content"][0]["text"]))
    elif kind(model) == "responses":
        for item in body["input"]:
            if item.get("type") == "function_call":
                calls.append((item["call_id"], json.loads(item["arguments"])))
            if item.get("type") == "function_call_output":
                out = item["output"]
                answers.append((item["call_id"], out if isinstance(out, str) else out[0]["text"]))
    else:
        for m in body["messages"]:
            for b in m["content"] if isinstance(m["content"], list) else []:
                if b["type"] == "tool_use":
                    calls.append((b["id"], b["input"]))
                if b["type"] == "tool_result":
                    content = b["content"]
                    answers.append((b["tool_use_id"], content if isinstance(content, str) else content[0]["text"]))
    return calls, answers


@STREAMS
@pytest.mark.parametrize("model", [pytest.param(ANTH, id="anthropic"), pytest.param(RESP, id="responses")])
def test_reasoning_state_replayed_byte_identical(mock, gclient, model, stream):
    """An Anthropic signature / Responses encrypted reasoning reaches the Gemini client as a
    thoughtSignature; sent back in the history, the provider gets it byte-identical."""
    secret = "EqQBCkYIBxgCKkD+/sig=="
    block = Reasoning("Let me think… 日本", signature=secret) if kind(model) == "anthropic" else \
        Reasoning("Let me think… 日本", encrypted_content=secret)
    mock.enqueue(Turn([block, Text("Answer.")]))
    result = generate(gclient, model, stream, thinking_config=types.ThinkingConfig(include_thoughts=True, thinking_budget=4096))
    parts = parts_of(result, stream)
    thoughts = [p for p in parts if p.thought]
    assert "".join(p.text or "" for p in thoughts) == "Let me think… 日本"
    # The state rides on the answer's first text part, as Gemini puts its own.
    assert not any(p.thought_signature for p in thoughts)
    assert next(p for p in parts if not p.thought).thought_signature
    first = sent(mock)
    if kind(model) == "anthropic":
        assert first["thinking"]["type"] in ("enabled", "adaptive")
    else:
        assert first["reasoning"]["effort"] == "medium" and first["reasoning"]["summary"] == "auto"
    # Next turn: the SDK's own history (one Content per stream chunk when streaming).
    history = [types.Content(role="user", parts=[types.Part(text="hi")])]
    responses = result if stream else [result]
    history += [r.candidates[0].content for r in responses if r.candidates and r.candidates[0].content.parts]
    history.append(types.Content(role="user", parts=[types.Part(text="and?")]))
    mock.enqueue(Turn([Text("More.")]))
    generate(gclient, model, stream, contents=history)
    body = sent(mock)
    if kind(model) == "anthropic":
        assistant = next(m for m in body["messages"] if m["role"] == "assistant")
        thinking = [b for b in assistant["content"] if b["type"] == "thinking"]
        assert thinking == [{"type": "thinking", "thinking": "Let me think… 日本", "signature": secret}]
    else:
        item = next(i for i in body["input"] if i.get("type") == "reasoning")
        assert item["encrypted_content"] == secret


def test_signature_never_reaches_another_family(mock, gclient):
    mock.enqueue(Turn([Reasoning("hmm", signature="SIG-anthropic"), Text("A.")]))
    first = generate(gclient, ANTH, False)
    mock.enqueue(Turn([Text("B.")]))
    generate(gclient, CHAT, False, contents=[types.Content(role="user", parts=[types.Part(text="hi")]),
                                           first.candidates[0].content,
                                           types.Content(role="user", parts=[types.Part(text="next")])])
    assert "SIG-anthropic" not in mock.requests[-1].raw.decode()


def test_redacted_thinking_round_trip(mock, gclient):
    mock.enqueue(Turn([RedactedReasoning("opaque-data=="), Text("A.")]))
    first = generate(gclient, ANTH, True)
    history = [types.Content(role="user", parts=[types.Part(text="hi")])]
    history += [r.candidates[0].content for r in first if r.candidates and r.candidates[0].content.parts]
    history.append(types.Content(role="user", parts=[types.Part(text="next")]))
    mock.enqueue(Turn([Text("B.")]))
    generate(gclient, ANTH, False, contents=history)
    assistant = next(m for m in sent(mock)["messages"] if m["role"] == "assistant")
    assert {"type": "redacted_thinking", "data": "opaque-data=="} in assistant["content"]


@pytest.mark.parametrize("model", PROVIDERS)
def test_stream_cut_short_is_an_error(mock, gclient, model):
    mock.enqueue(Turn([Text("partial answer that goes on")], cut_after=3))
    with pytest.raises(genai_errors.APIError) as info:
        generate(gclient, model, True)
    assert info.value.code == 502
    assert sent(mock)["stream"] is True


def test_stream_stalled_is_an_error(harness, start_proxy, mock):
    config = harness.default_config()
    config["providers"]["anthropic"]["read_idle_timeout_secs"] = 0.5
    p = start_proxy(config)
    client = genai.Client(api_key=CLIENT_KEY, http_options=types.HttpOptions(base_url=p.url))
    mock.enqueue(Turn([Text("slow")], stall_after=2, stall_secs=3))
    with pytest.raises(genai_errors.APIError) as info:
        list(client.models.generate_content_stream(model=ANTH, contents="hi"))
    assert info.value.code in (502, 504)


def test_every_finish_reason(mock, gclient):
    cases = {"end_turn": "STOP", "max_tokens": "MAX_TOKENS", "stop_sequence": "STOP", "pause_turn": "STOP",
             "refusal": "SAFETY", "model_context_window_exceeded": "MAX_TOKENS", "tool_use": "STOP"}
    for stop, expected in cases.items():
        blocks = [ToolCall("toolu_1", "get_time", "{}")] if stop == "tool_use" else [Text("x")]
        for stream in (False, True):
            mock.enqueue(Turn(blocks, stop={"anthropic_messages": stop}))
            result = generate(gclient, ANTH, stream, tools=TOOLS)
            assert last(result, stream).candidates[0].finish_reason.value == expected, (stop, stream)
            assert [t["name"] for t in sent(mock)["tools"]] == ["get_weather", "get_time"]


def test_gemini_errors_name_the_field(proxy, gclient, mock):
    with pytest.raises(genai_errors.ClientError) as info:
        generate(gclient, ANTH, False, cached_content="cachedContents/abc")
    err = info.value
    assert err.code == 400 and err.status == "INVALID_ARGUMENT" and "cachedContent" in err.message
    assert err.details["error"]["details"][0]["fieldViolations"][0]["field"] == "cachedContent"
    assert not mock.requests


def post_json(url, body, headers=None):
    """(status, JSON body) of a POST made without an SDK."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_client_auth_header_or_key_param(harness, start_proxy, mock, caplog):
    import logging

    caplog.set_level(logging.DEBUG, logger="proxai")
    config = harness.default_config()
    config["server"] = {"api_keys": ["gem-key-1"]}
    p = start_proxy(config)
    ok = genai.Client(api_key="gem-key-1", http_options=types.HttpOptions(base_url=p.url))
    mock.enqueue(Turn([Text("hi")]))
    assert ok.models.generate_content(model=CHAT, contents="x").text == "hi"
    assert "gem-key-1" not in json.dumps(mock.requests[-1].headers) + mock.requests[-1].query
    bad = genai.Client(api_key="nope", http_options=types.HttpOptions(base_url=p.url))
    with pytest.raises(genai_errors.ClientError) as info:
        bad.models.generate_content(model=CHAT, contents="x")
    assert info.value.code == 401 and info.value.status == "UNAUTHENTICATED"
    mock.enqueue(Turn([Text("by query")]))
    status, answer = post_json(f"{p.url}/v1/models/{CHAT}:generateContent?key=gem-key-1",
                               {"contents": [{"role": "user", "parts": [{"text": "x"}]}]})
    assert status == 200 and answer["candidates"][0]["content"]["parts"][0]["text"] == "by query"
    assert "gem-key-1" not in mock.requests[-1].query + json.dumps(mock.requests[-1].headers)
    status, answer = post_json(f"{p.url}/v1/models/{CHAT}:generateContent?key=wrong", {"contents": []})
    assert status == 401 and answer["error"]["status"] == "UNAUTHENTICATED"
    assert "client_protocol=gemini_generate_content" in caplog.text
    assert "gem-key-1" not in caplog.text


def test_snake_case_keys_and_url_safe_bytes(mock, proxy):
    """Keys the SDK sends in snake_case inside camelCase JSON, and URL-safe base64."""
    png = b"\xfb\xff\xfe"
    mock.enqueue(Turn([Text("ok")]))
    status, answer = post_json(f"{proxy.url}/v1beta/models/{ANTH}:generateContent", headers={"x-goog-api-key": CLIENT_KEY}, body={
        "contents": [{"role": "user", "parts": [{"text": "x"}, {"inline_data": {"mime_type": "image/png",
                                                                                "data": base64.urlsafe_b64encode(png).decode().rstrip("=")}}]}],
        "tools": [{"function_declarations": [{"name": "f", "parameters_json_schema": {"type": "object", "properties": {"a_b": {"type": "string"}}}}]}],
        "generationConfig": {"thinking_config": {"include_thoughts": True, "thinking_budget": 1024}, "max_output_tokens": 100}})
    assert status == 200, answer
    body = sent(mock)
    assert body["messages"][0]["content"][1]["source"]["data"] == base64.b64encode(png).decode()
    assert body["tools"][0]["input_schema"] == {"type": "object", "properties": {"a_b": {"type": "string"}}}
    assert body["max_tokens"] == 100 and body["thinking"]["type"] in ("enabled", "adaptive")


def test_openapi_schema_parameters(mock, gclient):
    decl = types.FunctionDeclaration(name="f", parameters=types.Schema(
        type="OBJECT", properties={"n": types.Schema(type="INTEGER", nullable=True)}, required=["n"]))
    mock.enqueue(Turn([Text("ok")]))
    generate(gclient, CHAT, False, tools=[types.Tool(function_declarations=[decl])])
    assert sent(mock)["tools"][0]["function"]["parameters"] == {
        "type": "object", "properties": {"n": {"type": ["integer", "null"]}}, "required": ["n"]}


@pytest.mark.parametrize("model", PROVIDERS)
def test_count_tokens(mock, gclient, model):
    if kind(model) != "chat":
        mock.enqueue(lambda rec: __import__("proxai.mock", fromlist=["Json"]).Json({"input_tokens": 42} if kind(model) == "anthropic"
                                                                                   else {"object": "response.input_tokens", "input_tokens": 42}))
    result = gclient.models.count_tokens(model=model, contents="how many tokens?")
    if kind(model) == "chat":
        assert result.total_tokens > 0 and not mock.requests  # the local estimate
    else:
        assert result.total_tokens == 42
        rec = mock.requests[-1]
        assert rec.path.endswith("/count_tokens" if kind(model) == "anthropic" else "/input_tokens")


def test_models_list_and_get(harness, start_proxy):
    config = harness.default_config()
    config["providers"]["anthropic"]["models"] = ["claude-listed"]
    config["routing"]["default_providers"]["gemini_generate_content"] = "anthropic"
    p = start_proxy(config)
    client = genai.Client(api_key=CLIENT_KEY, http_options=types.HttpOptions(base_url=p.url))
    names = [m.name for m in client.models.list()]
    assert "models/claude-listed" in names
    model = client.models.get(model="claude-listed")
    assert model.name == "models/claude-listed" and "generateContent" in model.supported_actions


def test_translate_cli_takes_a_gemini_request(tmp_path):
    from proxai.tools import dryrun
    import engine

    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "generationConfig": {"maxOutputTokens": 64}}
    out, _ = dryrun.translate(engine.Engine.load(), "request", "gemini_generate_content", "anthropic_messages",
                              json.dumps(body).encode(), model="claude-x")
    result = json.loads(out)
    assert result["model"] == "claude-x" and result["max_tokens"] == 64
    assert result["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def test_key_query_parameter_is_redacted_in_captures(harness, start_proxy, mock, tmp_path, monkeypatch):
    from proxai.observability import capture
    home = tmp_path / "home"
    monkeypatch.setenv("PROXAI_HOME", str(home))
    config = harness.default_config()
    config["capture"] = dict.fromkeys(capture.PHASES, True)
    config["server"] = {"api_keys": ["gem-secret-key"]}
    p = start_proxy(config)
    mock.enqueue(Turn([Text("x")]))
    status, _ = post_json(f"{p.url}/v1beta/models/{CHAT}:generateContent?key=gem-secret-key",
                          {"contents": [{"role": "user", "parts": [{"text": "x"}]}]})
    assert status == 200
    files = list((home / "captures").glob("*.http"))
    assert any(f.name.endswith(".inbound_request.http") for f in files)
    for f in files:
        assert b"gem-secret-key" not in f.read_bytes(), f.name
    inbound = next(f for f in files if f.name.endswith(".inbound_request.http")).read_bytes()
    assert b"key=[redacted]" in inbound


@pytest.mark.parametrize("model", PROVIDERS)
def test_upstream_error_mid_stream_is_a_gemini_error_chunk(proxy, mock, model):
    """The text so far reaches the client, then one `data: {"error": ...}` chunk, which the
    SDK raises as APIError; nothing after it."""
    import urllib.request

    mock.enqueue(Turn([Text("partial answer here")], error_after=3,
                      error={"type": "overloaded_error", "message": "overloaded"} if kind(model) == "anthropic"
                      else {"message": "overloaded", "type": "server_error", "code": "server_error"}))
    req = urllib.request.Request(f"{proxy.url}/v1beta/models/{model}:streamGenerateContent?alt=sse", method="POST",
                                 data=json.dumps({"contents": [{"role": "user", "parts": [{"text": "x"}]}]}).encode(),
                                 headers={"Content-Type": "application/json", "x-goog-api-key": CLIENT_KEY})
    with urllib.request.urlopen(req) as resp:
        raw = resp.read().decode()
    chunks = [json.loads(line[6:]) for line in raw.split("\n") if line.startswith("data: ")]
    assert "[DONE]" not in raw
    assert "error" in chunks[-1] and list(chunks[-1])[0] == "error"
    assert chunks[-1]["error"]["status"] in ("UNAVAILABLE", "INTERNAL") and isinstance(chunks[-1]["error"]["code"], int)
    assert all("candidates" in c and "finishReason" not in c["candidates"][0] for c in chunks[:-1])
    client = genai.Client(api_key=CLIENT_KEY, http_options=types.HttpOptions(base_url=proxy.url))
    mock.enqueue(Turn([Text("partial answer here")], error_after=3,
                      error={"type": "overloaded_error", "message": "overloaded"} if kind(model) == "anthropic"
                      else {"message": "overloaded", "type": "server_error", "code": "server_error"}))
    with pytest.raises(genai_errors.APIError):
        list(client.models.generate_content_stream(model=model, contents="x"))


def test_no_heartbeat_comments_toward_gemini_clients(harness, start_proxy, mock):
    """The SDK reads any line that is not `data:` as JSON: a keep-alive comment would break it."""
    config = harness.default_config()
    config["server"] = {"stream_heartbeat_secs": 0.2}
    p = start_proxy(config)
    client = genai.Client(api_key=CLIENT_KEY, http_options=types.HttpOptions(base_url=p.url))
    mock.enqueue(Turn([Text("slow but fine")], stall_after=2, stall_secs=1.0))
    chunks = list(client.models.generate_content_stream(model=ANTH, contents="hi"))
    assert "".join(c.text or "" for c in chunks) == "slow but fine"


@STREAMS
def test_sdk_chat_history_replays_the_signature(mock, gclient, stream):
    """The SDK's own chat session keeps the history (one Content per chunk when streaming):
    the second turn still carries the Anthropic signature byte-identical."""
    chat = gclient.chats.create(model=ANTH)
    mock.enqueue(Turn([Reasoning("plan: be kind", signature="SIG/+=x"), Text("Hello!")]))
    if stream:
        assert "".join(c.text or "" for c in chat.send_message_stream("hi")) == "Hello!"
    else:
        assert chat.send_message("hi").text == "Hello!"
    mock.enqueue(Turn([Text("Again.")]))
    if stream:
        list(chat.send_message_stream("more"))
    else:
        chat.send_message("more")
    messages = sent(mock)["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assistant = messages[1]["content"]
    assert {"type": "thinking", "thinking": "plan: be kind", "signature": "SIG/+=x"} in assistant
    assert any(b.get("type") == "text" and b.get("text") == "Hello!" for b in assistant), assistant

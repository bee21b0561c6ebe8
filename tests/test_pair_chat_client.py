"""End to end, with the official OpenAI SDK as a Chat Completions client, against an
Anthropic Messages provider and an OpenAI Responses provider (the mock upstreams).

Every test also checks what the provider received: the translated request body.
Models `anthropic/<x>` and `responses/<x>` route to those providers with upstream model `<x>`.
"""
from __future__ import annotations

import openai
import pytest

from proxai.mock import Error, Reasoning, RedactedReasoning, Refusal, Text, ToolCall, Turn, Usage

A, R = "anthropic", "responses"
PROVIDERS = [A, R]
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
]
HI = [{"role": "user", "content": "hi"}]


def model(provider: str) -> str:
    return f"{provider}/up-model"


def sent(mock) -> dict:
    """The translated request body the provider received last."""
    return mock.requests[-1].body


def user_text(provider: str, body: dict) -> list:
    """The user turns' text as the provider received them."""
    if provider == A:
        return [b["text"] for m in body["messages"] if m["role"] == "user" for b in m["content"] if b["type"] == "text"]
    return [p["text"] for item in body["input"] if item.get("role") == "user" for p in item["content"] if p["type"] == "input_text"]


def stream_raw(client, **kw):
    """`stream=True` iteration: the chunks, in order."""
    return list(client.chat.completions.create(stream=True, **kw))


def joined(chunks, field):
    return "".join(getattr(c.choices[0].delta, field, None) or "" for c in chunks if c.choices)


def finish(chunks):
    return [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]


# --------------------------------------------------------------------------------------
# text, multi-turn, system instructions
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
def test_text_non_streaming(openai_client, mock, provider):
    mock.enqueue(Turn([Text("Hello there")], usage=Usage(12, 3)))
    r = openai_client.chat.completions.create(model=model(provider), messages=HI, max_completion_tokens=50, temperature=0.5)
    assert r.choices[0].message.content == "Hello there"
    assert r.choices[0].finish_reason == "stop"
    assert r.object == "chat.completion"
    assert r.id.startswith("chatcmpl-")
    assert r.model == model(provider)  # the client's name (response_model: client); upstream got up-model
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (12, 3, 15)
    body = sent(mock)
    assert body["model"] == "up-model"
    assert body["temperature"] == 0.5
    if provider == A:
        assert body["max_tokens"] == 50
        assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    else:
        assert body["max_output_tokens"] == 50
        assert body["store"] is False
        assert body["input"] == [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_text_streaming_three_ways(openai_client, mock, provider):
    mock.enqueue(Turn([Text("Hello there", chunks=["Hel", "lo ", "there"])]))
    chunks = stream_raw(openai_client, model=model(provider), messages=HI)
    assert joined(chunks, "content") == "Hello there"
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len({c.id for c in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-")
    assert finish(chunks) == ["stop"]
    # Usage was not asked for, so there is no usage chunk.
    assert all(c.choices for c in chunks)
    assert sent(mock)["stream"] is True

    mock.enqueue(Turn([Text("Second")]))
    with openai_client.chat.completions.stream(model=model(provider), messages=HI) as s:
        final = s.get_final_completion()
    assert final.choices[0].message.content == "Second"
    assert final.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_multi_turn_with_system_and_developer(openai_client, mock, provider):
    mock.enqueue(Turn([Text("3")]))
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "1+1?"},
        {"role": "assistant", "content": "2"},
        {"role": "developer", "content": "Answer with digits."},
        {"role": "user", "content": [{"type": "text", "text": "and 1+2?"}]},
    ]
    r = openai_client.chat.completions.create(model=model(provider), messages=messages)
    assert r.choices[0].message.content == "3"
    body = sent(mock)
    if provider == A:
        # decisions.md #7: every system/developer message goes to the top-level system, in order.
        assert body["system"] == [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Answer with digits."}]
        assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
        assert body["messages"][1]["content"] == [{"type": "text", "text": "2"}]
    else:
        # Chat <-> Responses: system/developer messages stay in place with their role.
        assert [i.get("role") for i in body["input"]] == ["system", "user", "assistant", "developer", "user"]
        assert body["input"][2]["content"][0]["text"] == "2"
    assert user_text(provider, body) == ["1+1?", "and 1+2?"]


# --------------------------------------------------------------------------------------
# tools
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
def test_single_tool_call_and_result(openai_client, mock, provider):
    mock.enqueue(Turn([ToolCall("call_w1", "get_weather", '{"city":"Paris"}')]))
    r = openai_client.chat.completions.create(model=model(provider), messages=HI, tools=TOOLS, tool_choice="required")
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls"
    assert [(c.id, c.function.name, c.function.arguments) for c in msg.tool_calls] == [("call_w1", "get_weather", '{"city":"Paris"}')]
    body = sent(mock)
    if provider == A:
        assert body["tools"][0] == {"name": "get_weather", "input_schema": TOOLS[0]["function"]["parameters"]}
        assert body["tool_choice"] == {"type": "any"}
    else:
        assert body["tools"][0]["name"] == "get_weather" and body["tools"][0]["type"] == "function"
        assert body["tool_choice"] == "required"

    mock.enqueue(Turn([Text("Sunny")]))
    history = HI + [msg.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": "call_w1", "content": "22C sunny"}]
    r2 = openai_client.chat.completions.create(model=model(provider), messages=history, tools=TOOLS)
    assert r2.choices[0].message.content == "Sunny"
    body = sent(mock)
    if provider == A:
        assert body["messages"][1] == {"role": "assistant", "content": [
            {"type": "tool_use", "id": "call_w1", "name": "get_weather", "input": {"city": "Paris"}}]}
        assert body["messages"][2] == {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_w1", "content": [{"type": "text", "text": "22C sunny"}]}]}
    else:
        call = next(i for i in body["input"] if i.get("type") == "function_call")
        assert (call["call_id"], call["name"], call["arguments"]) == ("call_w1", "get_weather", '{"city":"Paris"}')
        output = next(i for i in body["input"] if i.get("type") == "function_call_output")
        assert output["call_id"] == "call_w1"
        assert output["output"] in ("22C sunny", [{"type": "input_text", "text": "22C sunny"}])


@pytest.mark.parametrize("provider", PROVIDERS)
def test_parallel_tool_calls_streaming(openai_client, mock, provider):
    calls = [ToolCall("call_a", "get_weather", '{"city":"Oslo"}', chunks=['{"ci', 'ty":"Os', 'lo"}']),
             ToolCall("call_b", "get_time", '{}', chunks=['{', '}'])]
    # The Responses mock interleaves the two calls' argument deltas.
    mock.enqueue(Turn([Text("Checking"), *calls], interleave_tools=True))
    with openai_client.chat.completions.stream(model=model(provider), messages=HI, tools=TOOLS, parallel_tool_calls=True) as s:
        final = s.get_final_completion()
    msg = final.choices[0].message
    assert msg.content == "Checking"
    assert [(c.id, c.function.name, c.function.arguments) for c in msg.tool_calls] == [
        ("call_a", "get_weather", '{"city":"Oslo"}'), ("call_b", "get_time", "{}")]
    assert final.choices[0].finish_reason == "tool_calls"
    body = sent(mock)
    if provider == A:
        assert "disable_parallel_tool_use" not in str(body.get("tool_choice"))
    else:
        assert body["parallel_tool_calls"] is True

    mock.enqueue(Turn(calls, interleave_tools=True))
    chunks = stream_raw(openai_client, model=model(provider), messages=HI, tools=TOOLS, parallel_tool_calls=False)
    indexes = [tc.index for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert sorted(set(indexes)) == [0, 1]
    body = sent(mock)
    if provider == A:
        assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    else:
        assert body["parallel_tool_calls"] is False


# --------------------------------------------------------------------------------------
# reasoning and continuation
# --------------------------------------------------------------------------------------


def replay_message(msg) -> dict:
    """What a Chat client keeps of an assistant message and sends back."""
    out = {"role": "assistant", "content": msg.content}
    extra = msg.model_extra or {}
    if extra.get("reasoning_content") is not None:
        out["reasoning_content"] = extra["reasoning_content"]
    if msg.tool_calls:
        out["tool_calls"] = [c.model_dump(exclude_none=True) for c in msg.tool_calls]
    return out


ANTHROPIC_TURN = [
    Reasoning("I should check the weather.", signature="EqQBCkYIBxgCKkA+sig/1=="),
    ToolCall("toolu_1", "get_weather", '{"city":"Rome"}'),
    RedactedReasoning("EmwKAhgBEgy3vaREDACTED=="),
    Reasoning("And the time.", signature="EqQBCkYIBxgCKkA+sig/2=="),
    ToolCall("toolu_2", "get_time", "{}"),
]


@pytest.mark.parametrize("streaming", [False, True])
def test_anthropic_thinking_signature_and_redacted_replayed_byte_identical(openai_client, mock, streaming):
    mock.enqueue(Turn(list(ANTHROPIC_TURN)))
    if streaming:
        with openai_client.chat.completions.stream(model=model(A), messages=HI, tools=TOOLS) as s:
            msg = s.get_final_completion().choices[0].message
    else:
        msg = openai_client.chat.completions.create(model=model(A), messages=HI, tools=TOOLS).choices[0].message
    reasoning = msg.model_extra["reasoning_content"]
    assert reasoning.startswith("I should check the weather.\n\nAnd the time.\n\npxc1.")
    assert "REDACTED" not in reasoning and "sig/1" not in reasoning  # carried encoded, never echoed
    assert msg.content in (None, "")

    mock.enqueue(Turn([Text("Rome: sunny, 10:00")]))
    history = HI + [replay_message(msg),
                    {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
                    {"role": "tool", "tool_call_id": "toolu_2", "content": "10:00"}]
    r = openai_client.chat.completions.create(model=model(A), messages=history, tools=TOOLS)
    assert r.choices[0].message.content == "Rome: sunny, 10:00"
    body = sent(mock)
    assert body["messages"][1] == {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "I should check the weather.", "signature": "EqQBCkYIBxgCKkA+sig/1=="},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Rome"}},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3vaREDACTED=="},
        {"type": "thinking", "thinking": "And the time.", "signature": "EqQBCkYIBxgCKkA+sig/2=="},
        {"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": {}},
    ]}
    assert [b["tool_use_id"] for b in body["messages"][2]["content"]] == ["toolu_1", "toolu_2"]


def test_unsigned_or_edited_reasoning_is_never_forged_for_anthropic(openai_client, mock):
    mock.enqueue(Turn([Reasoning("Plan A.", signature="SIG-A"), Text("ok")]))
    msg = openai_client.chat.completions.create(model=model(A), messages=HI).choices[0].message
    edited = replay_message(msg)
    edited["reasoning_content"] = edited["reasoning_content"].replace("Plan A.", "Plan B.")
    mock.enqueue(Turn([Text("fine")]))
    openai_client.chat.completions.create(model=model(A), messages=HI + [edited, {"role": "user", "content": "go"}])
    body = sent(mock)
    assert body["messages"][1] == {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}

    mock.enqueue(Turn([Text("fine")]))
    plain = {"role": "assistant", "content": "ok", "reasoning_content": "made up thoughts"}
    openai_client.chat.completions.create(model=model(A), messages=HI + [plain, {"role": "user", "content": "go"}])
    assert sent(mock)["messages"][1] == {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}


@pytest.mark.parametrize("streaming", [False, True])
def test_responses_encrypted_reasoning_replayed_byte_identical(openai_client, mock, streaming):
    mock.enqueue(Turn([Reasoning("Need the weather.", encrypted_content="gAAAAABenc-1+/="),
                       ToolCall("call_1", "get_weather", '{"city":"Lima"}')]))
    if streaming:
        with openai_client.chat.completions.stream(model=model(R), messages=HI, tools=TOOLS) as s:
            msg = s.get_final_completion().choices[0].message
    else:
        msg = openai_client.chat.completions.create(model=model(R), messages=HI, tools=TOOLS).choices[0].message
    first = sent(mock)
    assert first["store"] is False and "reasoning.encrypted_content" in first["include"]
    assert msg.model_extra["reasoning_content"].startswith("Need the weather.\n\npxc1.")

    mock.enqueue(Turn([Text("Lima: foggy")]))
    history = HI + [replay_message(msg), {"role": "tool", "tool_call_id": "call_1", "content": "foggy"}]
    openai_client.chat.completions.create(model=model(R), messages=history, tools=TOOLS)
    items = sent(mock)["input"]
    kinds = [i.get("type") for i in items]
    assert kinds[1:] == ["reasoning", "function_call", "function_call_output"]
    assert items[1]["encrypted_content"] == "gAAAAABenc-1+/="
    assert items[2]["call_id"] == "call_1"


def test_reasoning_state_does_not_cross_providers(openai_client, mock):
    mock.enqueue(Turn([Reasoning("Think.", signature="SIG-X"), Text("ok")]))
    msg = openai_client.chat.completions.create(model=model(A), messages=HI).choices[0].message
    mock.enqueue(Turn([Text("fine")]))
    openai_client.chat.completions.create(model=model(R), messages=HI + [replay_message(msg), {"role": "user", "content": "go"}])
    body = sent(mock)
    assert "SIG-X" not in str(body) and "pxc1." not in str(body)
    assert not any(i.get("type") == "reasoning" for i in body["input"])


# --------------------------------------------------------------------------------------
# refusal, stop reasons, usage
# --------------------------------------------------------------------------------------


def test_anthropic_refusal_without_text(openai_client, mock):
    mock.enqueue(Turn([Refusal("", explanation="This request violates policy.", category="cyber")]))
    r = openai_client.chat.completions.create(model=model(A), messages=HI)
    assert r.choices[0].finish_reason == "content_filter"
    assert r.choices[0].message.refusal == "This request violates policy."
    assert not r.choices[0].message.content

    mock.enqueue(Turn([Refusal("", explanation="This request violates policy.")]))
    chunks = stream_raw(openai_client, model=model(A), messages=HI)
    assert joined(chunks, "refusal") == "This request violates policy."
    assert joined(chunks, "content") == "" and finish(chunks) == ["content_filter"]


def test_anthropic_refusal_after_text_keeps_text_only(openai_client, mock):
    mock.enqueue(Turn([Text("Sure, first"), Refusal("", explanation="Stopped.")]))
    chunks = stream_raw(openai_client, model=model(A), messages=HI)
    assert joined(chunks, "content") == "Sure, first"
    assert joined(chunks, "refusal") == ""
    assert finish(chunks) == ["content_filter"]


@pytest.mark.parametrize("streaming", [False, True])
def test_responses_refusal_uses_the_refusal_slot(openai_client, mock, streaming):
    mock.enqueue(Turn([Refusal("I can't help with that.")]))
    if streaming:
        chunks = stream_raw(openai_client, model=model(R), messages=HI)
        assert joined(chunks, "refusal") == "I can't help with that." and joined(chunks, "content") == ""
    else:
        msg = openai_client.chat.completions.create(model=model(R), messages=HI).choices[0].message
        assert msg.refusal == "I can't help with that." and not msg.content


@pytest.mark.parametrize("stop,expected", [
    ("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"), ("model_context_window_exceeded", "length"),
    ("tool_use", "tool_calls"), ("pause_turn", "stop"), ("refusal", "content_filter")])
@pytest.mark.parametrize("streaming", [False, True])
def test_every_anthropic_stop_reason(openai_client, mock, stop, expected, streaming):
    blocks = [Text("x")] + ([ToolCall("toolu_s", "get_time", "{}")] if stop == "tool_use" else [])
    mock.enqueue(Turn(blocks, stop=stop, stop_sequence="END" if stop == "stop_sequence" else None))
    kw = {"model": model(A), "messages": HI, "stop": ["END"]}
    if streaming:
        assert finish(stream_raw(openai_client, **kw)) == [expected]
    else:
        assert openai_client.chat.completions.create(**kw).choices[0].finish_reason == expected
    assert sent(mock)["stop_sequences"] == ["END"]


@pytest.mark.parametrize("stop,expected", [
    ("completed", "stop"), ("incomplete:max_output_tokens", "length"), ("incomplete:content_filter", "content_filter"),
    ("incomplete:max_messages", "length")])
@pytest.mark.parametrize("streaming", [False, True])
def test_every_responses_status(openai_client, mock, stop, expected, streaming):
    mock.enqueue(Turn([Text("x")], stop=stop))
    kw = {"model": model(R), "messages": HI}
    if streaming:
        assert finish(stream_raw(openai_client, **kw)) == [expected]
    else:
        assert openai_client.chat.completions.create(**kw).choices[0].finish_reason == expected


@pytest.mark.parametrize("streaming", [False, True])
def test_responses_failed_is_an_error(openai_client, mock, streaming):
    mock.enqueue(Turn([Text("x")], stop="failed", error={"code": "server_error", "message": "model crashed"}))
    with pytest.raises(openai.APIError):
        if streaming:
            stream_raw(openai_client, model=model(R), messages=HI)
        else:
            openai_client.chat.completions.create(model=model(R), messages=HI)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("streaming", [False, True])
def test_usage_with_cache_tokens(openai_client, mock, provider, streaming):
    mock.enqueue(Turn([Text("x")], usage=Usage(input_tokens=1000, output_tokens=50, cached_tokens=600,
                                               cache_write_tokens=300, reasoning_tokens=20)))
    kw = {"model": model(provider), "messages": HI}
    if streaming:
        chunks = stream_raw(openai_client, stream_options={"include_usage": True}, **kw)
        assert chunks[-1].choices == [] and finish(chunks[:-1]) == ["stop"]
        usage = chunks[-1].usage
    else:
        usage = openai_client.chat.completions.create(**kw).usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (1000, 50, 1050)
    assert usage.prompt_tokens_details.cached_tokens == 600
    assert usage.prompt_tokens_details.cache_write_tokens == 300
    assert usage.completion_tokens_details.reasoning_tokens == 20


# --------------------------------------------------------------------------------------
# unicode, errors, streams cut short
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
def test_unicode_split_across_network_chunks(openai_client, mock, provider):
    text = "Grüße 👋🏽 日本語 — ok"
    mock.enqueue(Turn([Text(text, chunks=["Grü", "ße 👋", "🏽 日本", "語 — ok"])], split_bytes=3))
    chunks = stream_raw(openai_client, model=model(provider), messages=[{"role": "user", "content": "Ünïcode ✓"}])
    assert joined(chunks, "content") == text
    assert user_text(provider, sent(mock)) == ["Ünïcode ✓"]


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("status,exc", [(429, openai.RateLimitError), (400, openai.BadRequestError), (503, openai.InternalServerError)])
def test_upstream_http_error(openai_client, mock, provider, status, exc):
    mock.enqueue(Error(status, message="upstream said no"))
    with pytest.raises(exc) as err:
        openai_client.chat.completions.create(model=model(provider), messages=HI)
    assert err.value.status_code == status
    assert "upstream said no" in str(err.value)
    assert sent(mock)["model"] == "up-model"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_upstream_http_error_when_streaming(openai_client, mock, provider):
    mock.enqueue(Error(429, message="slow down"))
    with pytest.raises(openai.RateLimitError):
        stream_raw(openai_client, model=model(provider), messages=HI)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_mid_stream_error(openai_client, mock, provider):
    mock.enqueue(Turn([Text("partial answer here")], error_after=5, error={"message": "overloaded now"}))
    seen = []
    with pytest.raises(openai.APIError) as err:
        for c in openai_client.chat.completions.create(model=model(provider), messages=HI, stream=True):
            seen.append(c)
    assert "overloaded now" in str(err.value)
    assert not finish(seen)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_stream_cut_short_is_never_a_normal_completion(openai_client, mock, provider):
    mock.enqueue(Turn([Text("this will be cut", chunks=["this ", "will ", "be cut"])], cut_after=5))
    seen = []
    with pytest.raises(openai.APIError):
        for c in openai_client.chat.completions.create(model=model(provider), messages=HI, stream=True):
            seen.append(c)
    assert not finish(seen)

    mock.enqueue(Turn([Text("cut again")], cut_after=4))
    with pytest.raises(openai.APIError):
        with openai_client.chat.completions.stream(model=model(provider), messages=HI) as s:
            s.get_final_completion()


@pytest.mark.parametrize("provider", PROVIDERS)
def test_unrepresentable_request_is_a_400_naming_the_field(openai_client, mock, provider):
    with pytest.raises(openai.BadRequestError) as err:
        openai_client.chat.completions.create(model=model(provider), messages=HI, n=2)
    assert err.value.param == "n"
    audio = [{"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}}]}]
    with pytest.raises(openai.BadRequestError) as err:
        openai_client.chat.completions.create(model=model(provider), messages=audio)
    assert err.value.param == "messages[0].content[1]"
    with pytest.raises(openai.BadRequestError) as err:
        openai_client.chat.completions.create(model=model(provider), messages=HI, functions=[{"name": "f"}])
    assert "functions" in str(err.value)
    assert mock.requests == []


def test_custom_tool_round_trip_with_a_responses_provider(mock, openai_client):
    """Custom (free-form) tools exist in Chat and Responses only: lossless between them."""
    from proxai.mock import Json

    mock.enqueue(Json({
        "id": "resp_1", "object": "response", "created_at": 1700000000, "model": "up-model", "status": "completed",
        "output": [{"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_c1", "name": "run_sql",
                    "input": "SELECT 1;", "status": "completed"}],
        "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "error": None, "incomplete_details": None,
        "usage": {"input_tokens": 5, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 3,
                  "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 8},
    }))
    tools = [{"type": "custom", "custom": {"name": "run_sql", "description": "Run SQL",
                                           "format": {"type": "grammar", "grammar": {"definition": "start: /.+/", "syntax": "lark"}}}}]
    done = openai_client.chat.completions.create(model=model(R), messages=HI, tools=tools)
    call = done.choices[0].message.tool_calls[0]
    assert (call.type, call.id, call.custom.name, call.custom.input) == ("custom", "call_c1", "run_sql", "SELECT 1;")
    assert done.choices[0].finish_reason == "tool_calls"
    sent_tool = sent(mock)["tools"][0]
    assert sent_tool["type"] == "custom" and sent_tool["name"] == "run_sql"
    assert sent_tool["format"]["grammar"]["definition"] == "start: /.+/"
    # The result goes back as a custom_tool_call_output linked by call id.
    mock.enqueue(Turn([Text("one")]))
    openai_client.chat.completions.create(model=model(R), tools=tools, messages=HI + [
        {"role": "assistant", "tool_calls": [{"id": "call_c1", "type": "custom", "custom": {"name": "run_sql", "input": "SELECT 1;"}}]},
        {"role": "tool", "tool_call_id": "call_c1", "content": "1"}])
    items = sent(mock)["input"]
    assert {"type": "custom_tool_call", "call_id": "call_c1", "name": "run_sql", "input": "SELECT 1;"}.items() <= items[1].items()
    assert items[2]["type"] == "custom_tool_call_output" and items[2]["call_id"] == "call_c1" and items[2]["output"] == "1"


def test_custom_tool_toward_anthropic_is_a_function_and_its_call_comes_back_custom(mock, openai_client):
    tools = [{"type": "custom", "custom": {"name": "run_sql", "description": "Run SQL."}}]
    mock.enqueue(Turn([ToolCall("toolu_1", "run_sql", '{"input":"select 1"}')]))
    r = openai_client.chat.completions.create(model=model(A), messages=HI, tools=tools)
    call = r.choices[0].message.tool_calls[0]
    assert call.type == "custom" and call.custom.name == "run_sql" and call.custom.input == "select 1"
    tool = sent(mock)["tools"][0]
    assert tool["name"] == "run_sql" and tool["description"].startswith("Run SQL.")
    assert tool["input_schema"]["properties"]["input"]["type"] == "string"

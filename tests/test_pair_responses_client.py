"""End to end, with the official OpenAI SDK as a Responses client, against an Anthropic
Messages provider and an OpenAI Chat Completions provider (the mock upstreams).

Every test also checks what the provider received: the translated request body.
Models `anthropic/<x>` and `chat/<x>` route to those providers with upstream model `<x>`.
"""
from __future__ import annotations

import openai
import pytest

from proxai.mock import Error, Reasoning, RedactedReasoning, Refusal, Text, ToolCall, Turn, Usage

A, C = "anthropic", "chat"
PROVIDERS = [A, C]
TOOLS = [
    {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}, "strict": None},
    {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}, "strict": None},
]


def model(provider: str) -> str:
    return f"{provider}/up-model"


def sent(mock) -> dict:
    """The translated request body the provider received last."""
    return mock.requests[-1].body


def stream_final(client, **kw):
    with client.responses.stream(**kw) as stream:
        events = list(stream)
        return events, stream.get_final_response()


@pytest.mark.parametrize("provider", PROVIDERS)
def test_text_non_streaming(openai_client, mock, provider):
    mock.enqueue(Turn([Text("Hello there")], usage=Usage(12, 3)))
    r = openai_client.responses.create(model=model(provider), instructions="Be brief.", input="hi",
                                       max_output_tokens=50, temperature=0.5)
    assert r.output_text == "Hello there"
    assert r.status == "completed" and r.id.startswith("resp_") and r.model == model(provider)
    assert (r.usage.input_tokens, r.usage.output_tokens, r.usage.total_tokens) == (12, 3, 15)
    body = sent(mock)
    assert body["model"] == "up-model" and body["temperature"] == 0.5
    if provider == A:
        assert body["max_tokens"] == 50 and body["system"] == "Be brief."
        assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    else:
        assert body["max_completion_tokens"] == 50
        assert body["messages"][0] == {"role": "system", "content": "Be brief."}
        assert body["messages"][1]["role"] == "user"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_text_streaming_with_unicode_split_across_chunks(openai_client, mock, provider):
    mock.enqueue(Turn([Text("héllo wörld 🌍", chunks=["hé", "llo wö", "rld 🌍"])], usage=Usage(5, 4), split_bytes=3))
    events, final = stream_final(openai_client, model=model(provider), input="hi")
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == "héllo wörld 🌍"
    assert final.output_text == "héllo wörld 🌍" and final.status == "completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert sent(mock)["stream"] is True


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("stream", [False, True])
def test_parallel_tool_calls_and_results(openai_client, mock, provider, stream):
    calls = [ToolCall("call_1", "get_weather", '{"city":"Paris"}', chunks=['{"city"', ':"Paris"}']),
             ToolCall("call_2", "get_time", "{}")]
    mock.enqueue(Turn([Text("Checking."), *calls], interleave_tools=True, usage=Usage(20, 8)))
    kw = dict(model=model(provider), input="weather and time?", tools=TOOLS, tool_choice="required")
    if stream:
        _, r = stream_final(openai_client, **kw)
    else:
        r = openai_client.responses.create(**kw)
    fcs = [i for i in r.output if i.type == "function_call"]
    assert [(f.call_id, f.name, f.arguments) for f in fcs] == [("call_1", "get_weather", '{"city":"Paris"}'), ("call_2", "get_time", "{}")]
    assert r.status == "completed"
    body = sent(mock)
    if provider == A:
        assert body["tool_choice"] == {"type": "any"}
        assert [t["name"] for t in body["tools"]] == ["get_weather", "get_time"]
    else:
        assert body["tool_choice"] == "required"
    # next turn: the results go back
    mock.enqueue(Turn([Text("Sunny, noon.")]))
    history = [{"role": "user", "content": "weather and time?"}, *[i.model_dump(exclude_none=True) for i in r.output],
               {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
               {"type": "function_call_output", "call_id": "call_2", "output": "12:00"}]
    r2 = openai_client.responses.create(model=model(provider), input=history, tools=TOOLS)
    assert r2.output_text == "Sunny, noon."
    body = sent(mock)
    if provider == A:
        assert body["messages"][1]["content"][1:] == [
            {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "call_2", "name": "get_time", "input": {}}]
        assert [b["tool_use_id"] for b in body["messages"][2]["content"]] == ["call_1", "call_2"]
    else:
        assert [t["id"] for t in body["messages"][1]["tool_calls"]] == ["call_1", "call_2"]
        assert [(m["role"], m["tool_call_id"]) for m in body["messages"][2:]] == [("tool", "call_1"), ("tool", "call_2")]


@pytest.mark.parametrize("stream", [False, True])
def test_thinking_signature_and_redacted_replayed_byte_identical(openai_client, mock, stream):
    sig = "EqQBCkgIARAB+sig/==" * 3
    mock.enqueue(Turn([Reasoning("Let me think.", signature=sig), RedactedReasoning("REDACTED/data+=="),
                       ToolCall("toolu_1", "get_time", "{}")], usage=Usage(10, 5)))
    kw = dict(model=model(A), input="time?", tools=TOOLS)
    if stream:
        _, r = stream_final(openai_client, **kw)
    else:
        r = openai_client.responses.create(**kw)
    rs = [i for i in r.output if i.type == "reasoning"]
    assert len(rs) == 2 and rs[0].content[0].text == "Let me think."
    assert all(i.encrypted_content.startswith("pxc1.") for i in rs)
    mock.enqueue(Turn([Text("Noon.")]))
    history = [{"role": "user", "content": "time?"}, *[i.model_dump(exclude_none=True) for i in r.output],
               {"type": "function_call_output", "call_id": "toolu_1", "output": "12:00"}]
    openai_client.responses.create(model=model(A), input=history, tools=TOOLS)
    assistant = sent(mock)["messages"][1]["content"]
    assert assistant == [{"type": "thinking", "thinking": "Let me think.", "signature": sig},
                         {"type": "redacted_thinking", "data": "REDACTED/data+=="},
                         {"type": "tool_use", "id": "toolu_1", "name": "get_time", "input": {}}]


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_refusal(openai_client, mock, stream):
    mock.enqueue(Turn([Refusal("", explanation="I can't help with that.")], stop="refusal"))
    kw = dict(model=model(A), input="bad")
    if stream:
        with openai_client.responses.stream(**kw) as s:
            events = list(s)
        r = events[-1].response
        assert events[-1].type == "response.incomplete"
    else:
        r = openai_client.responses.create(**kw)
    assert r.status == "incomplete" and r.incomplete_details.reason == "content_filter"
    refusals = [p.refusal for i in r.output if i.type == "message" for p in i.content if p.type == "refusal"]
    assert refusals == ["I can't help with that."]


@pytest.mark.parametrize("provider,stop,status,reason", [
    (A, "end_turn", "completed", None), (A, "max_tokens", "incomplete", "max_output_tokens"),
    (A, "stop_sequence", "completed", None), (A, "pause_turn", "completed", None),
    (A, "model_context_window_exceeded", "incomplete", "max_output_tokens"),
    (C, "stop", "completed", None), (C, "length", "incomplete", "max_output_tokens"),
    (C, "content_filter", "incomplete", "content_filter")])
@pytest.mark.parametrize("stream", [False, True])
def test_stop_reasons(openai_client, mock, provider, stop, status, reason, stream):
    mock.enqueue(Turn([Text("x")], stop=stop))
    kw = dict(model=model(provider), input="hi")
    if stream:
        with openai_client.responses.stream(**kw) as s:
            r = list(s)[-1].response
    else:
        r = openai_client.responses.create(**kw)
    assert r.status == status
    assert (r.incomplete_details.reason if r.incomplete_details else None) == reason


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("stream", [False, True])
def test_usage_with_cache_tokens(openai_client, mock, provider, stream):
    mock.enqueue(Turn([Text("x")], usage=Usage(input_tokens=100, output_tokens=7, cached_tokens=60, cache_write_tokens=15, reasoning_tokens=2)))
    kw = dict(model=model(provider), input="hi")
    r = stream_final(openai_client, **kw)[1] if stream else openai_client.responses.create(**kw)
    u = r.usage
    assert (u.input_tokens, u.output_tokens, u.total_tokens) == (100, 7, 107)
    assert (u.input_tokens_details.cached_tokens, u.input_tokens_details.cache_write_tokens) == (60, 15)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_upstream_http_error(openai_client, mock, provider):
    mock.enqueue(Error(429, message="slow down"))
    with pytest.raises(openai.RateLimitError):
        openai_client.responses.create(model=model(provider), input="hi")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_mid_stream_error_is_a_failure(openai_client, mock, provider):
    mock.enqueue(Turn([Text("partial answer", chunks=["partial", " answer"])], error_after=3, error={"message": "overloaded"}))
    with pytest.raises(Exception):
        stream_final(openai_client, model=model(provider), input="hi")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_stream_cut_short_never_completes(openai_client, mock, provider):
    mock.enqueue(Turn([Text("partial answer", chunks=["partial", " answer"])], cut_after=3))
    with pytest.raises(Exception):
        stream_final(openai_client, model=model(provider), input="hi")


def test_unrepresentable_request_is_400_naming_the_field(openai_client, mock):
    with pytest.raises(openai.BadRequestError) as err:
        openai_client.responses.create(model=model(A), input="hi", previous_response_id="resp_1")
    # With the state store on (the default), an unknown id is OpenAI's own 400.
    assert err.value.body["param"] == "previous_response_id"
    assert err.value.body["code"] == "previous_response_not_found"
    assert mock.requests == []

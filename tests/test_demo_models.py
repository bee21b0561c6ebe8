"""Demo-mode model names script the built-in mock upstreams: every endpoint, and through translations."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

PREFIXES = ("chat/", "responses/", "anthropic/", "interactions/")  # which mock provider answers; the client endpoint varies
WEATHER_TOOL_CHAT = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
WEATHER_TOOL_RESPONSES = {"type": "function", "name": "get_weather", "parameters": WEATHER_TOOL_CHAT["function"]["parameters"]}
WEATHER_TOOL_ANTHROPIC = {"name": "get_weather", "input_schema": WEATHER_TOOL_CHAT["function"]["parameters"]}
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def demo(harness):
    p = harness.start_demo()
    yield p
    p.stop()


@pytest.fixture
def oa(demo):
    c = demo.openai()
    yield c
    c.close()


@pytest.fixture
def an(demo):
    c = demo.anthropic()
    yield c
    c.close()


@pytest.mark.parametrize("prefix", PREFIXES)
def test_demo_tools_chat_client_full_loop(oa, prefix):
    first = oa.chat.completions.create(model=prefix + "demo-tools", messages=HI, tools=[WEATHER_TOOL_CHAT])
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    second = oa.chat.completions.create(model=prefix + "demo-tools", tools=[WEATHER_TOOL_CHAT], messages=HI + [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "18 C and sunny"},
    ])
    assert second.choices[0].finish_reason == "stop"
    assert "18 C and sunny" in second.choices[0].message.content


@pytest.mark.parametrize("prefix", PREFIXES)
def test_demo_tools_streams_on_responses_and_anthropic(oa, an, prefix):
    with oa.responses.stream(model=prefix + "demo-tools", input="hi", tools=[WEATHER_TOOL_RESPONSES]) as s:
        final = s.get_final_response()
    calls = [item for item in final.output if item.type == "function_call"]
    assert calls[0].name == "get_weather" and json.loads(calls[0].arguments) == {"city": "Paris"}
    with an.messages.stream(model=prefix + "demo-tools", max_tokens=100, messages=HI, tools=[WEATHER_TOOL_ANTHROPIC]) as s:
        msg = s.get_final_message()
    assert msg.stop_reason == "tool_use"
    use = next(b for b in msg.content if b.type == "tool_use")
    assert use.name == "get_weather" and use.input == {"city": "Paris"}


@pytest.mark.parametrize("prefix", PREFIXES)
def test_demo_think_shows_reasoning(an, oa, prefix):
    msg = an.messages.create(model=prefix + "demo-think", max_tokens=2000, messages=HI,
                             thinking={"type": "enabled", "budget_tokens": 1024})
    kinds = [b.type for b in msg.content]
    assert kinds[0] in ("thinking", "redacted_thinking") and kinds[-1] == "text"
    resp = oa.responses.create(model=prefix + "demo-think", input="hi", reasoning={"effort": "low", "summary": "auto"})
    assert [i.type for i in resp.output][0] == "reasoning"
    assert resp.output_text.startswith("Hello! I thought about it first.")
    assert resp.usage.output_tokens_details.reasoning_tokens > 0 or prefix == "anthropic/"


@pytest.mark.parametrize("prefix", PREFIXES)
def test_demo_json_is_json(oa, prefix):
    c = oa.chat.completions.create(model=prefix + "demo-json", messages=HI, response_format={"type": "json_object"})
    assert json.loads(c.choices[0].message.content) == {"city": "Paris", "temperature_c": 18, "conditions": "sunny"}


@pytest.mark.parametrize("prefix", PREFIXES)
def test_demo_refusal(oa, an, prefix):
    msg = an.messages.create(model=prefix + "demo-refusal", max_tokens=100, messages=HI)
    # the Interactions API has no refusal status: its mock's refusal is the wording as text
    assert msg.stop_reason == ("end_turn" if prefix == "interactions/" else "refusal")
    c = oa.chat.completions.create(model=prefix + "demo-refusal", messages=HI)
    assert "can't help" in (c.choices[0].message.refusal or c.choices[0].message.content or "")


@pytest.mark.parametrize("prefix", PREFIXES)
def test_demo_length_is_truncated(oa, an, prefix):
    c = oa.chat.completions.create(model=prefix + "demo-length", messages=HI)
    assert c.choices[0].finish_reason == "length"
    msg = an.messages.create(model=prefix + "demo-length", max_tokens=100, messages=HI)
    assert msg.stop_reason == "max_tokens"
    resp = oa.responses.create(model=prefix + "demo-length", input="hi")
    assert resp.status == "incomplete" and resp.incomplete_details.reason == "max_output_tokens"


@pytest.mark.parametrize("prefix", PREFIXES)
def test_demo_429_is_a_rate_limit_error_in_each_client_protocol(oa, an, prefix):
    with pytest.raises(openai.RateLimitError) as e:
        oa.chat.completions.create(model=prefix + "demo-429", messages=HI)
    assert e.value.response.headers.get("retry-after") == "1"
    with pytest.raises(openai.RateLimitError):
        oa.responses.create(model=prefix + "demo-429", input="hi")
    with pytest.raises(anthropic.RateLimitError) as ea:
        an.messages.create(model=prefix + "demo-429", max_tokens=10, messages=HI)
    assert ea.value.body["error"]["type"] == "rate_limit_error"


def test_demo_500_is_a_server_error(oa, an):
    with pytest.raises(openai.InternalServerError):
        oa.chat.completions.create(model="anthropic/demo-500", messages=HI)
    with pytest.raises(anthropic.InternalServerError):
        an.messages.create(model="chat/demo-500", max_tokens=10, messages=HI)


@pytest.mark.parametrize("prefix", ["anthropic/"])
def test_demo_slow_streams_word_by_word(oa, prefix):
    stream = oa.chat.completions.create(model=prefix + "demo-slow", messages=HI, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text.startswith("This answer arrives slowly")


def test_demo_cut_ends_the_stream_with_an_error(an, oa):
    with pytest.raises(anthropic.APIError):
        with an.messages.stream(model="chat/demo-cut", max_tokens=100, messages=HI) as s:
            s.get_final_message()
    with pytest.raises(openai.APIError):
        list(oa.chat.completions.create(model="anthropic/demo-cut", messages=HI, stream=True))


def test_plain_model_names_keep_the_greeting(oa):
    c = oa.chat.completions.create(model="anthropic/demo", messages=HI)
    assert "Hello from the ProxAI demo Anthropic Messages upstream" in c.choices[0].message.content


def test_demo_anthropic_takes_claude_codes_system_message_in_place(an):
    # Claude Code 2.1.251+ sends a system message after the first user turn; the demo's
    # models stand for current Claude models, which take it (a misplaced one is still refused).
    messages = [{"role": "user", "content": "hi"}, {"role": "system", "content": "be brief"}]
    reply = an.messages.create(model="anthropic/claude-demo", max_tokens=100, messages=messages)
    assert "Hello from the ProxAI demo" in reply.content[0].text
    with pytest.raises(anthropic.BadRequestError, match="must follow a 'user' message"):
        an.messages.create(model="anthropic/claude-demo", max_tokens=100,
                           messages=[*messages, {"role": "assistant", "content": "ok"}, {"role": "system", "content": "x"},
                                     {"role": "user", "content": "go"}])

"""End to end, the official SDKs against the real proxy and the mock upstream:

1. Reasoning toward a Gemini provider: thoughts are asked for (includeThoughts) exactly
   when the client asked for reasoning it can see, and the mock, as Gemini does, returns
   thought parts only then.
2. Refusals reaching Anthropic clients: `stop_details` always validates as the SDK's
   RefusalStopDetails (a category from its enum where the meaning matches, else null).
3. Gemini clients that keep no thought parts (Gemini CLI): the provider's reasoning state
   rides on the step's first functionCall (or first text) part as thoughtSignature, and
   comes back from there to the provider.
"""
from __future__ import annotations

import base64
import json
import typing

import anthropic
import pytest
from anthropic.types import RefusalStopDetails
from google import genai
from google.genai import types

from engine.context import Context
from engine.hooks import continuation
from gemini_helpers import MODEL, check_response, gemini_config, sent
from harness import CLIENT_KEY
from proxai.mock import Json, Reasoning, RedactedReasoning, Refusal, Stream, Text, ToolCall, Turn, Usage

STREAMS = pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
THOUGHT = "I should look up the weather first."
HI = [{"role": "user", "content": "weather in Paris?"}]


@pytest.fixture(scope="module")
def gemini_proxy(harness):
    p = harness.start_proxy(gemini_config(harness.mock_url))
    yield p
    p.stop()


def gemini_turn(*blocks, **kw) -> Turn:
    """A scripted Gemini answer whose wire form validates as google.genai.types."""
    from proxai.mock import render_gemini

    t = Turn(list(blocks), **kw)
    for request in ({"model": "m", "generationConfig": {"thinkingConfig": {"includeThoughts": True}}}, {"model": "m"}):
        check_response(render_gemini.body(t, request))
        for _, chunk in render_gemini.events(t, {**request, "stream": True}):
            if "error" not in chunk:
                check_response(chunk)
    return t


# --- 1. includeThoughts toward Gemini ---------------------------------------------------------


def chat_reasoning(proxy, stream, **kw):
    client = proxy.openai()
    if not stream:
        msg = client.chat.completions.create(model=MODEL, messages=HI, **kw).choices[0].message
        return msg.content, (msg.model_extra or {}).get("reasoning_content")
    text, reasoning = "", None
    for chunk in client.chat.completions.create(model=MODEL, messages=HI, stream=True, **kw):
        if chunk.choices:
            delta = chunk.choices[0].delta
            text += delta.content or ""
            more = (delta.model_extra or {}).get("reasoning_content")
            if more:
                reasoning = (reasoning or "") + more
    return text, reasoning


def responses_reasoning(proxy, stream, **kw):
    client = proxy.openai()
    if not stream:
        r = client.responses.create(model=MODEL, input="weather in Paris?", **kw)
    else:
        with client.responses.stream(model=MODEL, input="weather in Paris?", **kw) as s:
            r = s.get_final_response()
    summaries = ["".join(s.text for s in i.summary) + "".join(c.text for c in (i.content or ()))
                 for i in r.output if i.type == "reasoning"]
    return r.output_text, "".join(summaries) or None


def anthropic_reasoning(proxy, stream, **kw):
    client = proxy.anthropic()
    if not stream:
        m = client.messages.create(model=MODEL, max_tokens=20000, messages=HI, **kw)
    else:
        with client.messages.stream(model=MODEL, max_tokens=20000, messages=HI, **kw) as s:
            m = s.get_final_message()
    text = "".join(b.text for b in m.content if b.type == "text")
    thinking = "".join(b.thinking for b in m.content if b.type == "thinking")
    return text, thinking or None


# (client, request options, whether the client can see reasoning)
VISIBILITY = [
    pytest.param(chat_reasoning, {"reasoning_effort": "high"}, True, id="chat-effort"),
    pytest.param(chat_reasoning, {"reasoning_effort": "minimal"}, False, id="chat-effort-minimal"),
    pytest.param(responses_reasoning, {"reasoning": {"effort": "high", "summary": "auto"}}, True, id="responses-summary"),
    pytest.param(responses_reasoning, {"reasoning": {"effort": "high"}}, False, id="responses-no-summary"),
    pytest.param(anthropic_reasoning, {"thinking": {"type": "enabled", "budget_tokens": 16000}}, True, id="anthropic-enabled"),
    pytest.param(anthropic_reasoning, {"thinking": {"type": "adaptive"}}, True, id="anthropic-adaptive"),
    pytest.param(anthropic_reasoning, {"thinking": {"type": "adaptive", "display": "summarized"}}, True,
                 id="anthropic-summarized"),
    pytest.param(anthropic_reasoning, {"thinking": {"type": "enabled", "budget_tokens": 16000, "display": "omitted"}},
                 False, id="anthropic-omitted"),
    pytest.param(anthropic_reasoning, {"thinking": {"type": "disabled"}}, False, id="anthropic-disabled"),
]


@STREAMS
@pytest.mark.parametrize("ask,options,visible", VISIBILITY)
def test_gemini_provider_is_asked_for_thoughts_the_client_can_see(gemini_proxy, mock, ask, options, visible, stream):
    mock.enqueue(gemini_turn(Reasoning(THOUGHT), Text("Sunny."),
                             usage=Usage(input_tokens=5, output_tokens=20, reasoning_tokens=12)))
    text, reasoning = ask(gemini_proxy, stream, **options)
    thinking = sent(mock, stream)["generationConfig"].get("thinkingConfig") or {}
    assert text == "Sunny."
    if visible:
        assert thinking.get("includeThoughts") is True, thinking
        assert reasoning == THOUGHT
    else:
        assert "includeThoughts" not in thinking, thinking
        assert not reasoning  # Gemini sends no thoughts it was not asked for


def test_mock_gemini_returns_thoughts_only_when_asked(harness, mock):
    """The mock enforces what the real API does: thought parts only with includeThoughts;
    the thoughts are still counted, and a thought's signature moves to the next part."""
    client = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=harness.mock_url))
    for include in (True, False, None):
        for stream in (False, True):
            mock.enqueue(gemini_turn(Reasoning(THOUGHT, signature="c2ln"), Text("Sunny."),
                                     usage=Usage(input_tokens=5, output_tokens=20, reasoning_tokens=12)))
            config = types.GenerateContentConfig(
                thinking_config=types.ThinkingConfig(include_thoughts=include) if include is not None else None)
            if stream:
                chunks = list(client.models.generate_content_stream(model="gemini-3-pro-preview", contents="hi",
                                                                    config=config))
            else:
                chunks = [client.models.generate_content(model="gemini-3-pro-preview", contents="hi", config=config)]
            parts = [p for c in chunks if c.candidates and c.candidates[0].content
                     for p in c.candidates[0].content.parts or ()]
            thoughts = [p for p in parts if p.thought]
            assert bool(thoughts) is bool(include), (include, stream, parts)
            assert chunks[-1].usage_metadata.thoughts_token_count == 12
            if not include:
                signed = [p for p in parts if p.thought_signature]
                assert len(signed) == 1 and signed[0].text == "Sunny."[: len(signed[0].text)]


# --- 2. stop_details toward Anthropic clients -------------------------------------------------

CATEGORIES = {"cyber", "bio", "frontier_llm", "reasoning_extraction", "general_harms"}


def test_refusal_category_enum_is_the_sdks():
    literal = next(a for a in typing.get_args(RefusalStopDetails.model_fields["category"].annotation) if a is not type(None))
    assert set(typing.get_args(literal)) == CATEGORIES


def anthropic_stop(proxy, model, stream):
    """(stop_reason, the stop_details JSON as the proxy sent it) for one Anthropic request."""
    client = proxy.anthropic()
    if not stream:
        raw = client.messages.with_raw_response.create(model=model, max_tokens=100, messages=HI)
        body = json.loads(raw.http_response.text)
        return body["stop_reason"], body["stop_details"]
    deltas = []
    with client.messages.stream(model=model, max_tokens=100, messages=HI) as s:
        for event in s:
            if event.type == "message_delta":
                deltas.append(event.delta.model_dump())
        s.get_final_message()
    assert len(deltas) == 1
    return deltas[0]["stop_reason"], deltas[0]["stop_details"]


def blocked(reason: str, message: str | None = None) -> dict:
    feedback = {"blockReason": reason, **({"blockReasonMessage": message} if message else {})}
    body = {"promptFeedback": feedback, "usageMetadata": {"promptTokenCount": 4, "totalTokenCount": 4},
            "modelVersion": "gemini-3-pro-preview", "responseId": "r1"}
    check_response(body)
    return body


def blocked_reply(body: dict, stream: bool):
    return Stream(events=[(None, body)]) if stream else Json(body)


# (the Gemini reply, the category an Anthropic client gets, the explanation)
GEMINI_REFUSALS = [
    pytest.param(lambda s: gemini_turn(Refusal("", explanation="Unsafe content.")), "general_harms", "Unsafe content.",
                 id="SAFETY"),
    pytest.param(lambda s: gemini_turn(Refusal(""), stop="PROHIBITED_CONTENT"), "general_harms", None,
                 id="PROHIBITED_CONTENT"),
    pytest.param(lambda s: gemini_turn(Text("It was the best"), Refusal(""), stop="RECITATION"), None, None,
                 id="RECITATION"),
    pytest.param(lambda s: gemini_turn(Refusal(""), stop="SPII"), None, None, id="SPII"),
    pytest.param(lambda s: gemini_turn(Refusal(""), stop="BLOCKLIST"), None, None, id="BLOCKLIST"),
    pytest.param(lambda s: gemini_turn(Refusal(""), stop="LANGUAGE"), None, None, id="LANGUAGE"),
    pytest.param(lambda s: blocked_reply(blocked("SAFETY", "The prompt was blocked."), s), "general_harms",
                 "The prompt was blocked.", id="blockReason-SAFETY"),
    pytest.param(lambda s: blocked_reply(blocked("PROHIBITED_CONTENT"), s), "general_harms", None,
                 id="blockReason-PROHIBITED_CONTENT"),
    pytest.param(lambda s: blocked_reply(blocked("JAILBREAK"), s), None, None, id="blockReason-JAILBREAK"),
    pytest.param(lambda s: blocked_reply(blocked("OTHER"), s), None, None, id="blockReason-OTHER"),
    pytest.param(lambda s: blocked_reply(blocked("MODEL_ARMOR"), s), None, None, id="blockReason-MODEL_ARMOR"),
]


@STREAMS
@pytest.mark.parametrize("reply,category,explanation", GEMINI_REFUSALS)
def test_gemini_refusal_reaches_anthropic_client_with_a_valid_category(gemini_proxy, mock, reply, category,
                                                                      explanation, stream):
    mock.enqueue(reply(stream))
    stop, details = anthropic_stop(gemini_proxy, MODEL, stream)
    assert sent(mock, stream)["contents"][0]["parts"] == [{"text": "weather in Paris?"}]
    assert stop == "refusal"
    assert details == {"type": "refusal", "category": category, "explanation": explanation}
    RefusalStopDetails.model_validate(details)


@STREAMS
@pytest.mark.parametrize("provider,stop", [("chat", "content_filter"), ("responses", None)])
def test_openai_refusal_reaches_anthropic_client_without_a_category(proxy, mock, provider, stop, stream):
    mock.enqueue(Turn([Refusal("I can't help with that.")], stop=stop))
    reason, details = anthropic_stop(proxy, f"{provider}/up-model", stream)
    assert mock.requests[-1].body["model"] == "up-model"
    assert reason == "refusal"
    RefusalStopDetails.model_validate(details)
    assert details["category"] is None



# --- 3. reasoning state for Gemini clients that keep no thought parts ------------------------

SIG = "EqQBCkYIBxgCKkD+/anthropic-signature=="
SIG_2 = "EqQBCkYIBxgCKkD+/second-signature=="
ANTH, RESP = "anthropic/claude-up", "responses/resp-up"
WEATHER = types.Tool(function_declarations=[types.FunctionDeclaration(
    name="get_weather", description="Weather for a city",
    parameters_json_schema={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})])
THINK = types.ThinkingConfig(include_thoughts=True, thinking_budget=4096)


@pytest.fixture
def gclient(harness, start_proxy):
    """A Gemini client; the Anthropic provider asks for thinking with a budget (type enabled),
    the mode whose tool-loop rule the mock enforces."""
    config = harness.default_config()
    config["providers"]["anthropic"]["thinking_mode"] = "budget"
    p = start_proxy(config)
    return genai.Client(api_key=CLIENT_KEY, http_options=types.HttpOptions(base_url=p.url))


def ask_gemini(client, model, contents, stream):
    """The answer's parts, all chunks' in order, and the raw parts as JSON."""
    config = types.GenerateContentConfig(tools=[WEATHER], thinking_config=THINK)
    if stream:
        responses = list(client.models.generate_content_stream(model=model, contents=contents, config=config))
    else:
        responses = [client.models.generate_content(model=model, contents=contents, config=config)]
    return [p for r in responses if r.candidates and r.candidates[0].content for p in r.candidates[0].content.parts or ()]


def as_gemini_cli_keeps(parts) -> types.Content:
    """The model turn as Gemini CLI keeps it in its history: no thought parts, consecutive
    text parts merged into the first (which keeps its own signature)."""
    kept: list = []
    for p in parts:
        if p.thought:
            continue
        if kept and p.text is not None and kept[-1].text and not p.function_call and not kept[-1].function_call:
            kept[-1] = kept[-1].model_copy(update={"text": kept[-1].text + p.text})
            continue
        kept.append(p)
    return types.Content(role="model", parts=kept)


def user(text):
    return types.Content(role="user", parts=[types.Part(text=text)])


def result(call, output):
    return types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
        id=call.id, name=call.name, response={"output": output}))])


def assistant_blocks(mock):
    body = mock.requests[-1].body
    turns = [m for m in body["messages"] if m["role"] == "assistant"]
    assert len(turns) == 1, body["messages"]
    return turns[0]["content"]


@STREAMS
def test_gemini_cli_history_brings_the_anthropic_signature_back(mock, gclient, stream):
    """Turn 1: thinking with its signature, then a tool call. The signature rides on the
    functionCall part (thought parts carry only text); a history without thought parts
    still gives Anthropic the thinking block, text and signature unchanged, which the mock,
    as Anthropic, requires of a tool_result turn."""
    mock.enqueue(Turn([Reasoning(THOUGHT, signature=SIG), ToolCall("toolu_1", "get_weather", '{"city": "Paris"}')]))
    parts = ask_gemini(gclient, ANTH, "weather in Paris?", stream)
    assert mock.requests[-1].body["thinking"]["type"] == "enabled"
    thoughts = [p for p in parts if p.thought]
    calls = [p for p in parts if p.function_call]
    assert "".join(p.text for p in thoughts) == THOUGHT
    assert not any(p.thought_signature for p in thoughts)
    assert len(calls) == 1 and calls[0].thought_signature
    assert SIG.encode() not in calls[0].thought_signature

    mock.enqueue(Turn([Text("Sunny.")]))
    history = [user("weather in Paris?"), as_gemini_cli_keeps(parts), result(calls[0].function_call, "sunny")]
    answer = ask_gemini(gclient, ANTH, history, stream)
    assert "".join(p.text for p in answer if p.text and not p.thought) == "Sunny."
    assert assistant_blocks(mock) == [
        {"type": "thinking", "thinking": THOUGHT, "signature": SIG},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]


@STREAMS
def test_sdk_history_with_thought_parts_gives_one_thinking_block(mock, gclient, stream):
    """A client that keeps the thought parts too (the SDK's own history) sends the thinking
    twice, as text and in the call's signature: the provider gets it once."""
    mock.enqueue(Turn([Reasoning(THOUGHT, signature=SIG), ToolCall("toolu_1", "get_weather", '{"city": "Paris"}')]))
    parts = ask_gemini(gclient, ANTH, "weather in Paris?", stream)
    call = next(p.function_call for p in parts if p.function_call)
    mock.enqueue(Turn([Text("Sunny.")]))
    ask_gemini(gclient, ANTH, [user("weather in Paris?"), types.Content(role="model", parts=parts),
                               result(call, "sunny")], stream)
    assert assistant_blocks(mock) == [
        {"type": "thinking", "thinking": THOUGHT, "signature": SIG},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]


@STREAMS
def test_interleaved_thinking_rides_on_each_call(mock, gclient, stream):
    mock.enqueue(Turn([Reasoning(THOUGHT, signature=SIG), ToolCall("toolu_1", "get_weather", '{"city": "Paris"}'),
                       Reasoning("Now Rome.", signature=SIG_2), ToolCall("toolu_2", "get_weather", '{"city": "Rome"}')]))
    parts = ask_gemini(gclient, ANTH, "weather in Paris and Rome?", stream)
    calls = [p for p in parts if p.function_call]
    assert len(calls) == 2 and all(p.thought_signature for p in calls)
    mock.enqueue(Turn([Text("Sunny and rainy.")]))
    history = [user("weather in Paris and Rome?"), as_gemini_cli_keeps(parts),
               types.Content(role="user", parts=result(calls[0].function_call, "sunny").parts
                             + result(calls[1].function_call, "rainy").parts)]
    ask_gemini(gclient, ANTH, history, stream)
    assert assistant_blocks(mock) == [
        {"type": "thinking", "thinking": THOUGHT, "signature": SIG},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "thinking", "thinking": "Now Rome.", "signature": SIG_2},
        {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome"}}]


@STREAMS
def test_answer_without_a_call_carries_the_state_on_its_first_text(mock, gclient, stream):
    mock.enqueue(Turn([Reasoning(THOUGHT, signature=SIG), RedactedReasoning("cmVkYWN0ZWQ="), Text("It is sunny.")]))
    parts = ask_gemini(gclient, ANTH, "weather in Paris?", stream)
    texts = [p for p in parts if p.text and not p.thought]
    assert texts[0].thought_signature and not any(p.thought_signature for p in parts if p.thought)
    assert not any(p.thought_signature for p in texts[1:])
    mock.enqueue(Turn([Text("You're welcome.")]))
    ask_gemini(gclient, ANTH, [user("weather in Paris?"), as_gemini_cli_keeps(parts), user("thanks")], stream)
    assert assistant_blocks(mock) == [
        {"type": "thinking", "thinking": THOUGHT, "signature": SIG},
        {"type": "redacted_thinking", "data": "cmVkYWN0ZWQ="},
        {"type": "text", "text": "It is sunny."}]


@STREAMS
def test_responses_encrypted_reasoning_comes_back_from_the_call(mock, gclient, stream):
    mock.enqueue(Turn([Reasoning(THOUGHT, encrypted_content="gAAAA-encrypted", summary=True),
                       ToolCall("call_1", "get_weather", '{"city": "Paris"}')]))
    parts = ask_gemini(gclient, RESP, "weather in Paris?", stream)
    call = next(p for p in parts if p.function_call)
    assert call.thought_signature
    mock.enqueue(Turn([Text("Sunny.")]))
    ask_gemini(gclient, RESP, [user("weather in Paris?"), as_gemini_cli_keeps(parts), result(call.function_call, "sunny")],
               stream)
    items = mock.requests[-1].body["input"]
    reasoning = [i for i in items if i.get("type") == "reasoning"]
    assert len(reasoning) == 1 and reasoning[0]["encrypted_content"] == "gAAAA-encrypted"
    assert [i.get("type") for i in items].index("reasoning") < [i.get("type") for i in items].index("function_call")


def test_mock_anthropic_refuses_a_tool_result_turn_without_its_thinking(harness, mock):
    """The mock enforces Anthropic's rule: with thinking on, the turn a tool_result answers
    must carry the thinking sent with that call, signature and text unchanged."""
    client = anthropic.Anthropic(base_url=harness.mock_url, api_key="k", max_retries=0)
    call = {"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {"city": "Paris"}}
    mock.enqueue(Turn([Reasoning(THOUGHT, signature=SIG), ToolCall("toolu_9", "get_weather", '{"city": "Paris"}')]))
    thinking = {"type": "enabled", "budget_tokens": 2048}
    tools = [{"name": "get_weather", "input_schema": {"type": "object"}}]
    first = client.messages.create(model="m", max_tokens=4096, thinking=thinking, tools=tools, messages=HI)
    assert [b.type for b in first.content] == ["thinking", "tool_use"]
    answer = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "sunny"}]}
    for content in ([call], [{"type": "thinking", "thinking": "edited", "signature": SIG}, call]):
        with pytest.raises(anthropic.BadRequestError):
            client.messages.create(model="m", max_tokens=4096, thinking=thinking, tools=tools,
                                   messages=HI + [{"role": "assistant", "content": content}, answer])
    mock.enqueue(Turn([Text("Sunny.")]))
    ok = client.messages.create(model="m", max_tokens=4096, thinking=thinking, tools=tools, messages=HI + [
        {"role": "assistant", "content": [{"type": "thinking", "thinking": THOUGHT, "signature": SIG}, call]}, answer])
    assert ok.content[0].text == "Sunny."


@STREAMS
def test_reasoning_with_no_part_after_it_keeps_its_state_on_its_thought_part(mock, gclient, stream):
    mock.enqueue(Turn([Text("Done."), Reasoning(THOUGHT, signature=SIG)]))
    parts = ask_gemini(gclient, ANTH, "weather in Paris?", stream)
    assert not any(p.thought_signature for p in parts if not p.thought)
    assert [p for p in parts if p.thought and p.thought_signature]
    mock.enqueue(Turn([Text("ok")]))
    ask_gemini(gclient, ANTH, [user("weather in Paris?"), types.Content(role="model", parts=parts), user("more")], stream)
    assert assistant_blocks(mock) == [{"type": "text", "text": "Done."},
                                      {"type": "thinking", "thinking": THOUGHT, "signature": SIG}]


@STREAMS
def test_continuation_off_sends_no_signatures_to_gemini_clients(start_proxy, harness, mock, stream):
    config = harness.default_config()
    config["continuation"] = {"enabled": False}
    p = start_proxy(config)
    client = genai.Client(api_key=CLIENT_KEY, http_options=types.HttpOptions(base_url=p.url))
    mock.enqueue(Turn([Reasoning(THOUGHT, signature=SIG), ToolCall("toolu_1", "get_weather", '{"city": "Paris"}')]))
    parts = ask_gemini(client, ANTH, "weather in Paris?", stream)
    assert "".join(p.text for p in parts if p.thought) == THOUGHT
    assert not any(p.thought_signature for p in parts)


def test_carried_state_with_a_secret_round_trips_and_a_forged_one_is_dropped(start_proxy, harness, mock):
    config = harness.default_config()
    config["continuation"] = {"secret": "s3cret"}
    config["providers"]["anthropic"]["thinking_mode"] = "budget"
    p = start_proxy(config)
    client = genai.Client(api_key=CLIENT_KEY, http_options=types.HttpOptions(base_url=p.url))
    mock.enqueue(Turn([Reasoning(THOUGHT, signature=SIG), ToolCall("toolu_1", "get_weather", '{"city": "Paris"}')]))
    parts = ask_gemini(client, ANTH, "weather in Paris?", False)
    kept = as_gemini_cli_keeps(parts)
    call = kept.parts[0]
    mock.enqueue(Turn([Text("Sunny.")]))
    ask_gemini(client, ANTH, [user("weather in Paris?"), kept, result(call.function_call, "sunny")], False)
    assert assistant_blocks(mock)[0] == {"type": "thinking", "thinking": THOUGHT, "signature": SIG}
    # The same envelope made without the secret (a forgery) is foreign: nothing reaches Anthropic.
    forged = continuation.carry(Context("gemini_generate_content", "anthropic_messages", "anthropic"),
                                [{"type": "reasoning", "text": THOUGHT,
                                  "opaque": {"protocol": "anthropic_messages", "provider": "anthropic", "signature": SIG}}])
    kept.parts[0] = call.model_copy(update={"thought_signature": base64.b64encode(forged.encode())})
    mock.enqueue(Turn([Text("Sunny.")]))
    # With no thinking block to restore, the request goes without thinking (the mock, as
    # Anthropic, would refuse the tool-use turn otherwise).
    ask_gemini(client, ANTH, [user("weather in Paris?"), kept, result(call.function_call, "sunny")], False)
    assert SIG not in mock.requests[-1].raw.decode()
    assert "thinking" not in mock.requests[-1].body

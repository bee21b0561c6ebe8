"""Thinking toward Anthropic against the tool-use turn in progress, end to end.

The mock, as Anthropic, refuses a request with thinking on whose tool-use turn does not
start with a thinking block (proxai/mock/anthropic_thinking.py). A turn whose reasoning
the proxy can restore (this provider's signature, back through the continuation
envelope) keeps thinking on, the block first; a turn with none (reasoning from another
provider, or a client that keeps none: Chat clients, Gemini histories from elsewhere)
goes without thinking for that request. Every client protocol that translates toward
Anthropic, streaming and not, adaptive and budget thinking."""
from __future__ import annotations

import anthropic
import pytest
from google import genai
from google.genai import types

from harness import CLIENT_KEY, traced
from proxai.mock import Reasoning, Text, ToolCall, Turn

STREAMS = pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
MODES = pytest.mark.parametrize("mode", ["adaptive", "budget"])
MODEL = "anthropic/claude-sonnet-4-5"
SIG = "EqQBCkYIBxgCKkD+/anthropic-signature=="
THOUGHT = "I should look the weather up."
CALL = ToolCall("toolu_1", "get_weather", '{"city": "Paris"}')
FUNCTION = {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
THINKING_OFF = "thinking off for this request"


@pytest.fixture
def start(harness, start_proxy):
    def go(mode: str):
        config = harness.default_config()
        config["providers"]["anthropic"]["thinking_mode"] = mode
        return start_proxy(config)
    return go


def first_assistant(mock) -> list:
    return next(m for m in mock.requests[-1].body["messages"] if m["role"] == "assistant")["content"]


def thinking_sent(mock):
    return mock.requests[-1].body.get("thinking")


# --- Chat clients (openai-agents' Chat model with reasoning_effort): no reasoning state ----


def chat_turn(client, messages, stream):
    kw = dict(model=MODEL, messages=messages, reasoning_effort="high", tools=[{"type": "function", "function": FUNCTION}])
    if not stream:
        msg = client.chat.completions.create(**kw).choices[0].message
        return msg.model_dump(exclude_none=True)
    calls: dict = {}
    text = reasoning = ""
    for chunk in client.chat.completions.create(stream=True, **kw):
        for c in chunk.choices:
            text += c.delta.content or ""
            reasoning += (c.delta.model_extra or {}).get("reasoning_content") or ""
            for tc in c.delta.tool_calls or ():
                slot = calls.setdefault(tc.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
                slot["id"] = tc.id or slot["id"]
                slot["function"]["name"] += (tc.function.name or "") if tc.function else ""
                slot["function"]["arguments"] += (tc.function.arguments or "") if tc.function else ""
    out = {"role": "assistant", "content": text or None}
    if reasoning:
        out["reasoning_content"] = reasoning
    if calls:
        out["tool_calls"] = [calls[i] for i in sorted(calls)]
    return out


@STREAMS
@MODES
def test_chat_client_tool_loop_goes_without_thinking_on_its_second_request(start, mock, mode, stream, caplog):
    """A client that keeps content and tool calls only (openai-agents' Chat model)."""
    p = start(mode)
    client = p.openai()
    mock.enqueue(Turn([Reasoning(THOUGHT, signature=SIG), CALL]))
    history = [{"role": "user", "content": "weather in Paris?"}]
    assistant = chat_turn(client, history, stream)
    assert thinking_sent(mock)["type"] == ("enabled" if mode == "budget" else "adaptive")
    assert assistant["tool_calls"][0]["id"] == "toolu_1" and assistant["reasoning_content"]
    kept = {k: assistant.get(k) for k in ("role", "content", "tool_calls")}
    history += [kept, {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"}]
    mock.enqueue(Turn([Text("Sunny.")]))
    with caplog.at_level("DEBUG", logger="proxai"):
        answer = chat_turn(client, history, stream)
        assert traced(caplog, THINKING_OFF)
    assert answer["content"] == "Sunny."  # not Anthropic's 400
    assert thinking_sent(mock) is None
    assert first_assistant(mock)[0]["type"] == "tool_use"
    # The next user turn starts a new assistant turn: thinking is back on.
    history += [{"role": "assistant", "content": answer["content"]}, {"role": "user", "content": "and tomorrow?"}]
    mock.enqueue(Turn([Text("Rain.")]))
    chat_turn(client, history, stream)
    assert thinking_sent(mock)["type"] in ("enabled", "adaptive")


@STREAMS
@MODES
def test_chat_client_that_keeps_reasoning_content_keeps_thinking(start, mock, mode, stream):
    """reasoning_content carries the provider's state (docs/continuation.md): restored, thinking stays on."""
    p = start(mode)
    client = p.openai()
    mock.enqueue(Turn([Reasoning(THOUGHT, signature=SIG), CALL]))
    history = [{"role": "user", "content": "weather in Paris?"}]
    history += [chat_turn(client, history, stream), {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"}]
    mock.enqueue(Turn([Text("Sunny.")]))
    assert chat_turn(client, history, stream)["content"] == "Sunny."
    assert thinking_sent(mock)["type"] == ("enabled" if mode == "budget" else "adaptive")
    assert first_assistant(mock)[0] == {"type": "thinking", "thinking": THOUGHT, "signature": SIG}


# --- Responses clients: the provider's signature comes back in encrypted_content ------------


def responses_turn(client, items, stream):
    kw = dict(model=MODEL, input=items, reasoning={"effort": "high"}, store=False,
              include=["reasoning.encrypted_content"], tools=[{"type": "function", **FUNCTION}])
    if not stream:
        return client.responses.create(**kw)
    events = list(client.responses.create(stream=True, **kw))
    assert events[-1].type == "response.completed"
    return events[-1].response


@STREAMS
@MODES
def test_responses_client_restores_the_thinking_block_first(start, mock, mode, stream):
    p = start(mode)
    client = p.openai()
    mock.enqueue(Turn([Reasoning(THOUGHT, signature=SIG), Text("Let me check."), CALL]))
    items = [{"role": "user", "content": "weather in Paris?"}]
    first = responses_turn(client, items, stream)
    out = [i.model_dump(exclude_none=True) for i in first.output]
    # A client that keeps its items in another order (text first): the block still goes first.
    reasoning = [i for i in out if i["type"] == "reasoning"]
    others = [i for i in out if i["type"] != "reasoning"]
    call = next(i for i in out if i["type"] == "function_call")
    items += others[:1] + reasoning + others[1:] + [
        {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}]
    mock.enqueue(Turn([Text("Sunny.")]))
    assert responses_turn(client, items, stream).output_text == "Sunny."
    assert thinking_sent(mock)["type"] == ("enabled" if mode == "budget" else "adaptive")
    blocks = first_assistant(mock)
    assert [b["type"] for b in blocks] == ["thinking", "text", "tool_use"]
    assert blocks[0] == {"type": "thinking", "thinking": THOUGHT, "signature": SIG}


@STREAMS
def test_responses_client_with_foreign_reasoning_goes_without_thinking(start, mock, stream):
    p = start("adaptive")
    items = [{"role": "user", "content": "weather in Paris?"},
             {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA-from-openai"},
             {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
             {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]
    mock.enqueue(Turn([Text("Sunny.")]))
    assert responses_turn(p.openai(), items, stream).output_text == "Sunny."
    assert thinking_sent(mock) is None
    assert "gAAAA-from-openai" not in mock.requests[-1].raw.decode()


# --- Gemini clients: a history from another model has no signature for Anthropic -----------


@STREAMS
@MODES
def test_gemini_history_without_anthropic_state_goes_without_thinking(start, mock, mode, stream):
    p = start(mode)
    client = genai.Client(api_key=CLIENT_KEY, http_options=types.HttpOptions(base_url=p.url))
    weather = types.Tool(function_declarations=[types.FunctionDeclaration(
        name="get_weather", parameters_json_schema=FUNCTION["parameters"])])
    config = types.GenerateContentConfig(tools=[weather], thinking_config=types.ThinkingConfig(thinking_budget=4096))
    history = [
        types.Content(role="user", parts=[types.Part(text="weather in Paris?")]),
        types.Content(role="model", parts=[types.Part(function_call=types.FunctionCall(
            id="c1", name="get_weather", args={"city": "Paris"}), thought_signature=b"gemini-own-signature")]),
        types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
            id="c1", name="get_weather", response={"output": "sunny"}))]),
    ]
    mock.enqueue(Turn([Text("Sunny.")]))
    if stream:
        text = "".join(c.text or "" for c in client.models.generate_content_stream(model=MODEL, contents=history, config=config))
    else:
        text = client.models.generate_content(model=MODEL, contents=history, config=config).text
    assert text == "Sunny."
    assert thinking_sent(mock) is None and first_assistant(mock)[0]["type"] == "tool_use"


# --- the enforcing mock, as Anthropic ------------------------------------------------------


@pytest.fixture
def ant(harness):
    return anthropic.Anthropic(base_url=harness.mock_url, api_key="k", max_retries=0)


HI = [{"role": "user", "content": "weather in Paris?"}]
USE = {"type": "tool_use", "id": "toolu_x", "name": "get_weather", "input": {"city": "Paris"}}
RESULT = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "sunny"}]}
TOOLS = [{"name": "get_weather", "input_schema": {"type": "object"}}]


def refusal(ant, **kw) -> str:
    with pytest.raises(anthropic.BadRequestError) as info:
        ant.messages.create(model="m", tools=TOOLS, **{"max_tokens": 4096, **kw})
    assert info.value.status_code == 400 and info.value.body["type"] == "error"
    assert info.value.body["error"]["type"] == "invalid_request_error"
    return info.value.body["error"]["message"]


@pytest.mark.parametrize("thinking", [{"type": "adaptive"}, {"type": "enabled", "budget_tokens": 2048}])
def test_mock_refuses_a_foreign_tool_use_turn_without_thinking(ant, mock, thinking):
    message = refusal(ant, thinking=thinking, messages=HI + [{"role": "assistant", "content": [USE]}, RESULT])
    assert message.startswith("messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
                              "`tool_use`. When `thinking` is enabled, a final `assistant` message must start with "
                              "a thinking block")
    # A text block first is no better; later steps of the same turn owe nothing more.
    message = refusal(ant, thinking=thinking, messages=HI + [
        {"role": "assistant", "content": [{"type": "text", "text": "Checking."}, USE]}, RESULT])
    assert "but found `text`" in message
    mock.enqueue(Turn([Text("ok")]))
    second = {"type": "tool_use", "id": "toolu_y", "name": "get_weather", "input": {"city": "Rome"}}
    ant.messages.create(model="m", max_tokens=4096, tools=TOOLS, thinking=thinking, messages=HI + [
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"}, USE]}, RESULT,
        {"role": "assistant", "content": [second]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_y", "content": "rain"}]}])
    # Without thinking, or after a new user turn, nothing is owed.
    for kw in ({"messages": HI + [{"role": "assistant", "content": [USE]}, RESULT]},
               {"thinking": thinking, "messages": HI + [{"role": "assistant", "content": [USE]}, RESULT,
                                                        {"role": "assistant", "content": "Sunny."},
                                                        {"role": "user", "content": "thanks"}]}):
        mock.enqueue(Turn([Text("ok")]))
        assert ant.messages.create(model="m", max_tokens=4096, tools=TOOLS, **kw).content[0].text == "ok"


def test_mock_holds_adaptive_thinking_to_what_it_sent(ant, mock):
    mock.enqueue(Turn([Reasoning(THOUGHT, signature=SIG), ToolCall("toolu_x", "get_weather", '{"city": "Paris"}')]))
    ant.messages.create(model="m", max_tokens=4096, tools=TOOLS, thinking={"type": "adaptive"}, messages=HI)
    edited = {"type": "thinking", "thinking": "edited", "signature": SIG}
    assert "Invalid `signature`" in refusal(ant, thinking={"type": "adaptive"},
                                            messages=HI + [{"role": "assistant", "content": [edited, USE]}, RESULT])
    # A call the mock sent without thinking (adaptive: the model did not think) owes none.
    mock.enqueue(Turn([ToolCall("toolu_z", "get_weather", "{}")]))
    ant.messages.create(model="m", max_tokens=4096, tools=TOOLS, thinking={"type": "adaptive"}, messages=HI)
    mock.enqueue(Turn([Text("ok")]))
    ant.messages.create(model="m", max_tokens=4096, tools=TOOLS, thinking={"type": "adaptive"}, messages=HI + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_z", "name": "get_weather", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_z", "content": "x"}]}])


def test_mock_requires_signatures_on_replayed_thinking(ant, mock):
    unsigned = {"type": "thinking", "thinking": "t"}
    assert refusal(ant, messages=HI + [{"role": "assistant", "content": [unsigned, {"type": "text", "text": "a"}]},
                                       {"role": "user", "content": "more"}]) == \
        "messages.1.content.0.thinking.signature: Field required"
    empty = {"type": "thinking", "thinking": "t", "signature": ""}
    assert refusal(ant, thinking={"type": "adaptive"}, messages=HI + [{"role": "assistant", "content": [empty, USE]},
                                                                      RESULT]) == \
        "messages.1.content.0: Invalid `signature` in `thinking` block"


def test_mock_holds_the_thinking_budget_to_anthropics_limits(ant, mock):
    assert refusal(ant, thinking={"type": "enabled", "budget_tokens": 1000}, messages=HI) == \
        "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
    assert refusal(ant, max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 2048}, messages=HI).startswith(
        "`max_tokens` must be greater than `thinking.budget_tokens`")
    mock.enqueue(Turn([Text("ok")]))  # the interleaved-thinking beta lifts the max_tokens bound
    ant.messages.create(model="m", max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 4096}, messages=HI,
                        extra_headers={"anthropic-beta": "interleaved-thinking-2025-05-14"})
    mock.enqueue(Turn([Text("ok")]))
    ant.messages.create(model="m", max_tokens=4096, thinking={"type": "enabled", "budget_tokens": 1024}, messages=HI)


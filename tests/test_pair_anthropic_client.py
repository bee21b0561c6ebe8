"""End to end: the official Anthropic SDK as the client, a Chat Completions or a
Responses provider behind the proxy (the mock upstream). Every test also checks
what the provider received."""
from __future__ import annotations

import anthropic
import pytest

from proxai.mock import Error, Reasoning, RedactedReasoning, Refusal, Stream, Text, ToolCall, Turn, Usage

CHAT_MODEL = "chat/gpt-up"
RESP_MODEL = "responses/resp-up"
PROVIDERS = [pytest.param(CHAT_MODEL, id="chat"), pytest.param(RESP_MODEL, id="responses")]
TOOLS = [{"name": "get_weather", "description": "Weather for a city",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
         {"name": "get_time", "input_schema": {"type": "object", "properties": {"tz": {"type": "string"}}}}]
UNICODE = "héllo wörld — 日本語 🎉🚀 ok"


def is_chat(model: str) -> bool:
    return model.startswith("chat/")


def sent(mock) -> dict:
    """The translated body of the last upstream request."""
    assert mock.requests, "the provider received nothing"
    return mock.requests[-1].body


def create(client, model, stream=False, **kw):
    kw.setdefault("max_tokens", 256)
    kw.setdefault("messages", [{"role": "user", "content": "hi"}])
    if stream:
        with client.messages.stream(model=model, **kw) as s:
            for _ in s:
                pass
            return s.get_final_message()
    return client.messages.create(model=model, **kw)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("model", PROVIDERS)
class TestPairs:
    def test_text(self, mock, anthropic_client, model, stream):
        mock.enqueue(Turn([Text(UNICODE)], usage=Usage(input_tokens=30, output_tokens=7, cached_tokens=12, cache_write_tokens=3),
                          split_bytes=3))
        extra = {"stop_sequences": ["STOP"]} if is_chat(model) else {}
        msg = create(anthropic_client, model, stream, system="be brief",
                     messages=[{"role": "user", "content": "hi"}], extra_body={"temperature": 0.3}, **extra)
        assert msg.content[0].type == "text" and msg.content[0].text == UNICODE
        assert msg.stop_reason == "end_turn" and msg.role == "assistant" and msg.id.startswith("msg_")
        assert msg.usage.input_tokens == 15 and msg.usage.output_tokens == 7
        assert msg.usage.cache_read_input_tokens == 12 and msg.usage.cache_creation_input_tokens == 3
        body = sent(mock)
        assert body["temperature"] == 0.3
        if is_chat(model):
            assert body["model"] == "gpt-up"
            assert body["messages"][0] == {"role": "system", "content": "be brief"}
            assert body["messages"][1]["role"] == "user"
            assert body["stop"] in (["STOP"], "STOP")
            assert body.get("max_completion_tokens", body.get("max_tokens")) == 256
        else:
            assert body["model"] == "resp-up"
            assert body["instructions"] == "be brief"
            assert body["max_output_tokens"] == 256
        assert body.get("stream", False) == stream

    def test_multi_turn(self, mock, anthropic_client, model, stream):
        mock.enqueue(Turn([Text("third")]))
        msg = create(anthropic_client, model, stream, messages=[
            {"role": "user", "content": "one"}, {"role": "assistant", "content": "two"},
            {"role": "user", "content": [{"type": "text", "text": "three"}]}])
        assert msg.content[0].text == "third"
        body = sent(mock)
        if is_chat(model):
            roles = [m["role"] for m in body["messages"]]
            assert roles == ["user", "assistant", "user"]
        else:
            items = body["input"]
            assert [i.get("role") for i in items] == ["user", "assistant", "user"]

    def test_parallel_tool_calls(self, mock, anthropic_client, model, stream):
        mock.enqueue(Turn([Text("Checking."),
                           ToolCall("call_1", "get_weather", '{"city": "Paris"}', chunks=['{"ci', 'ty": "Pa', 'ris"}']),
                           ToolCall("call_2", "get_time", '{"tz": "CET"}', chunks=['{"tz"', ': "CET"}'])],
                          stop={"openai_chat_completions": "tool_calls", "openai_responses": "completed"},
                          interleave_tools=True))
        msg = create(anthropic_client, model, stream, tools=TOOLS, tool_choice={"type": "auto", "disable_parallel_tool_use": False})
        assert msg.stop_reason == "tool_use"
        calls = [b for b in msg.content if b.type == "tool_use"]
        assert [(c.id, c.name, c.input) for c in calls] == [("call_1", "get_weather", {"city": "Paris"}),
                                                            ("call_2", "get_time", {"tz": "CET"})]
        assert msg.content[0].type == "text" and msg.content[0].text == "Checking."
        body = sent(mock)
        assert body["parallel_tool_calls"] is True and body["tool_choice"] == "auto"
        if is_chat(model):
            assert body["tools"][0] == {"type": "function", "function": {
                "name": "get_weather", "description": "Weather for a city", "parameters": TOOLS[0]["input_schema"]}}
        else:
            assert body["tools"][0]["name"] == "get_weather" and body["tools"][0]["parameters"] == TOOLS[0]["input_schema"]

    def test_tool_results(self, mock, anthropic_client, model, stream):
        mock.enqueue(Turn([Text("It is sunny.")]))
        msg = create(anthropic_client, model, stream, tools=TOOLS, messages=[
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"},
                                         {"type": "text", "text": "thanks"}]}])
        assert msg.content[0].text == "It is sunny."
        body = sent(mock)
        if is_chat(model):
            m = body["messages"]
            assert m[1]["tool_calls"][0]["id"] == "call_1" and m[1]["tool_calls"][0]["function"]["name"] == "get_weather"
            assert m[2]["role"] == "tool" and m[2]["tool_call_id"] == "call_1"
            assert m[3]["role"] == "user"
        else:
            items = body["input"]
            fc = next(i for i in items if i.get("type") == "function_call")
            out = next(i for i in items if i.get("type") == "function_call_output")
            assert fc["call_id"] == "call_1" and out["call_id"] == "call_1"
            assert items.index(fc) < items.index(out)
            assert items[-1].get("role") == "user"

    def test_refusal(self, mock, anthropic_client, model, stream):
        mock.enqueue(Turn([Refusal("I can't help with that.")],
                          stop={"openai_chat_completions": "stop", "openai_responses": "completed"}))
        msg = create(anthropic_client, model, stream)
        assert msg.stop_reason == "refusal"
        assert [b.text for b in msg.content if b.type == "text"] == ["I can't help with that."]
        assert msg.stop_details is not None and msg.stop_details.type == "refusal"

    def test_max_tokens(self, mock, anthropic_client, model, stream):
        mock.enqueue(Turn([Text("cut")], stop={"openai_chat_completions": "length",
                                              "openai_responses": "incomplete:max_output_tokens"}))
        msg = create(anthropic_client, model, stream, max_tokens=5)
        assert msg.stop_reason == "max_tokens"

    def test_upstream_http_error(self, mock, anthropic_client, model, stream):
        mock.enqueue(Error(429, message="slow down"))
        with pytest.raises(anthropic.RateLimitError):
            create(anthropic_client, model, stream)
        assert sent(mock) is not None


@pytest.mark.parametrize("model", PROVIDERS)
def test_unrepresentable_request_is_rejected_before_upstream(mock, anthropic_client, model):
    with pytest.raises(anthropic.BadRequestError) as err:
        anthropic_client.messages.create(model=model, max_tokens=10, extra_body={"top_k": 5}, messages=[{"role": "user", "content": "x"}])
    assert mock.requests == []
    assert "top_k" in str(err.value)


STOPS = [
    # (provider model, native stop, Anthropic stop_reason)
    (CHAT_MODEL, "stop", "end_turn"),
    (CHAT_MODEL, "length", "max_tokens"),
    (CHAT_MODEL, "content_filter", "refusal"),
    (RESP_MODEL, "completed", "end_turn"),
    (RESP_MODEL, "incomplete:max_output_tokens", "max_tokens"),
    (RESP_MODEL, "incomplete:content_filter", "refusal"),
    (RESP_MODEL, "incomplete:max_messages", "max_tokens"),
]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("model,native,reason", STOPS)
def test_every_stop_reason(mock, anthropic_client, model, native, reason, stream):
    mock.enqueue(Turn([Text("t")], stop=native))
    msg = create(anthropic_client, model, stream)
    assert msg.stop_reason == reason
    assert sent(mock)["model"] in ("gpt-up", "resp-up")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_failed_responses_answer_is_an_error(mock, anthropic_client, stream):
    mock.enqueue(Turn([Text("t")], stop="failed"))
    with pytest.raises(anthropic.APIError):
        create(anthropic_client, RESP_MODEL, stream)
    assert sent(mock)["input"]


@pytest.mark.parametrize("model", PROVIDERS)
def test_mid_stream_error(mock, anthropic_client, model):
    mock.enqueue(Turn([Text("some text before the failure")], error_after=4,
                      error={"message": "upstream exploded", "type": "server_error", "code": "server_error"}))
    with pytest.raises(anthropic.APIError) as err:
        create(anthropic_client, model, stream=True)
    assert "exploded" in str(err.value) or "upstream" in str(err.value)
    assert sent(mock)["stream"] is True


@pytest.mark.parametrize("model", PROVIDERS)
def test_abrupt_disconnect(mock, anthropic_client, model):
    mock.enqueue(Turn([Text("partial answer that is long")], cut_after=3))
    # A cut after the first few events must never look like a normal completion.
    with pytest.raises(anthropic.APIError):
        create(anthropic_client, model, stream=True)


@pytest.mark.parametrize("model", PROVIDERS)
def test_streamed_usage_from_the_final_event(mock, anthropic_client, model):
    mock.enqueue(Turn([Text("ok")], usage=Usage(input_tokens=100, output_tokens=9, cached_tokens=40, cache_write_tokens=10,
                                               reasoning_tokens=2)))
    msg = create(anthropic_client, model, stream=True)
    assert (msg.usage.input_tokens, msg.usage.cache_read_input_tokens, msg.usage.cache_creation_input_tokens,
            msg.usage.output_tokens) == (50, 40, 10, 9)
    if is_chat(model):
        assert sent(mock)["stream_options"]["include_usage"] is True


class TestReasoningReplay:
    """Provider reasoning state goes to the client inside thinking signatures and
    redacted_thinking data, and comes back byte-identical on the next turn."""

    @pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
    def test_responses_encrypted_content_round_trip(self, mock, anthropic_client, stream):
        mock.enqueue(Turn([Reasoning("first thought", encrypted_content="ENC-1/+=="),
                           ToolCall("call_1", "get_weather", '{"city":"Oslo"}'),
                           RedactedReasoning("ENC-2-redacted"),
                           Reasoning("second thought", encrypted_content="ENC-3"),
                           ToolCall("call_2", "get_time", '{"tz":"CET"}')], stop="completed"))
        msg = create(anthropic_client, RESP_MODEL, stream, tools=TOOLS,
                     thinking={"type": "adaptive", "display": "summarized"})
        first = sent(mock)
        assert first["store"] is False and "reasoning.encrypted_content" in first["include"]
        kinds = [b.type for b in msg.content]
        assert kinds == ["thinking", "tool_use", "redacted_thinking", "thinking", "tool_use"]
        assert msg.content[0].thinking == "first thought" and msg.content[0].signature.startswith("pxc1.")
        assert msg.content[2].data.startswith("pxc1.")
        assert msg.stop_reason == "tool_use"

        mock.enqueue(Turn([Text("done")]))
        history = [b.model_dump(exclude_none=True) for b in msg.content]
        create(anthropic_client, RESP_MODEL, stream, tools=TOOLS, messages=[
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": history},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "cold"},
                                         {"type": "tool_result", "tool_use_id": "call_2", "content": "noon"}]}])
        items = sent(mock)["input"]
        replayed = [(i["type"], i.get("encrypted_content") or i.get("call_id")) for i in items
                    if i.get("type") in ("reasoning", "function_call")]
        assert replayed == [("reasoning", "ENC-1/+=="), ("function_call", "call_1"), ("reasoning", "ENC-2-redacted"),
                            ("reasoning", "ENC-3"), ("function_call", "call_2")]
        assert not any("pxc1." in str(i) for i in items)

    def test_edited_thinking_is_not_replayed(self, mock, anthropic_client):
        mock.enqueue(Turn([Reasoning("original", encrypted_content="ENC-X"), Text("a")]))
        msg = create(anthropic_client, RESP_MODEL)
        history = [b.model_dump(exclude_none=True) for b in msg.content]
        history[0]["thinking"] = "tampered"
        mock.enqueue(Turn([Text("b")]))
        create(anthropic_client, RESP_MODEL, messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": history},
                                                        {"role": "user", "content": "again"}])
        assert "ENC-X" not in str(sent(mock)["input"])

    @pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
    def test_chat_reasoning_content(self, mock, anthropic_client, stream):
        mock.enqueue(Turn([Reasoning("let me think", chunks=["let ", "me think"]), Text("answer")]))
        msg = create(anthropic_client, CHAT_MODEL, stream)
        assert msg.content[0].type == "thinking" and msg.content[0].thinking == "let me think"
        assert msg.content[0].signature == ""
        assert msg.content[1].text == "answer"

    def test_chat_reasoning_content_replayed_as_plain_text(self, mock, anthropic_client):
        # A Chat provider's reasoning has no opaque state: the client gets signature "",
        # and on replay the text goes back as reasoning_content (continuation.md: never
        # forged, but a Chat provider may take it), with no envelope anywhere.
        mock.enqueue(Turn([Reasoning("let me think"), ToolCall("call_1", "get_weather", '{"city":"Oslo"}')]))
        first = create(anthropic_client, CHAT_MODEL, tools=TOOLS)
        assert [b.type for b in first.content] == ["thinking", "tool_use"]
        mock.enqueue(Turn([Text("Sunny")]))
        create(anthropic_client, CHAT_MODEL, tools=TOOLS, messages=[
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"}]}])
        assistant = sent(mock)["messages"][1]
        assert assistant["role"] == "assistant" and assistant["reasoning_content"] == "let me think"
        assert assistant["tool_calls"][0]["id"] == "call_1"
        assert "pxc1." not in str(sent(mock))

    def test_foreign_signature_never_reaches_the_provider(self, mock, anthropic_client):
        mock.enqueue(Turn([Text("ok")]))
        create(anthropic_client, RESP_MODEL, messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "real-anthropic-signature"},
                                              {"type": "redacted_thinking", "data": "real-anthropic-data"},
                                              {"type": "text", "text": "x"}]},
            {"role": "user", "content": "more"}])
        body = str(sent(mock))
        assert "real-anthropic-signature" not in body and "real-anthropic-data" not in body


@pytest.mark.parametrize("field", ["max_completion_tokens", "max_tokens"])
def test_chat_provider_max_tokens_field_option(harness, start_proxy, mock, field):
    config = harness.default_config()
    config["providers"]["chat"]["max_tokens_field"] = field
    client = start_proxy(config).anthropic()
    mock.enqueue(Turn([Text("ok")]))
    client.messages.create(model=CHAT_MODEL, max_tokens=77, messages=[{"role": "user", "content": "hi"}])
    body = sent(mock)
    other = {"max_completion_tokens", "max_tokens"} - {field}
    assert body[field] == 77 and not other & set(body)

"""Fidelity details where the documentation and the wire must agree, end to end with the
official SDKs against the real server: what the provider received and what the client got.

- a Chat provider that repeats a tool call's name in later chunks (recorded traffic)
"""
from __future__ import annotations

import logging
from pathlib import Path

import anthropic
import openai
import pytest

from proxai.mock import Stream
from test_observability import LogCapture

CORPUS = Path(__file__).parent / "corpus"
# OpenRouter (Novita, kimi-k2): every chunk of the call carries function.name again.
REPEATED_NAME = CORPUS / "llm/openai_chat_completions/stream/test_tools_streaming_variant_a.0.sse"
HI = [{"role": "user", "content": "hi"}]
VERSION_TOOL = {"name": "llm_version", "description": "v", "input_schema": {"type": "object", "properties": {}}}


def sent(mock) -> dict:
    return mock.requests[-1].body


def chat_chunk(tool_call: dict | None = None, finish: str | None = None) -> dict:
    delta = {"tool_calls": [tool_call]} if tool_call else {}
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


# --- a tool call's name repeated in later chunks ----------------------------------------------


def test_recorded_stream_repeating_a_tool_name_gives_the_name_once(anthropic_client, mock):
    raw = REPEATED_NAME.read_bytes()
    assert raw.count(b'"name":"llm_version"') == 2  # the recorded quirk itself
    mock.enqueue(Stream(raw=[raw]))
    with LogCapture(level=logging.DEBUG) as cap:
        with anthropic_client.messages.stream(model="chat/kimi-k2", max_tokens=200, messages=HI, tools=[VERSION_TOOL],
                                              extra_headers={"x-request-id": "repeated-name"}) as stream:
            message = stream.get_final_message()
        lines = cap.lines_with("request_id=repeated-name", count=2)
    (call,) = [b for b in message.content if b.type == "tool_use"]
    assert (call.name, call.input) == ("llm_version", {})  # not "llm_versionllm_version"
    assert sent(mock)["tools"][0]["function"]["name"] == "llm_version"
    notes = [line for line in lines if "repeated a tool call's function.name" in line]
    assert len(notes) == 1, lines


def test_recorded_stream_repeating_a_tool_name_to_a_responses_client(openai_client, mock):
    mock.enqueue(Stream(raw=[REPEATED_NAME.read_bytes()]))
    events = list(openai_client.responses.create(model="chat/kimi-k2", input="hi", stream=True, tools=[
        {"type": "function", "name": "llm_version", "parameters": {"type": "object", "properties": {}}}]))
    added = [e.item.name for e in events if e.type == "response.output_item.added" and e.item.type == "function_call"]
    done = events[-1]
    assert added == ["llm_version"]
    assert [(i.name, i.arguments) for i in done.response.output if i.type == "function_call"] == [("llm_version", "{}")]


def test_a_tool_name_that_changes_mid_call_ends_the_stream_with_an_error(anthropic_client, mock):
    # A name split over chunks cannot be amended once the client has the call's start: the
    # stream fails rather than run a tool named by the first piece.
    mock.enqueue(Stream(events=[
        (None, chat_chunk({"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_", "arguments": ""}})),
        (None, chat_chunk({"index": 0, "function": {"name": "weather", "arguments": "{}"}})),
        (None, chat_chunk(finish="tool_calls")),
        (None, "[DONE]"),
    ]))
    with pytest.raises(anthropic.APIStatusError) as err:
        with anthropic_client.messages.stream(model="chat/m", max_tokens=50, messages=HI, tools=[VERSION_TOOL]) as stream:
            stream.get_final_message()
    assert "function.name" in str(err.value)

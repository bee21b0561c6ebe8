"""Recorded provider streams (tests/corpus) replayed by the mock upstream through the real
server, read by the official SDKs: what real Chat-compatible servers and the Responses
API send, and what each client gets from it."""
from __future__ import annotations

import json
from pathlib import Path

import anthropic
import openai
import pytest

from proxai.mock import Stream

CORPUS = Path(__file__).parent / "corpus"
AZURE = CORPUS / "vercel-ai/openai_chat_completions/stream/azure-model-router.1.sse"
# OpenRouter (Novita, kimi-k2): usage on a chunk that still has choices, no finish_reason, then [DONE].
OPENROUTER_TOOLS = CORPUS / "llm/openai_chat_completions/stream/test_tools_streaming_variant_a.0.sse"
QUOTA = CORPUS / "vercel-ai/openai_responses/stream/openai-error.1.sse"
HI = [{"role": "user", "content": "hi"}]


def replay(mock, path: Path) -> None:
    mock.enqueue(Stream(raw=[path.read_bytes()]))


def chunks(path: Path) -> list[dict]:
    return [json.loads(line[6:]) for line in path.read_text().splitlines()
            if line.startswith("data: ") and line != "data: [DONE]"]


def recorded_text(path: Path) -> str:
    return "".join((c.get("delta") or {}).get("content") or "" for ch in chunks(path) for c in ch["choices"])


def recorded_usage(path: Path) -> dict:
    return [ch["usage"] for ch in chunks(path) if ch.get("usage")][-1]


# --- 5. Azure: a leading filter-results chunk with an empty id ------------------------------


def test_azure_stream_to_anthropic_client(anthropic_client, mock):
    replay(mock, AZURE)
    with anthropic_client.messages.stream(model="chat/gpt-5-nano", max_tokens=200, messages=HI) as stream:
        text = "".join(stream.text_stream)
        message = stream.get_final_message()
    assert text == recorded_text(AZURE) and text.startswith("Capital")
    assert message.stop_reason == "end_turn"
    usage = recorded_usage(AZURE)
    assert (message.usage.input_tokens, message.usage.output_tokens) == (usage["prompt_tokens"], usage["completion_tokens"])
    assert mock.requests[-1].path == "/v1/chat/completions" and mock.requests[-1].body["stream"] is True


def test_azure_stream_to_responses_client(openai_client, mock):
    replay(mock, AZURE)
    events = list(openai_client.responses.create(model="chat/gpt-5-nano", input="hi", stream=True))
    done = events[-1]
    assert done.type == "response.completed"
    assert done.response.output_text == recorded_text(AZURE)
    assert done.response.id  # minted or the provider's: never empty
    assert mock.requests[-1].body["stream_options"] == {"include_usage": True}


# --- 6 + 7. OpenRouter: usage on a chunk with choices; [DONE] without finish_reason ----------


def test_openrouter_tool_stream_to_anthropic_client(anthropic_client, mock):
    replay(mock, OPENROUTER_TOOLS)
    tools = [{"name": "llm_version", "description": "v", "input_schema": {"type": "object", "properties": {}}}]
    with anthropic_client.messages.stream(model="chat/kimi-k2", max_tokens=200, messages=HI, tools=tools) as stream:
        message = stream.get_final_message()
    assert message.stop_reason == "tool_use"  # inferred: the provider sent no finish_reason
    (call,) = [b for b in message.content if b.type == "tool_use"]
    assert (call.name, call.input) == ("llm_version", {})
    usage = recorded_usage(OPENROUTER_TOOLS)
    assert (message.usage.input_tokens, message.usage.output_tokens) == (usage["prompt_tokens"], usage["completion_tokens"])
    sent = mock.requests[-1].body
    assert sent["tools"][0]["function"]["name"] == "llm_version"


def test_openrouter_tool_stream_to_responses_client(openai_client, mock):
    replay(mock, OPENROUTER_TOOLS)
    tools = [{"type": "function", "name": "llm_version", "parameters": {"type": "object", "properties": {}}}]
    events = list(openai_client.responses.create(model="chat/kimi-k2", input="hi", tools=tools, stream=True))
    done = events[-1]
    assert done.type == "response.completed"
    (call,) = [item for item in done.response.output if item.type == "function_call"]
    assert (call.name, json.loads(call.arguments)) == ("llm_version", {})
    usage = recorded_usage(OPENROUTER_TOOLS)
    assert done.response.usage.input_tokens == usage["prompt_tokens"]
    assert done.response.usage.output_tokens == usage["completion_tokens"]


@pytest.mark.parametrize("path", sorted((CORPUS / "llm/openai_chat_completions/stream").glob("*.sse")), ids=lambda p: p.stem)
def test_every_recorded_router_stream_reaches_an_anthropic_client_whole(anthropic_client, mock, path):
    replay(mock, path)
    with anthropic_client.messages.stream(model="chat/routed", max_tokens=200, messages=HI) as stream:
        message = stream.get_final_message()
    text = "".join(b.text for b in message.content if b.type == "text")
    assert text == recorded_text(path)
    calls = [b for b in message.content if b.type == "tool_use"]
    assert message.stop_reason == ("tool_use" if calls else "end_turn")
    usage = recorded_usage(path)
    assert message.usage.output_tokens == usage["completion_tokens"]


# --- 8. Responses error events nest their reason ---------------------------------------------


def test_quota_error_reaches_a_chat_client_with_its_reason(openai_client, mock):
    replay(mock, QUOTA)
    with pytest.raises(openai.APIError) as err:
        list(openai_client.chat.completions.create(model="responses/gpt-5-nano", messages=HI, stream=True))
    assert "You exceeded your current quota" in err.value.message
    assert err.value.code == "insufficient_quota"
    assert mock.requests[-1].path == "/v1/responses" and mock.requests[-1].body["stream"] is True


def test_quota_error_reaches_an_anthropic_client_with_its_reason(anthropic_client, mock):
    replay(mock, QUOTA)
    with pytest.raises(anthropic.APIStatusError) as err:
        with anthropic_client.messages.stream(model="responses/gpt-5-nano", max_tokens=50, messages=HI) as stream:
            stream.get_final_message()
    assert "You exceeded your current quota" in str(err.value)
    assert err.value.body["error"]["type"] == "rate_limit_error"  # 429: insufficient_quota's status


@pytest.mark.parametrize("path", [AZURE, OPENROUTER_TOOLS], ids=lambda p: p.stem)
def test_quirky_chat_streams_pass_through_to_a_chat_client_unchanged(openai_client, mock, path):
    replay(mock, path)
    chunks_seen = list(openai_client.chat.completions.create(model="chat/routed", messages=HI, stream=True,
                                                             stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks_seen if c.choices)
    assert text == recorded_text(path)
    assert [c.usage.completion_tokens for c in chunks_seen if c.usage] == [recorded_usage(path)["completion_tokens"]]

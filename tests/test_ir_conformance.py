"""Every decoder produces IR that conforms to schemas/ir.schema.json: the contract
that lets any decoder feed any encoder."""
import json
from pathlib import Path

import jsonschema
import orjson
import pytest

import engine
from engine.stream import StreamRun
from proxai.mock import Reasoning, RedactedReasoning, Refusal, Text, ToolCall, Turn, Usage, render

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "schemas" / "ir.schema.json").read_text())
PROTOCOLS = ["openai_chat_completions", "openai_responses", "anthropic_messages"]


def validator(name):
    return jsonschema.Draft202012Validator({"$schema": SCHEMA["$schema"], "$defs": SCHEMA["$defs"], "$ref": f"#/$defs/{name}"})


REQUEST, RESPONSE, EVENT = validator("request"), validator("response"), validator("event")

TURNS = {
    "text": Turn([Text("héllo 🎉")], usage=Usage(input_tokens=10, output_tokens=3, cached_tokens=4, cache_write_tokens=1)),
    "tools": Turn([Text("calling"), ToolCall("call_1", "get_weather", '{"city":"Oslo"}'), ToolCall("call_2", "get_time", "{}")],
                  interleave_tools=True),
    "reasoning": Turn([Reasoning("let me think", signature="sig-1", encrypted_content="enc-1"), Text("done")]),
    "redacted": Turn([RedactedReasoning("opaque-data"), Text("x")]),
    "refusal": Turn([Refusal("I can't help with that", explanation="policy")]),
    "max_tokens": Turn([Text("cut")], stop={"anthropic_messages": "max_tokens", "openai_chat_completions": "length",
                                             "openai_responses": "incomplete:max_output_tokens"}),
}

REQUESTS = {
    "openai_chat_completions": {
        "model": "m", "max_completion_tokens": 100, "stream": True, "stream_options": {"include_usage": True},
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi"},
                                         {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]},
            {"role": "assistant", "content": "calling", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "ok"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}],
        "tool_choice": "auto", "reasoning_effort": "low", "temperature": 0.5},
    "openai_responses": {
        "model": "m", "instructions": "be brief", "max_output_tokens": 100, "stream": True,
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "thought"}]},
            {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{\"a\":1}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "ok"}],
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}, "strict": None}],
        "reasoning": {"effort": "medium", "summary": "auto"}},
    "anthropic_messages": {
        "model": "m", "max_tokens": 100, "system": "be brief", "stream": True,
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "foreign"},
                                              {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok", "is_error": True},
                                         {"type": "text", "text": "and?"}]}],
        "tools": [{"name": "f", "input_schema": {"type": "object", "properties": {}}}],
        "tool_choice": {"type": "auto"}, "thinking": {"type": "enabled", "budget_tokens": 4000}},
}


@pytest.fixture(scope="module")
def eng():
    return engine.Engine.load()


def errors(validator, value):
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(value)]


@pytest.mark.parametrize("client", PROTOCOLS)
def test_request_decoders_produce_ir(eng, client):
    provider = next(p for p in PROTOCOLS if p != client)
    ctx = engine.Context(client, provider, provider_name="p", client_body=REQUESTS[client])
    ir = eng.decode_request(ctx, REQUESTS[client])
    assert errors(REQUEST, ir) == []
    assert any(p["type"] == "tool_result" for m in ir["messages"] for p in m["content"])


@pytest.mark.parametrize("turn", sorted(TURNS))
@pytest.mark.parametrize("provider", PROTOCOLS)
def test_response_decoders_produce_ir(eng, provider, turn):
    client = next(p for p in PROTOCOLS if p != provider)
    body = render(provider, TURNS[turn], {"model": "m"})
    ir = eng.decode_response(engine.Context(client, provider, provider_name="p"), body)
    assert errors(RESPONSE, ir) == []


@pytest.mark.parametrize("turn", sorted(TURNS))
@pytest.mark.parametrize("provider", PROTOCOLS)
def test_stream_decoders_produce_ir_events(eng, provider, turn):
    client = next(p for p in PROTOCOLS if p != provider)
    ctx = engine.Context(client, provider, provider_name="p", client_body={"model": "m", "stream": True})
    run = StreamRun(eng.streams[("stream.decode", provider)], ctx)
    seen = []
    for name, data in render(provider, TURNS[turn], {"model": "m", "stream": True}):
        payload = {"type": "[DONE]"} if data == "[DONE]" else (orjson.loads(data) if isinstance(data, str) else data)
        if name and isinstance(payload, dict) and "type" not in payload:
            payload["type"] = name
        for event in run.decode(payload):
            assert errors(EVENT, event) == [], event
            seen.append(event["type"])
    seen += [e["type"] for e in run.handle_eof()]
    assert seen[0] == "message_start" and seen.count("message_start") == 1
    assert seen[-1] == "message_stop" and seen.count("message_stop") == 1
    # every block that starts also stops
    assert seen.count("block_start") == seen.count("block_stop")

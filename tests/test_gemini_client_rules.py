"""The Gemini client rules on their own: request decoding to the IR, response and stream
encoding from it, without a server."""
from __future__ import annotations

import base64
import json

import orjson
import pytest

import engine
from engine import Context
from engine.hooks import continuation
from proxai.observability.capture import redact_target

GEMINI = "gemini_generate_content"


@pytest.fixture(scope="module")
def eng():
    return engine.Engine.load()


def ctx(provider="anthropic_messages"):
    return Context(client_protocol=GEMINI, provider_protocol=provider, provider_name="p", upstream_model="m",
                   client_body={})


def decode(eng, body, provider="anthropic_messages"):
    return eng.decode_request(ctx(provider), {"model": "m", "stream": False, **body})


def test_consecutive_model_turns_and_thoughts_merge(eng):
    c = ctx()
    envelope = continuation.pack(c, [{"k": "thinking", "s": "SIG", "h": continuation.digest("ab"), "l": 2}])
    sig = base64.urlsafe_b64encode(envelope.encode()).decode().rstrip("=")
    ir = decode(eng, {"contents": [
        {"role": "user", "parts": [{"text": "q"}]},
        {"role": "model", "parts": [{"text": "a", "thought": True}]},
        {"role": "model", "parts": [{"text": "b", "thought": True}]},
        {"role": "model", "parts": [{"text": "", "thought": True, "thoughtSignature": sig}]},
        {"role": "model", "parts": [{"text": "answer"}]},
        {"role": "user", "parts": [{"text": "next"}]}]})
    assistant = ir["messages"][1]
    assert [m["role"] for m in ir["messages"]] == ["user", "assistant", "user"]
    assert [(p["type"], p.get("text")) for p in assistant["content"]] == [("reasoning", "ab"), ("text", "answer")]
    assert assistant["content"][0]["opaque"]["signature"] == "SIG"


def test_changed_thought_text_drops_the_signature(eng):
    c = ctx()
    envelope = continuation.pack(c, [{"k": "thinking", "s": "SIG", "h": continuation.digest("original"), "l": 8}])
    sig = base64.b64encode(envelope.encode()).decode()
    ir = decode(eng, {"contents": [{"role": "user", "parts": [{"text": "q"}]},
                                   {"role": "model", "parts": [{"text": "edited", "thought": True, "thoughtSignature": sig}]},
                                   {"role": "user", "parts": [{"text": "n"}]}]})
    assert ir["messages"][1]["content"][0].get("opaque") is None


def test_parallel_same_name_calls_are_linked_in_order(eng):
    ir = decode(eng, {"contents": [
        {"role": "user", "parts": [{"text": "q"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"i": 1}}},
                                    {"functionCall": {"name": "g", "args": {}}},
                                    {"functionCall": {"name": "f", "args": {"i": 2}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"r": 1}}},
                                   {"functionResponse": {"name": "g", "response": {"r": "g"}}},
                                   {"functionResponse": {"name": "f", "response": {"r": 2}}}]}]})
    calls = ir["messages"][1]["content"]
    results = [m["content"][0] for m in ir["messages"][2:]]
    assert [json.loads(c["arguments"]) for c in calls] == [{"i": 1}, {}, {"i": 2}]
    assert [r["call_id"] for r in results] == [calls[0]["id"], calls[1]["id"], calls[2]["id"]]
    assert len({c["id"] for c in calls}) == 3
    assert [json.loads(r["content"][0]["text"]) for r in results] == [{"r": 1}, {"r": "g"}, {"r": 2}]


def test_an_unanswerable_function_response_names_the_field(eng):
    with pytest.raises(engine.InvalidRequest) as info:
        decode(eng, {"contents": [{"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]}]})
    assert info.value.param == "contents[0].parts[0].functionResponse.name"


def test_rejections_name_gemini_fields(eng):
    for body, param in (({"contents": []}, "contents"),
                        ({"contents": [{"parts": [{"text": "x"}]}], "cachedContent": "cachedContents/1"}, "cachedContent"),
                        ({"contents": [{"parts": [{"text": "x"}]}], "generationConfig": {"responseModalities": ["IMAGE"]}},
                         "generationConfig.responseModalities")):
        with pytest.raises(engine.InvalidRequest) as info:
            decode(eng, body)
        assert info.value.param == param


def test_tool_config_and_thinking(eng):
    tools = [{"functionDeclarations": [{"name": "f"}, {"name": "g"}]}, {"googleSearch": {}}]
    ir = decode(eng, {"contents": [{"parts": [{"text": "x"}]}], "tools": tools,
                      "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["g"]}},
                      "generationConfig": {"thinkingConfig": {"thinkingLevel": "HIGH", "includeThoughts": True}}})
    assert ir["tool_choice"] == {"type": "tool", "name": "g"}
    assert [t["type"] for t in ir["tools"]] == ["function", "function", "hosted"]
    assert ir["tools"][2]["hosted_type"] == "googleSearch"
    assert ir["reasoning"] == {"effort": "high", "summary": "auto"}
    ir = decode(eng, {"contents": [{"parts": [{"text": "x"}]}], "tools": tools,
                      "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["f", "g"]}},
                      "generationConfig": {"thinkingConfig": {"thinkingBudget": 0}}})
    assert ir["tool_choice"] == {"type": "required", "allowed": ["f", "g"]}
    assert ir["reasoning"]["effort"] == "none"


def test_response_encoding(eng):
    c = ctx()
    ir = {"id": "msg_1", "model": "claude", "stop": "tool_use",
          "content": [{"type": "reasoning", "text": "hm", "opaque": {"protocol": "anthropic_messages", "provider": "p",
                                                                      "signature": "S"}},
                      {"type": "text", "text": "ok"},
                      {"type": "tool_call", "id": "toolu_1", "name": "f", "arguments": "{\"a\":1}"}],
          "usage": {"input_tokens": 10, "cached_tokens": 4, "output_tokens": 6, "reasoning_tokens": 2}}
    out = eng.encode_response(c, ir)
    cand = out["candidates"][0]
    parts = cand["content"]["parts"]
    # The reasoning state rides on the first part after the reasoning (here the text).
    assert parts[0] == {"text": "hm", "thought": True}
    assert base64.b64decode(parts[1].pop("thoughtSignature")).startswith(b"pxc1.")
    assert parts[1] == {"text": "ok"} and parts[2] == {"functionCall": {"id": "toolu_1", "name": "f", "args": {"a": 1}}}
    assert cand["finishReason"] == "STOP"
    assert out["usageMetadata"] == {"promptTokenCount": 10, "cachedContentTokenCount": 4, "candidatesTokenCount": 4,
                                    "thoughtsTokenCount": 2, "totalTokenCount": 16}
    assert out["modelVersion"] == "claude" and out["responseId"] == "msg_1"


def test_every_ir_stop_has_a_finish_reason(eng):
    table = eng.tables["ir.stop->gemini_generate_content.finish_reason"]
    for stop in eng.enums["ir.stop"]:
        assert table.lookup(stop)


def test_stream_encoding_holds_calls_until_whole(eng):
    c = ctx()
    translator = eng.open_stream(Context(client_protocol=GEMINI, provider_protocol="anthropic_messages",
                                         provider_name="p", upstream_model="m", client_body={}))
    wire = translator.push([
        {"type": "message_start", "id": "m1", "model": "claude", "usage": {"input_tokens": 5}},
        {"type": "block_start", "index": 0, "kind": "text", "text": "hé"},
        {"type": "block_delta", "index": 0, "kind": "text", "delta": "llo"},
        {"type": "block_stop", "index": 0},
        {"type": "block_start", "index": 1, "kind": "tool_call", "id": "t1", "name": "f"},
        {"type": "block_delta", "index": 1, "kind": "tool_call", "delta": "{\"a\""},
        {"type": "block_delta", "index": 1, "kind": "tool_call", "delta": ": 1}"},
        {"type": "block_stop", "index": 1},
        {"type": "message_stop", "stop": "tool_use", "usage": {"input_tokens": 5, "output_tokens": 3}},
    ])
    chunks = [orjson.loads(w[len(b"data: "):]) for w in wire]
    assert all(w.startswith(b"data: ") and w.endswith(b"\n\n") and b"event:" not in w for w in wire)
    parts = [p for ch in chunks for p in ch["candidates"][0]["content"]["parts"]]
    assert parts[:3] == [{"text": "hé"}, {"text": "llo"}, {"functionCall": {"id": "t1", "name": "f", "args": {"a": 1}}}]
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    assert chunks[-1]["usageMetadata"]["totalTokenCount"] == 8
    assert all("finishReason" not in ch["candidates"][0] for ch in chunks[:-1])
    assert chunks[0]["usageMetadata"]["promptTokenCount"] == 5  # cumulative from the start


def test_openapi_schema_to_json_schema(eng):
    from engine.hooks.gemini_client import json_schema

    schema = {"type": "OBJECT", "properties": {"tags": {"type": "ARRAY", "items": {"type": "STRING"}, "max_items": "3"},
                                               "kind": {"type": "STRING", "enum": ["a", "b"], "nullable": True}},
              "required": ["tags"], "propertyOrdering": ["tags", "kind"]}
    assert json_schema(None, schema=schema) == {
        "type": "object", "required": ["tags"],
        "properties": {"tags": {"type": "array", "items": {"type": "string"}, "maxItems": "3"},
                       "kind": {"type": ["string", "null"], "enum": ["a", "b"]}}}


def test_capture_start_lines_redact_the_key_parameter():
    line = "POST /v1beta/models/x:streamGenerateContent?alt=sse&key=SECRET HTTP/1.1"
    assert redact_target(line) == "POST /v1beta/models/x:streamGenerateContent?alt=sse&key=[redacted] HTTP/1.1"
    assert redact_target("POST /v1/messages HTTP/1.1") == "POST /v1/messages HTTP/1.1"
    assert redact_target("HTTP/1.1 200 OK") == "HTTP/1.1 200 OK"


def test_every_generation_config_field_is_decided():
    """Each GenerationConfig field the SDK types (camelCase on the wire) is mapped, advisory
    or rejected in the request decoder, so a field a new SDK adds fails here until decided."""
    from pathlib import Path

    from google.genai import types
    from pydantic.alias_generators import to_camel

    text = (Path(__file__).resolve().parent.parent / "rules" / GEMINI / "request.decode.yaml").read_text(encoding="utf-8")
    missing = [name for name in map(to_camel, types.GenerationConfig.model_fields)
               if f"generationConfig.{name}" not in text]
    assert not missing

"""The Gemini provider's rule files at engine level (no network): IR requests encoded
for Gemini, Gemini responses and chunk streams decoded to the IR. Every Gemini payload
here validates as google.genai.types'."""
from __future__ import annotations

import jsonschema
import pytest

import engine
from engine.ruleset import SCHEMAS
from engine.stream import StreamRun
from gemini_helpers import check_request, check_response

G = "gemini_generate_content"
CHAT = "openai_chat_completions"

IR_EVENT = jsonschema.Draft202012Validator(
    {**__import__("json").loads((SCHEMAS / "ir.schema.json").read_text()), "$ref": "#/$defs/event"})


@pytest.fixture(scope="module")
def eng():
    return engine.Engine.load()


def ctx(**kw):
    return engine.Context(client_protocol=CHAT, provider_protocol=G, provider_name="gm", **kw)


def encode(eng, ir, **kw):
    c = ctx(**kw)
    out = eng.encode_request(c, ir)
    check_request(out)
    return out, c


SIGNED = {"protocol": G, "provider": "gm"}


def test_signature_markers_go_onto_the_next_part_and_trail_as_empty_text(eng):
    ir = {"model": "m", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [
            {"type": "reasoning", "text": None, "opaque": {**SIGNED, "data": "QUFB"}},
            {"type": "text", "text": "one"},
            {"type": "reasoning", "text": None, "opaque": {**SIGNED, "data": "QkJC"}},
            {"type": "reasoning", "text": None, "opaque": {**SIGNED, "data": "Q0ND"}},
        ]}]}
    out, _ = encode(eng, ir)
    assert out["contents"][1]["parts"] == [
        {"text": "one", "thoughtSignature": "QUFB"},
        {"text": "", "thoughtSignature": "QkJC"},
        {"text": "", "thoughtSignature": "Q0ND"}]


def test_signatures_of_another_provider_or_family_are_left_out(eng):
    ir = {"model": "m", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [
            {"type": "reasoning", "text": "a", "opaque": {"protocol": G, "provider": "other", "signature": "QUFB"}},
            {"type": "reasoning", "text": "b", "opaque": {"protocol": "anthropic_messages", "provider": "gm", "signature": "QkJC"}},
            {"type": "text", "text": "answer"}]}]}
    out, c = encode(eng, ir)
    assert out["contents"][1]["parts"] == [{"text": "answer"}]
    assert sum("dropped for gemini_generate_content/gm" in t for t in c.traces) == 2


def test_same_role_contents_merge_and_empty_ones_go(eng):
    ir = {"model": "m", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "a"}]},
        {"role": "assistant", "content": [{"type": "text", "text": ""}]},
        {"role": "user", "content": [{"type": "text", "text": "b"}]}]}
    out, _ = encode(eng, ir)
    assert out["contents"] == [{"role": "user", "parts": [{"text": "a"}, {"text": "b"}]}]


def test_allowed_tools_subset(eng):
    tools = [{"type": "function", "name": n, "parameters": {"type": "object"}} for n in ("a", "b")]
    out, _ = encode(eng, {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}],
                          "tools": tools, "tool_choice": {"type": "auto", "allowed": ["a"]}})
    assert out["toolConfig"] == {"functionCallingConfig": {"mode": "VALIDATED", "allowedFunctionNames": ["a"]}}


def test_response_calls_without_ids_get_stable_minted_ids(eng):
    body = {"candidates": [{"content": {"role": "model", "parts": [
        {"functionCall": {"name": "f", "args": {"x": 1}}, "thoughtSignature": "U0lH"},
        {"functionCall": {"id": "own", "name": "f", "args": {}}},
        {"functionCall": {"name": "g"}}]}, "finishReason": "STOP"}], "responseId": "r/1 x"}
    check_response(body)
    ir = eng.decode_response(ctx(), body)
    assert [(p["type"], p.get("id")) for p in ir["content"]] == [
        ("reasoning", None), ("tool_call", "gcall_r1x_0"), ("tool_call", "own"), ("tool_call", "gcall_r1x_2")]
    assert ir["content"][0]["opaque"] == {**SIGNED, "data": "U0lH"}
    assert ir["content"][3]["arguments"] == "{}" and ir["stop"] == "tool_use"


def test_unexpected_parts_are_upstream_errors(eng):
    body = {"candidates": [{"content": {"role": "model", "parts": [{"executableCode": {"code": "1", "language": "PYTHON"}}]},
                            "finishReason": "STOP"}]}
    check_response(body)
    with pytest.raises(engine.UpstreamProtocolError, match="unexpected part"):
        eng.decode_response(ctx(), body)
    with pytest.raises(engine.UpstreamProtocolError, match="no finishReason"):
        eng.decode_response(ctx(), {"candidates": [{"content": {"role": "model", "parts": [{"text": "x"}]}}]})


def run(eng, chunks, **kw):
    r = StreamRun(eng.streams[("stream.decode", G)], ctx(**kw))
    out = []
    for chunk in chunks:
        if "error" not in chunk:
            check_response(chunk)
        out.extend(r.decode(chunk))
    out.extend(r.handle_eof() if not any(e["type"] in ("message_stop", "error") for e in out) else [])
    for ev in out:
        IR_EVENT.validate(ev)
    return out


def chunk(*parts, finish=None, usage=None, **extra):
    candidate = {"content": {"role": "model", "parts": list(parts)}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    out = {"candidates": [candidate], "responseId": "rid", "modelVersion": "gemini-x", **extra}
    if usage:
        out["usageMetadata"] = usage
    return out


def test_stream_blocks_text_thoughts_and_several_calls_in_one_chunk(eng):
    events = run(eng, [
        chunk({"text": "Let me ", "thought": True}),
        chunk({"text": "see.", "thought": True, "thoughtSignature": "VEhP"}),
        chunk({"text": "Two calls: "}, {"functionCall": {"name": "f", "args": {"a": 1}}, "thoughtSignature": "Rg=="},
              {"functionCall": {"name": "f", "args": {"a": 2}}},
              usage={"promptTokenCount": 9, "candidatesTokenCount": 1, "totalTokenCount": 10}),
        chunk(finish="STOP", usage={"promptTokenCount": 9, "candidatesTokenCount": 6, "thoughtsTokenCount": 4,
                                    "cachedContentTokenCount": 3, "totalTokenCount": 19}),
    ])
    kinds = [(e["type"], e.get("index"), e.get("kind")) for e in events]
    assert kinds == [
        ("message_start", None, None),
        ("block_start", 0, "reasoning"), ("block_delta", 0, "reasoning"), ("block_delta", 0, "reasoning"),
        ("block_opaque", 0, None), ("block_stop", 0, None),
        ("block_start", 1, "text"), ("block_delta", 1, "text"), ("block_stop", 1, None),
        ("block_start", 2, "redacted_reasoning"), ("block_stop", 2, None),
        ("block_start", 3, "tool_call"), ("block_delta", 3, "tool_call"), ("block_stop", 3, None),
        ("block_start", 4, "tool_call"), ("block_delta", 4, "tool_call"), ("block_stop", 4, None),
        ("message_stop", None, None)]
    assert events[4]["opaque"] == {**SIGNED, "signature": "VEhP"}
    assert events[9]["opaque"] == {**SIGNED, "data": "Rg=="}
    assert [e["id"] for e in events if e["type"] == "block_start" and e["kind"] == "tool_call"] == ["gcall_rid_0", "gcall_rid_1"]
    assert events[-1] == {"type": "message_stop", "stop": "tool_use",
                          "usage": {"input_tokens": 9, "cached_tokens": 3, "output_tokens": 10, "reasoning_tokens": 4}}


def test_stream_without_finish_reason_fails_at_eof(eng):
    events = run(eng, [chunk({"text": "partial"})])
    assert events[-1]["type"] == "error" and "finishReason" in events[-1]["message"]


def test_stream_error_chunk_keeps_status(eng):
    events = run(eng, [chunk({"text": "a"}), {"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}}])
    assert events[-1] == {"type": "error", "status": 429, "error_type": "RESOURCE_EXHAUSTED", "message": "quota"}


def test_stream_blocked_prompt(eng):
    events = run(eng, [{"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 4, "totalTokenCount": 4},
                        "responseId": "b"}])
    assert events[-1]["stop"] == "refusal" and events[-1]["stop_details"]["category"] == "general_harms"


def test_stream_failure_finish_is_an_error(eng):
    events = run(eng, [chunk(finish="MALFORMED_FUNCTION_CALL")])
    assert events[-1]["type"] == "error" and events[-1]["code"] == "MALFORMED_FUNCTION_CALL"

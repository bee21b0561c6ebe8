"""The Anthropic Messages codec, direction by direction, at engine level (no network).

Each test drives one rule file through the engine: a client request decoded to
the IR, an IR request encoded for an Anthropic provider, provider responses and
streams decoded, IR responses and events encoded for an Anthropic client.
"""
from __future__ import annotations

import copy

import orjson
import pytest
from pydantic import TypeAdapter

import engine
from ir_helpers import strip_paths
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message, RawMessageStreamEvent
from engine.hooks import continuation
from engine.stream import StreamRun, StreamTranslator

A = "anthropic_messages"
CHAT = "openai_chat_completions"
RESP = "openai_responses"


@pytest.fixture(scope="module")
def eng():
    return engine.Engine.load()


def ctx(client=A, provider=CHAT, body=None, name="p", **kw):
    return engine.Context(client_protocol=client, provider_protocol=provider, provider_name=name, client_body=body, **kw)




def decode(eng, body, provider=CHAT, **kw):
    c = ctx(A, provider, body=body, **kw)
    return strip_paths(eng.decode_request(c, copy.deepcopy(body))), c


def encode(eng, ir, client=CHAT, **kw):
    c = ctx(client, A, **kw)
    return eng.encode_request(c, copy.deepcopy(ir)), c


def base(**extra):
    return {"model": "claude", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}], **extra}


def ir_base(**extra):
    return {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], **extra}


# =============================================================================
# request.decode: Anthropic client -> IR
# =============================================================================


class TestRequestDecode:
    def test_scalars(self, eng):
        body = base(stream=True, temperature=0.5, top_p=0.9, top_k=3, stop_sequences=["X"],
                    metadata={"user_id": "u1"}, service_tier="standard_only")
        ir, _ = decode(eng, body)
        assert ir["model"] == "claude" and ir["stream"] is True
        assert ir["max_output_tokens"] == 64
        assert (ir["temperature"], ir["top_p"], ir["top_k"]) == (0.5, 0.9, 3)
        assert ir["stop"] == ["X"]
        assert ir["user"] == "u1"
        assert ir["service_tier"] == "default"
        assert ir["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]

    def test_service_tier_auto(self, eng):
        assert decode(eng, base(service_tier="auto"))[0]["service_tier"] == "auto"

    def test_system_string_and_blocks(self, eng):
        assert decode(eng, base(system="be brief"))[0]["system"] == [{"type": "text", "text": "be brief"}]
        ir, c = decode(eng, base(system=[{"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}},
                                         {"type": "text", "text": "b"}]))
        assert ir["system"] == [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
        assert any("system[0].cache_control" in t for t in c.traces)

    def test_system_message_in_place(self, eng):
        body = base(messages=[{"role": "user", "content": "a"}, {"role": "system", "content": "rule"},
                              {"role": "user", "content": "b"}])
        ir, _ = decode(eng, body)
        assert [m["role"] for m in ir["messages"]] == ["user", "system", "user"]
        assert ir["messages"][1]["content"] == [{"type": "text", "text": "rule"}]

    def test_user_parts(self, eng):
        content = [
            {"type": "text", "text": "look"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAA"}},
            {"type": "image", "source": {"type": "url", "url": "https://x/i.png"}},
            {"type": "image", "source": {"type": "file", "file_id": "file_1"}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "PDF"}, "title": "a.pdf"},
            {"type": "document", "source": {"type": "url", "url": "https://x/d.pdf"}},
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "plain"}},
            {"type": "search_result", "source": "s", "title": "t", "content": []},
        ]
        ir, _ = decode(eng, base(messages=[{"role": "user", "content": content}]))
        assert ir["messages"][0]["content"] == [
            {"type": "text", "text": "look"},
            {"type": "image", "source": "base64", "media_type": "image/png", "data": "AAA"},
            {"type": "image", "source": "url", "url": "https://x/i.png"},
            {"type": "image", "source": "file", "file_id": "file_1"},
            {"type": "document", "source": "base64", "media_type": "application/pdf", "data": "PDF", "filename": "a.pdf"},
            {"type": "document", "source": "url", "url": "https://x/d.pdf"},
            {"type": "document", "source": "text", "media_type": "text/plain", "data": "plain"},
            {"type": "unsupported", "what": "search_result"},
        ]

    def test_paths_name_client_fields(self, eng):
        body = base(messages=[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                              {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"},
                                                           {"type": "text", "text": "x"}]}])
        ir = eng.decode_request(ctx(body=body), copy.deepcopy(body))
        assert [m["_path"] for m in ir["messages"]] == ["messages[0]", "messages[1]", "messages[2].content[0]", "messages[2]"]
        assert ir["messages"][3]["content"][0]["_path"] == "messages[2].content[1]"

    def test_tool_results_split_user_turn(self, eng):
        turn = {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "42"},
            {"type": "text", "text": "and then"},
            {"type": "tool_result", "tool_use_id": "t2", "is_error": True,
             "content": [{"type": "text", "text": "boom"}, {"type": "image", "source": {"type": "url", "url": "u"}}]},
            {"type": "tool_result", "tool_use_id": "t3"},
        ]}
        ir, _ = decode(eng, base(messages=[turn]))
        assert ir["messages"] == [
            {"role": "tool", "content": [{"type": "tool_result", "call_id": "t1", "content": [{"type": "text", "text": "42"}]}]},
            {"role": "tool", "content": [{"type": "tool_result", "call_id": "t2", "is_error": True, "content": [
                {"type": "text", "text": "boom"}, {"type": "image", "source": "url", "url": "u"}]}]},
            {"role": "tool", "content": [{"type": "tool_result", "call_id": "t3", "content": []}]},
            {"role": "user", "content": [{"type": "text", "text": "and then"}]},
        ]

    def test_only_tool_results_gives_no_user_message(self, eng):
        ir, _ = decode(eng, base(messages=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}]))
        assert [m["role"] for m in ir["messages"]] == ["tool"]

    def test_assistant_blocks(self, eng):
        turn = {"role": "assistant", "content": [
            {"type": "text", "text": "calling", "citations": [
                {"type": "web_search_result_location", "url": "https://w", "title": "W", "cited_text": "c", "encrypted_index": "e"},
                {"type": "char_location", "cited_text": "c", "document_index": 0, "start_char_index": 0, "end_char_index": 1}]},
            {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"city": "Zürich", "n": 1}},
        ]}
        ir, _ = decode(eng, base(messages=[{"role": "user", "content": "q"}, turn]))
        assert ir["messages"][1] == {"role": "assistant", "content": [
            {"type": "text", "text": "calling", "annotations": [
                {"type": "url_citation", "url": "https://w", "title": "W", "start_index": 0, "end_index": 7}]},
            {"type": "tool_call", "id": "toolu_1", "name": "f", "arguments": '{"city":"Zürich","n":1}'},
        ]}

    def test_assistant_string_content(self, eng):
        ir, _ = decode(eng, base(messages=[{"role": "assistant", "content": "prefill"}]))
        assert ir["messages"] == [{"role": "assistant", "content": [{"type": "text", "text": "prefill"}]}]

    def test_foreign_thinking_is_plain_reasoning(self, eng):
        turn = {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "anthropic-sig"},
                                                 {"type": "redacted_thinking", "data": "anthropic-data"},
                                                 {"type": "text", "text": "x"}]}
        ir, c = decode(eng, base(messages=[turn]))
        assert ir["messages"][0]["content"] == [{"type": "reasoning", "text": "hm"}, {"type": "text", "text": "x"}]
        assert c.traces.count("foreign reasoning state skipped") == 2

    def test_envelopes_unwrap(self, eng):
        c0 = ctx(A, RESP, name="up")
        scope = type("S", (), {"ctx": c0})
        opaque = {"protocol": RESP, "provider": "up", "encrypted_content": "ENC", "id": "rs_1", "summary_lengths": None}
        signed = continuation.wrap(scope, {"type": "reasoning", "text": "why", "opaque": opaque})
        redacted = continuation.wrap(scope, {"type": "reasoning", "opaque": {"protocol": RESP, "provider": "up", "encrypted_content": "E2", "id": None}})
        turn = {"role": "assistant", "content": [{"type": "thinking", "thinking": "why", "signature": signed},
                                                 {"type": "redacted_thinking", "data": redacted}]}
        ir, _ = decode(eng, base(messages=[turn]), provider=RESP, name="up")
        parts = ir["messages"][0]["content"]
        assert parts[0] == {"type": "reasoning", "text": "why", "opaque": opaque}
        assert parts[1]["opaque"]["encrypted_content"] == "E2" and "text" not in parts[1]

    def test_envelope_with_changed_text_is_dropped(self, eng):
        c0 = ctx(A, RESP, name="up")
        scope = type("S", (), {"ctx": c0})
        signed = continuation.wrap(scope, {"type": "reasoning", "text": "why", "opaque": {"protocol": RESP, "provider": "up", "encrypted_content": "E"}})
        ir, c = decode(eng, base(messages=[{"role": "assistant", "content": [{"type": "thinking", "thinking": "edited", "signature": signed}]}]),
                       provider=RESP, name="up")
        assert ir["messages"][0]["content"] == [{"type": "reasoning", "text": "edited"}]
        assert any("changed" in t for t in c.traces)

    def test_tools(self, eng):
        tools = [{"name": "f", "description": "d", "input_schema": {"type": "object", "properties": {"a": {"type": "string"}}},
                  "strict": True, "cache_control": {"type": "ephemeral"}, "eager_input_streaming": True},
                 {"type": "custom", "name": "g", "input_schema": {"type": "object"}, "allowed_callers": ["direct"]},
                 {"type": "web_search_20250305", "name": "web_search"}]
        ir, c = decode(eng, base(tools=tools))
        assert ir["tools"] == [
            {"type": "function", "name": "f", "description": "d", "parameters": tools[0]["input_schema"], "strict": True},
            {"type": "function", "name": "g", "parameters": {"type": "object"}},
            {"type": "hosted", "name": "web_search", "hosted_type": "web_search_20250305"},
        ]
        assert {"tools[0].cache_control", "tools[0].eager_input_streaming"} <= {t.split()[3] for t in c.traces if t.startswith("dropped")}

    @pytest.mark.parametrize("extra,param", [
        ({"input_examples": [{"a": 1}]}, "tools[0].input_examples"),
        ({"allowed_callers": ["code_execution_20250825"]}, "tools[0].allowed_callers"),
    ])
    def test_tool_extras_rejected(self, eng, extra, param):
        with pytest.raises(engine.InvalidRequest) as err:
            decode(eng, base(tools=[{"name": "f", "input_schema": {"type": "object"}, **extra}]))
        assert err.value.param == param

    @pytest.mark.parametrize("choice,ir_choice,parallel", [
        ({"type": "auto"}, {"type": "auto"}, None),
        ({"type": "any"}, {"type": "required"}, None),
        ({"type": "none"}, {"type": "none"}, None),
        ({"type": "tool", "name": "f"}, {"type": "tool", "name": "f"}, None),
        ({"type": "auto", "disable_parallel_tool_use": True}, {"type": "auto"}, False),
        ({"type": "any", "disable_parallel_tool_use": False}, {"type": "required"}, True),
    ])
    def test_tool_choice(self, eng, choice, ir_choice, parallel):
        ir, _ = decode(eng, base(tool_choice=choice))
        assert ir["tool_choice"] == ir_choice
        assert ir.get("parallel_tool_calls") == parallel

    @pytest.mark.parametrize("thinking,effort", [
        ({"type": "enabled", "budget_tokens": 1024}, "low"),
        ({"type": "enabled", "budget_tokens": 2048}, "medium"),
        ({"type": "enabled", "budget_tokens": 8191}, "medium"),
        ({"type": "enabled", "budget_tokens": 8192}, "high"),
        ({"type": "enabled", "budget_tokens": 32768}, "xhigh"),
        ({"type": "disabled"}, "none"),
        ({"type": "adaptive"}, None),
        ({"type": "between_tools"}, None),
    ])
    def test_thinking_to_effort(self, eng, thinking, effort):
        ir, _ = decode(eng, base(thinking=thinking))
        assert ir["reasoning"].get("effort") == effort
        assert ir["reasoning"]["thinking"] == thinking

    def test_output_effort_wins_over_budget(self, eng):
        ir, c = decode(eng, base(thinking={"type": "enabled", "budget_tokens": 40000}, output_config={"effort": "low"}))
        assert ir["reasoning"]["effort"] == "low"
        assert any("budget_tokens ignored" in t for t in c.traces)

    def test_display(self, eng):
        ir, _ = decode(eng, base(thinking={"type": "adaptive", "display": "summarized"}))
        assert ir["reasoning"]["summary"] == "auto"
        ir, _ = decode(eng, base(thinking={"type": "adaptive", "display": "omitted"}))
        assert "summary" not in ir["reasoning"]

    def test_no_reasoning_without_thinking(self, eng):
        assert "reasoning" not in decode(eng, base())[0]

    def test_output_format(self, eng):
        schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
        ir, _ = decode(eng, base(output_config={"format": {"type": "json_schema", "schema": schema}}))
        assert ir["response_format"] == {"type": "json_schema", "name": "output", "schema": schema, "strict": True}

    def test_advisory_top_level(self, eng):
        ir, c = decode(eng, base(cache_control={"type": "ephemeral"}, inference_geo="us"))
        assert "cache_control" not in ir
        assert any("cache_control" in t for t in c.traces) and any("inference_geo" in t for t in c.traces)
        assert not any("ephemeral" in t or "us" == t for t in c.traces)

    def test_unknown_role_rejected(self, eng):
        with pytest.raises(engine.InvalidRequest) as err:
            decode(eng, base(messages=[{"role": "robot", "content": "x"}]))
        assert err.value.param == "messages[0]"

    def test_unknown_tool_choice_rejected(self, eng):
        with pytest.raises(engine.InvalidRequest):
            decode(eng, base(tool_choice={"type": "sometimes"}))


# =============================================================================
# request.encode: IR -> Anthropic provider
# =============================================================================


class TestRequestEncode:
    def test_minimal(self, eng):
        out, _ = encode(eng, ir_base())
        assert out == {"model": "m", "max_tokens": engine.DEFAULT_MAX_TOKENS,
                       "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}

    def test_max_tokens_and_model(self, eng):
        out, _ = encode(eng, ir_base(max_output_tokens=77, stream=True), upstream_model="claude-x")
        assert (out["max_tokens"], out["model"], out["stream"]) == (77, "claude-x", True)
        out, _ = encode(eng, ir_base(), max_tokens_default=999)
        assert out["max_tokens"] == 999

    def test_system_gathered_in_order(self, eng):
        ir = ir_base(system=[{"type": "text", "text": "top"}], messages=[
            {"role": "system", "content": [{"type": "text", "text": "s1"}]},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "developer", "content": [{"type": "text", "text": "d1"}, {"type": "text", "text": "d2"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "yo"}]},
        ])
        out, _ = encode(eng, ir)
        assert out["system"] == [{"type": "text", "text": t} for t in ("top", "s1", "d1", "d2")]
        assert [m["role"] for m in out["messages"]] == ["user", "assistant"]

    def test_single_system_block_is_a_string(self, eng):
        out, _ = encode(eng, ir_base(messages=[{"role": "developer", "content": [{"type": "text", "text": "only"}]},
                                               {"role": "user", "content": [{"type": "text", "text": "hi"}]}]))
        assert out["system"] == "only"

    def test_non_text_system_part_rejected(self, eng):
        ir = ir_base(messages=[{"role": "system", "_path": "input[0]", "content": [
            {"type": "image", "source": "url", "url": "u", "_path": "input[0].content[0]"}]}])
        with pytest.raises(engine.InvalidRequest) as err:
            encode(eng, ir)
        assert err.value.param == "input[0].content[0]"

    def test_tool_results_merge_with_following_user(self, eng):
        ir = ir_base(messages=[
            {"role": "user", "content": [{"type": "text", "text": "go"}]},
            {"role": "assistant", "content": [{"type": "tool_call", "id": "c1", "name": "f", "arguments": "{}"},
                                              {"type": "tool_call", "id": "c2", "name": "f", "arguments": ""}]},
            {"role": "tool", "content": [{"type": "tool_result", "call_id": "c1", "content": [{"type": "text", "text": "1"}]}]},
            {"role": "tool", "content": [{"type": "tool_result", "call_id": "c2", "content": [{"type": "text", "text": ""}]}]},
            {"role": "user", "content": [{"type": "text", "text": "next"}]},
            {"role": "user", "content": [{"type": "text", "text": "more"}]},
        ])
        out, _ = encode(eng, ir)
        assert out["messages"] == [
            {"role": "user", "content": [{"type": "text", "text": "go"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "f", "input": {}},
                                              {"type": "tool_use", "id": "c2", "name": "f", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": [{"type": "text", "text": "1"}]},
                {"type": "tool_result", "tool_use_id": "c2", "content": []},
                {"type": "text", "text": "next"}, {"type": "text", "text": "more"}]},
        ]

    def test_tool_result_blocks_lead_merged_user_turn(self, eng):
        ir = ir_base(messages=[{"role": "user", "content": [{"type": "text", "text": "a"}]},
                               {"role": "tool", "content": [{"type": "tool_result", "call_id": "c", "content": [], "is_error": True}]}])
        out, _ = encode(eng, ir)
        assert out["messages"] == [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c", "content": [], "is_error": True}, {"type": "text", "text": "a"}]}]

    def test_tool_result_without_call_id(self, eng):
        ir = ir_base(messages=[{"role": "tool", "_path": "input[1]", "content": [
            {"type": "tool_result", "content": [], "_path": "input[1]"}]}])
        with pytest.raises(engine.InvalidRequest) as err:
            encode(eng, ir)
        assert err.value.param == "input[1].call_id"

    def test_assistant_parts(self, eng):
        ir = ir_base(messages=[{"role": "assistant", "content": [
            {"type": "text", "text": "a"}, {"type": "refusal", "text": "no"},
            {"type": "tool_call", "id": "c", "name": "f", "arguments": '{"x": [1, "é"]}'}]}])
        out, _ = encode(eng, ir)
        assert out["messages"][0]["content"] == [
            {"type": "text", "text": "a"}, {"type": "text", "text": "no"},
            {"type": "tool_use", "id": "c", "name": "f", "input": {"x": [1, "é"]}}]

    @pytest.mark.parametrize("arguments", ["{bad", "[1]", "3"])
    def test_invalid_arguments_rejected(self, eng, arguments):
        ir = ir_base(messages=[{"role": "assistant", "_path": "messages[1]", "content": [
            {"type": "tool_call", "id": "c", "name": "f", "arguments": arguments, "_path": "messages[1].tool_calls[0]"}]}])
        with pytest.raises(engine.InvalidRequest) as err:
            encode(eng, ir)
        assert err.value.param == "messages[1].tool_calls[0].arguments"

    def test_reasoning_restored_only_for_its_provider(self, eng):
        sig = {"protocol": A, "provider": "p", "signature": "SIG"}
        red = {"protocol": A, "provider": "p", "data": "DATA"}
        other = {"protocol": A, "provider": "elsewhere", "signature": "S2"}
        ir = ir_base(messages=[{"role": "assistant", "content": [
            {"type": "reasoning", "text": "t1", "opaque": sig},
            {"type": "text", "text": "x"},
            {"type": "reasoning", "opaque": red},
            {"type": "reasoning", "text": "t3", "opaque": other},
            {"type": "reasoning", "text": "unsigned"},
            {"type": "reasoning", "text": "r", "opaque": {"protocol": RESP, "provider": "p", "encrypted_content": "E"}},
            {"type": "tool_call", "id": "c", "name": "f", "arguments": "{}"}]}])
        out, c = encode(eng, ir)
        assert out["messages"][0]["content"] == [
            {"type": "thinking", "thinking": "t1", "signature": "SIG"},
            {"type": "text", "text": "x"},
            {"type": "redacted_thinking", "data": "DATA"},
            {"type": "tool_use", "id": "c", "name": "f", "input": {}}]
        assert sum("skipped" in t or "dropped" in t for t in c.traces) >= 3

    def test_turn_of_only_skipped_reasoning_disappears(self, eng):
        ir = ir_base(messages=[{"role": "user", "content": [{"type": "text", "text": "a"}]},
                               {"role": "assistant", "content": [{"type": "reasoning", "text": "plain"}]},
                               {"role": "user", "content": [{"type": "text", "text": "b"}]}])
        out, _ = encode(eng, ir)
        assert out["messages"] == [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]

    def test_user_images_and_documents(self, eng):
        ir = ir_base(messages=[{"role": "user", "content": [
            {"type": "image", "source": "url", "url": "data:image/png;base64,QUJD", "detail": "high"},
            {"type": "image", "source": "url", "url": "https://x/i.jpg"},
            {"type": "image", "source": "base64", "media_type": "image/webp", "data": "V0VC"},
            {"type": "document", "source": "base64", "data": "data:application/pdf;base64,UERG", "filename": "a.pdf"},
            {"type": "document", "source": "base64", "data": "UERG", "filename": "B.PDF"},
            {"type": "document", "source": "base64", "media_type": "application/pdf", "data": "UERG"},
            {"type": "document", "source": "url", "url": "https://x/d.pdf"},
        ]}])
        out, _ = encode(eng, ir)
        pdf = {"type": "base64", "media_type": "application/pdf", "data": "UERG"}
        assert out["messages"][0]["content"] == [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "QUJD"}},
            {"type": "image", "source": {"type": "url", "url": "https://x/i.jpg"}},
            {"type": "image", "source": {"type": "base64", "media_type": "image/webp", "data": "V0VC"}},
            {"type": "document", "source": pdf, "title": "a.pdf"},
            {"type": "document", "source": pdf, "title": "B.PDF"},
            {"type": "document", "source": pdf},
            {"type": "document", "source": {"type": "url", "url": "https://x/d.pdf"}},
        ]

    @pytest.mark.parametrize("part", [
        {"type": "image", "source": "url", "url": "data:image/bmp;base64,QUJD"},
        {"type": "image", "source": "base64", "media_type": "image/tiff", "data": "x"},
        {"type": "image", "source": "url", "url": "data:image/png,notbase64"},
        {"type": "image", "source": "file", "file_id": "file_1"},
        {"type": "document", "source": "base64", "data": "data:text/plain;base64,QUJD", "filename": "a.txt"},
        {"type": "document", "source": "base64", "data": "QUJD", "filename": "a.txt"},
        {"type": "document", "source": "file", "file_id": "file_1"},
        {"type": "audio", "data": "x", "format": "wav"},
        {"type": "unsupported", "what": "search_result"},
    ])
    def test_unrepresentable_user_parts(self, eng, part):
        ir = ir_base(messages=[{"role": "user", "_path": "messages[0]", "content": [{**part, "_path": "messages[0].content[0]"}]}])
        with pytest.raises(engine.InvalidRequest) as err:
            encode(eng, ir)
        assert err.value.param.startswith("messages[0].content[0]")

    def test_tools(self, eng):
        ir = ir_base(tools=[{"type": "function", "name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}, "strict": True},
                            {"type": "function", "name": "g", "parameters": None, "strict": None},
                            {"type": "function", "name": "h", "parameters": {}}])
        out, _ = encode(eng, ir)
        empty = {"type": "object", "properties": {}}
        assert out["tools"] == [{"name": "f", "description": "d", "input_schema": empty, "strict": True},
                                {"name": "g", "input_schema": empty}, {"name": "h", "input_schema": empty}]

    @pytest.mark.parametrize("tool,param", [
        ({"type": "function", "name": "f", "parameters": {"type": "string"}}, "tools[0].function.parameters"),
        ({"type": "hosted", "name": "web_search", "hosted_type": "web_search_preview"}, "tools[0]"),
    ])
    def test_tools_rejected(self, eng, tool, param):
        with pytest.raises(engine.InvalidRequest) as err:
            encode(eng, ir_base(tools=[{**tool, "_path": "tools[0]"}]), hosted_tools="reject")
        assert err.value.param.startswith("tools[0]")

    def test_hosted_tool_message_names_type(self, eng):
        with pytest.raises(engine.InvalidRequest) as err:
            encode(eng, ir_base(tools=[{"type": "hosted", "name": "x", "hosted_type": "file_search", "_path": "tools[0]"}]),
                   hosted_tools="reject")
        assert "file_search" in err.value.message

    @pytest.mark.parametrize("choice,parallel,expected", [
        ({"type": "auto"}, None, {"type": "auto"}),
        ({"type": "none"}, None, {"type": "none"}),
        ({"type": "required"}, None, {"type": "any"}),
        ({"type": "tool", "name": "f"}, None, {"type": "tool", "name": "f"}),
        ({"type": "required"}, False, {"type": "any", "disable_parallel_tool_use": True}),
        ({"type": "tool", "name": "f"}, False, {"type": "tool", "name": "f", "disable_parallel_tool_use": True}),
        ({"type": "none"}, False, {"type": "none"}),
        (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
        (None, True, None),
    ])
    def test_tool_choice(self, eng, choice, parallel, expected):
        ir = ir_base(tools=[{"type": "function", "name": "f", "parameters": {"type": "object"}}])
        if choice:
            ir["tool_choice"] = choice
        if parallel is not None:
            ir["parallel_tool_calls"] = parallel
        out, _ = encode(eng, ir)
        assert out.get("tool_choice") == expected

    def test_allowed_tools_subset(self, eng):
        tools = [{"type": "function", "name": n, "parameters": {"type": "object"}} for n in ("a", "b", "c")]
        out, _ = encode(eng, ir_base(tools=tools, tool_choice={"type": "required", "allowed": ["a", "c"]}))
        assert [t["name"] for t in out["tools"]] == ["a", "c"]
        assert out["tool_choice"] == {"type": "any"}
        out, _ = encode(eng, ir_base(tools=tools, tool_choice={"type": "auto", "allowed": ["b"]}))
        assert [t["name"] for t in out["tools"]] == ["b"] and out["tool_choice"] == {"type": "auto"}

    @pytest.mark.parametrize("choice", [{"type": "hosted", "name": "web_search_preview"}])
    def test_tool_choice_rejected(self, eng, choice):
        with pytest.raises(engine.InvalidRequest) as err:
            encode(eng, ir_base(tool_choice=choice))
        assert err.value.param == "tool_choice"

    @pytest.mark.parametrize("field,value", [
        ("n", 2), ("seed", 0), ("presence_penalty", 0.5), ("frequency_penalty", -1), ("logit_bias", {"1": 2}),
        ("logprobs", True), ("top_logprobs", 2), ("max_tool_calls", 3), ("truncation", "auto"), ("background", True),
        ("previous_response_id", "resp_1"), ("conversation", "conv_1"),
    ])
    def test_rejected_fields(self, eng, field, value):
        with pytest.raises(engine.InvalidRequest) as err:
            encode(eng, ir_base(**{field: value}))
        assert err.value.param == field and err.value.status == 400

    def test_rejection_names_the_clients_wire_field(self, eng):
        c = ctx(CHAT, A)
        c.param_names.update({"max_output_tokens": "max_completion_tokens", "temperature": "temperature"})
        with pytest.raises(engine.InvalidRequest) as err:
            eng.encode_request(c, ir_base(temperature=1.5))
        assert err.value.param == "temperature"

    def test_neutral_values_pass(self, eng):
        out, c = encode(eng, ir_base(n=1, presence_penalty=0, frequency_penalty=0.0, logit_bias={}, logprobs=False,
                                      top_logprobs=0, truncation="disabled", background=False))
        for key in ("n", "presence_penalty", "logit_bias", "logprobs", "truncation", "background"):
            assert key not in out

    def test_sampling(self, eng):
        out, _ = encode(eng, ir_base(temperature=0.7, top_p=1, stop=["END"]))
        assert (out["temperature"], out["top_p"], out["stop_sequences"]) == (0.7, 1, ["END"])
        for field, value in (("temperature", 1.2), ("temperature", -0.1), ("top_p", 2)):
            with pytest.raises(engine.InvalidRequest) as err:
                encode(eng, ir_base(**{field: value}))
            assert err.value.param == field
        out, c = encode(eng, ir_base(temperature=1.5, top_p=0.5), drop_sampling=True)
        assert "temperature" not in out and "top_p" not in out
        assert any("temperature dropped" in t for t in c.traces)

    @pytest.mark.parametrize("reasoning,thinking,effort", [
        ({"effort": "none"}, {"type": "disabled"}, None),
        ({"effort": "minimal"}, {"type": "disabled"}, None),
        # An effort alone must turn thinking on: the API does not think without `thinking` (mappings.md §9).
        ({"effort": "low"}, {"type": "adaptive"}, "low"),
        ({"effort": "xhigh"}, {"type": "adaptive"}, "xhigh"),
        ({"effort": "max"}, {"type": "adaptive"}, "max"),
        ({"effort": "high", "summary": "detailed"}, {"type": "adaptive", "display": "summarized"}, "high"),
        ({"summary": "auto"}, {"type": "adaptive", "display": "summarized"}, None),
        ({"effort": "none", "summary": "auto"}, {"type": "disabled"}, None),
    ])
    def test_reasoning_controls(self, eng, reasoning, thinking, effort):
        out, _ = encode(eng, ir_base(reasoning=reasoning))
        assert out.get("thinking") == thinking
        assert (out.get("output_config") or {}).get("effort") == effort

    @pytest.mark.parametrize("reasoning,max_tokens,thinking", [
        ({"effort": "low"}, None, {"type": "enabled", "budget_tokens": 1024}),
        ({"effort": "medium"}, None, {"type": "enabled", "budget_tokens": 2048}),
        ({"effort": "high"}, 32000, {"type": "enabled", "budget_tokens": 8192}),
        # kept below max_tokens
        ({"effort": "xhigh"}, 8000, {"type": "enabled", "budget_tokens": 7999}),
        ({"effort": "max", "summary": "auto"}, 20000, {"type": "enabled", "budget_tokens": 19999, "display": "summarized"}),
        ({"summary": "auto"}, None, {"type": "enabled", "budget_tokens": 2048, "display": "summarized"}),
        ({"effort": "minimal"}, None, {"type": "disabled"}),
    ])
    def test_budget_thinking_mode(self, eng, reasoning, max_tokens, thinking):
        extra = {"max_output_tokens": max_tokens} if max_tokens else {}
        out, _ = encode(eng, ir_base(reasoning=reasoning, **extra), thinking_mode="budget")
        assert out["thinking"] == thinking
        assert "effort" not in (out.get("output_config") or {})  # the budget form predates output_config.effort

    def test_budget_that_cannot_fit_is_left_off_with_a_trace(self, eng):
        out, c = encode(eng, ir_base(reasoning={"effort": "high"}, max_output_tokens=1000), thinking_mode="budget")
        assert "thinking" not in out
        assert any("thinking budget" in t for t in c.traces)

    @pytest.mark.parametrize("fmt,expected", [
        ({"type": "json_schema", "name": "n", "schema": {"type": "object", "properties": {}}, "strict": True},
         {"type": "json_schema", "schema": {"type": "object", "properties": {}}}),
        ({"type": "json_object"}, {"type": "json_schema", "schema": {"type": "object"}}),
        ({"type": "text"}, None),
    ])
    def test_response_format(self, eng, fmt, expected):
        out, _ = encode(eng, ir_base(response_format=fmt, reasoning={"effort": "low"}))
        assert out["output_config"].get("format") == expected
        assert out["output_config"]["effort"] == "low"

    def test_identity_metadata_tier(self, eng):
        out, c = encode(eng, ir_base(user="u-1", metadata={"k": "v"}, store=True, service_tier="default"))
        assert out["metadata"] == {"user_id": "u-1"} and out["service_tier"] == "standard_only"
        assert any("metadata" in t for t in c.traces) and any("store" in t for t in c.traces)
        assert not any("v" == t for t in c.traces)
        out, c = encode(eng, ir_base(service_tier="flex"))
        assert "service_tier" not in out and any("service_tier" in t for t in c.traces)
        assert encode(eng, ir_base(service_tier="auto"))[0]["service_tier"] == "auto"


# =============================================================================
# response.decode: Anthropic provider -> IR ; response.encode: IR -> Anthropic client
# =============================================================================


def a_message(content, stop_reason="end_turn", usage=None, **extra):
    return {"id": "msg_up", "type": "message", "role": "assistant", "model": "claude-up", "content": content,
            "stop_reason": stop_reason, "stop_sequence": None,
            "usage": usage or {"input_tokens": 10, "output_tokens": 5}, **extra}


class TestResponseDecode:
    def test_blocks_and_usage(self, eng):
        body = a_message([
            {"type": "thinking", "thinking": "hm", "signature": "SIG"},
            {"type": "redacted_thinking", "data": "DATA"},
            {"type": "text", "text": "hello", "citations": [{"type": "web_search_result_location", "url": "u", "title": "t",
                                                             "cited_text": "x", "encrypted_index": "e"}]},
            {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"q": "ü"}},
        ], stop_reason="tool_use", usage={"input_tokens": 10, "cache_read_input_tokens": 20, "cache_creation_input_tokens": 5,
                                          "output_tokens": 7, "output_tokens_details": {"thinking_tokens": 3}})
        ir = eng.decode_response(ctx(CHAT, A, name="prov"), body)
        assert ir["id"] == "msg_up" and ir["model"] == "claude-up" and ir["stop"] == "tool_use"
        assert ir["content"] == [
            {"type": "reasoning", "text": "hm", "opaque": {"protocol": A, "provider": "prov", "signature": "SIG"}},
            {"type": "reasoning", "opaque": {"protocol": A, "provider": "prov", "data": "DATA"}},
            {"type": "text", "text": "hello", "annotations": [{"type": "url_citation", "url": "u", "title": "t", "start_index": 0, "end_index": 5}]},
            {"type": "tool_call", "id": "toolu_1", "name": "f", "arguments": '{"q":"ü"}'},
        ]
        assert ir["usage"] == {"input_tokens": 35, "cached_tokens": 20, "cache_write_tokens": 5, "output_tokens": 7, "reasoning_tokens": 3}

    @pytest.mark.parametrize("reason,stop", [
        ("end_turn", "end_turn"), ("stop_sequence", "stop_sequence"), ("max_tokens", "max_tokens"),
        ("model_context_window_exceeded", "context_window_exceeded"), ("tool_use", "tool_use"),
        ("pause_turn", "pause_turn"), ("refusal", "refusal"),
    ])
    def test_every_stop_reason(self, eng, reason, stop):
        ir = eng.decode_response(ctx(CHAT, A), a_message([{"type": "text", "text": "x"}], stop_reason=reason, stop_sequence="S"))
        assert ir["stop"] == stop

    def test_refusal_details_kept(self, eng):
        details = {"type": "refusal", "category": "cyber", "explanation": "no"}
        ir = eng.decode_response(ctx(CHAT, A), a_message([], stop_reason="refusal", stop_details=details))
        assert ir["stop"] == "refusal" and ir["stop_details"] == details and ir["content"] == []

    @pytest.mark.parametrize("body", [
        a_message([{"type": "text", "text": "x"}], stop_reason=None),
        a_message([{"type": "text", "text": "x"}], stop_reason="sideways"),
        a_message([{"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}]),
    ])
    def test_protocol_errors(self, eng, body):
        with pytest.raises(engine.UpstreamProtocolError):
            eng.translate_response(ctx(A, A), body)


def ir_response(content, stop="end_turn", usage=None, **extra):
    return {"id": "up1", "model": "gpt-x", "content": content, "stop": stop,
            "usage": usage or {"input_tokens": 10, "output_tokens": 3}, **extra}


def encode_response(eng, ir, provider=CHAT, **kw):
    out = eng.encode_response(ctx(A, provider, **kw), copy.deepcopy(ir))
    Message.model_validate(out)  # what the official SDK parses
    return out


class TestResponseEncode:
    def test_shape(self, eng):
        out = encode_response(eng, ir_response([{"type": "text", "text": "hi"}],
                                               usage={"input_tokens": 100, "cached_tokens": 60, "cache_write_tokens": 10,
                                                      "output_tokens": 9, "reasoning_tokens": 4}))
        assert out == {"id": "msg_up1", "type": "message", "role": "assistant", "model": "gpt-x",
                       "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn", "stop_sequence": None,
                       "stop_details": None,
                       "usage": {"input_tokens": 30, "output_tokens": 9, "cache_read_input_tokens": 60,
                                 "cache_creation_input_tokens": 10, "output_tokens_details": {"thinking_tokens": 4}}}

    def test_usage_absent(self, eng):
        out = encode_response(eng, {**ir_response([]), "usage": None})
        assert out["usage"] == {"input_tokens": 0, "output_tokens": 0}

    @pytest.mark.parametrize("stop,reason", [
        ("end_turn", "end_turn"), ("stop_sequence", "stop_sequence"), ("max_tokens", "max_tokens"),
        ("context_window_exceeded", "model_context_window_exceeded"), ("tool_use", "tool_use"),
        ("pause_turn", "pause_turn"), ("refusal", "refusal"), ("incomplete", "max_tokens"),
    ])
    def test_every_stop(self, eng, stop, reason):
        out = encode_response(eng, ir_response([{"type": "text", "text": "x"}], stop=stop))
        assert out["stop_reason"] == reason

    @pytest.mark.parametrize("stop", ["failed", "cancelled", "protocol_error", None])
    def test_failed_stops_are_errors(self, eng, stop):
        ir = ir_response([], stop=stop, error={"code": "server_error", "message": "it broke"})
        with pytest.raises(engine.UpstreamProtocolError) as err:
            eng.encode_response(ctx(A, RESP), ir)
        assert err.value.status == 502
        if stop == "failed":
            assert err.value.message == "it broke"

    def test_stop_sequence(self, eng):
        out = encode_response(eng, ir_response([{"type": "text", "text": "x"}], stop="stop_sequence", stop_sequence="END"))
        assert out["stop_sequence"] == "END"

    def test_refusal_parts(self, eng):
        out = encode_response(eng, ir_response([{"type": "refusal", "text": "I can't"}], stop="end_turn"))
        assert out["content"] == [{"type": "text", "text": "I can't"}]
        assert out["stop_reason"] == "refusal"
        assert out["stop_details"] == {"type": "refusal", "category": None, "explanation": None}

    def test_refusal_after_text_stays_end_turn(self, eng):
        out = encode_response(eng, ir_response([{"type": "text", "text": "sure"}, {"type": "refusal", "text": "no"}]))
        assert out["stop_reason"] == "end_turn" and out["stop_details"] is None

    def test_content_filter_without_text(self, eng):
        out = encode_response(eng, ir_response([], stop="refusal"))
        assert out["content"] == [] and out["stop_reason"] == "refusal"
        assert out["stop_details"] == {"type": "refusal", "category": None, "explanation": None}

    def test_tool_calls(self, eng):
        out = encode_response(eng, ir_response([{"type": "text", "text": "a"},
                                                {"type": "tool_call", "id": "call_1", "name": "f", "arguments": '{"x":1}'},
                                                {"type": "tool_call", "id": "call_2", "name": "g", "arguments": ""}], stop="tool_use"))
        assert out["content"][1:] == [{"type": "tool_use", "id": "call_1", "name": "f", "input": {"x": 1}},
                                      {"type": "tool_use", "id": "call_2", "name": "g", "input": {}}]

    def test_bad_tool_arguments_are_upstream_errors(self, eng):
        with pytest.raises(engine.UpstreamProtocolError):
            eng.encode_response(ctx(A, CHAT), ir_response([{"type": "tool_call", "id": "c", "name": "f", "arguments": "{"}], stop="tool_use"))

    def test_reasoning_without_state_has_empty_signature(self, eng):
        out = encode_response(eng, ir_response([{"type": "reasoning", "text": "think"}, {"type": "text", "text": "x"}]))
        assert out["content"][0] == {"type": "thinking", "thinking": "think", "signature": ""}

    def test_reasoning_state_in_envelopes(self, eng):
        opaque = {"protocol": RESP, "provider": "p", "encrypted_content": "ENC", "id": "rs_9", "summary_lengths": [3]}
        red = {"protocol": RESP, "provider": "p", "encrypted_content": "ONLY", "id": "rs_10"}
        ir = ir_response([{"type": "reasoning", "text": "abc", "summary": ["abc"], "opaque": opaque},
                          {"type": "reasoning", "opaque": red}, {"type": "text", "text": "x"}])
        out = encode_response(eng, ir, provider=RESP)
        thinking, redacted = out["content"][:2]
        assert thinking["type"] == "thinking" and thinking["signature"].startswith("pxc1.")
        assert redacted["type"] == "redacted_thinking" and redacted["data"].startswith("pxc1.")
        # The client replays them: they decode back to the same provider state.
        body = base(messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": out["content"]}])
        back, _ = decode(eng, body, provider=RESP)
        parts = back["messages"][1]["content"]
        assert parts[0]["opaque"] == opaque and parts[0]["text"] == "abc"
        assert parts[1]["opaque"]["encrypted_content"] == "ONLY"

    def test_continuation_off(self, eng):
        opaque = {"protocol": RESP, "provider": "p", "encrypted_content": "ENC"}
        ir = ir_response([{"type": "reasoning", "text": "abc", "opaque": opaque}, {"type": "reasoning", "opaque": opaque},
                          {"type": "text", "text": "x"}])
        out = encode_response(eng, ir, provider=RESP, continuation_enabled=False)
        assert out["content"] == [{"type": "thinking", "thinking": "abc", "signature": ""}, {"type": "text", "text": "x"}]

    def test_citations(self, eng):
        out = encode_response(eng, ir_response([{"type": "text", "text": "see here", "annotations": [
            {"type": "url_citation", "url": "https://u", "title": "T", "start_index": 4, "end_index": 8}]}]))
        assert out["content"][0]["citations"] == [{"type": "web_search_result_location", "url": "https://u", "title": "T",
                                                   "cited_text": "here", "encrypted_index": ""}]


class TestContinuationRoundTrip:
    """Anthropic provider state crosses an IR round trip byte-identically and in order."""

    def test_provider_state_round_trip(self, eng):
        content = [{"type": "thinking", "thinking": "first", "signature": "SIG/1+=="},
                   {"type": "tool_use", "id": "t1", "name": "f", "input": {}},
                   {"type": "redacted_thinking", "data": "REDACTED=="},
                   {"type": "thinking", "thinking": "second", "signature": "SIG2"},
                   {"type": "tool_use", "id": "t2", "name": "g", "input": {"a": 1}}]
        ir = eng.decode_response(ctx(CHAT, A, name="prov"), a_message(content, stop_reason="tool_use"))
        replay = ir_base(messages=[{"role": "user", "content": [{"type": "text", "text": "q"}]},
                                   {"role": "assistant", "content": ir["content"]}])
        out, _ = encode(eng, replay, name="prov")
        assert out["messages"][1]["content"] == content
        out, _ = encode(eng, replay, name="another")
        assert [b["type"] for b in out["messages"][1]["content"]] == ["tool_use", "tool_use"]


# =============================================================================
# stream.decode: Anthropic provider SSE -> IR events
# =============================================================================


def decoder(eng, name="prov"):
    return StreamRun(eng.streams[("stream.decode", A)], ctx(CHAT, A, name=name))


def run_decoder(eng, events, name="prov"):
    d = decoder(eng, name)
    out = []
    for ev in events:
        try:
            out.extend(d.decode(copy.deepcopy(ev)))
        except engine.UpstreamProtocolError as err:
            out.append({"type": "error", "message": err.message})
            break
    return out


def msg_start(usage=None):
    return {"type": "message_start", "message": {"id": "msg_up", "type": "message", "role": "assistant", "model": "claude-up",
                                                 "content": [], "stop_reason": None, "stop_sequence": None,
                                                 "usage": usage or {"input_tokens": 12, "output_tokens": 1}}}


def block_start(i, block):
    return {"type": "content_block_start", "index": i, "content_block": block}


def delta(i, d):
    return {"type": "content_block_delta", "index": i, "delta": d}


def stop(i):
    return {"type": "content_block_stop", "index": i}


def msg_delta(reason, usage=None, **extra):
    return {"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": None, **extra},
            "usage": usage or {"output_tokens": 9}}


MSG_STOP = {"type": "message_stop"}


class TestStreamDecode:
    def test_text(self, eng):
        out = run_decoder(eng, [msg_start(), {"type": "ping"}, block_start(0, {"type": "text", "text": ""}),
                                delta(0, {"type": "text_delta", "text": "Hel"}), delta(0, {"type": "text_delta", "text": ""}),
                                delta(0, {"type": "text_delta", "text": "lo"}), stop(0), msg_delta("end_turn"), MSG_STOP])
        assert out == [
            {"type": "message_start", "id": "msg_up", "model": "claude-up", "usage": {"input_tokens": 12, "output_tokens": 1}},
            {"type": "block_start", "index": 0, "kind": "text"},
            {"type": "block_delta", "index": 0, "kind": "text", "delta": "Hel"},
            {"type": "block_delta", "index": 0, "kind": "text", "delta": "lo"},
            {"type": "block_stop", "index": 0},
            {"type": "message_stop", "stop": "end_turn", "usage": {"input_tokens": 12, "output_tokens": 9}},
        ]

    def test_text_in_block_start(self, eng):
        out = run_decoder(eng, [msg_start(), block_start(0, {"type": "text", "text": "pre"})])
        assert out[-1] == {"type": "block_delta", "index": 0, "kind": "text", "delta": "pre"}

    def test_thinking_signature_and_redacted(self, eng):
        out = run_decoder(eng, [msg_start(), block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
                                delta(0, {"type": "thinking_delta", "thinking": "hmm"}),
                                delta(0, {"type": "signature_delta", "signature": "SIG"}), stop(0),
                                block_start(1, {"type": "redacted_thinking", "data": "DATA"}), stop(1),
                                block_start(2, {"type": "text", "text": ""}), stop(2)])
        assert out[1:] == [
            {"type": "block_start", "index": 0, "kind": "reasoning"},
            {"type": "block_delta", "index": 0, "kind": "reasoning", "delta": "hmm"},
            {"type": "block_opaque", "index": 0, "opaque": {"protocol": A, "provider": "prov", "signature": "SIG"}},
            {"type": "block_stop", "index": 0},
            {"type": "block_start", "index": 1, "kind": "redacted_reasoning", "opaque": {"protocol": A, "provider": "prov", "data": "DATA"}},
            {"type": "block_stop", "index": 1},
            {"type": "block_start", "index": 2, "kind": "text"},
            {"type": "block_stop", "index": 2},
        ]

    def test_parallel_tool_calls(self, eng):
        out = run_decoder(eng, [msg_start(),
                                block_start(0, {"type": "tool_use", "id": "toolu_a", "name": "f", "input": {}}),
                                delta(0, {"type": "input_json_delta", "partial_json": ""}),
                                delta(0, {"type": "input_json_delta", "partial_json": '{"a":'}),
                                delta(0, {"type": "input_json_delta", "partial_json": ' 1}'}), stop(0),
                                block_start(1, {"type": "tool_use", "id": "toolu_b", "name": "g", "input": {}}), stop(1),
                                msg_delta("tool_use"), MSG_STOP])
        assert out[1:] == [
            {"type": "block_start", "index": 0, "kind": "tool_call", "id": "toolu_a", "name": "f"},
            {"type": "block_delta", "index": 0, "kind": "tool_call", "delta": '{"a":'},
            {"type": "block_delta", "index": 0, "kind": "tool_call", "delta": " 1}"},
            {"type": "block_stop", "index": 0},
            {"type": "block_start", "index": 1, "kind": "tool_call", "id": "toolu_b", "name": "g"},
            {"type": "block_delta", "index": 1, "kind": "tool_call", "delta": "{}"},
            {"type": "block_stop", "index": 1},
            {"type": "message_stop", "stop": "tool_use", "usage": {"input_tokens": 12, "output_tokens": 9}},
        ]

    @pytest.mark.parametrize("args", ['{"a":', "[1]", "nope"])
    def test_invalid_arguments(self, eng, args):
        out = run_decoder(eng, [msg_start(), block_start(0, {"type": "tool_use", "id": "t", "name": "f", "input": {}}),
                                delta(0, {"type": "input_json_delta", "partial_json": args}), stop(0)])
        assert out[-1]["type"] == "error" and "arguments" in out[-1]["message"]

    @pytest.mark.parametrize("reason,ir_stop", [
        ("end_turn", "end_turn"), ("stop_sequence", "stop_sequence"), ("max_tokens", "max_tokens"),
        ("model_context_window_exceeded", "context_window_exceeded"), ("tool_use", "tool_use"),
        ("pause_turn", "pause_turn"), ("refusal", "refusal"),
    ])
    def test_every_stop_reason(self, eng, reason, ir_stop):
        out = run_decoder(eng, [msg_start(), msg_delta(reason), MSG_STOP])
        assert out[-1]["type"] == "message_stop" and out[-1]["stop"] == ir_stop

    def test_stop_sequence_refusal_details_and_usage(self, eng):
        details = {"type": "refusal", "category": "bio", "explanation": "policy"}
        out = run_decoder(eng, [
            msg_start({"input_tokens": 5, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 7, "output_tokens": 1}),
            msg_delta("refusal", {"output_tokens": 20, "input_tokens": 6, "output_tokens_details": {"thinking_tokens": 4}},
                      stop_details=details), MSG_STOP])
        assert out[-1] == {"type": "message_stop", "stop": "refusal", "stop_details": details,
                           "usage": {"input_tokens": 113, "cached_tokens": 100, "cache_write_tokens": 7,
                                     "output_tokens": 20, "reasoning_tokens": 4}}
        out = run_decoder(eng, [msg_start(), {"type": "message_delta", "delta": {"stop_reason": "stop_sequence", "stop_sequence": "END"},
                                              "usage": {"output_tokens": 2}}, MSG_STOP])
        assert out[-1]["stop_sequence"] == "END"

    def test_message_delta_is_held(self, eng):
        assert run_decoder(eng, [msg_start(), msg_delta("end_turn")])[-1]["type"] == "message_start"

    def test_message_stop_without_stop_reason(self, eng):
        assert run_decoder(eng, [msg_start(), MSG_STOP])[-1]["type"] == "error"

    @pytest.mark.parametrize("etype,status", [("overloaded_error", 529), ("rate_limit_error", 429), ("api_error", 502),
                                              ("timeout_error", 504), ("something_new", 502)])
    def test_error_event(self, eng, etype, status):
        out = run_decoder(eng, [msg_start(), {"type": "error", "error": {"type": etype, "message": "busy"}}])
        assert out[-1] == {"type": "error", "status": status, "error_type": etype, "message": "busy"}

    def test_server_tool_block_is_an_error(self, eng):
        out = run_decoder(eng, [msg_start(), block_start(0, {"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}})])
        assert out[-1]["type"] == "error"


# =============================================================================
# stream.encode: IR events -> Anthropic client SSE
# =============================================================================


def parse_sse(chunks):
    events = []
    for raw in chunks:
        text = raw.decode()
        assert text.endswith("\n\n")
        lines = text.strip("\n").split("\n")
        assert lines[0].startswith("event: ") and lines[1].startswith("data: ")
        data = orjson.loads(lines[1][len("data: "):])
        assert lines[0][len("event: "):] == data["type"]
        events.append(data)
    return events


def encode_stream(eng, events, provider=CHAT, name="p", **kw):
    """IR events through the engine's real encode pipeline (block serializer included)."""
    c = ctx(A, provider, name=name, **kw)
    t = StreamTranslator(eng.streams[("stream.decode", A)], eng.streams[("stream.encode", A)], c)
    return parse_sse(t._emit(copy.deepcopy(events)))


_EVENT = TypeAdapter(RawMessageStreamEvent)


def sdk_snapshot(events):
    """Accumulate the events the way the official SDK's MessageStream does."""
    snapshot, bufs = None, {}
    for data in events:
        if data["type"] == "error":
            raise AssertionError(f"stream error: {data}")
        snapshot = accumulate_event(event=_EVENT.validate_python(data), current_snapshot=snapshot, json_bufs=bufs)
    return snapshot


START = {"type": "message_start", "id": "up", "model": "gpt-x"}


def done(stop="end_turn", **extra):
    return {"type": "message_stop", "stop": stop, "usage": {"input_tokens": 50, "cached_tokens": 20, "output_tokens": 8}, **extra}


class TestStreamEncode:
    def test_text(self, eng):
        out = encode_stream(eng, [START, {"type": "block_start", "index": 0, "kind": "text"},
                                  {"type": "block_delta", "index": 0, "kind": "text", "delta": "Hi "},
                                  {"type": "block_delta", "index": 0, "kind": "text", "delta": ""},
                                  {"type": "block_delta", "index": 0, "kind": "text", "delta": "there ✓"},
                                  {"type": "block_stop", "index": 0}, done()])
        assert out[0] == {"type": "message_start", "message": {
            "id": "msg_up", "type": "message", "role": "assistant", "model": "gpt-x", "content": [],
            "stop_reason": None, "stop_sequence": None, "stop_details": None, "usage": {"input_tokens": 0, "output_tokens": 0}}}
        assert [e["type"] for e in out] == ["message_start", "content_block_start", "content_block_delta", "content_block_delta",
                                            "content_block_stop", "message_delta", "message_stop"]
        assert out[-2] == {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None, "stop_details": None},
                           "usage": {"input_tokens": 30, "output_tokens": 8, "cache_read_input_tokens": 20}}
        snap = sdk_snapshot(out)
        assert snap.content[0].text == "Hi there ✓" and snap.stop_reason == "end_turn"
        assert snap.usage.input_tokens == 30 and snap.usage.cache_read_input_tokens == 20

    def test_message_start_usage_when_known(self, eng):
        out = encode_stream(eng, [{**START, "usage": {"input_tokens": 40, "cached_tokens": 30, "cache_write_tokens": 4}}])
        assert out[0]["message"]["usage"] == {"input_tokens": 6, "output_tokens": 0, "cache_read_input_tokens": 30,
                                              "cache_creation_input_tokens": 4}

    def test_reasoning_without_state(self, eng):
        out = encode_stream(eng, [START, {"type": "block_start", "index": 0, "kind": "reasoning"},
                                  {"type": "block_delta", "index": 0, "kind": "reasoning", "delta": "think"},
                                  {"type": "block_stop", "index": 0}, {"type": "block_start", "index": 1, "kind": "text"},
                                  {"type": "block_delta", "index": 1, "kind": "text", "delta": "x"},
                                  {"type": "block_stop", "index": 1}, done()])
        assert not any(e.get("delta", {}).get("type") == "signature_delta" for e in out)
        snap = sdk_snapshot(out)
        assert snap.content[0].type == "thinking" and snap.content[0].thinking == "think" and snap.content[0].signature == ""

    def test_reasoning_state_becomes_signature_and_redacted(self, eng):
        opaque = {"protocol": RESP, "provider": "p", "encrypted_content": "ENC", "id": "rs_1", "summary_lengths": None}
        red = {"protocol": RESP, "provider": "p", "encrypted_content": "RED", "id": "rs_2", "summary_lengths": None}
        out = encode_stream(eng, [START, {"type": "block_start", "index": 0, "kind": "reasoning"},
                                  {"type": "block_delta", "index": 0, "kind": "reasoning", "delta": "ab"},
                                  {"type": "block_delta", "index": 0, "kind": "reasoning", "delta": "c"},
                                  {"type": "block_opaque", "index": 0, "opaque": opaque},
                                  {"type": "block_stop", "index": 0},
                                  {"type": "block_start", "index": 1, "kind": "redacted_reasoning", "opaque": red},
                                  {"type": "block_stop", "index": 1}, done()], provider=RESP)
        kinds = [(e["type"], e.get("delta", {}).get("type")) for e in out]
        assert kinds.index(("content_block_delta", "signature_delta")) == kinds.index(("content_block_stop", None)) - 1
        snap = sdk_snapshot(out)
        assert snap.content[1].type == "redacted_thinking"
        # Replayed by the client, the blocks give back the provider's state exactly.
        body = base(messages=[{"role": "user", "content": "q"},
                              {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in snap.content]}])
        ir, _ = decode(eng, body, provider=RESP)
        assert [p.get("opaque") for p in ir["messages"][1]["content"]] == [opaque, red]
        assert ir["messages"][1]["content"][0]["text"] == "abc"

    def test_continuation_off(self, eng):
        opaque = {"protocol": RESP, "provider": "p", "encrypted_content": "ENC"}
        out = encode_stream(eng, [START, {"type": "block_start", "index": 0, "kind": "redacted_reasoning", "opaque": opaque},
                                  {"type": "block_stop", "index": 0},
                                  {"type": "block_start", "index": 1, "kind": "reasoning"},
                                  {"type": "block_delta", "index": 1, "kind": "reasoning", "delta": "r"},
                                  {"type": "block_opaque", "index": 1, "opaque": opaque},
                                  {"type": "block_stop", "index": 1}, done()], provider=RESP, continuation_enabled=False)
        starts = [e for e in out if e["type"] == "content_block_start"]
        assert [s["index"] for s in starts] == [0] and starts[0]["content_block"]["type"] == "thinking"
        assert not any(e.get("delta", {}).get("type") == "signature_delta" for e in out)
        assert sdk_snapshot(out).content[0].thinking == "r"

    def test_interleaved_tool_calls_are_serialized(self, eng):
        ev = [START,
              {"type": "block_start", "index": 0, "kind": "tool_call", "id": "call_a", "name": "f"},
              {"type": "block_delta", "index": 0, "kind": "tool_call", "delta": '{"x":'},
              {"type": "block_start", "index": 1, "kind": "tool_call", "id": "call_b", "name": "g"},
              {"type": "block_delta", "index": 1, "kind": "tool_call", "delta": '{"y":'},
              {"type": "block_delta", "index": 0, "kind": "tool_call", "delta": "1}"},
              {"type": "block_delta", "index": 1, "kind": "tool_call", "delta": "2}"},
              {"type": "block_stop", "index": 0}, {"type": "block_stop", "index": 1}, done("tool_use")]
        out = encode_stream(eng, ev)
        open_block = None
        for e in out:
            if e["type"] == "content_block_start":
                assert open_block is None
                open_block = e["index"]
            elif e["type"] in ("content_block_delta", "content_block_stop"):
                assert e["index"] == open_block
                if e["type"] == "content_block_stop":
                    open_block = None
        snap = sdk_snapshot(out)
        assert [(b.id, b.name, b.input) for b in snap.content] == [("call_a", "f", {"x": 1}), ("call_b", "g", {"y": 2})]
        assert snap.stop_reason == "tool_use"

    def test_refusal_block(self, eng):
        out = encode_stream(eng, [START, {"type": "block_start", "index": 0, "kind": "refusal"},
                                  {"type": "block_delta", "index": 0, "kind": "refusal", "delta": "I can't"},
                                  {"type": "block_stop", "index": 0}, done("end_turn")])
        snap = sdk_snapshot(out)
        assert snap.content[0].text == "I can't" and snap.stop_reason == "refusal"
        assert out[-2]["delta"]["stop_details"] == {"type": "refusal", "category": None, "explanation": None}

    def test_refusal_after_text_keeps_end_turn(self, eng):
        out = encode_stream(eng, [START, {"type": "block_start", "index": 0, "kind": "text"},
                                  {"type": "block_delta", "index": 0, "kind": "text", "delta": "ok"},
                                  {"type": "block_stop", "index": 0},
                                  {"type": "block_start", "index": 1, "kind": "refusal"},
                                  {"type": "block_delta", "index": 1, "kind": "refusal", "delta": "no"},
                                  {"type": "block_stop", "index": 1}, done("end_turn")])
        assert out[-2]["delta"]["stop_reason"] == "end_turn"

    @pytest.mark.parametrize("stop,reason", [
        ("end_turn", "end_turn"), ("stop_sequence", "stop_sequence"), ("max_tokens", "max_tokens"),
        ("context_window_exceeded", "model_context_window_exceeded"), ("tool_use", "tool_use"),
        ("pause_turn", "pause_turn"), ("refusal", "refusal"), ("incomplete", "max_tokens"),
    ])
    def test_every_stop(self, eng, stop, reason):
        out = encode_stream(eng, [START, done(stop)])
        assert out[-2]["delta"]["stop_reason"] == reason and out[-1] == {"type": "message_stop"}
        assert sdk_snapshot(out).stop_reason == reason

    @pytest.mark.parametrize("stop", ["failed", "cancelled", "protocol_error"])
    def test_failed_stop_is_an_error(self, eng, stop):
        out = encode_stream(eng, [START, done(stop)])
        assert out[-1]["type"] == "error" and out[-1]["status"] == 502
        assert not any(e["type"] in ("message_delta", "message_stop") for e in out)

    @pytest.mark.parametrize("status,etype", [(429, "rate_limit_error"), (529, "overloaded_error"), (503, "overloaded_error"),
                                              (502, "api_error"), (None, "api_error")])
    def test_error_event(self, eng, status, etype):
        out = encode_stream(eng, [START, {"type": "block_start", "index": 0, "kind": "text"},
                                  {"type": "error", "status": status, "message": "boom"}])
        assert out[-1] == {"type": "error", "error": {"type": etype, "message": "boom"}, "status": status or 502}

    def test_stop_sequence_and_reasoning_usage(self, eng):
        out = encode_stream(eng, [START, {"type": "message_stop", "stop": "stop_sequence", "stop_sequence": "END",
                                          "usage": {"input_tokens": 3, "output_tokens": 4, "reasoning_tokens": 2}}])
        assert out[-2] == {"type": "message_delta", "delta": {"stop_reason": "stop_sequence", "stop_sequence": "END", "stop_details": None},
                           "usage": {"input_tokens": 3, "output_tokens": 4, "output_tokens_details": {"thinking_tokens": 2}}}


class TestStreamEndToEnd:
    """Anthropic events through decoder and encoder (the engine's own EOF handling)."""

    def translator(self, eng):
        return StreamTranslator(eng.streams[("stream.decode", A)], eng.streams[("stream.encode", A)], ctx(A, A))

    class SSE:
        def __init__(self, event, data):
            self.event, self.data = event, data

    def feed(self, t, events):
        out = []
        for ev in events:
            out.extend(t.feed(self.SSE(ev["type"], orjson.dumps(ev).decode())))
        return out

    def test_eof_after_message_delta_is_an_error(self, eng):
        t = self.translator(eng)
        out = self.feed(t, [msg_start(), block_start(0, {"type": "text", "text": ""}),
                            delta(0, {"type": "text_delta", "text": "x"}), stop(0), msg_delta("end_turn")])
        out = parse_sse(out + t.eof())
        assert out[-1]["type"] == "error" and not any(e["type"] == "message_stop" for e in out)

    def test_complete_stream(self, eng):
        t = self.translator(eng)
        out = parse_sse(self.feed(t, [msg_start(), msg_delta("end_turn"), MSG_STOP]) + t.eof())
        assert [e["type"] for e in out] == ["message_start", "message_delta", "message_stop"]

    def test_malformed_event(self, eng):
        t = self.translator(eng)
        out = parse_sse(self.feed(t, [msg_start()]) + t.feed(self.SSE("content_block_delta", "{not json")))
        assert out[-1]["type"] == "error"


def test_custom_tool_call_in_history_replays_as_a_call_of_the_wrapped_function():
    eng = engine.Engine.load()
    ctx = engine.Context("openai_chat_completions", "anthropic_messages", provider_name="a")
    body = {"model": "m", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "custom", "custom": {"name": "run", "input": "x"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "1"}],
        "tools": [{"type": "custom", "custom": {"name": "run"}}]}
    out = eng.translate_request(ctx, body)
    assert out["messages"][1]["content"] == [{"type": "tool_use", "id": "c1", "name": "run", "input": {"input": "x"}}]
    assert out["tools"][0]["input_schema"]["required"] == ["input"]

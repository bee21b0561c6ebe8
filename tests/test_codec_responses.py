"""The OpenAI Responses codec (rules/openai_responses/, engine/hooks/responses.py), engine level.

Each direction is exercised on its own against the IR conventions: Responses client
requests -> IR, IR -> Responses provider requests, Responses provider answers and streams
-> IR, IR answers and events -> Responses client answers and streams. Client-side output
is also checked with the official SDK's types and stream accumulator.
"""
from __future__ import annotations

import json

import pytest
from openai._models import construct_type
from openai._types import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent

import engine
from ir_helpers import strip_paths
from engine.hooks import continuation
from engine.stream import StreamRules, StreamRun, StreamTranslator
from engine.template import Compiler
from proxai.mock import ToolCall, Turn, Usage
from proxai.mock import render_responses
from proxai.http.sse import SSEEvent, SSEParser

R = "openai_responses"
A = "anthropic_messages"
C = "openai_chat_completions"
# What a translated Response says for the settings a client left out: the Responses defaults
# (store false and no previous response: the state store sets both when it is on).
DEFAULTS = {"instructions": None, "max_output_tokens": None, "metadata": {}, "temperature": 1, "top_p": 1,
            "reasoning": {"effort": None, "summary": None}, "text": {"format": {"type": "text"}},
            "truncation": "disabled", "presence_penalty": 0, "frequency_penalty": 0, "top_logprobs": 0,
            "max_tool_calls": None, "background": False, "service_tier": "auto", "safety_identifier": None,
            "prompt_cache_key": None, "previous_response_id": None, "store": False}


@pytest.fixture(scope="module")
def eng():
    return engine.Engine.load()


def ctx(client=R, provider=A, body=None, name="p", **kw):
    return engine.Context(client_protocol=client, provider_protocol=provider, provider_name=name,
                          client_body=body if body is not None else {}, **kw)




def decode(eng, body, provider=A, **kw):
    c = ctx(R, provider, body, **kw)
    return strip_paths(eng.decode_request(c, body)), c


def encode(eng, ir, client=C, **kw):
    c = ctx(client, R, **kw)
    return eng.encode_request(c, ir), c


def rejected(fn, param):
    with pytest.raises(engine.InvalidRequest) as err:
        fn()
    assert err.value.param == param, (err.value.param, err.value.message)
    return err.value


def user(text):
    return {"role": "user", "content": [{"type": "text", "text": text}]}


# =====================================================================================
# Request decode: Responses client -> IR
# =====================================================================================


class TestRequestDecode:
    def test_instructions_string_input_and_scalars(self, eng):
        ir, _ = decode(eng, {"model": "m", "instructions": "Be brief.", "input": "Hi", "stream": True,
                             "max_output_tokens": 50, "temperature": 0.5, "top_p": 0.9, "parallel_tool_calls": False,
                             "metadata": {"k": "v"}, "safety_identifier": "u1", "user": "old", "service_tier": "flex",
                             "store": True, "prompt_cache_key": "pk", "top_logprobs": 3,
                             "include": ["message.output_text.logprobs"]})
        assert ir["system"] == [{"type": "text", "text": "Be brief."}]
        assert ir["messages"] == [user("Hi")]
        assert (ir["stream"], ir["max_output_tokens"], ir["temperature"], ir["top_p"]) == (True, 50, 0.5, 0.9)
        assert ir["parallel_tool_calls"] is False and ir["metadata"] == {"k": "v"}
        assert ir["user"] == "u1" and ir["service_tier"] == "flex" and ir["prompt_cache_key"] == "pk"
        assert ir["logprobs"] is True and ir["top_logprobs"] == 3

    def test_deprecated_user_is_the_end_user_id(self, eng):
        ir, _ = decode(eng, {"model": "m", "input": "x", "user": "old"})
        assert ir["user"] == "old"

    def test_system_and_developer_messages_stay_in_place(self, eng):
        ir, _ = decode(eng, {"model": "m", "input": [
            {"role": "developer", "content": "dev"}, {"role": "user", "content": "q"},
            {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "sys"}]}]})
        assert [m["role"] for m in ir["messages"]] == ["developer", "user", "system"]
        assert ir["messages"][2]["content"] == [{"type": "text", "text": "sys"}]
        assert "system" not in ir

    def test_user_parts(self, eng):
        ir, _ = decode(eng, {"model": "m", "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "look"},
            {"type": "input_image", "image_url": "https://x/i.png", "detail": "high"},
            {"type": "input_image", "image_url": "data:image/png;base64,QUJD", "detail": "auto"},
            {"type": "input_image", "file_id": "file-1", "detail": "low"},
            {"type": "input_file", "file_data": "data:application/pdf;base64,UERG", "filename": "a.pdf"},
            {"type": "input_file", "file_data": "UERG", "filename": "b.pdf"},
            {"type": "input_file", "file_url": "https://x/d.pdf"},
            {"type": "input_file", "file_id": "file-2"},
        ]}]})
        assert ir["messages"][0]["content"] == [
            {"type": "text", "text": "look"},
            {"type": "image", "source": "url", "url": "https://x/i.png", "detail": "high"},
            {"type": "image", "source": "base64", "media_type": "image/png", "data": "QUJD", "detail": "auto"},
            {"type": "image", "source": "file", "file_id": "file-1", "detail": "low"},
            {"type": "document", "source": "base64", "media_type": "application/pdf", "data": "UERG", "filename": "a.pdf"},
            {"type": "document", "source": "base64", "data": "UERG", "filename": "b.pdf"},
            {"type": "document", "source": "url", "url": "https://x/d.pdf"},
            {"type": "document", "source": "file", "file_id": "file-2"},
        ]

    def test_assistant_items_group_into_one_turn_in_order(self, eng):
        ir, _ = decode(eng, {"model": "m", "input": [
            {"role": "user", "content": "q"},
            {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed", "content": [
                {"type": "output_text", "text": "Let me check.", "annotations": [
                    {"type": "url_citation", "url": "https://u", "title": "U", "start_index": 0, "end_index": 3},
                    {"type": "file_citation", "file_id": "f", "filename": "f", "index": 0}]},
                {"type": "refusal", "refusal": "not that"}]},
            {"type": "function_call", "call_id": "call_1", "name": "a", "arguments": '{"x":1}'},
            {"type": "function_call", "call_id": "call_2", "name": "b", "arguments": ""},
            {"type": "function_call_output", "call_id": "call_1", "output": "one"},
            {"type": "function_call_output", "call_id": "call_2", "output": [
                {"type": "input_text", "text": "two"}, {"type": "input_image", "image_url": "https://i", "detail": "auto"}]},
            {"role": "assistant", "content": "done"},
        ]})
        msgs = ir["messages"]
        assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "tool", "assistant"]
        assert msgs[1]["content"] == [
            {"type": "text", "text": "Let me check.", "annotations": [
                {"type": "url_citation", "url": "https://u", "title": "U", "start_index": 0, "end_index": 3}]},
            {"type": "refusal", "text": "not that"},
            {"type": "tool_call", "id": "call_1", "name": "a", "arguments": '{"x":1}'},
            {"type": "tool_call", "id": "call_2", "name": "b", "arguments": ""},
        ]
        assert msgs[2]["content"] == [{"type": "tool_result", "call_id": "call_1", "content": [{"type": "text", "text": "one"}]}]
        assert msgs[3]["content"][0]["content"] == [
            {"type": "text", "text": "two"}, {"type": "image", "source": "url", "url": "https://i", "detail": "auto"}]
        assert msgs[4]["content"] == [{"type": "text", "text": "done"}]

    def test_custom_tool_call_and_output(self, eng):
        ir, _ = decode(eng, {"model": "m", "input": [
            {"type": "custom_tool_call", "call_id": "c", "name": "patch", "input": "*** raw"},
            {"type": "custom_tool_call_output", "call_id": "c", "output": "ok"}]})
        assert ir["messages"][0]["content"] == [{"type": "tool_call", "custom": True, "id": "c", "name": "patch", "input": "*** raw"}]
        assert ir["messages"][1]["content"][0]["call_id"] == "c"

    def test_paths_name_the_client_items(self, eng):
        body = {"model": "m", "input": [{"role": "user", "content": "q"},
                                        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]}
        ir = eng.decode_request(ctx(body=body), body)
        assert ir["messages"][1]["content"][0]["_path"] == "input[1]"

    def test_reasoning_with_our_envelope_is_restored(self, eng):
        part = {"type": "reasoning", "text": "deep thought",
                "opaque": {"protocol": A, "provider": "p", "signature": "SIG=="}}
        env = continuation.wrap(_scope(ctx()), part)
        ir, c = decode(eng, {"model": "m", "input": [
            {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "deep thought"}],
             "encrypted_content": env},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]})
        assert ir["messages"][0]["content"][0] == {"type": "reasoning", "text": "deep thought",
                                                   "opaque": {"protocol": A, "provider": "p", "signature": "SIG=="}}
        assert c.traces == []

    def test_reasoning_redacted_envelope(self, eng):
        env = continuation.wrap(_scope(ctx()), {"type": "reasoning", "opaque": {"protocol": A, "provider": "p", "data": "RED"}})
        ir, _ = decode(eng, {"model": "m", "input": [{"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": env}]})
        assert ir["messages"][0]["content"] == [{"type": "reasoning", "opaque": {"protocol": A, "provider": "p", "data": "RED"}}]

    def test_reasoning_foreign_state_and_summary_text(self, eng):
        ir, c = decode(eng, {"model": "m", "input": [{"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAAAforeign",
                                                      "summary": [{"type": "summary_text", "text": "a"},
                                                                  {"type": "summary_text", "text": "b"}]}]})
        assert ir["messages"][0]["content"] == [{"type": "reasoning", "text": "a\n\nb", "summary": ["a", "b"]}]
        assert c.traces == ["foreign reasoning state skipped"]

    def test_reasoning_with_changed_text_drops_the_state(self, eng):
        env = continuation.wrap(_scope(ctx()), {"type": "reasoning", "text": "orig", "opaque": {"protocol": A, "provider": "p", "signature": "S"}})
        ir, c = decode(eng, {"model": "m", "input": [{"type": "reasoning", "id": "rs", "summary": [], "encrypted_content": env,
                                                      "content": [{"type": "reasoning_text", "text": "edited"}]}]})
        assert ir["messages"][0]["content"] == [{"type": "reasoning", "text": "edited"}]
        assert any("changed" in t for t in c.traces)

    def test_reasoning_with_nothing_is_dropped(self, eng):
        ir, _ = decode(eng, {"model": "m", "input": [{"type": "reasoning", "id": "rs", "summary": []}, {"role": "user", "content": "q"}]})
        assert ir["messages"] == [user("q")]

    def test_tools_and_tool_choice(self, eng):
        tools = [{"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}, "strict": True},
                 {"type": "function", "name": "g", "parameters": None, "strict": None},
                 {"type": "custom", "name": "h", "description": "free", "format": {"type": "text"}}]
        ir, _ = decode(eng, {"model": "m", "input": "x", "tools": tools, "tool_choice": "auto"})
        assert ir["tools"] == [{"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}, "strict": True},
                               {"type": "function", "name": "g"},
                               {"type": "custom", "name": "h", "description": "free", "format": {"type": "text"}}]
        assert ir["tool_choice"] == {"type": "auto"}
        for choice, expected in [("none", {"type": "none"}), ("required", {"type": "required"}),
                                 ({"type": "function", "name": "f"}, {"type": "tool", "name": "f"}),
                                 ({"type": "custom", "name": "h"}, {"type": "custom", "name": "h"}),
                                 ({"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "f"}, {"type": "custom", "name": "h"}]},
                                  {"type": "required", "allowed": ["f", "h"]}),
                                 ({"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "f"}]},
                                  {"type": "auto", "allowed": ["f"]})]:
            ir, _ = decode(eng, {"model": "m", "input": "x", "tools": tools, "tool_choice": choice})
            assert ir["tool_choice"] == expected

    def test_reasoning_text_format_and_verbosity(self, eng):
        ir, c = decode(eng, {"model": "m", "input": "x", "reasoning": {"effort": "minimal", "generate_summary": "concise", "context": "all_turns"},
                             "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}, "strict": True, "description": "d"},
                                      "verbosity": "low"}})
        assert ir["reasoning"] == {"effort": "minimal", "summary": "concise"}
        assert ir["response_format"] == {"type": "json_schema", "name": "n", "schema": {"type": "object"}, "strict": True, "description": "d"}
        assert ir["verbosity"] == "low"
        assert any("reasoning.context" in t for t in c.traces)
        for fmt in ({"type": "json_object"}, {"type": "text"}):
            ir, _ = decode(eng, {"model": "m", "input": "x", "text": {"format": fmt}})
            assert ir["response_format"] == fmt

    def test_advisory_fields_are_traced_without_values(self, eng):
        ir, c = decode(eng, {"model": "m", "prompt_cache_options": {"mode": "explicit"}, "input": [
            {"role": "assistant", "phase": "commentary", "content": "c"},
            {"role": "user", "content": [{"type": "input_text", "text": "SECRET", "prompt_cache_breakpoint": {"mode": "explicit"}}]}]})
        assert any("prompt_cache_options" in t for t in c.traces)
        assert any("input[0].phase" in t for t in c.traces)
        # A content part's breakpoint is carried as a cache mark (Anthropic cache_control).
        assert ir["messages"][1]["content"][0]["cache"] == {"ttl": "5m"}
        assert not any("SECRET" in t for t in c.traces)

    @pytest.mark.parametrize("extra,param", [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"prompt": {"id": "p"}}, "prompt"),
        ({"background": True}, "background"),
        ({"max_tool_calls": 2}, "max_tool_calls"),
        ({"truncation": "auto"}, "truncation"),
        ({"context_management": [{"type": "compaction"}]}, "context_management"),
        ({"moderation": {"model": "omni"}}, "moderation"),
        ({"access_programs": {"cyber": "standard"}}, "access_programs"),
        ({"tools": [{"type": "function", "name": "f", "parameters": None, "strict": None, "allowed_callers": ["programmatic"]}]}, "tools[0].allowed_callers"),
        ({"tool_choice": {"type": "web_search_preview"}}, "tool_choice"),
        ({"tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "file_search"}]}}, "tool_choice.tools[0]"),
        ({"text": {"format": {"type": "grammar"}}}, "text.format"),
    ])
    def test_rejections(self, eng, extra, param):
        body = {"model": "m", "input": "x", **extra}
        rejected(lambda: eng.decode_request(ctx(body=body), body), param)

    def test_neutral_values_pass(self, eng):
        ir, _ = decode(eng, {"model": "m", "input": "x", "truncation": "disabled", "background": False,
                             "previous_response_id": None, "tool_choice": None})
        assert ir["messages"] == [user("x")]

    @pytest.mark.parametrize("item,param", [
        ({"type": "item_reference", "id": "msg_1"}, "input[1]"),
        ({"type": "computer_call", "id": "cu", "status": "completed"}, "input[1]"),  # web_search_call: docs/web-search.md
        ({"type": "function_call_output", "output": "x"}, "input[1].call_id"),
        ({"role": "user", "content": [{"type": "input_image", "detail": "auto"}]}, "input[1].content[0]"),
        ({"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}, "input[1].content[0]"),
        ({"role": "moderator", "content": "x"}, "input[1]"),
    ])
    def test_item_rejections_name_the_item(self, eng, item, param):
        body = {"model": "m", "input": [{"role": "user", "content": "q"}, item]}
        rejected(lambda: eng.decode_request(ctx(body=body), body), param)


# =====================================================================================
# Request encode: IR -> Responses provider
# =====================================================================================


def ir_request(**kw):
    return {"model": "m", "messages": [user("q")], **kw}


class TestRequestEncode:
    def test_basics_store_and_include(self, eng):
        out, _ = encode(eng, ir_request(system=[{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
                                        stream=True, max_output_tokens=10, temperature=0.2, top_p=0.3,
                                        parallel_tool_calls=False, metadata={"a": "b"}, user="u", prompt_cache_key="k",
                                        logprobs=True, top_logprobs=2, verbosity="high", service_tier="default"))
        assert out["model"] == "m" and out["stream"] is True
        assert out["instructions"] == "A\n\nB"
        assert out["input"] == [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q"}]}]
        assert out["store"] is False
        assert out["include"] == ["reasoning.encrypted_content", "message.output_text.logprobs"]
        assert (out["max_output_tokens"], out["temperature"], out["top_p"], out["top_logprobs"]) == (10, 0.2, 0.3, 2)
        assert out["parallel_tool_calls"] is False and out["metadata"] == {"a": "b"}
        assert out["safety_identifier"] == "u" and out["prompt_cache_key"] == "k"
        assert out["text"] == {"verbosity": "high"} and out["service_tier"] == "default"

    def test_upstream_model_and_service_tier_table(self, eng):
        c = ctx(C, R, upstream_model="gpt-x")
        out = eng.encode_request(c, ir_request(service_tier="standard_only_unknown"))
        assert out["model"] == "gpt-x" and "service_tier" not in out
        out, _ = encode(eng, ir_request(service_tier="ultrafast"))
        assert out["service_tier"] == "ultrafast"

    def test_system_developer_messages_in_place(self, eng):
        out, _ = encode(eng, {"model": "m", "messages": [
            {"role": "system", "content": [{"type": "text", "text": "s"}]},
            {"role": "developer", "content": [{"type": "text", "text": "d"}]}, user("q")]})
        assert [(i["role"], i["content"][0]["text"]) for i in out["input"]] == [("system", "s"), ("developer", "d"), ("user", "q")]
        assert "instructions" not in out

    def test_assistant_turn_tool_results_and_order(self, eng):
        out, _ = encode(eng, {"model": "m", "messages": [
            user("q"),
            {"role": "assistant", "content": [
                {"type": "text", "text": "a", "annotations": [{"type": "url_citation", "url": "u", "title": "t", "start_index": 0, "end_index": 1}]},
                {"type": "refusal", "text": "r"},
                {"type": "tool_call", "id": "call_1", "name": "f", "arguments": '{"x":1}'},
                {"type": "text", "text": "b"},
                {"type": "tool_call", "id": "call_2", "name": "p", "custom": True, "input": "raw"}]},
            {"role": "tool", "content": [{"type": "tool_result", "call_id": "call_1", "is_error": True,
                                          "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]}]},
            {"role": "tool", "content": [{"type": "tool_result", "call_id": "call_2", "content": []}]},
            {"role": "tool", "content": [{"type": "tool_result", "call_id": "call_1", "content": [
                {"type": "text", "text": "img"}, {"type": "image", "source": "url", "url": "https://i"}]}]},
        ]})
        assert out["input"][1:] == [
            {"type": "message", "role": "assistant", "content": [
                {"type": "output_text", "text": "a", "annotations": [{"type": "url_citation", "url": "u", "title": "t", "start_index": 0, "end_index": 1}]},
                {"type": "refusal", "refusal": "r"}]},
            {"type": "function_call", "id": "fc_call_1", "call_id": "call_1", "name": "f", "arguments": '{"x":1}'},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "b", "annotations": []}]},
            {"type": "custom_tool_call", "call_id": "call_2", "name": "p", "input": "raw"},
            {"type": "function_call_output", "call_id": "call_1", "output": "xy"},
            {"type": "custom_tool_call_output", "call_id": "call_2", "output": ""},
            {"type": "function_call_output", "call_id": "call_1", "output": [
                {"type": "input_text", "text": "img"}, {"type": "input_image", "image_url": "https://i", "detail": "auto"}]},
        ]

    def test_user_parts(self, eng):
        out, _ = encode(eng, {"model": "m", "messages": [{"role": "user", "content": [
            {"type": "image", "source": "url", "url": "https://i", "detail": "low"},
            {"type": "image", "source": "base64", "media_type": "image/png", "data": "QUJD"},
            {"type": "document", "source": "base64", "media_type": "application/pdf", "data": "UERG", "filename": "a.pdf"},
            {"type": "document", "source": "base64", "data": "UERG", "filename": "b.pdf"},
            {"type": "document", "source": "url", "url": "https://d.pdf", "filename": "t"}]}]})
        assert out["input"][0]["content"] == [
            {"type": "input_image", "image_url": "https://i", "detail": "low"},
            {"type": "input_image", "image_url": "data:image/png;base64,QUJD", "detail": "auto"},
            {"type": "input_file", "file_data": "data:application/pdf;base64,UERG", "filename": "a.pdf"},
            {"type": "input_file", "file_data": "UERG", "filename": "b.pdf"},
            {"type": "input_file", "file_url": "https://d.pdf", "filename": "t"}]

    @pytest.mark.parametrize("part", [
        {"type": "audio", "data": "x", "format": "wav"},
        {"type": "image", "source": "file", "file_id": "f"},
        {"type": "document", "source": "file", "file_id": "f"},
        {"type": "document", "source": "text", "data": "plain"},
        {"type": "document", "source": "content"},
        {"type": "unsupported", "what": "search_result"},
    ])
    def test_unrepresentable_parts_name_the_client_field(self, eng, part):
        part = {**part, "_path": "messages[0].content[1]"}
        ir = {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "q"}, part], "_path": "messages[0]"}]}
        rejected(lambda: encode(eng, ir), "messages[0].content[1]")

    def test_tools_keep_required_null_keys(self, eng):
        out, _ = encode(eng, ir_request(tools=[{"type": "function", "name": "f"},
                                              {"type": "function", "name": "g", "description": "d", "parameters": {"type": "object"}, "strict": False},
                                              {"type": "custom", "name": "h", "format": {"type": "text"}}]))
        # parameters is required-but-nullable; strict unset is an explicit false (Responses
        # would otherwise pick strict mode for a tool written for another protocol).
        assert out["tools"] == [{"type": "function", "name": "f", "parameters": None, "strict": False},
                                {"type": "function", "name": "g", "description": "d", "parameters": {"type": "object"}, "strict": False},
                                {"type": "custom", "name": "h", "format": {"type": "text"}}]
        ir = ir_request(tools=[{"type": "hosted", "name": "web_search", "hosted_type": "web_search_20250305", "_path": "tools[0]"}])
        rejected(lambda: encode(eng, ir, hosted_tools="reject"), "tools[0]")

    @pytest.mark.parametrize("choice,expected", [
        ({"type": "none"}, "none"), ({"type": "auto"}, "auto"), ({"type": "required"}, "required"),
        ({"type": "tool", "name": "f"}, {"type": "function", "name": "f"}),
        ({"type": "custom", "name": "h"}, {"type": "custom", "name": "h"}),
        ({"type": "required", "allowed": ["f", "h"]},
         {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "f"}, {"type": "custom", "name": "h"}]}),
        ({"type": "auto", "allowed": ["f"]}, {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "f"}]}),
    ])
    def test_tool_choice(self, eng, choice, expected):
        out, _ = encode(eng, ir_request(tools=[{"type": "function", "name": "f"}, {"type": "custom", "name": "h"}], tool_choice=choice))
        assert out["tool_choice"] == expected

    def test_hosted_tool_choice_rejected(self, eng):
        rejected(lambda: encode(eng, ir_request(tool_choice={"type": "hosted"})), "tool_choice")

    def test_reasoning_and_response_format(self, eng):
        out, _ = encode(eng, ir_request(reasoning={"effort": "low", "summary": "auto", "thinking": {"type": "enabled", "budget_tokens": 1000}},
                                        response_format={"type": "json_schema", "schema": {"type": "object"}, "strict": True}))
        assert out["reasoning"] == {"effort": "low", "summary": "auto"}
        assert out["text"] == {"format": {"type": "json_schema", "name": "output", "schema": {"type": "object"}, "strict": True}}
        out, _ = encode(eng, ir_request(reasoning={"thinking": {"type": "adaptive"}}, response_format={"type": "json_object"}))
        assert "reasoning" not in out and out["text"] == {"format": {"type": "json_object"}}

    @pytest.mark.parametrize("field,value", [
        ("stop", ["END"]), ("n", 2), ("seed", 1), ("presence_penalty", 0.5), ("frequency_penalty", -1),
        ("logit_bias", {"1": 2}), ("top_k", 5)])
    def test_rejections_use_the_client_name(self, eng, field, value):
        c = ctx(A, R)
        c.param_names.update({"stop": "stop_sequences"})
        with pytest.raises(engine.InvalidRequest) as err:
            eng.encode_request(c, ir_request(**{field: value}))
        assert err.value.param == ("stop_sequences" if field == "stop" else field)

    def test_neutral_values_pass(self, eng):
        out, _ = encode(eng, ir_request(n=1, presence_penalty=0, frequency_penalty=0, logit_bias={}, stop=[]))
        assert out["input"]

    def test_name_on_message_is_advisory(self, eng):
        _, c = encode(eng, {"model": "m", "messages": [{**user("q"), "name": "bob", "_path": "messages[0]"}]})
        assert c.traces == ["dropped advisory field messages[0].name (no slot in openai_responses)"]


class TestRequestReasoningReplay:
    def _ir(self, opaque, text="thought", **extra):
        return {"model": "m", "messages": [user("q"), {"role": "assistant", "content": [
            {"type": "reasoning", "text": text, "opaque": opaque, **extra},
            {"type": "tool_call", "id": "c", "name": "f", "arguments": "{}"}]}]}

    def test_own_state_goes_back_with_content(self, eng):
        out, c = encode(eng, self._ir({"protocol": R, "provider": "p", "encrypted_content": "gAAA==", "id": "rs_9", "summary_lengths": None}))
        assert out["input"][1] == {"type": "reasoning", "id": "rs_9", "summary": [],
                                   "content": [{"type": "reasoning_text", "text": "thought"}], "encrypted_content": "gAAA=="}
        assert c.traces == []

    def test_summary_parts_rebuilt_byte_identical(self, eng):
        out, _ = encode(eng, self._ir({"protocol": R, "provider": "p", "encrypted_content": "E", "id": "rs_1", "summary_lengths": [3, 0, 4]},
                                      text="abc\n\n\n\ndéf!"))
        assert out["input"][1]["summary"] == [{"type": "summary_text", "text": "abc"}, {"type": "summary_text", "text": ""},
                                              {"type": "summary_text", "text": "déf!"}]
        assert "content" not in out["input"][1]

    @pytest.mark.parametrize("opaque", [
        {"protocol": R, "provider": "other", "encrypted_content": "E", "id": "rs"},
        {"protocol": A, "provider": "p", "signature": "S"},
        None])
    def test_foreign_or_unsigned_reasoning_is_skipped(self, eng, opaque):
        out, c = encode(eng, self._ir(opaque))
        assert [i["type"] for i in out["input"]] == ["message", "function_call"]
        assert bool(c.traces) == (opaque is not None)


# =====================================================================================
# Response decode: Responses provider -> IR
# =====================================================================================


def r_response(output, status="completed", incomplete=None, usage=True, **kw):
    body = {"id": "resp_1", "object": "response", "created_at": 1700000000, "model": "gpt-x", "status": status,
            "output": output, "incomplete_details": incomplete, "error": None, "parallel_tool_calls": True,
            "tool_choice": "auto", "tools": [], **kw}
    if usage:
        body["usage"] = {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 40, "cache_write_tokens": 10},
                         "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 7}, "total_tokens": 120}
    return body


def msg(*parts):
    return {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed", "content": list(parts)}


def otext(text, annotations=()):
    return {"type": "output_text", "text": text, "annotations": list(annotations)}


class TestResponseDecode:
    def rdec(self, eng, body, name="p"):
        return eng.decode_response(ctx(C, R, name=name), body)

    def test_text_refusal_usage(self, eng):
        ir = self.rdec(eng, r_response([msg(otext("Hi", [{"type": "url_citation", "url": "u", "title": "t", "start_index": 0, "end_index": 2},
                                                          {"type": "file_path", "file_id": "f", "index": 0}]),
                                            {"type": "refusal", "refusal": "no"}), msg(otext("again"))]))
        assert ir["id"] == "resp_1" and ir["model"] == "gpt-x" and ir["created"] == 1700000000
        assert ir["content"] == [{"type": "text", "text": "Hi", "annotations": [{"type": "url_citation", "url": "u", "title": "t", "start_index": 0, "end_index": 2}]},
                                 {"type": "refusal", "text": "no"}, {"type": "text", "text": "again"}]
        assert ir["stop"] == "end_turn"
        assert ir["usage"] == {"input_tokens": 100, "cached_tokens": 40, "cache_write_tokens": 10, "output_tokens": 20, "reasoning_tokens": 7}

    def test_function_calls_and_reasoning(self, eng):
        ir = self.rdec(eng, r_response([
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "s1"}, {"type": "summary_text", "text": "s22"}],
             "encrypted_content": "ENC"},
            {"type": "reasoning", "id": "rs_2", "summary": [{"type": "summary_text", "text": "sum"}],
             "content": [{"type": "reasoning_text", "text": "raw"}]},
            {"type": "reasoning", "id": "rs_3", "summary": [], "encrypted_content": "ONLY"},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": '{"a":1}', "status": "completed"},
            {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_2", "name": "g", "input": "free"}]))
        assert ir["content"] == [
            {"type": "reasoning", "text": "s1\n\ns22", "summary": ["s1", "s22"],
             "opaque": {"protocol": R, "provider": "p", "encrypted_content": "ENC", "id": "rs_1", "summary_lengths": [2, 3]}},
            {"type": "reasoning", "text": "raw", "summary": ["sum"]},
            {"type": "reasoning", "opaque": {"protocol": R, "provider": "p", "encrypted_content": "ONLY", "id": "rs_3"}},
            {"type": "tool_call", "id": "call_1", "name": "f", "arguments": '{"a":1}'},
            {"type": "tool_call", "custom": True, "id": "call_2", "name": "g", "input": "free"}]
        assert ir["stop"] == "tool_use"

    @pytest.mark.parametrize("status,reason,stop", [
        ("completed", None, "end_turn"),
        ("incomplete", "max_output_tokens", "max_tokens"),
        ("incomplete", "content_filter", "refusal"),
        ("incomplete", "max_messages", "incomplete"),
        ("incomplete", "steered", "incomplete"),
        ("incomplete", None, "incomplete"),
        ("failed", None, "failed"),
        ("cancelled", None, "cancelled"),
        ("queued", None, "protocol_error"),
        ("in_progress", None, "protocol_error"),
    ])
    def test_every_status(self, eng, status, reason, stop):
        body = r_response([msg(otext("x"))], status=status, incomplete={"reason": reason} if reason else None,
                          error={"code": "server_error", "message": "boom"} if status == "failed" else None)
        ir = self.rdec(eng, body)
        assert ir["stop"] == stop
        if status == "failed":
            assert ir["error"] == {"code": "server_error", "message": "boom"}

    def test_incomplete_with_function_call_keeps_incomplete(self, eng):
        ir = self.rdec(eng, r_response([{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{"}],
                                       status="incomplete", incomplete={"reason": "max_output_tokens"}))
        assert ir["stop"] == "max_tokens"

    def test_hosted_item_is_a_protocol_error(self, eng):
        with pytest.raises(engine.UpstreamProtocolError):
            self.rdec(eng, r_response([{"type": "web_search_call", "id": "ws", "status": "completed"}]))

    def test_missing_status_is_a_protocol_error(self, eng):
        body = r_response([msg(otext("x"))])
        del body["status"]
        with pytest.raises(engine.UpstreamProtocolError):
            self.rdec(eng, body)


# =====================================================================================
# Response encode: IR -> Responses client
# =====================================================================================


def ir_response(content, stop="end_turn", **kw):
    return {"id": "up1", "model": "claude-x", "created": 1700000001, "content": content, "stop": stop,
            "usage": {"input_tokens": 30, "cached_tokens": 5, "cache_write_tokens": 3, "output_tokens": 9}, **kw}


class TestResponseEncode:
    def renc(self, eng, ir, body=None, **kw):
        out = eng.encode_response(ctx(R, A, body=body, **kw), ir)
        Response.model_validate(out)  # the SDK's own type accepts it
        return out

    def test_items_ids_usage_and_echo(self, eng):
        body = {"model": "anthropic/claude-x", "tools": [{"type": "function", "name": "f", "parameters": None, "strict": None}],
                "tool_choice": "required", "parallel_tool_calls": False, "instructions": "I"}
        out = self.renc(eng, ir_response([
            {"type": "text", "text": "a"}, {"type": "refusal", "text": "r"},
            {"type": "tool_call", "id": "toolu_1", "name": "f", "arguments": "{}"},
            {"type": "text", "text": "b", "annotations": [{"type": "url_citation", "url": "u", "title": "t", "start_index": 0, "end_index": 1}]}],
            stop="tool_use"), body)
        assert out["id"] == "resp_up1" and out["object"] == "response" and out["model"] == "claude-x"
        assert out["created_at"] == 1700000001 and out["status"] == "completed"
        assert out["incomplete_details"] is None and out["error"] is None
        assert out["output"] == [
            {"id": "msg_up1_0", "type": "message", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "a", "annotations": [], "logprobs": []}, {"type": "refusal", "refusal": "r"}],
             "phase": "commentary"},
            {"id": "fc_toolu_1", "type": "function_call", "call_id": "toolu_1", "name": "f", "arguments": "{}", "status": "completed"},
            {"id": "msg_up1_2", "type": "message", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "b", "annotations": [{"type": "url_citation", "url": "u", "title": "t", "start_index": 0, "end_index": 1}],
                          "logprobs": []}], "phase": "final_answer"}]
        assert out["usage"] == {"input_tokens": 30, "input_tokens_details": {"cached_tokens": 5, "cache_write_tokens": 3},
                                "output_tokens": 9, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 39}
        assert out["tools"] == [{**body["tools"][0], "description": None}]
        assert out["tool_choice"] == "required" and out["parallel_tool_calls"] is False
        assert out["instructions"] == "I"

    def test_defaults_echo(self, eng):
        out = self.renc(eng, ir_response([{"type": "text", "text": "a"}]))
        assert out["tools"] == [] and out["tool_choice"] == "auto" and out["parallel_tool_calls"] is True
        assert {k: out[k] for k in DEFAULTS} == DEFAULTS
        assert isinstance(out["completed_at"], int)

    def test_settings_echo(self, eng):
        body = {"model": "m", "tools": [{"type": "function", "name": "f"}], "temperature": 0.2, "top_p": 0.9,
                "max_output_tokens": 64, "reasoning": {"effort": "low"}, "text": {"verbosity": "low"},
                "metadata": {"k": "v"}, "truncation": "disabled", "service_tier": "flex", "top_logprobs": 2,
                "safety_identifier": "u1", "prompt_cache_key": "pk"}
        out = self.renc(eng, ir_response([{"type": "text", "text": "a"}]), body)
        # A function tool's description, parameters and strict are required keys: unset reads null.
        assert out["tools"] == [{"type": "function", "name": "f", "description": None, "parameters": None, "strict": None}]
        assert out["reasoning"] == {"effort": "low", "summary": None}
        assert out["text"] == {"format": {"type": "text"}, "verbosity": "low"}
        for key in ("temperature", "top_p", "max_output_tokens", "metadata", "truncation", "service_tier",
                    "top_logprobs", "safety_identifier", "prompt_cache_key"):
            assert out[key] == body[key], key

    def test_both_encoders_echo_the_same_settings(self):
        """response.encode and stream.encode each hold the echo list (a $ref stays in its file)."""
        from engine import yamlsrc
        from engine.ruleset import BUILTIN_RULES

        def templates(name):
            path = BUILTIN_RULES / R / name
            return yamlsrc.load(path.read_text(), str(path))[0]["templates"]
        whole, streamed = templates("response.encode.yaml"), templates("stream.encode.yaml")
        assert whole["echo"] == streamed["echo"] and whole["echoed_tool"] == streamed["echoed_tool"]

    def test_completed_at_only_when_completed(self, eng):
        out = self.renc(eng, ir_response([{"type": "text", "text": "a"}], stop="max_tokens"))
        assert out["status"] == "incomplete" and out["completed_at"] is None

    def test_reasoning_carries_the_envelope(self, eng):
        sig = {"protocol": A, "provider": "p", "signature": "SIG"}
        red = {"protocol": A, "provider": "p", "data": "REDACTED"}
        out = self.renc(eng, ir_response([{"type": "reasoning", "text": "hmm", "opaque": sig}, {"type": "reasoning", "opaque": red},
                                          {"type": "reasoning", "text": "plain"}, {"type": "text", "text": "x"}]))
        r0, r1, r2 = out["output"][:3]
        assert (r0["id"], r1["id"], r2["id"]) == ("rs_up1_0", "rs_up1_1", "rs_up1_2")
        assert r0["summary"] == [] and r0["content"] == [{"type": "reasoning_text", "text": "hmm"}]
        assert r0["encrypted_content"].startswith("pxc1.")
        assert "content" not in r1 and r1["encrypted_content"].startswith("pxc1.")
        assert "encrypted_content" not in r2
        back = _scope(ctx())
        assert continuation.unwrap(back, r0["encrypted_content"], "hmm") == sig
        assert continuation.unwrap(back, r1["encrypted_content"], None) == red

    def test_continuation_off(self, eng):
        out = self.renc(eng, ir_response([{"type": "reasoning", "text": "hmm", "opaque": {"protocol": A, "provider": "p", "signature": "S"}},
                                          {"type": "reasoning", "opaque": {"protocol": A, "provider": "p", "data": "D"}},
                                          {"type": "text", "text": "x"}]), continuation_enabled=False)
        assert [i["type"] for i in out["output"]] == ["reasoning", "message"]
        assert "encrypted_content" not in out["output"][0]

    @pytest.mark.parametrize("stop,status,reason", [
        ("end_turn", "completed", None), ("stop_sequence", "completed", None), ("tool_use", "completed", None),
        ("pause_turn", "completed", None), ("max_tokens", "incomplete", "max_output_tokens"),
        ("context_window_exceeded", "incomplete", "max_output_tokens"), ("incomplete", "incomplete", "max_output_tokens"),
        ("refusal", "incomplete", "content_filter")])
    def test_every_stop(self, eng, stop, status, reason):
        out = self.renc(eng, ir_response([{"type": "text", "text": "x"}], stop=stop))
        assert out["status"] == status
        assert out["incomplete_details"] == ({"reason": reason} if reason else None)

    @pytest.mark.parametrize("stop", ["failed", "cancelled", "protocol_error", None])
    def test_unusable_stops_are_502(self, eng, stop):
        with pytest.raises(engine.UpstreamProtocolError):
            eng.encode_response(ctx(R, A), ir_response([{"type": "text", "text": "x"}], stop=stop))

    def test_refusal_explanation_without_text(self, eng):
        details = {"type": "refusal", "category": "cyber", "explanation": "I can't help with that."}
        out = self.renc(eng, ir_response([], stop="refusal", stop_details=details))
        assert out["status"] == "incomplete" and out["incomplete_details"] == {"reason": "content_filter"}
        assert out["output"] == [{"id": "msg_up1_0", "type": "message", "role": "assistant", "status": "completed",
                                  "content": [{"type": "refusal", "refusal": "I can't help with that."}], "phase": "final_answer"}]
        out = self.renc(eng, ir_response([{"type": "text", "text": "Partial"}], stop="refusal", stop_details=details))
        assert out["output"][0]["content"] == [{"type": "output_text", "text": "Partial", "annotations": [], "logprobs": []}]

    def test_custom_tool_call(self, eng):
        out = self.renc(eng, ir_response([{"type": "tool_call", "custom": True, "id": "c1", "name": "g", "input": "raw"}], stop="tool_use"))
        assert out["output"] == [{"type": "custom_tool_call", "id": "ctc_c1", "call_id": "c1", "name": "g", "input": "raw", "status": "completed"}]

    def test_no_usage(self, eng):
        ir = ir_response([{"type": "text", "text": "x"}])
        del ir["usage"]
        assert self.renc(eng, ir)["usage"] is None


# =====================================================================================
# Continuation: client-carried state comes back byte-identical
# =====================================================================================


class TestContinuationRoundTrip:
    def test_anthropic_state_through_a_responses_client(self, eng):
        sig = "EqQBCkgIARABGAIiQL+/signature/with+slashes=="
        ir = ir_response([{"type": "reasoning", "text": "Let me think\nabout ü", "opaque": {"protocol": A, "provider": "p", "signature": sig}},
                          {"type": "reasoning", "opaque": {"protocol": A, "provider": "p", "data": "REDACTED+DATA"}},
                          {"type": "text", "text": "Calling."},
                          {"type": "tool_call", "id": "toolu_1", "name": "f", "arguments": '{"q":1}'}], stop="tool_use")
        out = eng.encode_response(ctx(R, A), ir)
        replay = {"model": "anthropic/x", "input": [{"role": "user", "content": "q"}, *out["output"],
                                                    {"type": "function_call_output", "call_id": "toolu_1", "output": "42"}]}
        back, c = decode(eng, replay, provider=A)
        turn = back["messages"][1]["content"]
        assert turn[0]["opaque"]["signature"] == sig and turn[0]["text"] == "Let me think\nabout ü"
        assert turn[1]["opaque"]["data"] == "REDACTED+DATA" and "text" not in turn[1]
        assert [p["type"] for p in turn] == ["reasoning", "reasoning", "text", "tool_call"]
        # the message's phase (commentary: a tool call follows) has no slot at Anthropic
        assert out["output"][2]["phase"] == "commentary"
        assert c.traces == ["dropped advisory field input[3].phase (no slot in anthropic_messages)"]

    def test_other_provider_name_does_not_restore(self, eng):
        out = eng.encode_response(ctx(R, A, name="one"), ir_response([{"type": "reasoning", "text": "t", "opaque": {"protocol": A, "provider": "one", "signature": "S"}}]))
        replay = {"model": "m", "input": out["output"]}
        back, _ = decode(eng, replay, provider=A, name="two")
        # the envelope unwraps (it is ours); the provider encoder then refuses to use it
        assert back["messages"][0]["content"][0]["opaque"]["provider"] == "one"

    def test_secret_rejects_tampered_envelope(self, eng):
        out = eng.encode_response(ctx(R, A, continuation_secret="k"),
                                  ir_response([{"type": "reasoning", "text": "t", "opaque": {"protocol": A, "provider": "p", "signature": "S"}}]))
        item = out["output"][0]
        good, _ = decode(eng, {"model": "m", "input": [item]}, continuation_secret="k")
        assert good["messages"][0]["content"][0]["opaque"]["signature"] == "S"
        bad = {**item, "encrypted_content": item["encrypted_content"][:-2] + "AA"}
        back, c = decode(eng, {"model": "m", "input": [bad]}, continuation_secret="k")
        assert "opaque" not in back["messages"][0]["content"][0]
        assert any("HMAC" in t for t in c.traces)

    def test_responses_provider_state_round_trip(self, eng):
        """R provider -> IR -> (any client) -> IR -> R provider: encrypted_content, id and summary identical."""
        upstream = r_response([{"type": "reasoning", "id": "rs_abc", "encrypted_content": "gAAAAB+enc/==",
                                "summary": [{"type": "summary_text", "text": "First **bold**"}, {"type": "summary_text", "text": "Second ✓"}]},
                               {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"}])
        ir = eng.decode_response(ctx(A, R), upstream)
        part = ir["content"][0]
        env = continuation.wrap(_scope(ctx(A, R)), part)
        # a client of another protocol replays the text and the envelope
        replayed = {"type": "reasoning", "text": part["text"], "opaque": continuation.unwrap(_scope(ctx(A, R)), env, part["text"])}
        out, _ = encode(eng, {"model": "m", "messages": [user("q"), {"role": "assistant", "content": [
            replayed, {"type": "tool_call", "id": "call_1", "name": "f", "arguments": "{}"}]}]}, client=A)
        assert out["input"][1] == {"type": "reasoning", "id": "rs_abc", "encrypted_content": "gAAAAB+enc/==",
                                   "summary": upstream["output"][0]["summary"]}


# =====================================================================================
# Streams
# =====================================================================================


def _scope(c):
    from engine.template import Run, Scope
    return Scope(None, {"ctx": c.vars(), "state": {}}, "", c, Run())


def sse_events(turn, request=None):
    return [(t, d) for t, d in render_responses.events(turn, request or {})]


def ev(type_, **kw):
    return {"type": type_, **kw}


def r_stream(*body, status="completed", incomplete=None, usage=None, rid="resp_s"):
    snap = {"id": rid, "object": "response", "created_at": 1700000002, "model": "gpt-x", "status": "in_progress", "output": []}
    out = [ev("response.created", response=snap), ev("response.in_progress", response=snap), *body]
    if status is not None:
        final = {**snap, "status": status, "incomplete_details": incomplete, "usage": usage}
        out.append(ev("response.incomplete" if status == "incomplete" else "response.completed", response=final))
    return [{**e, "sequence_number": i} for i, e in enumerate(out)]


def decode_stream(eng, events, name="p"):
    run = StreamRun(eng.streams[("stream.decode", R)], ctx(C, R, name=name))
    out = []
    for e in events:
        try:
            out.extend(run.decode(json.loads(json.dumps(e))))
        except engine.UpstreamProtocolError as err:
            out.append({"type": "error", "message": err.message})
            break
    return out


def text_item(oi, iid, *pieces, done_text=None):
    at = {"item_id": iid, "output_index": oi, "content_index": 0}
    full = "".join(pieces) if done_text is None else done_text
    return [ev("response.output_item.added", output_index=oi, item={"id": iid, "type": "message", "role": "assistant", "status": "in_progress", "content": []}),
            ev("response.content_part.added", **at, part={"type": "output_text", "text": "", "annotations": []}),
            *[ev("response.output_text.delta", **at, delta=p, logprobs=[]) for p in pieces],
            ev("response.output_text.done", **at, text=full, logprobs=[]),
            ev("response.content_part.done", **at, part={"type": "output_text", "text": full, "annotations": []}),
            ev("response.output_item.done", output_index=oi, item={"id": iid, "type": "message", "role": "assistant", "status": "completed",
                                                                   "content": [{"type": "output_text", "text": full, "annotations": []}]})]


def call_item(oi, call_id, name, *pieces, done_args=None):
    iid = f"fc_{call_id}"
    args = "".join(pieces) if done_args is None else done_args
    return [ev("response.output_item.added", output_index=oi, item={"id": iid, "type": "function_call", "call_id": call_id, "name": name, "arguments": ""}),
            *[ev("response.function_call_arguments.delta", item_id=iid, output_index=oi, delta=p) for p in pieces],
            ev("response.function_call_arguments.done", item_id=iid, output_index=oi, arguments=args),
            ev("response.output_item.done", output_index=oi, item={"id": iid, "type": "function_call", "call_id": call_id, "name": name, "arguments": args})]


def types(events):
    return [e["type"] for e in events]


USAGE = {"input_tokens": 11, "input_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 2},
         "output_tokens": 6, "output_tokens_details": {"reasoning_tokens": 3}, "total_tokens": 17}


class TestStreamDecode:
    def test_text_stream_and_usage(self, eng):
        out = decode_stream(eng, r_stream(*text_item(0, "msg_1", "Hel", "", "lo"), usage=USAGE))
        assert out == [
            {"type": "message_start", "id": "resp_s", "model": "gpt-x", "created": 1700000002},
            {"type": "block_start", "index": 0, "kind": "text"},
            {"type": "block_delta", "index": 0, "kind": "text", "delta": "Hel"},
            {"type": "block_delta", "index": 0, "kind": "text", "delta": "lo"},
            {"type": "block_stop", "index": 0},
            {"type": "message_stop", "stop": "end_turn",
             "usage": {"input_tokens": 11, "cached_tokens": 4, "cache_write_tokens": 2, "output_tokens": 6, "reasoning_tokens": 3}}]

    def test_done_without_deltas(self, eng):
        out = decode_stream(eng, r_stream(*text_item(0, "m", done_text="whole"), *call_item(1, "c1", "f", done_args='{"a":1}')))
        deltas = [e["delta"] for e in out if e["type"] == "block_delta"]
        assert deltas == ["whole", '{"a":1}']
        assert out[-1]["stop"] == "tool_use"

    def test_done_text_disagreeing_with_deltas_is_traced(self, eng):
        run = StreamRun(eng.streams[("stream.decode", R)], c := ctx(C, R))
        for e in r_stream(*text_item(0, "m", "abc", done_text="abX")):
            run.decode(e)
        assert any("disagrees" in t for t in c.traces)

    def test_interleaved_parallel_calls_keep_their_keys(self, eng):
        turn = Turn(blocks=[ToolCall("call_a", "fa", '{"x":1}', chunks=['{"x"', ":1}"]), ToolCall("call_b", "fb", '{"y":2}', chunks=['{"y"', ":2}"])],
                    stop="completed", interleave_tools=True, usage=Usage())
        out = decode_stream(eng, [d for _, d in sse_events(turn)])
        starts = [e for e in out if e["type"] == "block_start"]
        assert [(s["index"], s["id"], s["name"]) for s in starts] == [(0, "call_a", "fa"), (1, "call_b", "fb")]
        by_index = {0: "", 1: ""}
        for e in out:
            if e["type"] == "block_delta":
                by_index[e["index"]] += e["delta"]
        assert by_index == {0: '{"x":1}', 1: '{"y":2}'}
        assert types(out)[-3:] == ["block_stop", "block_stop", "message_stop"] and out[-1]["stop"] == "tool_use"

    def test_call_without_arguments_gets_empty_object(self, eng):
        out = decode_stream(eng, r_stream(*call_item(0, "c", "f", done_args="")))
        assert [e.get("delta") for e in out if e["type"] == "block_delta"] == ["{}"]

    @pytest.mark.parametrize("args", ['{"a":', "[1]", "nope"])
    def test_invalid_arguments_are_an_error(self, eng, args):
        out = decode_stream(eng, r_stream(*call_item(0, "c", "f", args)))
        error = next(e for e in out if e["type"] == "error")
        assert error["status"] == 502 and "block_stop" not in types(out[: out.index(error)])

    def test_reasoning_summary_parts_and_opaque(self, eng):
        at = {"item_id": "rs_1", "output_index": 0}
        body = [ev("response.output_item.added", output_index=0, item={"id": "rs_1", "type": "reasoning", "summary": []}),
                ev("response.reasoning_summary_part.added", **at, summary_index=0, part={"type": "summary_text", "text": ""}),
                ev("response.reasoning_summary_text.delta", **at, summary_index=0, delta="One"),
                ev("response.reasoning_summary_text.done", **at, summary_index=0, text="One"),
                ev("response.reasoning_summary_part.added", **at, summary_index=1, part={"type": "summary_text", "text": ""}),
                ev("response.reasoning_summary_text.delta", **at, summary_index=1, delta="Tw"),
                ev("response.reasoning_summary_text.delta", **at, summary_index=1, delta="o"),
                # another kind for the same item: ignored (first kind wins)
                ev("response.reasoning_text.delta", **at, content_index=0, delta="raw"),
                ev("response.output_item.done", output_index=0, item={"id": "rs_1", "type": "reasoning", "encrypted_content": "ENC",
                                                                      "summary": [{"type": "summary_text", "text": "One"}, {"type": "summary_text", "text": "Two"}]}),
                *text_item(1, "msg_1", "ok")]
        out = decode_stream(eng, r_stream(*body))
        assert out[1:6] == [
            {"type": "block_start", "index": 0, "kind": "reasoning"},
            {"type": "block_delta", "index": 0, "kind": "reasoning", "delta": "One"},
            {"type": "block_delta", "index": 0, "kind": "reasoning", "delta": "\n\n"},
            {"type": "block_delta", "index": 0, "kind": "reasoning", "delta": "Tw"},
            {"type": "block_delta", "index": 0, "kind": "reasoning", "delta": "o"}]
        assert out[6] == {"type": "block_opaque", "index": 0, "opaque": {"protocol": R, "provider": "p", "encrypted_content": "ENC",
                                                                        "id": "rs_1", "summary_lengths": [3, 3]}}
        assert out[7] == {"type": "block_stop", "index": 0}

    def test_reasoning_text_done_only_and_redacted(self, eng):
        body = [ev("response.output_item.added", output_index=0, item={"id": "rs_1", "type": "reasoning", "summary": []}),
                ev("response.output_item.done", output_index=0, item={"id": "rs_1", "type": "reasoning", "summary": [],
                                                                      "content": [{"type": "reasoning_text", "text": "full"}], "encrypted_content": "E1"}),
                ev("response.output_item.added", output_index=1, item={"id": "rs_2", "type": "reasoning", "summary": []}),
                ev("response.output_item.done", output_index=1, item={"id": "rs_2", "type": "reasoning", "summary": [], "encrypted_content": "E2"}),
                ev("response.output_item.added", output_index=2, item={"id": "rs_3", "type": "reasoning", "summary": []}),
                ev("response.output_item.done", output_index=2, item={"id": "rs_3", "type": "reasoning", "summary": []})]
        out = decode_stream(eng, r_stream(*body))
        assert out[1:5] == [{"type": "block_start", "index": 0, "kind": "reasoning"},
                            {"type": "block_delta", "index": 0, "kind": "reasoning", "delta": "full"},
                            {"type": "block_opaque", "index": 0, "opaque": {"protocol": R, "provider": "p", "encrypted_content": "E1", "id": "rs_1", "summary_lengths": None}},
                            {"type": "block_stop", "index": 0}]
        assert out[5:7] == [{"type": "block_start", "index": 1, "kind": "redacted_reasoning",
                             "opaque": {"protocol": R, "provider": "p", "encrypted_content": "E2", "id": "rs_2"}},
                            {"type": "block_stop", "index": 1}]
        assert types(out[7:]) == ["message_stop"]

    def test_refusal_part(self, eng):
        at = {"item_id": "m", "output_index": 0, "content_index": 0}
        body = [ev("response.output_item.added", output_index=0, item={"id": "m", "type": "message", "role": "assistant", "content": []}),
                ev("response.content_part.added", **at, part={"type": "refusal", "refusal": ""}),
                ev("response.refusal.delta", **at, delta="No."),
                ev("response.refusal.done", **at, refusal="No."),
                ev("response.content_part.done", **at, part={"type": "refusal", "refusal": "No."}),
                ev("response.output_item.done", output_index=0, item={"id": "m", "type": "message", "content": []})]
        out = decode_stream(eng, r_stream(*body))
        assert out[1:4] == [{"type": "block_start", "index": 0, "kind": "refusal"},
                            {"type": "block_delta", "index": 0, "kind": "refusal", "delta": "No."},
                            {"type": "block_stop", "index": 0}]

    @pytest.mark.parametrize("status,reason,stop", [
        ("completed", None, "end_turn"), ("incomplete", "max_output_tokens", "max_tokens"),
        ("incomplete", "content_filter", "refusal"), ("incomplete", "max_messages", "incomplete"),
        ("incomplete", "steered", "incomplete")])
    def test_terminals(self, eng, status, reason, stop):
        out = decode_stream(eng, r_stream(*text_item(0, "m", "x"), status=status, incomplete={"reason": reason} if reason else None))
        assert out[-1]["type"] == "message_stop" and out[-1]["stop"] == stop

    def test_open_parts_are_closed_at_the_terminal(self, eng):
        body = text_item(0, "m", "x")[:3]
        out = decode_stream(eng, r_stream(*body))
        assert types(out)[-2:] == ["block_stop", "message_stop"]

    def test_error_event_and_failed(self, eng):
        out = decode_stream(eng, r_stream(*text_item(0, "m", "x"), ev("error", code="rate_limit_exceeded", message="slow down", param=None), status=None))
        assert out[-1] == {"type": "error", "status": 429, "message": "slow down", "code": "rate_limit_exceeded"}
        out = decode_stream(eng, r_stream(ev("response.failed", response={"id": "resp_s", "status": "failed",
                                                                           "error": {"code": "server_error", "message": "boom"}}), status=None))
        assert out[-1] == {"type": "error", "status": 500, "message": "boom", "code": "server_error"}
        out = decode_stream(eng, r_stream(ev("error", message="odd"), status=None))
        assert out[-1] == {"type": "error", "status": 502, "message": "odd"}

    def test_hosted_items_and_early_content_are_errors(self, eng):
        out = decode_stream(eng, r_stream(ev("response.output_item.added", output_index=0, item={"id": "ws", "type": "web_search_call"}), status=None))
        assert out[-1]["type"] == "error"
        out = decode_stream(eng, [ev("response.output_text.delta", item_id="m", output_index=0, content_index=0, delta="x")])
        assert out[-1]["type"] == "error"

    def test_duplicate_created_is_ignored(self, eng):
        events = r_stream(*text_item(0, "m", "x"))
        out = decode_stream(eng, events[:1] + events)
        assert types(out).count("message_start") == 1


# --- stream encode ------------------------------------------------------------------

_PASS = """
kind: stream.decode
protocol: openai_chat_completions
on:
  message_start: [{steps: [{emit: ["@"]}]}]
  block_start: [{steps: [{emit: ["@"]}]}]
  block_delta: [{steps: [{emit: ["@"]}]}]
  block_opaque: [{steps: [{emit: ["@"]}]}]
  block_stop: [{steps: [{emit: ["@"]}]}]
  message_stop: [{steps: [{emit: ["@"]}]}]
  error: [{steps: [{emit: ["@"]}]}]
"""


def ir_translator(eng, c):
    """IR events in (as if a provider decoder produced them), Responses SSE out."""
    from engine import yamlsrc
    from engine.hooks import HOOKS
    doc, _ = yamlsrc.load(_PASS, "ir-pass")
    decoder = StreamRules(doc, Compiler("ir-pass", HOOKS, eng.tables, {}))
    return StreamTranslator(decoder, eng.streams[("stream.encode", R)], c)


def encode_stream(eng, ir_events, body=None, eof=False, **kw):
    c = ctx(R, A, body=body or {}, **kw)
    st = ir_translator(eng, c)
    raw = b""
    for e in ir_events:
        raw += b"".join(st.feed(SSEEvent(None, json.dumps(e))))
    if eof:
        raw += b"".join(st.eof())
    parser = SSEParser()
    out = []
    for sse in parser.feed(raw):
        data = json.loads(sse.data)
        assert sse.event == data["type"]
        out.append(data)
    return out, st


def sdk_accumulate(events, tools=()):
    """Run the official SDK's stream state machine over the events; returns (state, final response or None)."""
    state = ResponseStreamState(input_tools=list(tools), text_format=omit)
    for e in events:
        state.handle_event(construct_type(type_=ResponseStreamEvent, value=e))
    return state


def start(id="up", model="claude-x"):
    return {"type": "message_start", "id": id, "model": model, "created": 1700000003}


def b_start(i, kind, **kw):
    return {"type": "block_start", "index": i, "kind": kind, **kw}


def b_delta(i, kind, delta):
    return {"type": "block_delta", "index": i, "kind": kind, "delta": delta}


def b_stop(i):
    return {"type": "block_stop", "index": i}


def m_stop(stop="end_turn", usage=None, **kw):
    return {"type": "message_stop", "stop": stop, "usage": usage or {"input_tokens": 10, "output_tokens": 4, "cached_tokens": 2}, **kw}


class TestStreamEncode:
    def test_full_sequence_is_accepted_by_the_sdk(self, eng):
        sig = {"protocol": A, "provider": "p", "signature": "SIG"}
        events, st = encode_stream(eng, [
            start(),
            b_start(0, "reasoning"), b_delta(0, "reasoning", "Think"), b_delta(0, "reasoning", ""), {"type": "block_opaque", "index": 0, "opaque": sig}, b_stop(0),
            b_start(1, "text"), b_delta(1, "text", "Hi "), b_delta(1, "text", "there"), b_stop(1),
            b_start(2, "refusal"), b_delta(2, "refusal", "nope"), b_stop(2),
            b_start(3, "tool_call", id="toolu_1", name="f"), b_delta(3, "tool_call", '{"a"'), b_delta(3, "tool_call", ":1}"), b_stop(3),
            m_stop("tool_use")], body={"tools": [{"type": "function", "name": "f", "parameters": None, "strict": None}]})
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        assert types(events) == [
            "response.created", "response.in_progress",
            "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
            "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
            "response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
            "response.output_text.done", "response.content_part.done",
            "response.content_part.added", "response.refusal.delta", "response.refusal.done", "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
            "response.function_call_arguments.done", "response.output_item.done",
            "response.completed"]
        state = sdk_accumulate(events, [{"type": "function", "name": "f", "parameters": None, "strict": None}])
        final = events[-1]["response"]
        assert final["id"] == "resp_up" and final["status"] == "completed" and final["model"] == "claude-x"
        assert [i["id"] for i in final["output"]] == ["rs_up_0", "msg_up_1", "fc_toolu_1"]
        assert final["output"][0]["encrypted_content"].startswith("pxc1.")
        assert continuation.unwrap(_scope(ctx()), final["output"][0]["encrypted_content"], "Think") == sig
        assert final["output"][1]["content"] == [{"type": "output_text", "text": "Hi there", "annotations": [], "logprobs": []},
                                                 {"type": "refusal", "refusal": "nope"}]
        assert final["output"][2]["arguments"] == '{"a":1}'
        assert final["usage"] == {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 2, "cache_write_tokens": 0},
                                  "output_tokens": 4, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 14}
        assert final["tools"][0]["name"] == "f"
        Response.model_validate(final)
        assert st.complete and not st.failed

    def test_every_snapshot_echoes_the_settings(self, eng):
        events, _ = encode_stream(eng, [start(), b_start(0, "text"), b_delta(0, "text", "x"), b_stop(0), m_stop()],
                                  body={"tools": [{"type": "function", "name": "f"}]})
        snapshots = [e["response"] for e in events if "response" in e]
        assert [s["status"] for s in snapshots] == ["in_progress", "in_progress", "completed"]
        for snapshot in snapshots:
            assert {k: snapshot[k] for k in DEFAULTS} == DEFAULTS
            assert snapshot["tools"] == [{"type": "function", "name": "f", "description": None, "parameters": None, "strict": None}]
        assert snapshots[0]["completed_at"] is None and isinstance(snapshots[-1]["completed_at"], int)

    def test_interleaved_calls_do_not_overlap(self, eng):
        events, _ = encode_stream(eng, [
            start(), b_start(0, "tool_call", id="a", name="fa"), b_start(1, "tool_call", id="b", name="fb"),
            b_delta(0, "tool_call", '{"x"'), b_delta(1, "tool_call", '{"y"'), b_delta(0, "tool_call", ":1}"), b_delta(1, "tool_call", ":2}"),
            b_stop(0), b_stop(1), m_stop("tool_use")])
        open_items, seen = set(), []
        for e in events:
            if e["type"] == "response.output_item.added":
                assert not open_items
                open_items.add(e["output_index"])
            elif e["type"] == "response.output_item.done":
                open_items.discard(e["output_index"])
                seen.append((e["output_index"], e["item"]["call_id"], e["item"]["arguments"]))
        assert seen == [(0, "a", '{"x":1}'), (1, "b", '{"y":2}')]
        sdk_accumulate(events)

    def test_redacted_reasoning_and_start_text(self, eng):
        red = {"protocol": A, "provider": "p", "data": "RED"}
        events, _ = encode_stream(eng, [start(), b_start(0, "redacted_reasoning", opaque=red), b_stop(0),
                                        b_start(1, "text", text="Hello"), b_stop(1), m_stop()])
        done = [e for e in events if e["type"] == "response.output_item.done"]
        assert done[0]["item"]["type"] == "reasoning" and "content" not in done[0]["item"]
        assert continuation.unwrap(_scope(ctx()), done[0]["item"]["encrypted_content"], None) == red
        assert done[1]["item"]["content"][0]["text"] == "Hello"
        sdk_accumulate(events)

    def test_continuation_off_skips_state(self, eng):
        events, _ = encode_stream(eng, [start(), b_start(0, "redacted_reasoning", opaque={"protocol": A, "provider": "p", "data": "R"}), b_stop(0),
                                        b_start(1, "reasoning"), b_delta(1, "reasoning", "t"),
                                        {"type": "block_opaque", "index": 1, "opaque": {"protocol": A, "provider": "p", "signature": "S"}}, b_stop(1),
                                        m_stop()], continuation_enabled=False)
        final = events[-1]["response"]
        assert len(final["output"]) == 1 and final["output"][0]["type"] == "reasoning"
        assert "encrypted_content" not in final["output"][0]
        assert [e["output_index"] for e in events if e["type"] == "response.output_item.added"] == [0]
        sdk_accumulate(events)

    @pytest.mark.parametrize("stop,event,status,reason", [
        ("end_turn", "response.completed", "completed", None), ("stop_sequence", "response.completed", "completed", None),
        ("pause_turn", "response.completed", "completed", None), ("tool_use", "response.completed", "completed", None),
        ("max_tokens", "response.incomplete", "incomplete", "max_output_tokens"),
        ("context_window_exceeded", "response.incomplete", "incomplete", "max_output_tokens"),
        ("incomplete", "response.incomplete", "incomplete", "max_output_tokens"),
        ("refusal", "response.incomplete", "incomplete", "content_filter")])
    def test_every_stop(self, eng, stop, event, status, reason):
        events, _ = encode_stream(eng, [start(), b_start(0, "text"), b_delta(0, "text", "x"), b_stop(0), m_stop(stop)])
        assert events[-1]["type"] == event
        assert events[-1]["response"]["status"] == status
        assert events[-1]["response"]["incomplete_details"] == ({"reason": reason} if reason else None)
        sdk_accumulate(events)

    @pytest.mark.parametrize("stop", ["failed", "cancelled", "protocol_error"])
    def test_unusable_stop_fails(self, eng, stop):
        events, st = encode_stream(eng, [start(), b_start(0, "text"), b_delta(0, "text", "x"), b_stop(0), m_stop(stop)])
        assert types(events)[-2:] == ["error", "response.failed"]
        assert events[-1]["response"]["status"] == "failed" and events[-1]["response"]["error"]["code"] == "server_error"

    def test_refusal_explanation_item(self, eng):
        details = {"type": "refusal", "category": None, "explanation": "Not allowed."}
        events, _ = encode_stream(eng, [start(), m_stop("refusal", stop_details=details)])
        assert types(events)[2:] == ["response.output_item.added", "response.content_part.added", "response.refusal.delta",
                                     "response.refusal.done", "response.content_part.done", "response.output_item.done",
                                     "response.incomplete"]
        assert events[-1]["response"]["output"][0]["content"] == [{"type": "refusal", "refusal": "Not allowed."}]
        sdk_accumulate(events)
        # text already streamed: no refusal wording is added
        events, _ = encode_stream(eng, [start(), b_start(0, "text"), b_delta(0, "text", "Sure"), b_stop(0), m_stop("refusal", stop_details=details)])
        assert "response.refusal.delta" not in types(events)
        assert events[-1]["response"]["incomplete_details"] == {"reason": "content_filter"}

    def test_error_mid_stream(self, eng):
        events, st = encode_stream(eng, [start(), b_start(0, "text"), b_delta(0, "text", "partial"),
                                          {"type": "error", "status": 429, "message": "slow", "code": "rate_limit"}])
        assert types(events)[-2:] == ["error", "response.failed"]
        assert events[-2] == {"type": "error", "code": "rate_limit", "message": "slow", "param": None, "sequence_number": len(events) - 2}
        failed = events[-1]["response"]
        assert failed["status"] == "failed" and failed["error"] == {"code": "rate_limit_exceeded", "message": "slow"}
        assert failed["output"][0]["type"] == "message"
        assert st.failed and not st.complete
        state = sdk_accumulate(events)
        assert state._completed_response is None  # the SDK never sees a completed response

    def test_error_before_start_still_opens_the_response(self, eng):
        events, _ = encode_stream(eng, [{"type": "error", "status": 500, "message": "down"}])
        assert types(events) == ["response.created", "response.in_progress", "error", "response.failed"]
        assert events[-1]["response"]["error"]["code"] == "server_error"
        sdk_accumulate(events)

    def test_eof_before_terminal_is_a_failure(self, eng):
        events, st = encode_stream(eng, [start(), b_start(0, "text"), b_delta(0, "text", "x")], eof=True)
        assert types(events)[-2:] == ["error", "response.failed"]
        assert st.failed and not st.complete

    def test_unicode_deltas_are_forwarded_whole(self, eng):
        events, _ = encode_stream(eng, [start(), b_start(0, "text"), b_delta(0, "text", "héllo "), b_delta(0, "text", "🌍"), b_stop(0), m_stop()])
        assert [e["delta"] for e in events if e["type"] == "response.output_text.delta"] == ["héllo ", "🌍"]
        assert events[-1]["response"]["output"][0]["content"][0]["text"] == "héllo 🌍"


class TestStreamResponsesToResponses:
    """The decoder and encoder compose: a mock Responses stream through both is SDK-valid."""

    def test_mock_stream_round_trip(self, eng):
        from proxai.mock import Reasoning, Text
        turn = Turn(blocks=[Reasoning("plan", encrypted_content="ENC", summary=True), Text("Hello", chunks=["He", "llo"]),
                            ToolCall("c1", "f", '{"a":1}', chunks=['{"a"', ":1}"]), ToolCall("c2", "g", "{}")],
                    stop="completed", interleave_tools=True, usage=Usage(50, 9, 20, 5, 2))
        c = ctx(R, R)
        st = eng.open_stream(c)
        raw = b""
        for t, d in sse_events(turn):
            raw += b"".join(st.feed(SSEEvent(t, json.dumps(d))))
        events = [json.loads(s.data) for s in SSEParser().feed(raw)]
        sdk_accumulate(events)
        final = events[-1]["response"]
        assert [i["type"] for i in final["output"]] == ["reasoning", "message", "function_call", "function_call"]
        assert final["usage"]["input_tokens_details"] == {"cached_tokens": 20, "cache_write_tokens": 5}

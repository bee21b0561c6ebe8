"""The OpenAI Chat Completions codec, engine level (no network): every mapping row that
touches Chat, in each direction, every rejection, and the stream decoder and encoder.

The codec is loaded on its own (Chat rule files + the shared tables) so these tests
exercise exactly rules/openai_chat_completions and engine/hooks/chat.py. Streams are
checked event by event, and the encoded stream once more through the OpenAI SDK's own
chunk accumulator.
"""
from __future__ import annotations

import copy
import json
import shutil

import orjson
import pytest
from openai.lib.streaming.chat._completions import ChatCompletionStreamState

import engine
from ir_helpers import strip_paths as strip
from engine.hooks import HOOKS
from engine.hooks import continuation
from engine.ruleset import BUILTIN_RULES
from engine.stream import StreamRules, StreamRun, StreamTranslator
from engine.template import Compiler
from proxai.http.sse import SSEEvent

CHAT = "openai_chat_completions"
ANTHROPIC = "anthropic_messages"
RESPONSES = "openai_responses"
SHARED_TABLES = ("enums", "errors", "stop_reasons", CHAT)
IR_EVENTS = ("message_start", "block_start", "block_delta", "block_opaque", "block_stop", "message_stop", "error")


@pytest.fixture(scope="module")
def eng(tmp_path_factory):
    root = tmp_path_factory.mktemp("chat_rules")
    (root / "tables").mkdir()
    for name in SHARED_TABLES:
        shutil.copy(BUILTIN_RULES / "tables" / f"{name}.yaml", root / "tables")
    shutil.copytree(BUILTIN_RULES / CHAT, root / CHAT)
    return engine.Engine.load(builtin_dir=root)


def make_ctx(client=CHAT, provider=CHAT, body=None, **kw):
    return engine.Context(client_protocol=client, provider_protocol=provider, provider_name="p",
                          client_body=body if body is not None else {}, **kw)




def decode(eng, body, provider=ANTHROPIC, **kw):
    """Chat client request -> IR (the provider only matters for continuation)."""
    ctx = make_ctx(CHAT, provider, body, **kw)
    return eng.decode_request(ctx, copy.deepcopy(body)), ctx


def encode(eng, ir, client=RESPONSES, **kw):
    """IR request -> Chat provider request."""
    ctx = make_ctx(client, CHAT, {}, **kw)
    return eng.encode_request(ctx, copy.deepcopy(ir)), ctx


def chat_body(*messages, **extra):
    return {"model": "gpt-x", "messages": list(messages), **extra}


def user(text="hi"):
    return {"role": "user", "content": text}


# ======================================================================================
# Requests: Chat client -> IR
# ======================================================================================


class TestRequestDecode:
    def test_system_and_developer_stay_in_place_with_their_role(self, eng):
        ir, _ = decode(eng, chat_body(
            {"role": "system", "content": "be brief"}, user(),
            {"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "name": "ops"}))
        assert "system" not in ir
        assert strip(ir["messages"]) == [
            {"role": "system", "content": [{"type": "text", "text": "be brief"}]},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "developer", "name": "ops", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        ]

    def test_non_text_part_in_system_message_is_rejected_naming_it(self, eng):
        body = chat_body({"role": "system", "content": [{"type": "image_url", "image_url": {"url": "http://x/i.png"}}]})
        with pytest.raises(engine.InvalidRequest) as err:
            decode(eng, body)
        assert err.value.param == "messages[0].content[0]"

    def test_user_parts(self, eng):
        ir, _ = decode(eng, chat_body({"role": "user", "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "https://x/cat.png", "detail": "high"}},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}},
            {"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}},
            {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBER", "filename": "a.pdf"}},
            {"type": "file", "file": {"file_data": "JVBER", "filename": "b.pdf"}},
            {"type": "file", "file": {"file_id": "file-1"}},
        ]}))
        parts = ir["messages"][0]["content"]
        assert strip(parts) == [
            {"type": "text", "text": "look"},
            {"type": "image", "source": "url", "url": "https://x/cat.png", "detail": "high"},
            {"type": "image", "source": "base64", "media_type": "image/png", "data": "iVBOR"},
            {"type": "audio", "data": "UklG", "format": "wav"},
            {"type": "document", "source": "base64", "media_type": "application/pdf", "data": "JVBER", "filename": "a.pdf"},
            {"type": "document", "source": "base64", "data": "JVBER", "filename": "b.pdf"},
            {"type": "document", "source": "file", "file_id": "file-1"},
        ]
        # Each part knows the client's field, so a provider encoder can name it.
        assert [p["_path"] for p in parts] == [f"messages[0].content[{i}]" for i in range(7)]

    def test_malformed_data_url_is_rejected(self, eng):
        with pytest.raises(engine.InvalidRequest) as err:
            decode(eng, chat_body({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png,nobase64"}}]}))
        assert err.value.param == "messages[0].content[0]"

    def test_unknown_user_part_is_rejected_naming_it(self, eng):
        with pytest.raises(engine.InvalidRequest) as err:
            decode(eng, chat_body(user(), {"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "video", "video": {}}]}))
        assert err.value.param == "messages[1].content[1]"
        assert "video" in err.value.message

    def test_assistant_history_text_refusal_tool_calls(self, eng):
        ir, _ = decode(eng, chat_body(user(), {
            "role": "assistant", "content": [{"type": "text", "text": "A"}, {"type": "refusal", "refusal": "no"}],
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get", "arguments": "{\"q\":1}"}},
                {"id": "call_2", "type": "custom", "custom": {"name": "sh", "input": "ls -la"}},
            ]}))
        msg = ir["messages"][1]
        assert msg["role"] == "assistant"
        assert strip(msg["content"]) == [
            {"type": "text", "text": "A"},
            {"type": "refusal", "text": "no"},
            {"type": "tool_call", "id": "call_1", "name": "get", "arguments": "{\"q\":1}"},
            {"type": "tool_call", "custom": True, "id": "call_2", "name": "sh", "input": "ls -la"},
        ]
        assert msg["content"][2]["_path"] == "messages[1].tool_calls[0]"

    def test_assistant_string_content_and_refusal_field(self, eng):
        ir, _ = decode(eng, chat_body(user(), {"role": "assistant", "content": "", "refusal": "I can't"},
                                      {"role": "assistant", "content": "hello"}))
        assert strip(ir["messages"][1]["content"]) == [{"type": "refusal", "text": "I can't"}]
        assert strip(ir["messages"][2]["content"]) == [{"type": "text", "text": "hello"}]

    def test_unsigned_reasoning_content_is_plain_reasoning_first(self, eng):
        ir, ctx = decode(eng, chat_body(user(), {"role": "assistant", "content": "ok", "reasoning_content": "let me think"}))
        assert strip(ir["messages"][1]["content"]) == [
            {"type": "reasoning", "text": "let me think"}, {"type": "text", "text": "ok"}]

    def test_tool_message_becomes_tool_result(self, eng):
        ir, _ = decode(eng, chat_body(
            {"role": "tool", "tool_call_id": "call_1", "content": "42"},
            {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}))
        assert strip(ir["messages"]) == [
            {"role": "tool", "content": [{"type": "tool_result", "call_id": "call_1", "content": [{"type": "text", "text": "42"}]}]},
            {"role": "tool", "content": [{"type": "tool_result", "call_id": "call_2",
                                          "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]},
        ]

    def test_tool_message_without_call_id_is_rejected(self, eng):
        with pytest.raises(engine.InvalidRequest) as err:
            decode(eng, chat_body({"role": "tool", "content": "42"}))
        assert err.value.param == "messages[0].tool_call_id"

    def test_tools_and_tool_choice(self, eng):
        tools = [
            {"type": "function", "function": {"name": "get", "description": "d", "parameters": {"type": "object"}, "strict": True}},
            {"type": "custom", "custom": {"name": "sh", "format": {"type": "text"}}},
        ]
        ir, _ = decode(eng, chat_body(user(), tools=tools, parallel_tool_calls=False))
        assert strip(ir["tools"]) == [
            {"type": "function", "name": "get", "description": "d", "parameters": {"type": "object"}, "strict": True},
            {"type": "custom", "name": "sh", "format": {"type": "text"}},
        ]
        assert ir["parallel_tool_calls"] is False
        cases = {
            "none": {"type": "none"}, "auto": {"type": "auto"}, "required": {"type": "required"},
            json.dumps({"type": "function", "function": {"name": "get"}}): {"type": "tool", "name": "get"},
            json.dumps({"type": "custom", "custom": {"name": "sh"}}): {"type": "custom", "name": "sh"},
            json.dumps({"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
                {"type": "function", "function": {"name": "get"}}, {"type": "custom", "custom": {"name": "sh"}}]}}):
                {"type": "required", "allowed": ["get", "sh"]},
        }
        for choice, expected in cases.items():
            value = choice if choice in ("none", "auto", "required") else json.loads(choice)
            ir, _ = decode(eng, chat_body(user(), tools=tools, tool_choice=value))
            assert ir["tool_choice"] == expected, choice

    def test_scalar_params(self, eng):
        ir, _ = decode(eng, chat_body(
            user(), max_completion_tokens=100, max_tokens=5, temperature=0.5, top_p=0.9, stop="END", n=1, seed=7,
            presence_penalty=0.1, frequency_penalty=0.2, logit_bias={"50256": -100}, logprobs=True, top_logprobs=2,
            reasoning_effort="high", verbosity="low", metadata={"k": "v"}, user="u-1", service_tier="flex",
            store=True, prompt_cache_key="pc", stream=True, stream_options={"include_usage": True}))
        expected = {
            "max_output_tokens": 100, "temperature": 0.5, "top_p": 0.9, "stop": ["END"], "n": 1, "seed": 7,
            "presence_penalty": 0.1, "frequency_penalty": 0.2, "logit_bias": {"50256": -100}, "logprobs": True,
            "top_logprobs": 2, "reasoning": {"effort": "high"}, "verbosity": "low", "metadata": {"k": "v"},
            "user": "u-1", "service_tier": "flex", "store": True, "prompt_cache_key": "pc", "stream": True,
            "include_usage": True, "model": "gpt-x"}
        for key, value in expected.items():
            assert ir[key] == value, key

    def test_deprecated_spellings(self, eng):
        ir, _ = decode(eng, chat_body(user(), max_tokens=5, user="old", safety_identifier="new", stop=["a", "b"]))
        assert (ir["max_output_tokens"], ir["user"], ir["stop"]) == (5, "new", ["a", "b"])
        ir, _ = decode(eng, chat_body(user(), user="old"))
        assert ir["user"] == "old"

    def test_response_format(self, eng):
        schema = {"type": "object", "properties": {"a": {"type": "string"}}}
        rf = {"type": "json_schema", "json_schema": {"name": "thing", "schema": schema, "strict": True, "description": "d"}}
        ir, _ = decode(eng, chat_body(user(), response_format=rf))
        assert ir["response_format"] == {"type": "json_schema", "name": "thing", "schema": schema, "strict": True, "description": "d"}
        for kind in ("json_object", "text"):
            ir, _ = decode(eng, chat_body(user(), response_format={"type": kind}))
            assert ir["response_format"] == {"type": kind}

    @pytest.mark.parametrize("extra,param", [
        ({"functions": [{"name": "f"}]}, "functions"),
        ({"function_call": "auto"}, "function_call"),
        ({"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"web_search_options": {}}, "web_search_options"),
    ])
    def test_top_level_fields_without_a_slot_are_rejected(self, eng, extra, param):
        with pytest.raises(engine.InvalidRequest) as err:
            decode(eng, chat_body(user(), **extra))
        assert err.value.param == param
        assert err.value.status == 400

    @pytest.mark.parametrize("message,param", [
        ({"role": "function", "name": "f", "content": "x"}, "messages[1]"),
        ({"role": "assistant", "function_call": {"name": "f", "arguments": "{}"}}, "messages[1].function_call"),
        ({"role": "assistant", "audio": {"id": "audio_1"}}, "messages[1].audio"),
        ({"role": "wizard", "content": "x"}, "messages[1]"),
    ])
    def test_legacy_and_unknown_messages_are_rejected(self, eng, message, param):
        with pytest.raises(engine.InvalidRequest) as err:
            decode(eng, chat_body(user(), message))
        assert err.value.param == param

    def test_neutral_values_pass(self, eng):
        ir, _ = decode(eng, chat_body(user(), functions=[], modalities=["text"]))
        assert strip(ir["messages"]) == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]

    def test_advisory_fields_are_dropped_with_a_trace(self, eng):
        ir, ctx = decode(eng, chat_body(user(), prediction={"type": "content", "content": "x"},
                                        prompt_cache_options={"mode": "explicit"}, prompt_cache_retention="24h"))
        assert "prediction" not in ir
        assert any("prediction" in t for t in ctx.traces)
        assert any("prompt_cache_options" in t for t in ctx.traces)
        # Retention is a cache hint with slots elsewhere (Responses; 1h breakpoints toward Anthropic).
        assert ir["prompt_cache_retention"] == "24h"
        assert not any("x" == t for t in ctx.traces)

    def test_client_field_names_are_recorded_for_provider_rejections(self, eng):
        _, ctx = decode(eng, chat_body(user(), max_completion_tokens=3))
        assert ctx.param_names["max_output_tokens"] == "max_completion_tokens"
        assert ctx.param_names["reasoning"] == "reasoning_effort"


# ======================================================================================
# Requests: IR -> Chat provider
# ======================================================================================


def ir_request(*messages, **extra):
    return {"model": "m", "messages": list(messages), **extra}


def ir_user(*parts):
    return {"role": "user", "content": list(parts) or [{"type": "text", "text": "hi"}]}


class TestRequestEncode:
    def test_top_level_system_becomes_one_leading_system_message(self, eng):
        out, _ = encode(eng, ir_request(ir_user(), system=[{"type": "text", "text": "one"}]))
        assert out["messages"][0] == {"role": "system", "content": "one"}
        out, _ = encode(eng, ir_request(
            ir_user(), {"role": "developer", "content": [{"type": "text", "text": "dev"}]},
            system=[{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]))
        assert out["messages"] == [
            {"role": "system", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "user", "content": "hi"},
            {"role": "developer", "content": "dev"},
        ]

    def test_non_text_in_a_system_message_is_rejected(self, eng):
        ir = ir_request({"role": "system", "_path": "input[0]", "content": [
            {"type": "image", "source": "url", "url": "http://x", "_path": "input[0].content[1]"}]})
        with pytest.raises(engine.InvalidRequest) as err:
            encode(eng, ir)
        assert err.value.param == "input[0].content[1]"

    def test_user_parts(self, eng):
        out, _ = encode(eng, ir_request(ir_user(
            {"type": "text", "text": "t"},
            {"type": "image", "source": "url", "url": "https://x/i.png", "detail": "low"},
            {"type": "image", "source": "base64", "media_type": "image/png", "data": "iVBOR"},
            {"type": "document", "source": "base64", "media_type": "application/pdf", "data": "JVBER", "filename": "a.pdf"},
            {"type": "document", "source": "base64", "data": "JVBER", "filename": "raw.pdf"},
            {"type": "audio", "data": "UklG", "format": "mp3"})))
        assert out["messages"][0]["content"] == [
            {"type": "text", "text": "t"},
            {"type": "image_url", "image_url": {"url": "https://x/i.png", "detail": "low"}},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}},
            {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBER", "filename": "a.pdf"}},
            {"type": "file", "file": {"file_data": "JVBER", "filename": "raw.pdf"}},
            {"type": "input_audio", "input_audio": {"data": "UklG", "format": "mp3"}},
        ]

    @pytest.mark.parametrize("part", [
        {"type": "image", "source": "file", "file_id": "f"},
        {"type": "document", "source": "url", "url": "https://x/a.pdf"},
        {"type": "document", "source": "file", "file_id": "f"},
        {"type": "document", "source": "text", "data": "plain"},
        {"type": "document", "source": "content"},
        {"type": "unsupported", "what": "search_result"},
    ])
    def test_unrepresentable_user_parts_are_rejected_naming_the_client_field(self, eng, part):
        ir = ir_request({"role": "user", "_path": "messages[2]", "content": [
            {"type": "text", "text": "x", "_path": "messages[2].content[0]"}, {**part, "_path": "messages[2].content[1]"}]})
        with pytest.raises(engine.InvalidRequest) as err:
            encode(eng, ir)
        assert err.value.param == "messages[2].content[1]"
        assert err.value.status == 400

    def test_assistant_text_refusal_calls_and_reasoning(self, eng):
        out, ctx = encode(eng, ir_request(ir_user(), {"role": "assistant", "content": [
            {"type": "reasoning", "text": "think 1", "opaque": {"protocol": ANTHROPIC, "provider": "p", "signature": "SIG"}},
            {"type": "text", "text": "a"},
            {"type": "tool_call", "id": "toolu_1", "name": "get", "arguments": "{\"q\":1}"},
            {"type": "reasoning", "text": "think 2"},
            {"type": "refusal", "text": "no"},
            {"type": "text", "text": "b"},
            {"type": "tool_call", "custom": True, "id": "call_c", "name": "sh", "input": "ls"},
        ]}))
        assert out["messages"][1] == {
            "role": "assistant",
            "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            "refusal": "no",
            "tool_calls": [
                {"id": "toolu_1", "type": "function", "function": {"name": "get", "arguments": "{\"q\":1}"}},
                # A free-form call replays as a call of the function it is sent as.
                {"id": "call_c", "type": "function", "function": {"name": "sh", "arguments": "{\"input\":\"ls\"}"}},
            ],
            # Visible reasoning goes as plain text; the signature never leaves its provider.
            "reasoning_content": "think 1\n\nthink 2",
        }
        assert "SIG" not in json.dumps(out)

    def test_assistant_with_only_tool_calls_has_no_content(self, eng):
        out, _ = encode(eng, ir_request(ir_user(), {"role": "assistant", "content": [
            {"type": "tool_call", "id": "c", "name": "f", "arguments": ""}]}))
        assert out["messages"][1] == {"role": "assistant", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": ""}}]}

    def test_unrepresentable_assistant_part_is_rejected(self, eng):
        ir = ir_request({"role": "assistant", "_path": "input[1]", "content": [
            {"type": "unsupported", "what": "server_tool_use", "_path": "messages[1].content[0]"}]})
        with pytest.raises(engine.InvalidRequest) as err:
            encode(eng, ir)
        assert err.value.param == "messages[1].content[0]"

    def test_tool_results_become_one_tool_message_each(self, eng):
        out, _ = encode(eng, ir_request(
            {"role": "tool", "content": [{"type": "tool_result", "call_id": "c1", "is_error": True,
                                          "content": [{"type": "text", "text": "boom"}]}]},
            {"role": "tool", "content": [{"type": "tool_result", "call_id": "c2", "content": []}]}))
        assert out["messages"] == [
            {"role": "tool", "tool_call_id": "c1", "content": "boom"},
            {"role": "tool", "tool_call_id": "c2", "content": ""},
        ]

    def test_image_in_a_tool_result_follows_in_a_user_message(self, eng):
        def result(call, *parts):
            return {"role": "tool", "content": [{"type": "tool_result", "call_id": call, "content": list(parts)}]}
        ir = ir_request(result("c1", {"type": "text", "text": "shot"}, {"type": "image", "source": "url", "url": "https://x/i.png"}),
                        result("c2", {"type": "image", "source": "base64", "media_type": "image/png", "data": "AAAA"}),
                        result("c3", {"type": "text", "text": "plain"}),
                        ir_user({"type": "text", "text": "next"}))
        out, _ = encode(eng, ir)
        assert out["messages"] == [
            {"role": "tool", "tool_call_id": "c1", "content": "shot"},
            {"role": "tool", "tool_call_id": "c2", "content": "(attached in the next user message)"},
            {"role": "tool", "tool_call_id": "c3", "content": "plain"},
            {"role": "user", "content": [
                {"type": "text", "text": "Attachments of tool result c1:"},
                {"type": "image_url", "image_url": {"url": "https://x/i.png"}},
                {"type": "text", "text": "Attachments of tool result c2:"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
            {"role": "user", "content": "next"},
        ]

    def test_tools(self, eng):
        out, _ = encode(eng, ir_request(ir_user(), tools=[
            {"type": "function", "name": "get", "description": "d", "parameters": {"type": "object"}, "strict": True},
            {"type": "function", "name": "bare"},
            {"type": "custom", "name": "sh", "format": {"type": "text"}},
        ], parallel_tool_calls=False))
        assert out["tools"] == [
            {"type": "function", "function": {"name": "get", "description": "d", "parameters": {"type": "object"}, "strict": True}},
            {"type": "function", "function": {"name": "bare"}},
            # Free-form tools go out as a function with one string parameter (most Chat
            # servers have no custom tools).
            {"type": "function", "function": {"name": "sh", "description": "Pass the free-form input as the string parameter `input`.",
                                              "parameters": {"type": "object", "properties": {"input": {
                                                  "type": "string", "description": "The tool's free-form input, verbatim (not JSON)."}},
                                                  "required": ["input"], "additionalProperties": False},
                                              "strict": False}},
        ]
        assert out["parallel_tool_calls"] is False

    def test_parallel_tool_calls_needs_tools(self, eng):
        out, _ = encode(eng, ir_request(ir_user(), parallel_tool_calls=True))
        assert "parallel_tool_calls" not in out

    def test_hosted_tool_is_rejected_naming_its_type(self, eng):
        ir = ir_request(ir_user(), tools=[{"type": "function", "name": "a", "_path": "tools[0]"},
                                          {"type": "hosted", "name": "web_search", "hosted_type": "web_search_20250305", "_path": "tools[1]"}])
        with pytest.raises(engine.InvalidRequest) as err:
            encode(eng, ir, hosted_tools="reject")
        assert err.value.param == "tools[1]"
        out, c = encode(eng, ir)  # the default policy: left out, with a trace
        assert [t["function"]["name"] for t in out["tools"]] == ["a"]
        assert c.dropped_tools == ["web_search_20250305"] and any("web_search_20250305" in t for t in c.traces)

    def test_tool_choice(self, eng):
        tools = [{"type": "function", "name": "get"}, {"type": "custom", "name": "sh"}]
        cases = [
            ({"type": "none"}, "none"), ({"type": "auto"}, "auto"), ({"type": "required"}, "required"),
            ({"type": "tool", "name": "get"}, {"type": "function", "function": {"name": "get"}}),
            ({"type": "custom", "name": "sh"}, {"type": "function", "function": {"name": "sh"}}),
            ({"type": "auto", "allowed": ["sh", "get"]}, {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [
                {"type": "function", "function": {"name": "sh"}}, {"type": "function", "function": {"name": "get"}}]}}),
        ]
        for choice, expected in cases:
            out, _ = encode(eng, ir_request(ir_user(), tools=tools, tool_choice=choice))
            assert out["tool_choice"] == expected, choice

    def test_hosted_tool_choice_is_rejected(self, eng):
        with pytest.raises(engine.InvalidRequest) as err:
            encode(eng, ir_request(ir_user(), tool_choice={"type": "hosted", "name": "web_search_preview"}))
        assert err.value.param == "tool_choice"

    @pytest.mark.parametrize("field,value", [
        ("top_k", 5), ("max_tool_calls", 3), ("truncation", "auto"), ("background", True),
        ("previous_response_id", "resp_1"), ("conversation", "conv_1"), ("stop", ["a", "b", "c", "d", "e"]),
    ])
    def test_top_level_rejections_use_the_client_field_name(self, eng, field, value):
        ctx = make_ctx(ANTHROPIC, CHAT, {})
        ctx.param_names.update({"stop": "stop_sequences"})
        with pytest.raises(engine.InvalidRequest) as err:
            eng.encode_request(ctx, ir_request(ir_user(), **{field: value}))
        assert err.value.param == ("stop_sequences" if field == "stop" else field)

    def test_neutral_values_are_not_rejected(self, eng):
        out, _ = encode(eng, ir_request(ir_user(), truncation="disabled", background=False, stop=["a", "b", "c", "d"]))
        assert out["stop"] == ["a", "b", "c", "d"]
        assert "truncation" not in out and "background" not in out

    def test_scalars_and_renames(self, eng):
        out, ctx = encode(eng, ir_request(
            ir_user(), max_output_tokens=64, temperature=1.5, top_p=0.5, stop=["x"], n=2, seed=1, presence_penalty=0.5,
            frequency_penalty=0.25, logit_bias={"1": 2}, logprobs=True, top_logprobs=3, reasoning={"effort": "minimal", "summary": "auto"},
            verbosity="high", metadata={"a": "b"}, user="u", service_tier="ultrafast", prompt_cache_key="k", store=True, stream=True),
            upstream_model="gpt-upstream")
        assert out == {
            "model": "gpt-upstream", "messages": [{"role": "user", "content": "hi"}],
            "max_completion_tokens": 64, "temperature": 1.5, "top_p": 0.5, "stop": ["x"], "n": 2, "seed": 1,
            "presence_penalty": 0.5, "frequency_penalty": 0.25, "logit_bias": {"1": 2}, "logprobs": True, "top_logprobs": 3,
            "reasoning_effort": "minimal", "verbosity": "high", "metadata": {"a": "b"}, "safety_identifier": "u",
            "prompt_cache_key": "k", "stream": True, "stream_options": {"include_usage": True},
        }
        # store means server-side state to a Responses client: dropped with a trace.
        assert any("store" in t for t in ctx.traces)

    @pytest.mark.parametrize("effort", ["none", "minimal", "low", "medium", "high", "xhigh", "max"])
    def test_every_reasoning_effort(self, eng, effort):
        out, _ = encode(eng, ir_request(ir_user(), reasoning={"effort": effort}))
        assert out["reasoning_effort"] == effort

    def test_response_format(self, eng):
        out, _ = encode(eng, ir_request(ir_user(), response_format={"type": "json_schema", "schema": {"type": "object"}, "strict": True}))
        assert out["response_format"] == {"type": "json_schema", "json_schema": {"name": "output", "schema": {"type": "object"}, "strict": True}}
        out, _ = encode(eng, ir_request(ir_user(), response_format={"type": "json_object"}))
        assert out["response_format"] == {"type": "json_object"}

    def test_chat_request_survives_a_round_trip(self, eng):
        body = chat_body(
            {"role": "system", "content": "s"}, user("q"),
            {"role": "assistant", "content": "a", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "r"},
            tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
            tool_choice="required", max_completion_tokens=9, temperature=0.2, stop=["z"], response_format={"type": "json_object"})
        ir, _ = decode(eng, body, provider=CHAT)
        out, _ = encode(eng, ir, client=CHAT)
        assert out == body


# ======================================================================================
# Responses: Chat provider -> IR
# ======================================================================================


def completion(message=None, finish="stop", usage=None, **extra):
    body = {"id": "chatcmpl-up", "object": "chat.completion", "created": 1700000000, "model": "gpt-up",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": None, **(message or {})}, "finish_reason": finish}]}
    if usage is not None:
        body["usage"] = usage
    body.update(extra)
    return body


class TestResponseDecode:
    def decode(self, eng, body):
        return eng.decode_response(make_ctx(ANTHROPIC, CHAT), body)

    def test_tool_calls_with_finish_stop_are_a_tool_use_stop(self, eng):
        # Several OpenAI-compatible servers end a tool-call turn with "stop".
        calls = [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
        assert self.decode(eng, completion({"content": None, "tool_calls": calls}, finish="stop"))["stop"] == "tool_use"
        assert self.decode(eng, completion({"content": "hi"}, finish="stop"))["stop"] == "end_turn"
        assert self.decode(eng, completion({"content": None, "tool_calls": calls}, finish="length"))["stop"] == "max_tokens"

    def test_message_parts_in_order(self, eng):
        ir = self.decode(eng, completion({
            "content": "Hello", "refusal": None, "reasoning_content": "thought",
            "annotations": [{"type": "url_citation", "url_citation": {"url": "https://x", "title": "X", "start_index": 0, "end_index": 5}}],
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}},
                           {"id": "call_2", "type": "custom", "custom": {"name": "sh", "input": "ls"}}]}, finish="tool_calls"))
        assert ir["id"] == "chatcmpl-up" and ir["model"] == "gpt-up" and ir["created"] == 1700000000
        assert ir["content"] == [
            {"type": "reasoning", "text": "thought"},
            {"type": "text", "text": "Hello", "annotations": [{"type": "url_citation", "url": "https://x", "title": "X", "start_index": 0, "end_index": 5}]},
            {"type": "tool_call", "id": "call_1", "name": "f", "arguments": "{\"a\":1}"},
            {"type": "tool_call", "custom": True, "id": "call_2", "name": "sh", "input": "ls"},
        ]
        assert ir["stop"] == "tool_use"

    def test_refusal(self, eng):
        ir = self.decode(eng, completion({"refusal": "I can't help"}, finish="stop"))
        assert ir["content"] == [{"type": "refusal", "text": "I can't help"}]

    @pytest.mark.parametrize("finish,stop", [
        ("stop", "end_turn"), ("length", "max_tokens"), ("tool_calls", "tool_use"),
        ("content_filter", "refusal"), ("function_call", "protocol_error"), (None, "protocol_error")])
    def test_every_finish_reason(self, eng, finish, stop):
        assert self.decode(eng, completion({"content": "x"}, finish=finish))["stop"] == stop

    def test_unknown_finish_reason_is_an_upstream_error(self, eng):
        with pytest.raises(engine.UpstreamProtocolError):
            self.decode(eng, completion({"content": "x"}, finish="sleepy"))

    def test_usage_with_cache_and_reasoning(self, eng):
        ir = self.decode(eng, completion({"content": "x"}, usage={
            "prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
            "prompt_tokens_details": {"cached_tokens": 60, "cache_write_tokens": 10, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 7}}))
        assert ir["usage"] == {"input_tokens": 100, "cached_tokens": 60, "cache_write_tokens": 10, "output_tokens": 20, "reasoning_tokens": 7}

    @pytest.mark.parametrize("choices", [
        [],
        [{"index": 0, "message": {"content": "a"}, "finish_reason": "stop"}, {"index": 1, "message": {"content": "b"}, "finish_reason": "stop"}],
        [{"index": 1, "message": {"content": "a"}, "finish_reason": "stop"}],
    ])
    def test_anything_but_one_choice_at_index_0_is_an_upstream_error(self, eng, choices):
        body = completion()
        body["choices"] = choices
        with pytest.raises(engine.UpstreamProtocolError) as err:
            self.decode(eng, body)
        assert err.value.status == 502


# ======================================================================================
# Responses: IR -> Chat client
# ======================================================================================


def ir_response(*content, stop="end_turn", **extra):
    return {"id": "msg_01", "model": "claude-x", "content": list(content), "stop": stop, **extra}


class TestResponseEncode:
    def encode(self, eng, ir, **kw):
        return eng.encode_response(make_ctx(CHAT, ANTHROPIC, {}, **kw), copy.deepcopy(ir))

    def test_text_and_envelope(self, eng):
        out = self.encode(eng, ir_response({"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}, created=1700000000.7))
        assert out["id"] == "chatcmpl-msg_01"
        assert out["object"] == "chat.completion"
        assert out["created"] == 1700000000
        assert out["model"] == "claude-x"
        assert out["choices"] == [{"index": 0, "message": {"role": "assistant", "content": "Hello", "refusal": None},
                                   "logprobs": None, "finish_reason": "stop"}]

    def test_created_defaults_to_now(self, eng):
        out = self.encode(eng, ir_response({"type": "text", "text": "x"}))
        assert isinstance(out["created"], int) and out["created"] > 1_600_000_000

    def test_tool_calls_after_text(self, eng):
        out = self.encode(eng, ir_response(
            {"type": "tool_call", "id": "toolu_1", "name": "f", "arguments": "{\"a\":1}"},
            {"type": "text", "text": "calling"},
            {"type": "tool_call", "id": "toolu_2", "name": "g", "arguments": "{}"}, stop="tool_use"))
        msg = out["choices"][0]["message"]
        assert msg["content"] == "calling"
        assert msg["tool_calls"] == [
            {"id": "toolu_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}},
            {"id": "toolu_2", "type": "function", "function": {"name": "g", "arguments": "{}"}}]
        assert out["choices"][0]["finish_reason"] == "tool_calls"

    def test_refusal_parts_go_to_refusal_never_content(self, eng):
        out = self.encode(eng, ir_response({"type": "refusal", "text": "I can't"}, {"type": "refusal", "text": " do that"}))
        msg = out["choices"][0]["message"]
        assert msg["refusal"] == "I can't do that" and msg["content"] is None

    def test_anthropic_refusal_without_text_uses_the_explanation(self, eng):
        details = {"type": "refusal", "category": "cyber", "explanation": "Policy says no."}
        out = self.encode(eng, ir_response(stop="refusal", stop_details=details))
        assert out["choices"][0]["message"] == {"role": "assistant", "content": None, "refusal": "Policy says no."}
        assert out["choices"][0]["finish_reason"] == "content_filter"

    def test_anthropic_refusal_after_text_keeps_the_text_only(self, eng):
        details = {"type": "refusal", "category": None, "explanation": "Policy says no."}
        out = self.encode(eng, ir_response({"type": "text", "text": "Sure, here"}, stop="refusal", stop_details=details))
        assert out["choices"][0]["message"] == {"role": "assistant", "content": "Sure, here", "refusal": None}
        assert out["choices"][0]["finish_reason"] == "content_filter"

    @pytest.mark.parametrize("stop,finish", [
        ("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"), ("context_window_exceeded", "length"),
        ("tool_use", "tool_calls"), ("pause_turn", "stop"), ("refusal", "content_filter"), ("incomplete", "length")])
    def test_every_stop(self, eng, stop, finish):
        out = self.encode(eng, ir_response({"type": "text", "text": "x"}, stop=stop))
        assert out["choices"][0]["finish_reason"] == finish

    @pytest.mark.parametrize("stop", ["failed", "cancelled", "protocol_error"])
    def test_failed_stops_are_upstream_errors(self, eng, stop):
        with pytest.raises(engine.UpstreamProtocolError) as err:
            self.encode(eng, ir_response({"type": "text", "text": "x"}, stop=stop, error={"code": "server_error", "message": "it broke"}))
        assert err.value.status == 502
        if stop == "failed":
            assert "it broke" in err.value.message

    def test_usage(self, eng):
        out = self.encode(eng, ir_response({"type": "text", "text": "x"}, usage={
            "input_tokens": 130, "cached_tokens": 100, "cache_write_tokens": 20, "output_tokens": 9, "reasoning_tokens": 4}))
        assert out["usage"] == {
            "prompt_tokens": 130, "completion_tokens": 9, "total_tokens": 139,
            "prompt_tokens_details": {"cached_tokens": 100, "cache_write_tokens": 20},
            "completion_tokens_details": {"reasoning_tokens": 4}}
        out = self.encode(eng, ir_response({"type": "text", "text": "x"}, usage={"input_tokens": 3, "output_tokens": 1}))
        assert out["usage"] == {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}

    def test_annotations_are_shifted_onto_the_joined_content(self, eng):
        out = self.encode(eng, ir_response(
            {"type": "text", "text": "abc"},
            {"type": "text", "text": "defg", "annotations": [{"type": "url_citation", "url": "u", "title": "T", "start_index": 0, "end_index": 4}]}))
        assert out["choices"][0]["message"]["annotations"] == [
            {"type": "url_citation", "url_citation": {"url": "u", "title": "T", "start_index": 3, "end_index": 7}}]

    def test_plain_reasoning_without_state(self, eng):
        out = self.encode(eng, ir_response({"type": "reasoning", "text": "hmm"}, {"type": "text", "text": "x"}))
        assert out["choices"][0]["message"]["reasoning_content"] == "hmm"

    def test_continuation_off_carries_only_visible_reasoning(self, eng):
        ir = ir_response({"type": "reasoning", "text": "hmm", "opaque": {"protocol": ANTHROPIC, "provider": "p", "signature": "S"}},
                         {"type": "text", "text": "x"})
        out = self.encode(eng, ir, continuation_enabled=False)
        assert out["choices"][0]["message"]["reasoning_content"] == "hmm"


# ======================================================================================
# Continuation: the Chat carrier (reasoning_content suffix) round-trips the provider state
# ======================================================================================


INTERLEAVED = [
    {"type": "reasoning", "text": "first thought", "opaque": {"protocol": ANTHROPIC, "provider": "p", "signature": "SIG-1/+=="}},
    {"type": "tool_call", "id": "toolu_1", "name": "a", "arguments": "{\"x\":1}"},
    {"type": "reasoning", "text": None, "opaque": {"protocol": ANTHROPIC, "provider": "p", "data": "REDACTED-\u00e9=="}},
    {"type": "reasoning", "text": "second thought", "opaque": {"protocol": ANTHROPIC, "provider": "p", "signature": "SIG-2"}},
    {"type": "text", "text": "done"},
    {"type": "tool_call", "id": "toolu_2", "name": "b", "arguments": "{}"},
]


def replay(eng, message, provider=ANTHROPIC, provider_name="p", **kw):
    """The Chat client sends an assistant message back: the IR parts the provider encoder sees."""
    body = chat_body(user(), message, {"role": "tool", "tool_call_id": "toolu_1", "content": "r"})
    ctx = engine.Context(client_protocol=CHAT, provider_protocol=provider, provider_name=provider_name, client_body=body, **kw)
    return eng.decode_request(ctx, copy.deepcopy(body))["messages"][1]["content"], ctx


class TestContinuation:
    def test_non_streaming_round_trip_restores_blocks_in_order_byte_identical(self, eng):
        out = eng.encode_response(make_ctx(CHAT, ANTHROPIC), ir_response(*copy.deepcopy(INTERLEAVED), stop="tool_use"))
        message = out["choices"][0]["message"]
        assert message["reasoning_content"].startswith("first thought\n\nsecond thought\n\npxc1.")
        assert "SIG-1" not in message["reasoning_content"]  # encoded, not echoed raw
        parts, _ = replay(eng, message)
        assert strip(parts) == INTERLEAVED

    def test_foreign_provider_gets_plain_reasoning_only(self, eng):
        out = eng.encode_response(make_ctx(CHAT, ANTHROPIC), ir_response(*copy.deepcopy(INTERLEAVED), stop="tool_use"))
        parts, ctx = replay(eng, out["choices"][0]["message"], provider=RESPONSES, provider_name="other")
        # The envelope still restores the layout; the encoder for another provider drops the state (usable()).
        scope = type("S", (), {"ctx": ctx})()
        assert all(not continuation.usable(scope, opaque=p.get("opaque")) for p in parts if p["type"] == "reasoning")

    def test_edited_reasoning_text_drops_its_signature(self, eng):
        out = eng.encode_response(make_ctx(CHAT, ANTHROPIC), ir_response(*copy.deepcopy(INTERLEAVED), stop="tool_use"))
        message = out["choices"][0]["message"]
        message["reasoning_content"] = message["reasoning_content"].replace("first thought", "first THOUGHT")
        parts, ctx = replay(eng, message)
        reasoning = [p for p in parts if p["type"] == "reasoning"]
        assert {"type": "reasoning", "text": "first THOUGHT"} in [strip(p) for p in reasoning]
        assert any("changed" in t for t in ctx.traces)

    def test_tampered_envelope_is_foreign(self, eng):
        message = {"role": "assistant", "content": "x", "reasoning_content": "thought\n\npxc1.AAAA"}
        parts, ctx = replay(eng, message)
        assert all("opaque" not in p for p in parts)

    def test_hmac_secret_rejects_an_unsigned_envelope(self, eng):
        out = eng.encode_response(make_ctx(CHAT, ANTHROPIC), ir_response(*copy.deepcopy(INTERLEAVED), stop="tool_use"))
        parts, ctx = replay(eng, out["choices"][0]["message"], continuation_secret="k")
        assert all("opaque" not in p for p in parts)
        assert any("HMAC" in t for t in ctx.traces)

    def test_responses_encrypted_content_round_trips(self, eng):
        opaque = {"protocol": RESPONSES, "provider": "p", "encrypted_content": "gAAAA-enc", "id": "rs_1", "summary_lengths": [3, 4]}
        out = eng.encode_response(make_ctx(CHAT, RESPONSES), ir_response(
            {"type": "reasoning", "text": "abc\n\ndefg", "opaque": opaque}, {"type": "text", "text": "hi"}))
        parts, _ = replay(eng, out["choices"][0]["message"], provider=RESPONSES)
        assert strip(parts) == [{"type": "reasoning", "text": "abc\n\ndefg", "opaque": opaque}, {"type": "text", "text": "hi"}]


# ======================================================================================
# Streams: Chat provider chunks -> IR events
# ======================================================================================


def chunk(delta=None, finish=None, usage=None, choices=True, id="chatcmpl-up"):
    body = {"id": id, "object": "chat.completion.chunk", "created": 1700000000, "model": "gpt-up"}
    body["choices"] = [{"index": 0, "delta": delta if delta is not None else {}, "finish_reason": finish, "logprobs": None}] if choices else []
    if usage is not None:
        body["usage"] = usage
    return body


def tool(index, id=None, name=None, args=None):
    call = {"index": index}
    if id:
        call.update(id=id, type="function")
    function = {}
    if name:
        function["name"] = name
    if args is not None:
        function["arguments"] = args
    call["function"] = function
    return chunk({"tool_calls": [call]})


DONE = {"type": "[DONE]"}
FIRST = chunk({"role": "assistant", "content": ""})


def run_decoder(eng, payloads, eof=False):
    ctx = make_ctx(RESPONSES, CHAT)
    translator = StreamTranslator(eng.streams[("stream.decode", CHAT)], _ir_sink(eng), ctx)
    events = []
    for payload in payloads:
        data = "[DONE]" if payload is DONE else json.dumps(payload)
        events += [orjson.loads(b[6:]) for b in translator.feed(SSEEvent(None, data))]
    if eof:
        events += [orjson.loads(b[6:]) for b in translator.eof()]
    return events, translator


def _ir_sink(eng):
    """An 'encoder' that writes IR events out as they are, to observe a decoder through the engine."""
    doc = {"kind": "stream.encode", "protocol": CHAT, "sse": "data", "on": {e: [{"steps": [{"emit": ["@"]}]}] for e in IR_EVENTS}}
    return StreamRules(doc, Compiler("ir_sink", HOOKS, eng.tables))


def _ir_source(eng):
    """A 'decoder' that reads IR events from the wire as they are, to drive an encoder through the engine."""
    doc = {"kind": "stream.decode", "protocol": ANTHROPIC, "on": {e: [{"steps": [{"emit": ["@"]}]}] for e in IR_EVENTS}}
    return StreamRules(doc, Compiler("ir_source", HOOKS, eng.tables))


def kinds(events):
    return [(e["type"], e.get("index")) for e in events]


class TestStreamDecode:
    def test_tool_calls_with_finish_stop_are_a_tool_use_stop(self, eng):
        events, st = run_decoder(eng, [FIRST, tool(0, "call_1", "f", "{}"), chunk({}, "stop"), DONE])
        assert st.stop == "tool_use"
        events, st = run_decoder(eng, [FIRST, chunk({"content": "x"}), chunk({}, "stop"), DONE])
        assert st.stop == "end_turn"

    def test_tool_calls_without_index_are_told_apart_by_id(self, eng):
        # Some OpenAI-compatible servers omit tool_calls[].index and send each call whole.
        def call(id=None, name=None, args=None):
            body = {"function": {k: v for k, v in (("name", name), ("arguments", args)) if v is not None}}
            if id:
                body.update(id=id, type="function")
            return chunk({"tool_calls": [body]})
        events, st = run_decoder(eng, [FIRST, call("call_a", "f", '{"a":'), call(args="1}"), call("call_b", "g", "{}"),
                                       chunk({}, "tool_calls"), DONE])
        starts = [(e["index"], e["id"]) for e in events if e["type"] == "block_start"]
        deltas = [(e["index"], e["delta"]) for e in events if e["type"] == "block_delta"]
        assert starts == [(0, "call_a"), (1, "call_b")]
        assert deltas == [(0, '{"a":'), (0, "1}"), (1, "{}")]
        assert st.complete and st.stop == "tool_use"

    def test_text_stream_with_usage_chunk(self, eng):
        events, st = run_decoder(eng, [
            FIRST, chunk({"content": "Hel"}), chunk({"content": ""}), chunk({"content": "lo"}), chunk({}, "stop"),
            chunk(choices=False, usage={"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 4}}), DONE])
        assert events == [
            {"type": "message_start", "id": "chatcmpl-up", "model": "gpt-up", "created": 1700000000},
            {"type": "block_start", "index": 0, "kind": "text"},
            {"type": "block_delta", "index": 0, "kind": "text", "delta": "Hel"},
            {"type": "block_delta", "index": 0, "kind": "text", "delta": "lo"},
            {"type": "block_stop", "index": 0},
            {"type": "message_stop", "stop": "end_turn", "usage": {"input_tokens": 10, "cached_tokens": 4, "output_tokens": 2}},
        ]
        assert st.complete and st.usage == {"input_tokens": 10, "cached_tokens": 4, "output_tokens": 2}

    def test_the_stop_is_held_until_usage_done_or_eof(self, eng):
        events, st = run_decoder(eng, [FIRST, chunk({"content": "x"}), chunk({}, "stop")])
        assert events[-1] == {"type": "block_stop", "index": 0} and not st.complete
        events, st = run_decoder(eng, [FIRST, chunk({"content": "x"}), chunk({}, "stop"), DONE])
        assert events[-1] == {"type": "message_stop", "stop": "end_turn"} and st.complete
        # decisions.md #12: EOF right after finish_reason counts as complete.
        events, st = run_decoder(eng, [FIRST, chunk({"content": "x"}), chunk({}, "length")], eof=True)
        assert events[-1] == {"type": "message_stop", "stop": "max_tokens"} and st.complete

    def test_usage_on_the_finish_chunk_is_accepted(self, eng):
        events, _ = run_decoder(eng, [FIRST, chunk({"content": "x"}, usage={"prompt_tokens": 1, "completion_tokens": 9}),
                                      chunk({}, "stop", usage={"prompt_tokens": 5, "completion_tokens": 6}), DONE])
        assert events[-1]["usage"] == {"input_tokens": 5, "output_tokens": 6}

    def test_usage_before_finish_is_not_a_terminal(self, eng):
        events, st = run_decoder(eng, [FIRST, chunk({"content": "x"}), chunk(choices=False, usage={"prompt_tokens": 1, "completion_tokens": 1})])
        assert not st.complete and events[-1]["type"] == "block_delta"

    def test_eof_before_finish_is_an_incomplete_stream(self, eng):
        events, st = run_decoder(eng, [FIRST, chunk({"content": "x"})], eof=True)
        assert events[-1]["type"] == "error" and events[-1]["status"] == 502
        assert st.failed and not st.complete

    def test_done_without_finish_infers_the_stop(self, eng):
        # Several OpenRouter providers never send finish_reason: the stream is otherwise whole.
        events, st = run_decoder(eng, [FIRST, chunk({"content": "x"}), DONE])
        assert events[-2:] == [{"type": "block_stop", "index": 0}, {"type": "message_stop", "stop": "end_turn"}]
        assert st.complete
        assert any("without finish_reason" in t for t in st.ctx.traces)
        events, st = run_decoder(eng, [FIRST, tool(0, "call_a", "get", '{"q": 1}'),
                                       chunk({"content": ""}, usage={"prompt_tokens": 3, "completion_tokens": 4}), DONE])
        assert events[-1] == {"type": "message_stop", "stop": "tool_use", "usage": {"input_tokens": 3, "output_tokens": 4}}

    def test_done_without_finish_still_checks_tool_arguments(self, eng):
        events, st = run_decoder(eng, [FIRST, tool(0, "call_a", "get", '{"q": '), DONE])
        assert events[-1]["type"] == "error" and st.failed and not st.complete

    def test_done_before_any_content_is_an_error(self, eng):
        for payloads in ([DONE], [FIRST, DONE]):
            events, st = run_decoder(eng, payloads)
            assert events[-1]["type"] == "error" and st.failed and not st.complete

    def test_azure_leading_filter_chunk_and_empty_id(self, eng):
        azure = {"choices": [], "created": 0, "id": "", "model": "", "object": "",
                 "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {}}]}
        events, st = run_decoder(eng, [azure, FIRST, chunk({"content": "x"}), chunk({}, "stop"), DONE])
        assert events[0] == {"type": "message_start", "id": "chatcmpl-up", "model": "gpt-up", "created": 1700000000}
        assert st.complete
        # the integrity check that matters stays: a second real id within one stream
        events, st = run_decoder(eng, [FIRST, chunk({"content": "x"}, id="chatcmpl-other")])
        assert events[-1]["type"] == "error" and st.failed

    def test_kinds_switch_closes_the_open_block(self, eng):
        events, _ = run_decoder(eng, [
            FIRST, chunk({"reasoning_content": "think"}), chunk({"reasoning_content": "ing"}), chunk({"content": "A"}),
            chunk({"refusal": "no"}), chunk({"content": "B"}), chunk({}, "stop"), DONE])
        assert kinds(events) == [
            ("message_start", None), ("block_start", 0), ("block_delta", 0), ("block_delta", 0), ("block_stop", 0),
            ("block_start", 1), ("block_delta", 1), ("block_stop", 1), ("block_start", 2), ("block_delta", 2), ("block_stop", 2),
            ("block_start", 3), ("block_delta", 3), ("block_stop", 3), ("message_stop", None)]
        assert [e["kind"] for e in events if e["type"] == "block_start"] == ["reasoning", "text", "refusal", "text"]

    def test_interleaved_parallel_tool_calls(self, eng):
        events, st = run_decoder(eng, [
            FIRST, chunk({"content": "Calling"}),
            tool(0, "call_a", "get", ""), tool(1, "call_b", "put", "{\"k\""),
            tool(0, args="{\"q\":"), tool(1, args=":\"v\"}"), tool(0, args="\"x\"}"), tool(2, "call_c", "noargs"),
            chunk({}, "tool_calls"), DONE])
        assert events[1:] == [
            {"type": "block_start", "index": 0, "kind": "text"},
            {"type": "block_delta", "index": 0, "kind": "text", "delta": "Calling"},
            {"type": "block_stop", "index": 0},
            {"type": "block_start", "index": 1, "kind": "tool_call", "id": "call_a", "name": "get"},
            {"type": "block_start", "index": 2, "kind": "tool_call", "id": "call_b", "name": "put"},
            {"type": "block_delta", "index": 2, "kind": "tool_call", "delta": "{\"k\""},
            {"type": "block_delta", "index": 1, "kind": "tool_call", "delta": "{\"q\":"},
            {"type": "block_delta", "index": 2, "kind": "tool_call", "delta": ":\"v\"}"},
            {"type": "block_delta", "index": 1, "kind": "tool_call", "delta": "\"x\"}"},
            {"type": "block_start", "index": 3, "kind": "tool_call", "id": "call_c", "name": "noargs"},
            {"type": "block_stop", "index": 1},
            {"type": "block_stop", "index": 2},
            # A call that streamed no arguments still gets a JSON object.
            {"type": "block_delta", "index": 3, "kind": "tool_call", "delta": "{}"},
            {"type": "block_stop", "index": 3},
            {"type": "message_stop", "stop": "tool_use"},
        ]
        assert st.complete

    def test_tool_arguments_in_progress_are_observable_for_the_stall_timer(self, eng):
        _, st = run_decoder(eng, [FIRST, tool(0, "c", "f", "{")])
        assert st.in_tool_arguments
        _, st = run_decoder(eng, [FIRST, tool(0, "c", "f", "{}"), chunk({}, "tool_calls")])
        assert not st.in_tool_arguments

    @pytest.mark.parametrize("args", ["{\"a\":", "[1, 2]", "nope"])
    def test_invalid_tool_arguments_end_the_stream_with_an_error(self, eng, args):
        events, st = run_decoder(eng, [FIRST, tool(0, "c", "f", args), chunk({}, "tool_calls"), DONE])
        assert events[-1]["type"] == "error" and events[-1]["status"] == 502
        assert "arguments" in events[-1]["message"]
        assert st.failed and not any(e["type"] == "message_stop" for e in events)

    def test_new_tool_fragment_without_id_is_an_error(self, eng):
        events, st = run_decoder(eng, [FIRST, tool(0, args="{}")])
        assert events[-1]["type"] == "error" and st.failed

    @pytest.mark.parametrize("finish,stop", [
        ("stop", "end_turn"), ("length", "max_tokens"), ("tool_calls", "tool_use"), ("content_filter", "refusal"),
        ("function_call", "protocol_error")])
    def test_every_finish_reason(self, eng, finish, stop):
        events, _ = run_decoder(eng, [FIRST, chunk({"content": "x"}), chunk({}, finish), DONE])
        assert events[-1] == {"type": "message_stop", "stop": stop}

    def test_finish_and_content_in_one_chunk(self, eng):
        events, _ = run_decoder(eng, [chunk({"role": "assistant", "content": "all at once"}, "stop"), DONE])
        assert kinds(events) == [("message_start", None), ("block_start", 0), ("block_delta", 0), ("block_stop", 0), ("message_stop", None)]

    def test_content_after_finish_is_an_error(self, eng):
        events, st = run_decoder(eng, [FIRST, chunk({}, "stop"), chunk({"content": "late"})])
        assert events[-1]["type"] == "error" and st.failed

    def test_more_than_one_choice_is_an_error(self, eng):
        bad = chunk({"content": "a"})
        bad["choices"].append({"index": 1, "delta": {"content": "b"}, "finish_reason": None})
        events, st = run_decoder(eng, [FIRST, bad])
        assert events[-1]["type"] == "error" and st.failed

    def test_changing_id_is_an_error(self, eng):
        events, st = run_decoder(eng, [FIRST, chunk({"content": "a"}, id="other")])
        assert events[-1]["type"] == "error" and st.failed

    def test_malformed_json_is_an_error(self, eng):
        ctx = make_ctx(RESPONSES, CHAT)
        st = StreamTranslator(eng.streams[("stream.decode", CHAT)], _ir_sink(eng), ctx)
        st.feed(SSEEvent(None, json.dumps(FIRST)))
        out = st.feed(SSEEvent(None, "{not json"))
        assert orjson.loads(out[0][6:])["type"] == "error" and st.failed

    @pytest.mark.parametrize("error,status", [
        ({"message": "slow down", "type": "rate_limit_error", "code": "rate_limit_exceeded"}, 429),
        ({"message": "quota", "type": "insufficient_quota"}, 429),
        ({"message": "boom", "type": "server_error"}, 502),
        ({"message": "odd", "type": "something_new"}, 502),
        ({"message": "from a proxy", "type": "x", "status": 503, "param": "p"}, 503),
    ])
    def test_error_chunk(self, eng, error, status):
        events, st = run_decoder(eng, [FIRST, chunk({"content": "a"}), {"error": error}])
        last = events[-1]
        assert last["type"] == "error" and last["status"] == status and last["message"] == error["message"]
        assert last.get("code") == error.get("code") and last.get("param") == error.get("param")
        assert st.failed

    def test_reasoning_then_tool_call(self, eng):
        events, _ = run_decoder(eng, [FIRST, chunk({"reasoning_content": "plan"}), tool(0, "c", "f", "{}"), chunk({}, "tool_calls"), DONE])
        assert kinds(events) == [("message_start", None), ("block_start", 0), ("block_delta", 0), ("block_stop", 0),
                                 ("block_start", 1), ("block_delta", 1), ("block_stop", 1), ("message_stop", None)]


# ======================================================================================
# Streams: IR events -> Chat client chunks
# ======================================================================================


def encode_stream(eng, events, include_usage=False, eof=False, provider=ANTHROPIC, **kw):
    body = {"stream": True, "stream_options": {"include_usage": True}} if include_usage else {"stream": True}
    ctx = make_ctx(CHAT, provider, body, **kw)
    st = StreamTranslator(_ir_source(eng), eng.streams[("stream.encode", CHAT)], ctx)
    raw = []
    for ev in events:
        raw += st.feed(SSEEvent(ev["type"], json.dumps(ev)))
    if eof:
        raw += st.eof()
    return raw, st


def parse(raw):
    out = []
    for item in raw:
        assert item.startswith(b"data: ") and item.endswith(b"\n\n")
        body = item[6:-2]
        out.append("[DONE]" if body == b"[DONE]" else orjson.loads(body))
    return out


def accumulate(chunks):
    """What the OpenAI SDK's stream helper builds from the chunks."""
    state = ChatCompletionStreamState()
    for c in chunks:
        if c == "[DONE]":
            continue
        assert "error" not in c
        state.handle_chunk(c if not isinstance(c, dict) else _chunk_model(c))
    return state.current_completion_snapshot


def _chunk_model(c):
    from openai._models import construct_type
    from openai.types.chat import ChatCompletionChunk
    return construct_type(type_=ChatCompletionChunk, value=c)


START = {"type": "message_start", "id": "msg_up", "model": "claude-x"}


def stop(stop="end_turn", **kw):
    return {"type": "message_stop", "stop": stop, **kw}


def deltas(chunks):
    return [c["choices"][0]["delta"] for c in chunks if isinstance(c, dict) and c.get("choices")]


class TestStreamEncode:
    def test_text_stream(self, eng):
        raw, st = encode_stream(eng, [
            START, {"type": "block_start", "index": 0, "kind": "text"},
            {"type": "block_delta", "index": 0, "kind": "text", "delta": "Hé"},
            {"type": "block_delta", "index": 0, "kind": "text", "delta": "llo"},
            {"type": "block_stop", "index": 0}, stop(usage={"input_tokens": 5, "output_tokens": 2})])
        chunks = parse(raw)
        assert chunks[-1] == "[DONE]"
        ids = {c["id"] for c in chunks[:-1]}
        assert ids == {"chatcmpl-msg_up"}
        assert all(c["object"] == "chat.completion.chunk" and c["model"] == "claude-x" for c in chunks[:-1])
        assert len({c["created"] for c in chunks[:-1]}) == 1
        assert deltas(chunks) == [{"role": "assistant", "content": ""}, {"content": "Hé"}, {"content": "llo"}, {}]
        assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
        # Usage was not asked for: no usage chunk.
        assert not any("usage" in c for c in chunks[:-1])
        assert "é".encode() in b"".join(raw)  # UTF-8, not escaped
        final = accumulate(chunks)
        assert final.choices[0].message.content == "Héllo" and final.choices[0].finish_reason == "stop"
        assert st.complete

    def test_usage_chunk_only_when_asked(self, eng):
        raw, _ = encode_stream(eng, [START, stop(usage={"input_tokens": 130, "cached_tokens": 100, "cache_write_tokens": 20,
                                                        "output_tokens": 9, "reasoning_tokens": 4})], include_usage=True)
        chunks = parse(raw)
        assert chunks[-2] == {"id": "chatcmpl-msg_up", "object": "chat.completion.chunk", "created": chunks[0]["created"],
                              "model": "claude-x", "choices": [], "usage": {
                                  "prompt_tokens": 130, "completion_tokens": 9, "total_tokens": 139,
                                  "prompt_tokens_details": {"cached_tokens": 100, "cache_write_tokens": 20},
                                  "completion_tokens_details": {"reasoning_tokens": 4}}}
        assert chunks[-3]["choices"][0]["finish_reason"] == "stop" and chunks[-1] == "[DONE]"

    def test_created_from_the_source(self, eng):
        raw, _ = encode_stream(eng, [{**START, "created": 1700000000.9}, stop()])
        assert {c["created"] for c in parse(raw)[:-1]} == {1700000000}

    def test_interleaved_tool_calls_get_minted_indexes(self, eng):
        raw, _ = encode_stream(eng, [
            START,
            {"type": "block_start", "index": 0, "kind": "text"}, {"type": "block_delta", "index": 0, "kind": "text", "delta": "ok"},
            {"type": "block_stop", "index": 0},
            {"type": "block_start", "index": 1, "kind": "tool_call", "id": "toolu_a", "name": "get"},
            {"type": "block_start", "index": 2, "kind": "tool_call", "id": "toolu_b", "name": "put"},
            {"type": "block_delta", "index": 2, "kind": "tool_call", "delta": "{\"k\":"},
            {"type": "block_delta", "index": 1, "kind": "tool_call", "delta": "{\"q\":1}"},
            {"type": "block_delta", "index": 2, "delta": "2}"},
            {"type": "block_stop", "index": 1}, {"type": "block_stop", "index": 2}, stop("tool_use")])
        chunks = parse(raw)
        assert deltas(chunks)[2:] == [
            {"tool_calls": [{"index": 0, "id": "toolu_a", "type": "function", "function": {"name": "get", "arguments": ""}}]},
            {"tool_calls": [{"index": 1, "id": "toolu_b", "type": "function", "function": {"name": "put", "arguments": ""}}]},
            {"tool_calls": [{"index": 1, "function": {"arguments": "{\"k\":"}}]},
            {"tool_calls": [{"index": 0, "function": {"arguments": "{\"q\":1}"}}]},
            {"tool_calls": [{"index": 1, "function": {"arguments": "2}"}}]},
            {},
        ]
        final = accumulate(chunks)
        calls = final.choices[0].message.tool_calls
        assert [(c.id, c.function.name, c.function.arguments) for c in calls] == [
            ("toolu_a", "get", "{\"q\":1}"), ("toolu_b", "put", "{\"k\":2}")]
        assert final.choices[0].finish_reason == "tool_calls"

    def test_thinking_with_signature_and_redacted_ride_the_envelope(self, eng):
        sig = {"protocol": ANTHROPIC, "provider": "p", "signature": "EqQBCkYIBxgCKkD+/=="}
        red = {"protocol": ANTHROPIC, "provider": "p", "data": "EmwKAhgBEgy3va=="}
        raw, _ = encode_stream(eng, [
            START,
            {"type": "block_start", "index": 0, "kind": "reasoning"},
            {"type": "block_delta", "index": 0, "kind": "reasoning", "delta": "Let me "},
            {"type": "block_delta", "index": 0, "kind": "reasoning", "delta": "think."},
            {"type": "block_opaque", "index": 0, "opaque": sig},
            {"type": "block_stop", "index": 0},
            {"type": "block_start", "index": 1, "kind": "redacted_reasoning", "opaque": red},
            {"type": "block_stop", "index": 1},
            {"type": "block_start", "index": 2, "kind": "tool_call", "id": "toolu_1", "name": "f"},
            {"type": "block_delta", "index": 2, "kind": "tool_call", "delta": "{}"},
            {"type": "block_stop", "index": 2},
            stop("tool_use")])
        chunks = parse(raw)
        ds = deltas(chunks)
        assert ds[1:3] == [{"reasoning_content": "Let me "}, {"reasoning_content": "think."}]
        # The envelope is one reasoning_content chunk right before the finish chunk.
        assert ds[-2]["reasoning_content"].startswith("\n\npxc1.") and ds[-1] == {}
        assert "EqQBCkYIBxgCKkD" not in raw[-3].decode()
        final = accumulate(chunks).choices[0].message
        reasoning = final.model_extra.get("reasoning_content") if final.model_extra else getattr(final, "reasoning_content", None)
        # Replaying the message gives back the exact blocks in the original order.
        message = {"role": "assistant", "content": final.content, "reasoning_content": reasoning,
                   "tool_calls": [c.model_dump() for c in final.tool_calls]}
        parts, _ = replay(eng, message)
        assert strip(parts) == [
            {"type": "reasoning", "text": "Let me think.", "opaque": sig},
            {"type": "reasoning", "text": None, "opaque": red},
            {"type": "tool_call", "id": "toolu_1", "name": "f", "arguments": "{}"},
        ]

    def test_several_reasoning_blocks_are_joined_as_the_envelope_expects(self, eng):
        sig = {"protocol": ANTHROPIC, "provider": "p", "signature": "S1"}
        events = [START]
        for i, text in enumerate(["one", "two"]):
            events += [{"type": "block_start", "index": 2 * i, "kind": "reasoning"},
                       {"type": "block_delta", "index": 2 * i, "kind": "reasoning", "delta": text},
                       {"type": "block_opaque", "index": 2 * i, "opaque": {**sig, "signature": f"S{i}"}},
                       {"type": "block_stop", "index": 2 * i},
                       {"type": "block_start", "index": 2 * i + 1, "kind": "tool_call", "id": f"t{i}", "name": "f"},
                       {"type": "block_delta", "index": 2 * i + 1, "kind": "tool_call", "delta": "{}"},
                       {"type": "block_stop", "index": 2 * i + 1}]
        raw, _ = encode_stream(eng, events + [stop("tool_use")])
        message = accumulate(parse(raw)).choices[0].message
        streamed = message.model_extra["reasoning_content"]
        # The same text as the non-streaming answer gives, so either replays the same way.
        parts = [{"type": "reasoning", "text": "one", "opaque": {**sig, "signature": "S0"}},
                 {"type": "tool_call", "id": "t0", "name": "f", "arguments": "{}"},
                 {"type": "reasoning", "text": "two", "opaque": {**sig, "signature": "S1"}},
                 {"type": "tool_call", "id": "t1", "name": "f", "arguments": "{}"}]
        whole = eng.encode_response(make_ctx(CHAT, ANTHROPIC), ir_response(*copy.deepcopy(parts), stop="tool_use"))
        assert streamed == whole["choices"][0]["message"]["reasoning_content"]
        assert streamed.startswith("one\n\ntwo\n\npxc1.")
        replayed, _ = replay(eng, {"role": "assistant", "content": None, "reasoning_content": streamed,
                                   "tool_calls": [c.model_dump() for c in message.tool_calls]})
        assert strip(replayed) == parts

    def test_encrypted_reasoning_from_responses(self, eng):
        opaque = {"protocol": RESPONSES, "provider": "p", "encrypted_content": "gAAAAB-xyz", "id": "rs_1", "summary_lengths": None}
        raw, _ = encode_stream(eng, [
            START, {"type": "block_start", "index": 0, "kind": "reasoning"},
            {"type": "block_delta", "index": 0, "kind": "reasoning", "delta": "why"},
            {"type": "block_opaque", "index": 0, "opaque": opaque}, {"type": "block_stop", "index": 0},
            {"type": "block_start", "index": 1, "kind": "text", "text": "Answer"}, {"type": "block_stop", "index": 1}, stop()],
            provider=RESPONSES)
        message = accumulate(parse(raw)).choices[0].message
        assert message.content == "Answer"
        parts, _ = replay(eng, {"role": "assistant", "content": message.content, "reasoning_content": message.model_extra["reasoning_content"]},
                          provider=RESPONSES)
        assert strip(parts) == [{"type": "reasoning", "text": "why", "opaque": opaque}, {"type": "text", "text": "Answer"}]

    def test_continuation_off_sends_no_envelope(self, eng):
        raw, _ = encode_stream(eng, [
            START, {"type": "block_start", "index": 0, "kind": "reasoning"},
            {"type": "block_delta", "index": 0, "kind": "reasoning", "delta": "why"},
            {"type": "block_opaque", "index": 0, "opaque": {"protocol": ANTHROPIC, "provider": "p", "signature": "S"}},
            {"type": "block_stop", "index": 0}, stop()], continuation_enabled=False)
        assert b"pxc1." not in b"".join(raw)

    def test_refusal_blocks_use_the_refusal_slot(self, eng):
        raw, _ = encode_stream(eng, [
            START, {"type": "block_start", "index": 0, "kind": "refusal"},
            {"type": "block_delta", "index": 0, "kind": "refusal", "delta": "I can't"},
            {"type": "block_stop", "index": 0}, stop("refusal")])
        chunks = parse(raw)
        assert deltas(chunks)[1:] == [{"refusal": "I can't"}, {}]
        final = accumulate(chunks).choices[0]
        assert final.message.refusal == "I can't" and not final.message.content and final.finish_reason == "content_filter"

    def test_anthropic_refusal_explanation_only_without_text(self, eng):
        details = {"type": "refusal", "category": "cyber", "explanation": "Not allowed."}
        raw, _ = encode_stream(eng, [START, stop("refusal", stop_details=details)])
        assert deltas(parse(raw))[1:] == [{"refusal": "Not allowed."}, {}]
        raw, _ = encode_stream(eng, [
            START, {"type": "block_start", "index": 0, "kind": "text"},
            {"type": "block_delta", "index": 0, "kind": "text", "delta": "Sure"}, {"type": "block_stop", "index": 0},
            stop("refusal", stop_details=details)])
        chunks = parse(raw)
        assert deltas(chunks)[1:] == [{"content": "Sure"}, {}]
        assert chunks[-2]["choices"][0]["finish_reason"] == "content_filter"

    @pytest.mark.parametrize("ir_stop,finish", [
        ("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"), ("context_window_exceeded", "length"),
        ("tool_use", "tool_calls"), ("pause_turn", "stop"), ("refusal", "content_filter"), ("incomplete", "length")])
    def test_every_stop(self, eng, ir_stop, finish):
        raw, st = encode_stream(eng, [START, stop(ir_stop)])
        chunks = parse(raw)
        assert chunks[0]["choices"][0] == {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
        assert chunks[-2]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish} and chunks[-1] == "[DONE]"
        assert st.complete

    @pytest.mark.parametrize("ir_stop", ["failed", "cancelled", "protocol_error"])
    def test_failed_stops_become_an_error_chunk(self, eng, ir_stop):
        raw, st = encode_stream(eng, [START, stop(ir_stop)])
        chunks = parse(raw)
        assert "error" in chunks[-1] and chunks[-1]["error"]["status"] == 502
        assert "[DONE]" not in chunks and not any(c.get("choices", [{}])[0].get("finish_reason") for c in chunks if isinstance(c, dict) and c.get("choices"))

    @pytest.mark.parametrize("status,type_", [(429, "rate_limit_error"), (529, "server_error"), (400, "invalid_request_error"), (None, "server_error")])
    def test_error_event(self, eng, status, type_):
        err = {"type": "error", "message": "upstream says no", "error_type": "overloaded_error"}
        if status:
            err["status"] = status
        raw, st = encode_stream(eng, [START, {"type": "block_start", "index": 0, "kind": "text"},
                                      {"type": "block_delta", "index": 0, "kind": "text", "delta": "par"}, err,
                                      {"type": "block_delta", "index": 0, "kind": "text", "delta": "ignored"}])
        chunks = parse(raw)
        assert chunks[-1] == {"error": {"message": "upstream says no", "type": type_, "param": None, "code": None, "status": status or 502}}
        assert "[DONE]" not in chunks and st.failed

    def test_error_keeps_code_and_param(self, eng):
        raw, _ = encode_stream(eng, [START, {"type": "error", "status": 400, "message": "bad", "code": "c1", "param": "p1"}])
        assert parse(raw)[-1] == {"error": {"message": "bad", "type": "invalid_request_error", "param": "p1", "code": "c1", "status": 400}}

    def test_eof_before_terminal_is_an_error_chunk(self, eng):
        raw, st = encode_stream(eng, [START, {"type": "block_start", "index": 0, "kind": "text"},
                                      {"type": "block_delta", "index": 0, "kind": "text", "delta": "cut"}], eof=True)
        chunks = parse(raw)
        assert chunks[-1]["error"]["status"] == 502 and "[DONE]" not in chunks
        assert st.failed and not st.complete

    def test_stall_is_an_error_chunk(self, eng):
        ctx = make_ctx(CHAT, ANTHROPIC, {"stream": True})
        st = StreamTranslator(_ir_source(eng), eng.streams[("stream.encode", CHAT)], ctx)
        st.feed(SSEEvent("message_start", json.dumps(START)))
        out = parse(st.fail("tool_call_stall", "tool call arguments stalled", 504))
        assert out == [{"error": {"message": "tool call arguments stalled", "type": "timeout_error", "param": None, "code": None,
                                   "status": 504}}]


# ======================================================================================
# Chat provider stream -> Chat client stream through the whole pipeline (both codecs)
# ======================================================================================


def test_chat_stream_through_decoder_and_encoder_rebuilds_the_same_completion(eng):
    ctx = make_ctx(CHAT, CHAT, {"stream": True, "stream_options": {"include_usage": True}})
    st = eng.open_stream(ctx)
    source = [
        FIRST, chunk({"reasoning_content": "hm"}), chunk({"content": "Hi "}), chunk({"content": "there"}),
        tool(0, "call_1", "f", ""), tool(1, "call_2", "g", "{\"b\":"), tool(0, args="{\"a\":1}"), tool(1, args="2}"),
        chunk({}, "tool_calls"), chunk(choices=False, usage={"prompt_tokens": 3, "completion_tokens": 4}), DONE]
    raw = []
    for payload in source:
        raw += st.feed(SSEEvent(None, "[DONE]" if payload is DONE else json.dumps(payload)))
    chunks = parse(raw)
    final = accumulate(chunks)
    choice = final.choices[0]
    assert choice.message.content == "Hi there"
    assert choice.message.model_extra["reasoning_content"] == "hm"
    assert [(c.id, c.function.arguments) for c in choice.message.tool_calls] == [("call_1", "{\"a\":1}"), ("call_2", "{\"b\":2}")]
    assert choice.finish_reason == "tool_calls"
    assert final.usage.prompt_tokens == 3 and final.usage.completion_tokens == 4
    assert chunks[-1] == "[DONE]" and st.complete

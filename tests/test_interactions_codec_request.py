"""The Gemini Interactions request codecs on their own (rules/gemini_interactions/
request.decode.yaml and request.encode.yaml): an Interactions client request to the
IR, the IR to an Interactions provider request (checked against the SDK's own
CreateModelInteraction type), the thought-signature round trip, and the errors that
name the field. Also the descriptor-driven serving of the protocol's endpoints."""
from __future__ import annotations

import base64
import json

import pytest
from google.genai._gaos.types.interactions.createmodelinteraction import CreateModelInteraction
from google.genai._gaos.types.interactions.step import _STEP_VARIANTS

import engine
from engine import Context
from engine.errors import InvalidRequest, RuleError
from engine.hooks import continuation
from engine.wire import protocol_hooks

INTERACTIONS = "gemini_interactions"


@pytest.fixture(scope="module")
def eng():
    return engine.Engine.load()


def ctx(client=INTERACTIONS, provider="anthropic_messages", name="p"):
    return Context(client_protocol=client, provider_protocol=provider, provider_name=name, upstream_model="up",
                   client_body={})


def decode(eng, body, provider="anthropic_messages", c=None):
    c = c or ctx(provider=provider)
    return eng.decode_request(c, {"model": "m", **body}), c


def encode(eng, ir, client="openai_responses", c=None):
    c = c or ctx(client=client, provider=INTERACTIONS, name="gi")
    out = eng.encode_request(c, {"model": "m", **ir})
    CreateModelInteraction.model_validate(out)  # the SDK's own type takes it
    return out, c


def parts(message):
    return [{k: v for k, v in p.items() if k != "_path"} for p in message["content"]]


def envelope(provider_protocol, provider, signature, text):
    """A continuation envelope as another client's answer carried it (docs/continuation.md)."""
    c = ctx(provider=provider_protocol, name=provider)
    return continuation.pack(c, [{"k": "thinking", "s": signature, "h": continuation.digest(text), "l": len(text)}])


# --- decode: Interactions client request -> IR ----------------------------------------


def test_a_string_input_with_system_tools_and_generation_config(eng):
    ir, c = decode(eng, {
        "input": "hello", "system_instruction": "be brief", "stream": True,
        "tools": [{"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}}],
        "generation_config": {"max_output_tokens": 50, "temperature": 0.2, "top_p": 0.9, "seed": 7,
                              "stop_sequences": ["END"], "thinking_level": "medium", "thinking_summaries": "auto",
                              "tool_choice": "any"}})
    assert ir["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]
    assert ir["system"] == [{"type": "text", "text": "be brief"}]
    assert ir["stream"] is True
    assert [{k: v for k, v in t.items() if k != "_path"} for t in ir["tools"]] == [
        {"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}}]
    assert (ir["max_output_tokens"], ir["temperature"], ir["top_p"], ir["seed"], ir["stop"]) == (50, 0.2, 0.9, 7, ["END"])
    assert ir["reasoning"] == {"effort": "medium", "summary": "auto"}
    assert ir["tool_choice"] == {"type": "required"}


@pytest.mark.parametrize("level, effort", [("minimal", "minimal"), ("low", "low"), ("high", "high"), ("xhigh", "xhigh")])
def test_thinking_level_is_the_effort(eng, level, effort):
    ir, _ = decode(eng, {"input": "x", "generation_config": {"thinking_level": level}})
    assert ir["reasoning"] == {"effort": effort}


def test_a_content_list_is_one_user_turn_with_its_media(eng):
    ir, _ = decode(eng, {"input": [
        {"type": "text", "text": "look"},
        {"type": "image", "data": "iVBORw0KGgo=", "mime_type": "image/png"},
        {"type": "image", "uri": "https://example.com/a.jpg", "mime_type": "image/jpeg"},
        {"type": "document", "data": "JVBERi0=", "mime_type": "application/pdf"},
        {"type": "document", "uri": "gs://bucket/a.pdf", "mime_type": "application/pdf"},
        {"type": "audio", "data": "UklGRg==", "mime_type": "audio/wav"},
        {"type": "video", "uri": "https://example.com/v.mp4", "mime_type": "video/mp4"}]})
    [message] = ir["messages"]
    assert message["role"] == "user"
    assert parts(message) == [
        {"type": "text", "text": "look"},
        {"type": "image", "source": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
        {"type": "image", "source": "url", "url": "https://example.com/a.jpg", "media_type": "image/jpeg"},
        {"type": "document", "source": "base64", "media_type": "application/pdf", "data": "JVBERi0="},
        {"type": "document", "source": "url", "url": "gs://bucket/a.pdf", "media_type": "application/pdf"},
        {"type": "audio", "data": "UklGRg==", "format": "wav"},
        {"type": "document", "source": "url", "url": "https://example.com/v.mp4", "media_type": "video/mp4"}]


def test_a_single_content_is_the_user_turn(eng):
    ir, _ = decode(eng, {"input": {"type": "text", "text": "one"}})
    assert [(m["role"], parts(m)) for m in ir["messages"]] == [("user", [{"type": "text", "text": "one"}])]


def test_steps_become_turns_with_calls_and_results_linked_by_id(eng):
    ir, _ = decode(eng, {"input": [
        {"type": "user_input", "content": [{"type": "text", "text": "weather?"}]},
        {"type": "model_output", "content": [{"type": "text", "text": "checking"}]},
        {"type": "function_call", "id": "call_1", "name": "weather", "arguments": {"city": "Paris"}},
        {"type": "function_call", "id": "call_2", "name": "now", "arguments": {}},
        {"type": "function_result", "call_id": "call_1", "name": "weather", "result": "sunny"},
        {"type": "function_result", "call_id": "call_2", "result": {"time": "noon"}, "is_error": True},
        {"type": "model_output", "content": [{"type": "text", "text": "sunny at noon"}]},
        {"type": "user_input", "content": [{"type": "text", "text": "thanks"}]}]})
    messages = ir["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "assistant", "user"]
    # Consecutive model steps are one assistant turn, in order.
    assert parts(messages[1]) == [
        {"type": "text", "text": "checking"},
        {"type": "tool_call", "id": "call_1", "name": "weather", "arguments": '{"city":"Paris"}'},
        {"type": "tool_call", "id": "call_2", "name": "now", "arguments": "{}"}]
    assert parts(messages[2]) == [{"type": "tool_result", "call_id": "call_1", "name": "weather",
                                   "content": [{"type": "text", "text": "sunny"}]}]
    # An object result is its JSON text; is_error says the call failed.
    assert parts(messages[3]) == [{"type": "tool_result", "call_id": "call_2", "is_error": True,
                                   "content": [{"type": "text", "text": '{"time":"noon"}'}]}]


def test_a_function_result_as_a_content_list_keeps_its_image(eng):
    ir, _ = decode(eng, {"input": [
        {"type": "user_input", "content": [{"type": "text", "text": "shot"}]},
        {"type": "function_call", "id": "c", "name": "screenshot", "arguments": {}},
        {"type": "function_result", "call_id": "c", "result": [
            {"type": "text", "text": "here"}, {"type": "image", "data": "AAAA", "mime_type": "image/png"}]}]})
    [result] = parts(ir["messages"][2])
    assert [{k: v for k, v in p.items() if k != "_path"} for p in result["content"]] == [
        {"type": "text", "text": "here"}, {"type": "image", "source": "base64", "media_type": "image/png", "data": "AAAA"}]


@pytest.mark.parametrize("wrap", [lambda e: e, lambda e: base64.b64encode(e.encode()).decode()], ids=["raw", "base64"])
def test_a_thought_signature_carrying_our_envelope_restores_the_reasoning_state(eng, wrap):
    signature = wrap(envelope("anthropic_messages", "p", "SIG-A", "thinking it over"))
    ir, _ = decode(eng, {"input": [
        {"type": "user_input", "content": [{"type": "text", "text": "q"}]},
        {"type": "thought", "signature": signature, "summary": [{"type": "text", "text": "thinking it over"}]},
        {"type": "model_output", "content": [{"type": "text", "text": "a"}]},
        {"type": "user_input", "content": [{"type": "text", "text": "next"}]}]})
    assistant = ir["messages"][1]
    assert parts(assistant) == [
        {"type": "reasoning", "text": "thinking it over",
         "opaque": {"protocol": "anthropic_messages", "provider": "p", "signature": "SIG-A"}},
        {"type": "text", "text": "a"}]


def test_a_thought_whose_summary_changed_loses_its_state_and_a_foreign_signature_is_skipped(eng):
    changed = envelope("anthropic_messages", "p", "SIG-A", "original")
    ir, c = decode(eng, {"input": [
        {"type": "user_input", "content": [{"type": "text", "text": "q"}]},
        {"type": "thought", "signature": changed, "summary": [{"type": "text", "text": "edited"}]},
        {"type": "thought", "signature": base64.b64encode(b"google's own bytes").decode()},
        {"type": "model_output", "content": [{"type": "text", "text": "a"}]}]})
    # The edited thought keeps its text, never the state; the signature-only foreign thought says nothing.
    assert parts(ir["messages"][1]) == [{"type": "reasoning", "text": "edited"}, {"type": "text", "text": "a"}]
    assert "reasoning text changed since it was signed; block dropped" in c.traces
    assert "foreign thought signature skipped" in c.traces


def test_built_in_tools_are_hosted_and_follow_the_hosted_tools_policy(eng):
    ir, _ = decode(eng, {"input": "x", "tools": [{"type": "google_search"}, {"type": "code_execution"},
                                                 {"type": "function", "name": "f"}]})
    assert [(t["type"], t.get("hosted_type")) for t in ir["tools"]] == [
        ("hosted", "google_search"), ("hosted", "code_execution"), ("function", None)]
    # Toward another provider the default policy (drop) leaves them out, traced.
    c = ctx()
    out = eng.translate_request(c, {"model": "m", "input": "x", "tools": [{"type": "google_search"}]})
    assert "tools" not in out
    assert any("hosted tool google_search left out" in t for t in c.traces)


@pytest.mark.parametrize("choice, ir_choice", [
    ("auto", {"type": "auto"}), ("none", {"type": "none"}), ("validated", {"type": "auto"}),
    ({"allowed_tools": {"mode": "any", "tools": ["f"]}}, {"type": "tool", "name": "f"}),
    ({"allowed_tools": {"mode": "any", "tools": ["f", "g"]}}, {"type": "required", "allowed": ["f", "g"]}),
    ({"allowed_tools": {"mode": "auto", "tools": ["f"]}}, {"type": "auto", "allowed": ["f"]}),
])
def test_tool_choice(eng, choice, ir_choice):
    ir, _ = decode(eng, {"input": "x", "generation_config": {"tool_choice": choice}})
    assert ir["tool_choice"] == ir_choice


@pytest.mark.parametrize("body, ir_format", [
    ({"response_format": {"type": "text", "mime_type": "application/json", "schema": {"type": "object"}}},
     {"type": "json_schema", "name": "response", "schema": {"type": "object"}}),
    ({"response_format": [{"type": "text", "mime_type": "application/json", "schema": {"type": "array"}}]},
     {"type": "json_schema", "name": "response", "schema": {"type": "array"}}),
    ({"response_format": {"type": "text", "mime_type": "application/json"}}, {"type": "json_object"}),
    ({"response_format": {"type": "object", "properties": {}}, "response_mime_type": "application/json"},
     {"type": "json_schema", "name": "response", "schema": {"type": "object", "properties": {}}}),
    ({"response_mime_type": "application/json"}, {"type": "json_object"}),
])
def test_structured_output(eng, body, ir_format):
    ir, _ = decode(eng, {"input": "x", **body})
    assert ir["response_format"] == ir_format


def test_plain_text_format_asks_for_nothing(eng):
    ir, _ = decode(eng, {"input": "x", "response_format": {"type": "text", "mime_type": "text/plain"}})
    assert "response_format" not in ir


@pytest.mark.parametrize("body, param, words", [
    ({"input": 5}, "input", "must be a string"),
    ({"input": []}, "input", "input is required"),
    ({"input": [3]}, "input[0]", "object with a type"),
    ({"input": [{"type": "bogus"}]}, "input[0].type", "unknown input step type: bogus "),
    ({"input": [{"type": "user_input", "content": [{"type": "hologram"}]}]}, "input[0].content[0]", "hologram"),
    ({"input": [{"type": "user_input", "content": [{"type": "audio", "uri": "gs://a.wav"}]}]},
     "input[0].content[0].uri", "audio by uri"),
    ({"input": [{"type": "user_input", "content": [{"type": "audio", "data": "AA", "mime_type": "audio/ogg"}]}]},
     "input[0].content[0].mime_type", "WAV and MP3"),
    ({"input": "x", "tools": [{"type": "function"}]}, "tools[0].name", "needs a name"),
    ({"input": "x", "previous_interaction_id": "i0"}, "previous_interaction_id", "stateless proxy"),
    ({"input": "x", "cached_content": "cachedContents/1"}, "cached_content", "context cache"),
    ({"input": "x", "continuation_token": "t"}, "continuation_token", "resumes"),
    ({"input": "x", "background": True}, "background", "background"),
    ({"input": "x", "response_modalities": ["image"]}, "response_modalities", "image or audio"),
    ({"input": "x", "generation_config": {"speech_config": {"voice": "v"}}}, "generation_config.speech_config", "speech"),
    ({"input": "x", "response_format": {"type": "audio"}}, "response_format", "audio, image or video"),
    ({"input": "x", "generation_config": {"tool_choice": 3}}, "generation_config.tool_choice", "tool_choice"),
])
def test_bad_input_is_refused_naming_the_field(eng, body, param, words):
    with pytest.raises(InvalidRequest) as err:
        decode(eng, body)
    assert err.value.param == param
    assert words in err.value.message


def test_an_unknown_step_type_is_refused_naming_the_step(eng):
    with pytest.raises(InvalidRequest) as err:
        decode(eng, {"input": [{"type": "user_input", "content": [{"type": "text", "text": "q"}]},
                               {"type": "bogus_step"}]})
    assert err.value.param == "input[1].type"
    assert "unknown input step type: bogus_step " in err.value.message


# The SDK's Step variants the proxy translates; every other one is a tool Google ran.
TRANSLATED_STEPS = {"user_input", "model_output", "thought", "function_call", "function_result"}


@pytest.mark.parametrize("step", sorted(set(_STEP_VARIANTS) - TRANSLATED_STEPS))
def test_every_hosted_step_type_of_the_sdk_decodes_for_the_encoder_to_refuse(eng, step):
    ir, _ = decode(eng, {"input": [{"type": "user_input", "content": [{"type": "text", "text": "q"}]},
                                   {"type": step, "id": "s1"}]})
    last = ir["messages"][-1]
    assert last["role"] == "assistant"
    assert [(part["type"], part["what"]) for part in last["content"]] == [("unsupported", step)]


@pytest.mark.parametrize("provider", ["openai_chat_completions", "openai_responses", "anthropic_messages",
                                      "gemini_generate_content"])
def test_hosted_steps_in_the_history_are_refused_by_the_encoder(eng, provider):
    """Every other provider's encoder names the step it cannot send (not "an unsupported part")."""
    with pytest.raises(InvalidRequest) as err:
        eng.translate_request(ctx(provider=provider), {"model": "m", "input": [
            {"type": "user_input", "content": [{"type": "text", "text": "q"}]},
            {"type": "google_search_call", "id": "s1", "arguments": {"queries": ["x"]}}]})
    assert "google_search_call" in err.value.message
    assert err.value.param.startswith("input[1]")


# --- encode: IR -> Interactions provider request ---------------------------------------


def test_a_conversation_goes_as_full_input_steps(eng):
    out, c = encode(eng, {
        "stream": True,
        "system": [{"type": "text", "text": "be brief"}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "weather?"},
                                         {"type": "image", "source": "url", "url": "data:image/png;base64,AA-_"},
                                         {"type": "image", "source": "url", "url": "https://example.com/a.png"}]},
            {"role": "developer", "content": [{"type": "text", "text": "use metric"}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "let me "}, {"type": "text", "text": "check"},
                {"type": "tool_call", "id": "call_1", "name": "weather", "arguments": '{"city":"Paris"}'},
                {"type": "tool_call", "id": "call_2", "name": "now", "arguments": ""}]},
            {"role": "tool", "content": [{"type": "tool_result", "call_id": "call_1", "content": [{"type": "text", "text": "sunny"}]}]},
            {"role": "tool", "content": [{"type": "tool_result", "call_id": "call_2", "is_error": True, "content": [
                {"type": "text", "text": "no clock"}, {"type": "image", "source": "base64", "media_type": "image/png", "data": "AAAA"}]}]}],
        "tools": [{"type": "function", "name": "weather", "description": "d", "parameters": {"type": "object"}},
                  {"type": "function", "name": "now"}]})
    assert out["model"] == "up" and out["stream"] is True
    # The proxy keeps the state: the provider stores nothing.
    assert out["store"] is False
    assert out["system_instruction"] == "be brief\n\nuse metric"
    assert out["input"] == [
        {"type": "user_input", "content": [
            {"type": "text", "text": "weather?"},
            {"type": "image", "mime_type": "image/png", "data": "AA+/"},
            {"type": "image", "mime_type": "image/png", "uri": "https://example.com/a.png"}]},
        {"type": "model_output", "content": [{"type": "text", "text": "let me "}, {"type": "text", "text": "check"}]},
        {"type": "function_call", "id": "call_1", "name": "weather", "arguments": {"city": "Paris"}},
        {"type": "function_call", "id": "call_2", "name": "now", "arguments": {}},
        {"type": "function_result", "call_id": "call_1", "result": "sunny"},
        {"type": "function_result", "call_id": "call_2", "is_error": True, "result": [
            {"type": "text", "text": "no clock"}, {"type": "image", "mime_type": "image/png", "data": "AAAA"}]}]
    assert out["tools"] == [{"type": "function", "name": "weather", "description": "d", "parameters": {"type": "object"}},
                            {"type": "function", "name": "now"}]
    assert any("folded into system_instruction" in t for t in c.traces)


def test_a_request_that_does_not_stream_says_nothing_of_it(eng):
    out, _ = encode(eng, {"stream": False, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]})
    assert "stream" not in out
    assert out["input"] == [{"type": "user_input", "content": [{"type": "text", "text": "hi"}]}]


def test_only_this_providers_own_thought_signature_goes_back_byte_for_byte(eng):
    signature = "Cv4BAXLI2nw+/=="  # as the service minted it: never re-encoded
    out, c = encode(eng, {"messages": [
        {"role": "user", "content": [{"type": "text", "text": "q"}]},
        {"role": "assistant", "content": [
            {"type": "reasoning", "text": "mine", "opaque": {"protocol": INTERACTIONS, "provider": "gi", "signature": signature}},
            {"type": "reasoning", "text": "other provider", "opaque": {"protocol": INTERACTIONS, "provider": "elsewhere", "signature": "S2"}},
            {"type": "reasoning", "text": "other family", "opaque": {"protocol": "anthropic_messages", "provider": "gi", "signature": "S3"}},
            {"type": "reasoning", "text": "unsigned"},
            {"type": "text", "text": "answer"}]},
        {"role": "user", "content": [{"type": "text", "text": "next"}]}]})
    assert out["input"][1] == {"type": "thought", "signature": signature, "summary": [{"type": "text", "text": "mine"}]}
    assert [s["type"] for s in out["input"]] == ["user_input", "thought", "model_output", "user_input"]
    assert "reasoning state from gemini_interactions/elsewhere dropped for gemini_interactions/gi" in c.traces
    assert "reasoning state from anthropic_messages/gi dropped for gemini_interactions/gi" in c.traces


@pytest.mark.parametrize("choice, wire", [
    ({"type": "auto"}, "auto"), ({"type": "none"}, "none"), ({"type": "required"}, "any"),
    ({"type": "tool", "name": "f"}, {"allowed_tools": {"mode": "any", "tools": ["f"]}}),
    ({"type": "required", "allowed": ["f", "g"]}, {"allowed_tools": {"mode": "any", "tools": ["f", "g"]}}),
    ({"type": "auto", "allowed": ["f"]}, {"allowed_tools": {"mode": "validated", "tools": ["f"]}}),
])
def test_tool_choice_toward_the_provider(eng, choice, wire):
    out, _ = encode(eng, {"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}],
                          "tools": [{"type": "function", "name": "f"}, {"type": "function", "name": "g"}], "tool_choice": choice})
    assert out["generation_config"]["tool_choice"] == wire


def test_generation_config_reasoning_and_structured_output(eng):
    out, _ = encode(eng, {"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}],
                          "max_output_tokens": 64, "temperature": 0.3, "top_p": 0.8, "seed": 1, "stop": ["Z"],
                          "reasoning": {"effort": "low", "summary": "auto"},
                          "response_format": {"type": "json_schema", "name": "r", "schema": {"type": "object"}, "strict": True}})
    assert out["generation_config"] == {"max_output_tokens": 64, "stop_sequences": ["Z"], "temperature": 0.3, "top_p": 0.8,
                                        "seed": 1, "thinking_level": "low", "thinking_summaries": "auto"}
    assert out["response_format"] == {"type": "text", "mime_type": "application/json", "schema": {"type": "object"}}


def test_reasoning_summaries_are_asked_for_only_when_the_client_shows_them(eng):
    # A Responses client's effort without a summary sees no reasoning: none is asked for.
    out, _ = encode(eng, {"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}],
                          "reasoning": {"effort": "high"}})
    assert out["generation_config"] == {"thinking_level": "high"}


@pytest.mark.parametrize("ir, param", [
    ({"n": 2}, "n"), ({"logit_bias": {"1": 2}}, "logit_bias"), ({"presence_penalty": 0.5}, "presence_penalty"),
    ({"previous_response_id": "resp_1"}, "previous_response_id"),
])
def test_what_interactions_cannot_express_is_refused_naming_the_field(eng, ir, param):
    with pytest.raises(InvalidRequest) as err:
        encode(eng, {"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}], **ir})
    assert err.value.param == param


def test_a_custom_tool_goes_as_a_function_of_one_string(eng):
    """Interactions has no free-form tools: a Responses client's custom tool (Codex's
    apply_patch) goes as a function whose `input` carries the free-form text, its
    history calls too (rules/tables/custom_tools.yaml names the protocols that have them)."""
    out, c = encode(eng, {"messages": [
        {"role": "user", "content": [{"type": "text", "text": "fix it"}]},
        {"role": "assistant", "content": [{"type": "tool_call", "id": "c1", "name": "apply_patch", "custom": True,
                                           "input": "*** Begin Patch"}]},
        {"role": "tool", "content": [{"type": "tool_result", "call_id": "c1", "content": [{"type": "text", "text": "done"}]}]}],
        "tools": [{"type": "custom", "name": "apply_patch", "description": "edit files"}]})
    [tool] = out["tools"]
    assert (tool["type"], tool["name"], tool["parameters"]["required"]) == ("function", "apply_patch", ["input"])
    assert out["input"][1] == {"type": "function_call", "id": "c1", "name": "apply_patch",
                               "arguments": {"input": "*** Begin Patch"}}
    assert c.tool_calls["apply_patch"]["custom"] is True  # its calls come back as custom calls


# --- round trips -------------------------------------------------------------------------


def test_a_signature_from_an_interactions_provider_comes_back_to_it_through_another_client(eng):
    """Turn 1 went to the Interactions provider `gi` through a translated answer, so its
    thought signature reached the client in our envelope; the turn that goes to `gi`
    again sends the raw signature back, byte for byte."""
    raw = "CiQBcsjafOriginal/Bytes+=="
    signature = envelope(INTERACTIONS, "gi", raw, "plan")
    c = ctx(provider=INTERACTIONS, name="gi")
    ir = eng.decode_request(c, {"model": "m", "input": [
        {"type": "user_input", "content": [{"type": "text", "text": "q"}]},
        {"type": "thought", "signature": signature, "summary": [{"type": "text", "text": "plan"}]},
        {"type": "function_call", "id": "call_9", "name": "f", "arguments": {"x": 1}},
        {"type": "function_result", "call_id": "call_9", "result": "done"}]})
    out = eng.encode_request(c, ir)
    CreateModelInteraction.model_validate(out)
    assert out["input"] == [
        {"type": "user_input", "content": [{"type": "text", "text": "q"}]},
        {"type": "thought", "signature": raw, "summary": [{"type": "text", "text": "plan"}]},
        {"type": "function_call", "id": "call_9", "name": "f", "arguments": {"x": 1}},
        {"type": "function_result", "call_id": "call_9", "result": "done"}]


def test_the_sdk_probe_request_round_trips(eng):
    """What google-genai sends (client.interactions.create) -> IR -> an Interactions provider."""
    body = {"model": "gemini-3-flash-preview", "generation_config": {"max_output_tokens": 50, "thinking_level": "low"},
            "input": "hello", "system_instruction": "be brief",
            "tools": [{"name": "f", "parameters": {"type": "object"}, "type": "function"}]}
    c = ctx(provider=INTERACTIONS, name="gi")
    out = eng.translate_request(c, body)
    CreateModelInteraction.model_validate(out)
    assert out == {"model": "up", "store": False, "system_instruction": "be brief",
                   "input": [{"type": "user_input", "content": [{"type": "text", "text": "hello"}]}],
                   "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
                   "generation_config": {"max_output_tokens": 50, "thinking_level": "low"}}


def test_an_interactions_client_toward_generate_content(eng):
    c = ctx(provider="gemini_generate_content", name="g")
    out = eng.translate_request(c, {"model": "m", "input": [
        {"type": "user_input", "content": [{"type": "text", "text": "q"}]},
        {"type": "function_call", "id": "c1", "name": "f", "arguments": {}},
        {"type": "function_result", "call_id": "c1", "name": "f", "result": "ok"}],
        "generation_config": {"thinking_level": "high", "tool_choice": "none"},
        "tools": [{"type": "function", "name": "f"}]})
    assert [c["role"] for c in out["contents"]] == ["user", "model", "user"]
    assert out["contents"][2]["parts"][0]["functionResponse"] == {"id": "c1", "name": "f", "response": {"output": "ok"}}
    assert out["generationConfig"]["thinkingConfig"]["thinkingLevel"] == "HIGH"
    assert out["toolConfig"] == {"functionCallingConfig": {"mode": "NONE"}}


# --- the descriptor: endpoints, hooks, summary --------------------------------------------


def test_the_endpoints_are_served_under_v1beta_and_v1(eng):
    from proxai.http.app import build_app
    from proxai.http.paths import Surface, canonical

    surface = Surface(eng.wire)
    assert surface.generate["/v1beta/interactions"] == INTERACTIONS
    assert surface.generate["/v1/interactions"] == INTERACTIONS
    # A served body endpoint under generateContent's root answers in its own protocol's shape.
    assert surface.protocol_for("/v1beta/interactions", {}) == INTERACTIONS
    assert surface.protocol_for("/v1/interactions", {}) == INTERACTIONS
    assert surface.protocol_for("/v1beta/models/g:generateContent", {}) == "gemini_generate_content"
    assert canonical("/v1beta/interactions") == "/v1beta/interactions"
    assert canonical("/messages") == "/v1/messages" and canonical("/v2/messages") == "/v1/v2/messages"
    routes = {(r.method, r.resource.canonical) for r in build_app().router.routes()}
    assert {("POST", "/v1beta/interactions"), ("POST", "/v1/interactions")} <= routes


def test_hooks_may_name_several_modules_and_a_name_may_be_defined_once(tmp_path):
    (tmp_path / "a.py").write_text('HOOKS = {"toy.one": lambda scope: 1}\n')
    (tmp_path / "b.py").write_text('HOOKS = {"toy.two": lambda scope: 2}\n')
    (tmp_path / "c.py").write_text('HOOKS = {"toy.one": lambda scope: 3}\n')
    file = str(tmp_path / "protocol.yaml")
    hooks, problems = protocol_hooks({"toy": ({"hooks": ["a.py", "b.py"]}, file)})
    assert sorted(hooks) == ["toy.one", "toy.two"] and problems == []
    hooks, problems = protocol_hooks({"toy": ({"hooks": "a.py"}, file)})
    assert sorted(hooks) == ["toy.one"] and problems == []
    _, problems = protocol_hooks({"toy": ({"hooks": ["a.py", "c.py"]}, file)})
    assert [type(p) for p in problems] == [RuleError] and "already defined" in str(problems[0])


def test_the_summary_reads_usage_stop_model_and_id_off_an_interaction(eng):
    body = {"id": "int_1", "model": "gemini-3-flash-preview", "status": "requires_action",
            "steps": [{"type": "function_call", "id": "c", "name": "f", "arguments": {}}],
            "usage": {"total_input_tokens": 100, "total_cached_tokens": 40, "total_output_tokens": 20,
                      "total_thought_tokens": 30, "total_tokens": 150}}
    s = eng.summary(INTERACTIONS, body)
    assert s["usage"] == {"input_tokens": 100, "cached_tokens": 40, "output_tokens": 50, "reasoning_tokens": 30}
    assert (s["stop"], s["model"], s["id"]) == ("tool_use", "gemini-3-flash-preview", "int_1")
    assert eng.summary(INTERACTIONS, {**body, "status": "incomplete"})["stop"] == "max_tokens"
    assert eng.summary(INTERACTIONS, {**body, "status": "completed", "steps": []})["stop"] == "end_turn"


def test_an_http_error_is_the_sdks_client_error_data(eng):
    """{error: {code, message}} with a string code: google-genai's interactions client
    parses it into CreateInteractionClientErrorData (a google.rpc.Status, with its
    numeric code, fails there)."""
    from google.genai._gaos.errors.createinteraction import CreateInteractionClientErrorData

    body = eng.http_error(INTERACTIONS, InvalidRequest("must be a string", param="input"))
    assert body == {"error": {"code": "invalid_request", "message": "must be a string (at input)"}}
    CreateInteractionClientErrorData.model_validate(body)
    # A provider's error body: its code is kept as its type; a google.rpc.Status is read too.
    assert eng.parse_error(INTERACTIONS, 429, {"error": {"code": "rate_limit_exceeded", "message": "slow"}}) == {
        "message": "slow", "error_type": "rate_limit_exceeded", "status": 429, "vocabulary": INTERACTIONS}
    parsed = eng.parse_error(INTERACTIONS, 400, {"error": {"code": 400, "message": "bad", "status": "INVALID_ARGUMENT"}})
    assert (parsed["message"], parsed["error_type"]) == ("bad", "INVALID_ARGUMENT")


def test_the_answers_steps_replayed_as_the_next_input_restore_the_providers_state(eng):
    """An Anthropic provider's thinking reaches an Interactions client as a thought step
    (response.encode: the envelope in `signature`); the client sends the answer's steps
    back in the next input, and the Anthropic request gets the signature again."""
    c = ctx(provider="anthropic_messages", name="claude")
    answer = eng.encode_response(c, {
        "id": "msg_1", "model": "claude-x", "stop": "tool_use", "usage": {"input_tokens": 5, "output_tokens": 3},
        "content": [{"type": "reasoning", "text": "I should call f",
                     "opaque": {"protocol": "anthropic_messages", "provider": "claude", "signature": "ANTHROPIC-SIG"}},
                    {"type": "tool_call", "id": "toolu_1", "name": "f", "arguments": '{"a":1}'}]})
    turn2 = {"model": "m", "input": [{"type": "user_input", "content": [{"type": "text", "text": "q"}]},
                                     *answer["steps"],
                                     {"type": "function_result", "call_id": "toolu_1", "result": "42"}],
             "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
             "generation_config": {"max_output_tokens": 1000, "thinking_level": "high", "thinking_summaries": "auto"}}
    sent = eng.translate_request(ctx(provider="anthropic_messages", name="claude"), turn2)
    assistant = sent["messages"][1]
    assert assistant["role"] == "assistant"
    assert assistant["content"][0] == {"type": "thinking", "thinking": "I should call f", "signature": "ANTHROPIC-SIG"}
    assert assistant["content"][1]["type"] == "tool_use" and assistant["content"][1]["id"] == "toolu_1"
    assert sent["messages"][2]["content"][0]["tool_use_id"] == "toolu_1"


def test_deferred_tools_and_media_hints(eng):
    ir, c = decode(eng, {"input": [{"type": "user_input", "content": [
        {"type": "image", "data": "AAAA", "mime_type": "image/png", "resolution": "high"}]}],
        "tools": [{"type": "function", "name": "rare", "defer_loading": True}, {"type": "function", "name": "often"}]})
    assert [(t["name"], t.get("defer_loading")) for t in ir["tools"]] == [("rare", True), ("often", None)]
    assert parts(ir["messages"][0]) == [{"type": "image", "source": "base64", "media_type": "image/png", "data": "AAAA"}]
    assert any("input[0].content[0].resolution" in t and "dropped advisory field" in t for t in c.traces)

"""End to end, with the official SDKs: the tool shapes coding agents send (Codex: namespaces,
additional_tools, free-form tools, hosted tools, images in tool output; Claude Code: tool
search, metadata.user_id, thinking with a 32000-token limit) through translated routes,
and the model capability settings. Every test checks what the provider received.
"""
from __future__ import annotations

import hashlib
import json

import anthropic
import openai
import pytest

from proxai.mock import Text, ToolCall, Turn

A, C, R = "anthropic", "chat", "responses"
GRAMMAR = 'start: "*** Begin Patch" LF hunk+ "*** End Patch"'
APPLY_PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files. This is a FREEFORM tool.",
               "format": {"type": "grammar", "syntax": "lark", "definition": GRAMMAR}}
NAMESPACE = {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.", "tools": [
    {"type": "function", "name": "spawn_agent", "description": "Spawn one.", "strict": False,
     "parameters": {"type": "object", "properties": {"task": {"type": "string"}}}},
    {"type": "function", "name": "wait_agent", "strict": False, "parameters": {"type": "object", "properties": {}}},
]}
EXEC = {"type": "function", "name": "exec_command", "strict": False,
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}
PATCH = "*** Begin Patch\n*** Add File: a.txt\n+hi \"there\"\n*** End Patch\n"


def model(provider: str) -> str:
    return f"{provider}/up-model"


def sent(mock) -> dict:
    return mock.requests[-1].body


def tool_names(provider: str, body: dict) -> list[str]:
    if provider == A:
        return [t["name"] for t in body.get("tools") or []]
    if provider == C:
        return [t["function"]["name"] for t in body.get("tools") or []]
    return [t["name"] for t in body.get("tools") or []]


def sent_tool(provider: str, body: dict, name: str) -> dict:
    for t in body["tools"]:
        if (t["function"]["name"] if provider == C else t["name"]) == name:
            return t["function"] if provider == C else t
    raise AssertionError(f"no tool {name} in {tool_names(provider, body)}")


def stream_final(client, **kw):
    with client.responses.stream(**kw) as stream:
        events = list(stream)
        return events, stream.get_final_response()


# --------------------------------------------------------------------------------------
# Responses clients (Codex) toward Anthropic and Chat
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("provider", [A, C])
def test_namespace_tools_flattened_and_calls_come_back_namespaced(openai_client, mock, provider, stream):
    mock.enqueue(Turn([ToolCall("call_1", "multi_agent_v1__spawn_agent", '{"task":"look"}', chunks=['{"ta', 'sk":"look"}'])]))
    kw = dict(model=model(provider), input="go", tools=[EXEC, NAMESPACE])
    if stream:
        _, r = stream_final(openai_client, **kw)
    else:
        r = openai_client.responses.create(**kw)
    call = r.output[0]
    assert call.type == "function_call" and call.name == "spawn_agent" and call.namespace == "multi_agent_v1"
    assert json.loads(call.arguments) == {"task": "look"}
    body = sent(mock)
    assert tool_names(provider, body) == ["exec_command", "multi_agent_v1__spawn_agent", "multi_agent_v1__wait_agent"]
    assert sent_tool(provider, body, "multi_agent_v1__spawn_agent")["description"] == (
        "Spawn one.\n\n(One of the multi_agent_v1 tools: Sub-agents.)")


@pytest.mark.parametrize("provider", [A, C])
def test_additional_tools_item_declares_tools_and_namespaced_history_replays(openai_client, mock, provider):
    mock.enqueue(Turn([Text("done")]))
    extra = {"type": "additional_tools", "id": "at_1", "role": "developer",
             "tools": [{"type": "namespace", "name": "clock", "description": "Time.", "tools": [
                 {"type": "function", "name": "sleep", "strict": False, "parameters": {"type": "object", "properties": {}}}]}]}
    history = [
        extra,
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "wait"}]},
        {"type": "function_call", "call_id": "call_s", "name": "sleep", "namespace": "clock", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_s", "output": "slept"},
    ]
    r = openai_client.responses.create(model=model(provider), input=history)
    assert r.output_text == "done"
    body = sent(mock)
    assert tool_names(provider, body) == ["clock__sleep"]
    if provider == A:
        assert body["messages"][1]["content"] == [{"type": "tool_use", "id": "call_s", "name": "clock__sleep", "input": {}}]
    else:
        assert body["messages"][1]["tool_calls"][0]["function"]["name"] == "clock__sleep"
    assert "additional_tools" not in json.dumps(body)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("provider", [A, C])
def test_custom_tool_is_a_one_string_function_and_its_call_comes_back_custom(openai_client, mock, provider, stream):
    arguments = json.dumps({"input": PATCH})
    mock.enqueue(Turn([ToolCall("call_p", "apply_patch", arguments, chunks=[arguments[:9], arguments[9:30], arguments[30:]])]))
    kw = dict(model=model(provider), input="patch it", tools=[EXEC, APPLY_PATCH])
    if stream:
        events, r = stream_final(openai_client, **kw)
        deltas = [e for e in events if e.type == "response.custom_tool_call_input.delta"]
        assert "".join(d.delta for d in deltas) == PATCH
        assert [e.input for e in events if e.type == "response.custom_tool_call_input.done"] == [PATCH]
        assert not [e for e in events if e.type.startswith("response.function_call_arguments")]
    else:
        r = openai_client.responses.create(**kw)
    call = r.output[0]
    assert call.type == "custom_tool_call" and call.name == "apply_patch" and call.input == PATCH
    assert call.call_id == "call_p"
    tool = sent_tool(provider, sent(mock), "apply_patch")
    schema = tool["input_schema"] if provider == A else tool["parameters"]
    assert schema["properties"]["input"]["type"] == "string" and schema["required"] == ["input"]
    assert tool["description"].startswith("Edit files.") and GRAMMAR in tool["description"]


@pytest.mark.parametrize("provider", [A, C])
def test_custom_call_history_replays_as_the_function_call(openai_client, mock, provider):
    mock.enqueue(Turn([Text("ok")]))
    history = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "patch"}]},
        {"type": "custom_tool_call", "call_id": "call_p", "name": "apply_patch", "input": PATCH},
        {"type": "custom_tool_call_output", "call_id": "call_p", "output": "Success."},
    ]
    openai_client.responses.create(model=model(provider), input=history, tools=[APPLY_PATCH])
    body = sent(mock)
    if provider == A:
        assert body["messages"][1]["content"] == [{"type": "tool_use", "id": "call_p", "name": "apply_patch", "input": {"input": PATCH}}]
        assert body["messages"][2]["content"][0]["tool_use_id"] == "call_p"
    else:
        call = body["messages"][1]["tool_calls"][0]
        assert call["type"] == "function" and json.loads(call["function"]["arguments"]) == {"input": PATCH}
        assert body["messages"][2] == {"role": "tool", "tool_call_id": "call_p", "content": "Success."}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("provider", [A, C])
def test_hosted_tools_left_out_and_named_in_a_header(openai_client, mock, provider, stream):
    mock.enqueue(Turn([Text("hi")]))
    tools = [EXEC, {"type": "web_search", "external_web_access": False},
             {"type": "tool_search", "execution": "client", "description": "find tools", "parameters": {"type": "object"}}]
    kw = dict(model=model(provider), input="hi", tools=tools, stream=stream)
    raw = openai_client.responses.with_raw_response.create(**kw)
    assert raw.headers["x-proxai-dropped-tools"] == "web_search, tool_search"
    if stream:
        assert any(e.type == "response.completed" for e in raw.parse())
    assert tool_names(provider, sent(mock)) == ["exec_command"]


@pytest.mark.parametrize("provider", [A, C])
def test_hosted_tools_reject_policy_on_a_route_names_the_tool(start_proxy, harness, mock, provider):
    config = harness.default_config()
    config["routing"]["routes"].insert(0, {"name": "strict", "model_pattern": "strict-*", "provider": provider,
                                           "upstream_model": "up", "hosted_tools": "reject"})
    client = start_proxy(config).openai()
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="strict-1", input="hi", tools=[EXEC, {"type": "web_search"}])
    assert err.value.body["param"] == "tools[1]" and "web_search" in err.value.body["message"]
    assert mock.requests == []


def test_image_in_a_function_output_reaches_a_chat_provider_in_a_user_message(openai_client, mock):
    """Codex view_image: the tool output carries an input_image."""
    mock.enqueue(Turn([Text("a cat")]))
    image = "data:image/png;base64,iVBORw0KGgo="
    history = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "look"}]},
        {"type": "function_call", "call_id": "call_v", "name": "view_image", "arguments": '{"path":"a.png"}'},
        {"type": "function_call_output", "call_id": "call_v", "output": [{"type": "input_image", "image_url": image}]},
    ]
    r = openai_client.responses.create(model=model(C), input=history)
    assert r.output_text == "a cat"
    messages = sent(mock)["messages"]
    assert messages[2]["role"] == "tool" and messages[2]["tool_call_id"] == "call_v"
    assert isinstance(messages[2]["content"], str)
    assert messages[3] == {"role": "user", "content": [
        {"type": "text", "text": "Attachments of tool result call_v:"},
        {"type": "image_url", "image_url": {"url": image}}]}


# --------------------------------------------------------------------------------------
# Anthropic clients (Claude Code) toward Chat and Responses
# --------------------------------------------------------------------------------------

CC_TOOLS = [
    {"name": "Bash", "description": "Run a command.", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}},
    {"name": "ToolSearch", "description": "Load deferred tools.", "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}},
    {"name": "WebFetch", "description": "Fetch a URL.", "defer_loading": True,
     "input_schema": {"type": "object", "properties": {"url": {"type": "string"}}}},
]


@pytest.mark.parametrize("provider", [C, R])
def test_tool_search_deferred_tools_and_tool_references(anthropic_client, mock, provider):
    mock.enqueue(Turn([Text("ok")]))
    messages = [
        {"role": "user", "content": "fetch it"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "ToolSearch", "input": {"query": "select:WebFetch"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": [{"type": "tool_reference", "tool_name": "WebFetch"}]}]},
    ]
    r = anthropic_client.messages.create(model=model(provider), max_tokens=100, messages=messages, tools=CC_TOOLS)
    assert r.content[0].text == "ok"
    body = sent(mock)
    assert "defer_loading" not in json.dumps(body)
    assert tool_names(provider, body) == ["Bash", "ToolSearch", "WebFetch"]
    if provider == C:
        assert body["messages"][2] == {"role": "tool", "tool_call_id": "toolu_1", "content": "Tool WebFetch is loaded and can be called."}
    else:
        assert body["input"][2]["output"] == "Tool WebFetch is loaded and can be called."
        # Tools translated from another protocol are not strict unless they said so.
        assert all(t["strict"] is False for t in body["tools"])


@pytest.mark.parametrize("provider", [C, R])
def test_image_in_a_tool_result(anthropic_client, mock, provider):
    mock.enqueue(Turn([Text("a png")]))
    png = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    messages = [
        {"role": "user", "content": "read a.png"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_r", "name": "Read", "input": {"file_path": "a.png"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_r", "content": [png]},
                                     {"type": "text", "text": "what is it?"}]},
    ]
    tools = [{"name": "Read", "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}}}]
    anthropic_client.messages.create(model=model(provider), max_tokens=100, messages=messages, tools=tools)
    body = sent(mock)
    if provider == C:
        assert [m["role"] for m in body["messages"]] == ["user", "assistant", "tool", "user", "user"]
        assert body["messages"][3]["content"][1] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    else:
        assert body["input"][2]["output"] == [{"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "auto"}]


@pytest.mark.parametrize("provider", [C, R])
def test_long_metadata_user_id_is_a_stable_hash(anthropic_client, mock, provider):
    user_id = json.dumps({"device_id": "d" * 64, "account_uuid": "", "session_id": "6a752dbd-e9bf-4153-ae7c-9e7ee024fccb"})
    assert len(user_id) > 128
    for _ in range(2):
        mock.enqueue(Turn([Text("ok")]))
        anthropic_client.messages.create(model=model(provider), max_tokens=10, messages=[{"role": "user", "content": "hi"}],
                                         metadata={"user_id": user_id})
        assert sent(mock)["safety_identifier"] == "sha256:" + hashlib.sha256(user_id.encode()).hexdigest()
    mock.enqueue(Turn([Text("ok")]))
    anthropic_client.messages.create(model=model(provider), max_tokens=10, messages=[{"role": "user", "content": "hi"}],
                                     metadata={"user_id": "user-1"})
    assert sent(mock)["safety_identifier"] == "user-1"


def test_anthropic_client_400_names_the_field_in_the_message(anthropic_client, mock):
    tools = [{"name": "f", "input_schema": {"type": "object"}, "input_examples": [{"a": 1}]}]
    with pytest.raises(anthropic.BadRequestError) as err:
        anthropic_client.messages.create(model=model(C), max_tokens=10, messages=[{"role": "user", "content": "hi"}], tools=tools)
    assert err.value.body["error"]["message"].endswith("(at tools[0].input_examples)")
    assert mock.requests == []


# --------------------------------------------------------------------------------------
# Model capabilities
# --------------------------------------------------------------------------------------


def _capability_proxy(start_proxy, harness, provider, **settings):
    config = harness.default_config()
    config["providers"][provider].update(settings)
    return start_proxy(config)


@pytest.mark.parametrize("provider", [C, R])
def test_reasoning_drop_and_output_ceiling_on_a_provider(start_proxy, harness, mock, provider):
    """Claude Code sends thinking, output_config.effort and max_tokens 32000 whatever the model."""
    client = _capability_proxy(start_proxy, harness, provider, reasoning="drop", max_output_tokens=16384).anthropic()
    mock.enqueue(Turn([Text("ok")]))
    client.messages.create(model=model(provider), max_tokens=32000, messages=[{"role": "user", "content": "hi"}],
                           thinking={"type": "enabled", "budget_tokens": 31999}, extra_body={"output_config": {"effort": "high"}},
                           timeout=30)
    body = sent(mock)
    assert "reasoning_effort" not in body and "reasoning" not in body
    assert "include" not in body  # non-reasoning models refuse reasoning.encrypted_content
    limit = body["max_completion_tokens"] if provider == C else body["max_output_tokens"]
    assert limit == 16384
    mock.enqueue(Turn([Text("ok")]))
    client.messages.create(model=model(provider), max_tokens=1000, messages=[{"role": "user", "content": "hi"}])
    assert (sent(mock)["max_completion_tokens"] if provider == C else sent(mock)["max_output_tokens"]) == 1000


def test_route_overrides_the_provider_capabilities(start_proxy, harness, mock):
    config = harness.default_config()
    config["providers"]["chat"]["reasoning"] = "drop"
    config["routing"]["routes"].insert(0, {"name": "o-series", "model_pattern": "o4-*", "provider": "chat", "reasoning": "forward"})
    client = start_proxy(config).anthropic()
    mock.enqueue(Turn([Text("ok")]))
    client.messages.create(model="o4-mini", max_tokens=100, messages=[{"role": "user", "content": "hi"}],
                           thinking={"type": "enabled", "budget_tokens": 4000})
    assert sent(mock)["reasoning_effort"] == "medium"


def test_sampling_left_out_toward_anthropic_when_thinking_is_on(openai_client, mock):
    mock.enqueue(Turn([Text("ok")]))
    openai_client.responses.create(model=model(A), input="hi", temperature=0.2, top_p=0.9,
                                   reasoning={"effort": "high", "summary": "auto"}, max_output_tokens=2000)
    body = sent(mock)
    assert body["thinking"]["type"] == "adaptive"
    assert "temperature" not in body and "top_p" not in body
    mock.enqueue(Turn([Text("ok")]))
    openai_client.chat.completions.create(model=model(A), messages=[{"role": "user", "content": "hi"}], temperature=0.2)
    assert sent(mock)["temperature"] == 0.2


# --------------------------------------------------------------------------------------
# Chat clients with free-form tools, streaming
# --------------------------------------------------------------------------------------

CHAT_CUSTOM = [{"type": "custom", "custom": {"name": "apply_patch", "description": "Edit files."}}]


def _custom_from_chunks(chunks):
    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
    first = calls[0].model_dump(exclude_none=True)
    return first, "".join(tc.model_dump(exclude_none=True).get("custom", {}).get("input", "") for tc in calls)


def test_chat_client_streamed_custom_call_from_anthropic(openai_client, mock):
    arguments = json.dumps({"input": PATCH})
    mock.enqueue(Turn([ToolCall("toolu_p", "apply_patch", arguments, chunks=[arguments[:5], arguments[5:40], arguments[40:]])]))
    chunks = list(openai_client.chat.completions.create(model=model(A), messages=[{"role": "user", "content": "patch"}],
                                                         tools=CHAT_CUSTOM, stream=True))
    first, text = _custom_from_chunks(chunks)
    assert first["type"] == "custom" and first["custom"]["name"] == "apply_patch" and first["id"] == "toolu_p"
    assert text == PATCH
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


def test_chat_client_streamed_custom_call_from_responses(openai_client, mock):
    from proxai.mock import Stream

    item = {"id": "ctc_1", "type": "custom_tool_call", "call_id": "call_p", "name": "apply_patch", "input": PATCH, "status": "completed"}
    resp = {"id": "resp_1", "object": "response", "created_at": 1, "status": "completed", "model": "up-model", "output": [item],
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "error": None, "incomplete_details": None,
            "instructions": None, "usage": {"input_tokens": 3, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 4,
                                            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 7}}
    events = [
        ("response.created", {"type": "response.created", "sequence_number": 0, "response": {**resp, "status": "in_progress", "output": [], "usage": None}}),
        ("response.output_item.added", {"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
                                        "item": {**item, "input": "", "status": "in_progress"}}),
        ("response.custom_tool_call_input.delta", {"type": "response.custom_tool_call_input.delta", "sequence_number": 2,
                                                   "output_index": 0, "item_id": "ctc_1", "delta": PATCH[:10]}),
        ("response.custom_tool_call_input.delta", {"type": "response.custom_tool_call_input.delta", "sequence_number": 3,
                                                   "output_index": 0, "item_id": "ctc_1", "delta": PATCH[10:]}),
        ("response.custom_tool_call_input.done", {"type": "response.custom_tool_call_input.done", "sequence_number": 4,
                                                  "output_index": 0, "item_id": "ctc_1", "input": PATCH}),
        ("response.output_item.done", {"type": "response.output_item.done", "sequence_number": 5, "output_index": 0, "item": item}),
        ("response.completed", {"type": "response.completed", "sequence_number": 6, "response": resp}),
    ]
    mock.enqueue(Stream(events=events))
    chunks = list(openai_client.chat.completions.create(model=model(R), messages=[{"role": "user", "content": "patch"}],
                                                         tools=CHAT_CUSTOM, stream=True))
    first, text = _custom_from_chunks(chunks)
    assert first["type"] == "custom" and first["custom"]["name"] == "apply_patch" and first["id"] == "call_p"
    assert text == PATCH
    assert sent(mock)["tools"] == [{"type": "custom", "name": "apply_patch", "description": "Edit files."}]

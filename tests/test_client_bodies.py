"""Request bodies recorded from the real Codex CLI (0.171) and Claude Code (2.1.197), replayed
with the official SDKs toward every provider protocol through the real server.

The fixtures (tests/fixtures/clients/) are what the CLIs sent in tool loops with their
default settings: Codex's namespaces, additional_tools items, free-form apply_patch and
exec, hosted web_search and tool_search, view_image output; Claude Code's tool search
(deferred tools, tool_reference blocks), an image read by a tool, a subagent, in-place
system messages, thinking with output_config.effort, a 150-character metadata.user_id.
Ids and paths are scrubbed, very long prompt texts are cut. Every replay must answer 200, and what the provider received
must be valid for its protocol.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from proxai.mock import Text, Turn

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "clients"
BODIES = sorted(FIXTURES.glob("*.json"))
PROVIDERS = ["anthropic", "chat", "responses"]
NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def load(path: Path) -> tuple[str, dict]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    return doc["path"].split("?")[0], doc["body"]


def test_fixtures_are_present():
    kinds = {load(p)[0] for p in BODIES}
    assert kinds == {"/v1/responses", "/v1/messages"} and len(BODIES) >= 6


def replay(proxy, path: str, body: dict, provider: str):
    body = dict(body)
    model = f"{provider}/{body.pop('model')}"
    stream = body.pop("stream", False)
    if path == "/v1/responses":
        client = proxy.openai()
        items = body.pop("input")
        if stream:
            with client.responses.stream(model=model, input=items, extra_body=body) as s:
                list(s)
                return s.get_final_response().output_text
        return client.responses.create(model=model, input=items, extra_body=body).output_text
    client = proxy.anthropic()
    messages, max_tokens = body.pop("messages"), body.pop("max_tokens")
    if stream:
        with client.messages.stream(model=model, max_tokens=max_tokens, messages=messages, extra_body=body) as s:
            list(s)
            return s.get_final_message().content[-1].text
    return client.messages.create(model=model, max_tokens=max_tokens, messages=messages, extra_body=body,
                                  timeout=30).content[-1].text


def check_anthropic(body: dict) -> None:
    for tool in body.get("tools") or []:
        assert NAME.match(tool["name"]), tool["name"]
        assert "input_schema" in tool
        assert "defer_loading" not in tool
    if (body.get("thinking") or {}).get("type") in ("enabled", "adaptive"):
        assert not {"temperature", "top_p", "top_k"} & set(body)
    roles = [m["role"] for m in body["messages"]]
    assert all(a != b for a, b in zip(roles, roles[1:])), roles  # turns alternate
    for m in body["messages"]:
        for block in m["content"] if isinstance(m["content"], list) else []:
            assert block["type"] in ("text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking")


def check_chat(body: dict) -> None:
    for tool in body.get("tools") or []:
        assert tool["type"] == "function" and NAME.match(tool["function"]["name"]), tool
    for m in body["messages"]:
        if m["role"] == "tool":
            content = m["content"]
            assert isinstance(content, str) or all(p["type"] == "text" for p in content)
        for call in m.get("tool_calls") or []:
            assert call["type"] == "function" and NAME.match(call["function"]["name"])
    assert len(body.get("safety_identifier") or "") <= 128


def check_responses(body: dict) -> None:
    for tool in body.get("tools") or []:
        assert tool["type"] in ("function", "custom"), tool
        if tool["type"] == "function":
            assert tool["strict"] is not None and "defer_loading" not in tool
    for item in body["input"]:
        if item.get("type") == "function_call_output" and isinstance(item["output"], list):
            assert all(p["type"] in ("input_text", "input_image", "input_file") for p in item["output"])
    assert len(body.get("safety_identifier") or "") <= 128


CHECKS = {"anthropic": check_anthropic, "chat": check_chat, "responses": check_responses}


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("fixture", BODIES, ids=lambda p: p.stem)
def test_recorded_body_is_served_by_every_provider_protocol(proxy, mock, fixture, provider):
    path, body = load(fixture)
    # The recordings' tool calls were answered by a mock that does not think: the enforcing
    # mock holds them as its own, sent without thinking (a real model's carry their blocks).
    for message in body.get("messages") or []:
        for block in message.get("content") if isinstance(message.get("content"), list) else []:
            if block.get("type") == "tool_use":
                mock.thinking.before_call[block["id"]] = []
    mock.enqueue(Turn([Text("All done.")]))
    assert replay(proxy, path, body, provider) == "All done."
    received = mock.requests[-1]
    assert received.path.endswith({"anthropic": "/v1/messages", "chat": "/v1/chat/completions", "responses": "/v1/responses"}[provider])
    client_protocol = "openai_responses" if path == "/v1/responses" else "anthropic_messages"
    if {"openai_responses": "responses", "anthropic_messages": "anthropic"}[client_protocol] == provider:
        return  # pass-through: the body goes as it came
    CHECKS[provider](received.body)
    text = json.dumps(received.body)
    assert '"namespace"' not in text and '"additional_tools"' not in text


def test_codex_tool_loop_toward_anthropic_keeps_every_tool_in_a_usable_form(proxy, mock):
    _, body = load(FIXTURES / "codex-gpt-5.5-tool-loop.json")
    mock.enqueue(Turn([Text("All done.")]))
    replay(proxy, "/v1/responses", body, "anthropic")
    sent = mock.requests[-1].body
    names = [t["name"] for t in sent["tools"]]
    assert "apply_patch" in names and "exec_command" in names and "web_search" not in names
    patch = next(t for t in sent["tools"] if t["name"] == "apply_patch")
    assert patch["input_schema"]["required"] == ["input"] and "lark" in patch["description"]
    # The apply_patch call in the history replays as a call of that function.
    calls = [b for m in sent["messages"] if m["role"] == "assistant" for b in m["content"] if b["type"] == "tool_use"]
    assert any(c["name"] == "apply_patch" and set(c["input"]) == {"input"} for c in calls)
    # The view_image output (an image) stays in its tool result.
    results = [b for m in sent["messages"] if m["role"] == "user" for b in m["content"] if b["type"] == "tool_result"]
    assert any(any(p["type"] == "image" for p in r["content"]) for r in results)


def test_codex_default_model_declares_namespaced_tools_in_an_input_item(proxy, mock):
    _, body = load(FIXTURES / "codex-default-model-tool-loop.json")
    mock.enqueue(Turn([Text("All done.")]))
    replay(proxy, "/v1/responses", body, "chat")
    sent = mock.requests[-1].body
    names = [t["function"]["name"] for t in sent["tools"]]
    assert {"functions__exec", "clock__sleep", "collaboration__spawn_agent"} <= set(names)
    calls = [c for m in sent["messages"] for c in m.get("tool_calls") or []]
    assert [c["function"]["name"] for c in calls] == ["functions__exec"]
    assert set(json.loads(calls[0]["function"]["arguments"])) == {"input"}


def test_claude_code_tool_search_loop_toward_chat(proxy, mock):
    _, body = load(FIXTURES / "claude-code-tool-search-loop.json")
    mock.enqueue(Turn([Text("All done.")]))
    replay(proxy, "/v1/messages", body, "chat")
    sent = mock.requests[-1].body
    assert "WebFetch" in [t["function"]["name"] for t in sent["tools"]]
    tool_messages = [m for m in sent["messages"] if m["role"] == "tool"]
    assert "Tool WebFetch is loaded" in json.dumps(tool_messages)
    # The PNG read by a tool follows the tool messages in a user message.
    images = [i for i, m in enumerate(sent["messages"]) if m["role"] == "user" and "image_url" in json.dumps(m)]
    assert images and sent["messages"][images[0] - 1]["role"] == "tool"
    assert sent["safety_identifier"].startswith("sha256:")

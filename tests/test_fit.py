"""Model capability settings in the config, and the name flattening of namespaced tools."""
from __future__ import annotations

import pytest

import engine
from engine.hooks.names import MAX_NAME, wire_name
from proxai.http.app import model_capabilities
from proxai.routing.config import load_dict
from proxai.http.errors import ConfigError
from proxai.routing.routes import Router


def doc(provider_extra=None, route_extra=None):
    return {
        "providers": {"c": {"protocol": "openai_chat_completions", "base_url": "http://x/v1", "api_key": "k",
                            **(provider_extra or {})}},
        "routing": {"default_providers": {"anthropic_messages": "c"},
                    "routes": [{"name": "r", "model_pattern": "gpt-4o*", "provider": "c", **(route_extra or {})}]},
    }


def test_capability_defaults_and_route_overrides():
    cfg = load_dict(doc(), {})
    p = cfg.providers["c"]
    assert (p.hosted_tools, p.reasoning, p.max_output_tokens) == ("drop", "forward", None)
    cfg = load_dict(doc({"reasoning": "drop", "max_output_tokens": 16384, "hosted_tools": "reject"},
                        {"reasoning": "forward", "max_output_tokens": 4096}), {})
    router = Router(cfg)
    assert model_capabilities(router.resolve("gpt-4o-mini", "anthropic_messages")) == {
        "hosted_tools": "reject", "tool_search": "emulate", "reasoning": "forward", "max_output_tokens": 4096,
        "mid_conversation_system": None}
    assert model_capabilities(router.resolve("other", "anthropic_messages")) == {
        "hosted_tools": "reject", "tool_search": "emulate", "reasoning": "drop", "max_output_tokens": 16384,
        "mid_conversation_system": None}


@pytest.mark.parametrize("where,key,value,message", [
    ("providers.c", "hosted_tools", "map", "must be one of: drop, reject"),
    ("providers.c", "reasoning", "off", "must be one of: forward, drop"),
    ("providers.c", "max_output_tokens", 0, "minimum"),
    ("routing.routes[0]", "hosted_tools", "keep", "must be one of: drop, reject"),
])
def test_capability_values_are_checked(where, key, value, message):
    d = doc({key: value}) if where.startswith("providers") else doc(route_extra={key: value})
    with pytest.raises(ConfigError) as err:
        load_dict(d, {})
    found = dict(err.value.problems)
    assert message in found[f"{where}.{key}"]


def test_wire_names():
    assert wire_name(None, "exec") == "exec"
    assert wire_name("crm", "lookup") == "crm__lookup"
    assert wire_name("mcp__github__", "create_issue") == "mcp__github__create_issue"
    assert wire_name("acme.crm", "find:one") == "acme_crm__find_one"
    long = wire_name("n" * 50, "tool_with_a_long_name")
    assert len(long) == MAX_NAME and long == wire_name("n" * 50, "tool_with_a_long_name")
    assert long != wire_name("n" * 50, "tool_with_a_long_name2")


def test_long_flattened_names_are_restored():
    eng = engine.Engine.load()
    ns = "n" * 50
    body = {"model": "m", "input": "x", "tools": [{"type": "namespace", "name": ns, "description": "d", "tools": [
        {"type": "function", "name": "tool_with_a_long_name", "parameters": {"type": "object", "properties": {}}}]}]}
    ctx = engine.Context("openai_responses", "anthropic_messages", client_body=body)
    out = eng.translate_request(ctx, body)
    flat = out["tools"][0]["name"]
    assert len(flat) <= MAX_NAME
    upstream = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "stop_reason": "tool_use",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": flat, "input": {}}],
                "usage": {"input_tokens": 1, "output_tokens": 1}}
    item = eng.translate_response(ctx, upstream)["output"][0]
    assert (item["name"], item["namespace"]) == ("tool_with_a_long_name", ns)


def test_reasoning_drop_leaves_thinking_out_toward_anthropic():
    eng = engine.Engine.load()
    body = {"model": "m", "input": "x", "reasoning": {"effort": "high", "summary": "auto"}, "max_output_tokens": 64000}
    ctx = engine.Context("openai_responses", "anthropic_messages", client_body=body, reasoning="drop", max_output_tokens=8192)
    out = eng.translate_request(ctx, body)
    assert "thinking" not in out and "effort" not in (out.get("output_config") or {})
    assert out["max_tokens"] == 8192
    assert any("reasoning left out" in t for t in ctx.traces) and any("clamped" in t for t in ctx.traces)


@pytest.mark.parametrize("fmt", [
    {"type": "grammar", "syntax": "regex", "definition": "^[a-z]+$"},            # Responses
    {"type": "grammar", "grammar": {"syntax": "regex", "definition": "^[a-z]+$"}},  # Chat
])
def test_custom_tool_grammar_goes_into_the_description(fmt):
    eng = engine.Engine.load()
    ir = {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}],
          "tools": [{"type": "custom", "name": "word", "description": "One word.", "format": fmt}]}
    out = eng.encode_request(engine.Context("openai_chat_completions", "anthropic_messages"), ir)
    assert out["tools"][0]["description"] == (
        "One word.\n\nPass the free-form input as the string parameter `input`.\n\n"
        "The input must match this regex grammar:\n```\n^[a-z]+$\n```")


@pytest.mark.parametrize("provider", ["anthropic_messages", "openai_chat_completions"])
def test_a_tool_declared_again_by_additional_tools_is_sent_once(provider):
    # A deferred tool the client later loads with an additional_tools item: one tool, declared twice.
    eng = engine.Engine.load()
    refund = {"type": "function", "name": "lookup_refund_policy", "description": "Refunds.",
              "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}}
    body = {"model": "m", "tools": [{"type": "function", "name": "other", "parameters": {"type": "object"}},
                                    {**refund, "defer_loading": True}],
            "input": [{"role": "user", "content": "refund for order 7?"},
                      {"type": "additional_tools", "role": "developer", "tools": [refund]}]}
    ctx = engine.Context("openai_responses", provider, client_body=body)
    out = eng.translate_request(ctx, body)
    names = [t.get("name") or t["function"]["name"] for t in out["tools"]]
    assert names == ["other", "lookup_refund_policy"]
    assert any("lookup_refund_policy declared again" in t for t in ctx.traces)

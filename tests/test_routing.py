from __future__ import annotations

import pytest

from proxai.routing.config import RouteConfig, load_dict
from proxai.http.errors import RoutingError
from proxai.routing.route_patterns import resolve_kind
from proxai.routing.routes import Router

CHAT, RESP, ANT = "openai_chat_completions", "openai_responses", "anthropic_messages"


def router(routes, defaults=None) -> Router:
    doc = {
        "providers": {
            "ant": {"protocol": ANT, "base_url": "https://a", "api_key": "k"},
            "oai": {"protocol": RESP, "base_url": "https://o/v1", "api_key": "k"},
            "local": {"protocol": CHAT, "base_url": "http://l/v1", "api_key": "k"},
        },
        "routing": {"routes": routes, "default_providers": defaults or {}},
    }
    return Router(load_dict(doc, {}))


def test_auto_kind():
    def kind(pattern):
        return resolve_kind(RouteConfig(name="r", model_pattern=pattern, provider="p"))

    assert kind("claude-*") == "glob"
    assert kind("gpt-4.1") == "exact"
    assert kind("gpt-4?") == "glob"
    assert kind("^claude-(.*)$") == "regex"
    assert kind("a|b") == "regex"


def test_first_matching_route_wins_over_later_routes_and_defaults():
    r = router(
        [
            {"name": "first", "model_pattern": "claude-*", "provider": "ant"},
            {"name": "second", "model_pattern": "claude-3*", "provider": "oai"},
        ],
        {CHAT: "local"},
    )
    m = r.resolve("claude-3-opus", CHAT)
    assert (m.route, m.provider.name, m.upstream_model) == ("first", "ant", "claude-3-opus")


def test_matching_is_case_insensitive_for_every_kind():
    r = router(
        [
            {"name": "e", "model_pattern": "Fast", "match_kind": "exact", "provider": "ant", "upstream_model": "claude-haiku-4-5"},
            {"name": "g", "model_pattern": "GPT-*", "provider": "oai"},
            {"name": "x", "model_pattern": "^Local-(?P<rest>.+)$", "provider": "local", "upstream_model": "$rest"},
        ]
    )
    assert r.resolve("FAST", ANT).upstream_model == "claude-haiku-4-5"
    assert r.resolve("gpt-4o", RESP).provider.name == "oai"
    m = r.resolve("LOCAL-Qwen3", CHAT)
    assert (m.provider.name, m.upstream_model) == ("local", "Qwen3")  # captured text keeps its case


def test_exact_does_not_match_prefix_and_glob_matches_whole_name():
    r = router(
        [
            {"name": "e", "model_pattern": "fast", "match_kind": "exact", "provider": "ant"},
            {"name": "g", "model_pattern": "gpt-4", "match_kind": "glob", "provider": "oai"},
        ],
        {CHAT: "local"},
    )
    assert r.resolve("faster", CHAT).route == "default"
    assert r.resolve("gpt-4o", CHAT).route == "default"
    assert r.resolve("gpt-4", CHAT).route == "g"


def test_regex_placeholders():
    r = router(
        [
            {"name": "num", "model_pattern": "^via-(ant)/(.+)$", "provider": "ant", "upstream_model": "$2@${1}"},
            {"name": "dollar", "model_pattern": "^d-(.+)$", "provider": "ant", "upstream_model": "$$$1"},
        ]
    )
    assert r.resolve("via-ant/claude-x", ANT).upstream_model == "claude-x@ant"
    assert r.resolve("d-x", ANT).upstream_model == "$x"


def test_regex_must_match_whole_name():
    r = router([{"name": "r", "model_pattern": "claude", "match_kind": "regex", "provider": "ant"}], {ANT: "ant"})
    assert r.resolve("my-claude-x", ANT).route == "default"


def test_request_protocol_guard_is_an_error_not_a_fall_through():
    r = router(
        [
            {"name": "chat-only", "model_pattern": "gpt-4o*", "request_protocol": CHAT, "provider": "oai"},
            {"name": "later", "model_pattern": "gpt-*", "provider": "local"},
        ],
        {RESP: "oai"},
    )
    assert r.resolve("gpt-4o-mini", CHAT).route == "chat-only"
    with pytest.raises(RoutingError) as exc_info:
        r.resolve("gpt-4o-mini", RESP)
    msg = str(exc_info.value)
    assert "gpt-4o-mini" in msg and RESP in msg and "chat-only" in msg
    assert exc_info.value.status == 400


def test_default_provider_per_protocol():
    r = router([], {CHAT: "local", ANT: "ant"})
    assert r.resolve("anything", CHAT).provider.name == "local"
    assert r.resolve("anything", ANT).provider.name == "ant"
    assert r.resolve("anything", ANT).upstream_model == "anything"


def test_no_route_and_no_default_names_model_and_protocol():
    r = router([{"name": "c", "model_pattern": "claude-*", "provider": "ant"}], {CHAT: "local"})
    with pytest.raises(RoutingError) as exc_info:
        r.resolve("mystery-model", RESP)
    assert "mystery-model" in str(exc_info.value) and RESP in str(exc_info.value)

"""Every field of each protocol's request type in the installed SDKs is decided: mapped
(read by the request decoder's output), advisory (dropped with a trace line) or rejected
(a 400 naming it), according to the decoder rule files. A field a new SDK adds fails here
until someone decides which it is, so none is ever dropped silently."""
from __future__ import annotations

import copy
import typing

import jmespath.parser
import pytest
from anthropic.types import message_create_params as anthropic_params
from anthropic.types.beta import message_create_params as anthropic_beta_params
from openai.types.chat import completion_create_params as chat_params
from openai.types.responses import response_create_params as responses_params

import engine
from engine import yamlsrc
from engine.ruleset import BUILTIN_RULES

SDK_REQUEST_TYPES = {
    "openai_chat_completions": [chat_params.CompletionCreateParams],
    "openai_responses": [responses_params.ResponseCreateParams],
    # Claude Code and other agents use the beta endpoint: its fields count too.
    "anthropic_messages": [anthropic_params.MessageCreateParams, anthropic_beta_params.MessageCreateParams],
}
# Sent by the SDKs as headers or query, never in the body; the server handles them.
NOT_BODY = {"anthropic_messages": {"betas"}}

_PARSER = jmespath.parser.Parser()


def typed_dict_keys(tp) -> set[str]:
    """Keys of a TypedDict, or of every member of a Union of them (Streaming / NonStreaming
    variants over their Base), inherited keys included."""
    members = typing.get_args(tp) or (tp,)
    keys: set[str] = set()
    for member in members:
        keys |= set(member.__required_keys__) | set(member.__optional_keys__)
    return keys


def sdk_fields(protocol: str) -> set[str]:
    keys: set[str] = set()
    for tp in SDK_REQUEST_TYPES[protocol]:
        keys |= typed_dict_keys(tp)
    return keys - NOT_BODY.get(protocol, set())


def decoder(protocol: str) -> dict:
    path = BUILTIN_RULES / protocol / "request.decode.yaml"
    return yamlsrc.load(path.read_text(encoding="utf-8"), str(path))[0]


def _roots(ast: dict) -> set[str]:
    """Top-level fields a jmespath AST reads from the current item (not from a projected element)."""
    kind, children = ast["type"], ast.get("children") or []
    if kind == "field":
        return {ast["value"]}
    if kind in ("subexpression", "index_expression", "projection", "value_projection", "flatten", "pipe"):
        return _roots(children[0]) if children else set()
    if kind == "filter_projection":
        return _roots(children[0])
    out: set[str] = set()
    for child in children:
        if isinstance(child, dict):
            out |= _roots(child)
    return out


def _selector_roots(text: str) -> set[str]:
    if text.startswith("$"):  # a variable ($ctx, $root, a $let binding): not the request's own field
        return set()
    return _roots(_PARSER.parse(text).parsed)


def read_fields(doc: dict) -> set[str]:
    """Top-level request fields the decoder's output template reads. Item templates under
    `$map`'s `$as` / `$where` see list items, not the request, so they do not count."""
    from engine.registry import children

    templates = doc.get("templates") or {}
    seen_refs: set[str] = set()

    def walk(node) -> set[str]:
        if isinstance(node, str):
            return _selector_roots(node)
        if isinstance(node, dict) and "$ref" in node:
            name = node["$ref"]
            if name in seen_refs:
                return set()
            seen_refs.add(name)
            return walk(templates[name])
        # children the registry lists; those under $map items (which bind $parent) read items
        return set().union(set(), *(walk(child) for child, _, _, bound in children(node) if "parent" not in bound))

    return walk(doc["output"])


def decisions(protocol: str) -> dict[str, set[str]]:
    doc = decoder(protocol)
    return {
        "mapped": read_fields(doc),
        "advisory": {a for a in doc.get("advisory") or [] if "." not in a and "[" not in a},
        "rejected": {r["param"].split(".")[0] for r in doc.get("reject") or []},
    }


@pytest.mark.parametrize("protocol", list(SDK_REQUEST_TYPES))
def test_every_sdk_request_field_is_decided(protocol):
    decided = decisions(protocol)
    undecided = sorted(f for f in sdk_fields(protocol) if not any(f in s for s in decided.values()))
    assert not undecided, (
        f"{protocol}: request fields of the installed SDK that the decoder neither maps, lists as "
        f"advisory nor rejects: {undecided}. Decide each in rules/{protocol}/request.decode.yaml")


@pytest.mark.parametrize("protocol", list(SDK_REQUEST_TYPES))
def test_advisory_and_rejected_fields_exist(protocol):
    """The lists name real fields (a typo would leave the real one undecided)."""
    decided = decisions(protocol)
    known = sdk_fields(protocol) | {"top_k", "temperature", "top_p"}  # sampling the Anthropic SDK no longer types
    assert not (decided["advisory"] | decided["rejected"]) - known


def test_the_walker_sees_reads_and_skips_item_scope():
    doc = {"output": {"a": "x.y", "b": {"$map": "items", "$as": {"c": "inner"}}, "d": {"$ref": "t"},
                      "e": "contains(include || `[]`, 'v')", "f": "$ctx.z", "g": "list[?k == 'v'].w"},
           "templates": {"t": {"$if": "cond", "$then": "then_field"}}}
    assert read_fields(doc) == {"x", "items", "cond", "then_field", "include", "list"}


# --- advisory fields leave a trace ---------------------------------------------------------

OTHER = {"openai_chat_completions": "anthropic_messages", "openai_responses": "anthropic_messages",
         "anthropic_messages": "openai_responses"}
MINIMAL = {
    "openai_chat_completions": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "openai_responses": {"model": "m", "input": "hi"},
    "anthropic_messages": {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]},
}


@pytest.mark.parametrize("protocol,field", [(p, f) for p in SDK_REQUEST_TYPES for f in sorted(decisions(p)["advisory"])])
def test_each_advisory_field_is_dropped_with_a_trace(protocol, field):
    eng = engine.Engine.load()
    body = copy.deepcopy(MINIMAL[protocol])
    body[field] = {"type": "some-value"}
    ctx = engine.Context(client_protocol=protocol, provider_protocol=OTHER[protocol], provider_name="p")
    out = eng.translate_request(ctx, body)
    assert field not in out or out[field] != body[field]
    assert any(field in t for t in ctx.traces), ctx.traces


@pytest.mark.parametrize("provider", ["openai_chat_completions", "openai_responses"])
def test_anthropic_agent_fields_toward_openai_are_traced_or_rejected(provider):
    eng = engine.Engine.load()
    fields = {"context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},
              "container": "container_1", "thinking": {"type": "adaptive"}}
    for name, value in fields.items():
        ctx = engine.Context(client_protocol="anthropic_messages", provider_protocol=provider, provider_name="p")
        out = eng.translate_request(ctx, {**MINIMAL["anthropic_messages"], name: value})
        assert name not in out
        assert any(name in t for t in ctx.traces), (name, ctx.traces)
    ctx = engine.Context(client_protocol="anthropic_messages", provider_protocol=provider, provider_name="p")
    with pytest.raises(engine.InvalidRequest) as err:
        eng.translate_request(ctx, {**MINIMAL["anthropic_messages"],
                                    "mcp_servers": [{"type": "url", "url": "https://mcp.example", "name": "x"}]})
    assert err.value.param == "mcp_servers"

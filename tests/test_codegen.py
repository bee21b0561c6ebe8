"""The generated Python (engine/codegen.py), the one way rules run, means what the
template language says.

Three guards: the golden files (tests/test_golden.py: every golden input, byte for byte);
here, random templates over random data against a small reference interpreter of the
language that lives only in this file; and failures named as before (message, client
field, the rule's file:line).
"""
from __future__ import annotations

import copy

import jmespath
import pytest
from hypothesis import example, given, settings, strategies as st

from test_expr_closures import DOCS

import engine
from engine.expr import OPTIONS, VAR, truthy
from engine.hooks import HOOKS
from engine.scope import MISS, NULL, Run, Scope
from engine.tables import Table
from engine.template import Compiler
from engine.yamlsrc import load

# one table for the $table cases: a hit, a miss with and without $default
_TABLES = {"roles": Table("roles", "test.roles", {"user": "human", "assistant": "ai"})}


def _compiled(node):
    """A template compiled as the loader compiles one, in a file named t.yaml."""
    return Compiler("t.yaml", HOOKS, _TABLES).compile(node)


def _yaml(src: str):
    return _compiled(load(src, "t.yaml")[0])


def _run(fn, data, error_class=engine.InvalidRequest):
    scope = Scope(data, {"root": data}, "", engine.Context("a", "b"), Run(error_class))
    try:
        return ("ok", fn(scope))
    except engine.TranslationError as err:
        return ("error", type(err).__name__, err.message, err.param, err.rule)
    except Exception as err:  # noqa: BLE001 - outside a fallible construct, as raised
        return ("raised", type(err).__name__)


# --- failures: message, client field, the innermost fallible construct's line ----------------

@pytest.mark.parametrize("src, data, want", [
    ("$map: messages\n$as:\n  $hook: text.join\n  $args: {values: content}\n", {"messages": [{"content": ["a"]}, {"content": 3}]},
     ("error", "InvalidRequest", "malformed payload (TypeError)", "messages[1]", "t.yaml:3")),
    ("$map: messages\n$as:\n  kind:\n    $switch: role\n    $cases: {user: !lit u}\n", {"messages": [{"role": "user"}, {"role": "tool"}]},
     ("error", "InvalidRequest", "unsupported role 'tool'", "messages[1]", "t.yaml:4")),
    ("out:\n  $map: messages\n", {"messages": "not a list"},
     ("error", "InvalidRequest", "expected a list, got str", "messages", "t.yaml:2")),
    ("$map: messages\n$as:\n  $table: roles\n  $of: role\n", {"messages": [{"role": "assistant"}, {"role": "tool"}]},
     ("error", "InvalidRequest", "unknown test.roles value 'tool'", "messages[1]", "t.yaml:3")),
    ("$map: messages\n$as: {$table: roles, $of: role, $default: !lit other}\n", {"messages": [{"role": "user"}, {"role": "tool"}]},
     ("ok", ["human", "other"])),
    ("a:\n  b:\n    $fail: \"{param} is not supported\"\n    $param: thing\n", {},
     ("error", "InvalidRequest", "thing is not supported", "thing", "t.yaml:3")),
    ("$map: messages\n$as:\n  $if: flag\n  $then:\n    $fail: \"{param} is refused\"\n", {"messages": [{"flag": False}, {"flag": True}]},
     ("error", "InvalidRequest", "messages[1] is refused", "messages[1]", "t.yaml:5")),
    # a malformed value under a construct that cannot fail is reported by the nearest one that can
    ("$map: messages\n$as:\n  $let: {n: \"length(content)\"}\n  $in: {size: $n}\n", {"messages": [{"content": "ab"}, {"content": 3}]},
     ("error", "InvalidRequest", "malformed payload (TypeError)", None, "t.yaml:1")),
])
def test_a_failure_names_the_client_field_and_the_rule(src, data, want):
    assert _run(_yaml(src), copy.deepcopy(data)) == want


def test_a_failure_on_the_response_path_is_an_upstream_error():
    got = _run(_yaml("$fail: no such thing\n"), {}, engine.UpstreamProtocolError)
    assert got == ("error", "UpstreamProtocolError", "no such thing", None, "t.yaml:1")


def test_v1_idioms_of_a_tolerated_file_run_as_they_did():
    # what the migration reads and a file of engine.ruleset.V1_TOLERATED_KINDS still runs
    src = ("a: \"'text'\"\nb: \"`3`\"\nc: {$hook: responses.nulls, $args: {keys: ks}}\n"
           "d: {$switch: x, $cases: {None: !lit none}}\n"
           "e: {$if: bad, $then: {$reject: \"{param} refused\", $param: bad}}\n")
    found: list = []
    fn = Compiler("t.yaml", HOOKS, _TABLES, legacy=True, found=found).compile(load(src, "t.yaml")[0])
    assert sorted(i.old for i in found) == ["$reject", "'text'", "None", "`3`", "responses.nulls"]
    assert _run(fn, {"ks": ["k"]}) == ("ok", {"a": "text", "b": 3, "c": {"k": None}, "d": "none"})
    assert _run(fn, {"bad": 1}, engine.UpstreamProtocolError) == (
        "error", "InvalidRequest", "{param} refused", "bad", "t.yaml:5")


def test_generated_code_is_named_after_its_rule():
    eng = engine.Engine.load()
    fn = eng.codecs[("request.decode", "openai_chat_completions")].first_reject
    assert fn.__code__.co_filename.startswith("<conditions rules/openai_chat_completions/request.decode.yaml")


# --- random templates against a reference interpreter ------------------------------------


class Refused(Exception):
    """The reference's failure: a $fail, a $switch or $table miss, a $map over a non-list."""


def _key(value) -> str:
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    return str(value)


def reference(node, cur, env):
    """What a template means, written as plainly as possible (the language of rules/README.md)."""
    if isinstance(node, str):
        if node == "@":
            return cur
        match = VAR.match(node)
        if match is not None:
            base = env.get(match.group(1))
            return base if match.group(2) is None else jmespath.search(match.group(2), base, OPTIONS)
        return jmespath.search(node, cur, OPTIONS)
    if isinstance(node, list):
        return [v for v in (reference(item, cur, env) for item in node) if v is not None]
    if not isinstance(node, dict):
        return node
    if not any(k.startswith("$") for k in node):
        out = {}
        for k, v in node.items():
            value = reference(v, cur, env)
            if value is not None:
                out[k] = None if value is NULL else value
        return out
    if "$lit" in node:
        return node["$lit"]
    if "$nullable" in node:
        value = reference(node["$nullable"], cur, env)
        return NULL if value is None else value
    if "$map" in node:
        items = reference(node["$map"], cur, env)
        if items is None:
            return None
        if not isinstance(items, list):
            raise Refused
        out = []
        for i, item in enumerate(items):
            inner = {**env, "parent": cur, "index": i}
            if "$where" in node and not truthy(reference(node["$where"], item, inner)):
                continue
            value = reference(node.get("$as", "@"), item, inner)
            if value is None:
                continue
            if node.get("$flat") and isinstance(value, list):
                out.extend(value)
            else:
                out.append(value)
        return out
    if "$switch" in node:
        cases = {_key(k): v for k, v in node["$cases"].items()}
        key = _key(reference(node["$switch"], cur, env))
        if key in cases:
            return reference(cases[key], cur, env)
        if "$default" in node:
            return reference(node["$default"], cur, env)
        raise Refused
    if "$if" in node:
        branch = "$then" if truthy(reference(node["$if"], cur, env)) else "$else"
        return reference(node.get(branch), cur, env)
    if "$first" in node:
        return next((v for v in (reference(t, cur, env) for t in node["$first"]) if v is not None), None)
    if "$table" in node:
        key = reference(node.get("$of", "@"), cur, env)
        if key is None:
            return None
        hit = _TABLES[node["$table"]].lookup(key)
        if hit is MISS:
            if "$default" in node:
                return reference(node["$default"], cur, env)
            raise Refused
        return hit
    if "$merge" in node:
        out = {}
        for t in node["$merge"]:
            value = reference(t, cur, env)
            if value:
                out.update(value)
        return out
    if "$concat" in node:
        out = []
        for t in node["$concat"]:
            value = reference(t, cur, env)
            if isinstance(value, list):
                out.extend(value)
            elif value is not None:
                out.append(value)
        return out
    if "$let" in node:
        return reference(node.get("$in"), cur, {**env, **{k: reference(v, cur, env) for k, v in node["$let"].items()}})
    if "$fail" in node:
        raise Refused
    raise AssertionError(f"the reference does not know {node}")


# Selectors of every generated shape; ordering comparisons are left out (jmespath raises on
# non-numbers where the generated code answers null: test_expr_closures covers them).
SELECTORS = ["@", "a", "a.b", "x", "s", "a[0]", "a[-1].b", "a[*].b", "a[?b == 'x']", "a[]", "a == 'x'", "!a", "a || b",
             "a && b", "length(s)", "to_string(n)", "[a, n]", "$v", "$v.a", "$parent.a", "$index", "$root.n", "type(a)"]
LITERALS = st.sampled_from([None, True, 0, 2, {"$lit": "x"}, {"$lit": ""}, {"$lit": [1]}, {"$nullable": None}])


def _templates():
    leaves = st.sampled_from(SELECTORS) | LITERALS

    def compound(t):
        return st.one_of(
            st.lists(t, max_size=3),
            st.dictionaries(st.sampled_from(["k", "l", "m"]), t, min_size=1, max_size=3),
            t.map(lambda x: {"$nullable": x}),
            st.tuples(st.sampled_from(["a", "a", "a", "x", "@", "$v"]), t, st.none() | t, st.booleans()).map(
                lambda p: {"$map": p[0], "$as": p[1], **({"$where": p[2]} if p[2] is not None else {}), **({"$flat": True} if p[3] else {})}),
            st.tuples(t, t, t).map(lambda p: {"$if": p[0], "$then": p[1], "$else": p[2]}),
            st.lists(t, min_size=1, max_size=3).map(lambda xs: {"$first": xs}),
            st.tuples(st.sampled_from(["a", "n", "s", "x.b"]), t, st.none() | t).map(
                lambda p: {"$switch": p[0], "$cases": {"x": p[1], "null": {"$lit": "none"}, "2": p[1]},
                           **({"$default": p[2]} if p[2] is not None else {})}),
            st.tuples(st.sampled_from(["s", "a", "@"]), st.none() | t).map(
                lambda p: {"$table": "roles", "$of": p[0], **({"$default": p[1]} if p[1] is not None else {})}),
            st.lists(t, max_size=3).map(lambda xs: {"$merge": xs}),
            st.lists(t, max_size=3).map(lambda xs: {"$concat": xs}),
            st.tuples(t, t).map(lambda p: {"$let": {"v": p[0]}, "$in": p[1]}),
            st.sampled_from(SELECTORS).map(lambda x: {"$if": x, "$then": {"$fail": "refused"}}),
        )
    template = st.recursive(leaves, compound, max_leaves=8)
    # half of them walk the list `a` of the document, where $parent, $index and $where matter
    return template | st.tuples(template, template).map(lambda p: {"$map": "a", "$as": p[0], "$where": p[1]}) \
        | template.map(lambda t: {"$map": "a", "$as": t, "$flat": True})


def _outcome_of_generated(fn, doc):
    got = _run(fn, doc)
    if got[0] == "ok":
        return got
    return ("refused",) if got[0] == "error" and not got[2].startswith("malformed") else ("malformed",)


def _outcome_of_reference(node, doc):
    try:
        return ("ok", reference(node, doc, {"root": doc}))
    except Refused:
        return ("refused",)
    except Exception:  # noqa: BLE001 - a type error of the data (jmespath's or Python's)
        return ("malformed",)


# mostly a document whose `a` is a list of objects, which `$map` walks
_DATA = st.fixed_dictionaries({"a": st.lists(DOCS, max_size=3), "s": st.sampled_from(["user", "tool", "x"])},
                              optional={"n": st.integers(-1, 3), "x": st.sampled_from(["x", 2, None])})


_ITEMS = {"x": 1, "a": [{"a": "x", "b": 1}, {"b": 2}, {"a": [3, 4]}], "s": "user"}


@settings(max_examples=500, deadline=None, derandomize=True)
@given(node=_templates(), doc=_DATA | DOCS)
@example({"$map": "a", "$as": {"i": "$index", "p": "$parent.x", "v": "a"}, "$where": "b"}, _ITEMS)
@example({"$map": "a", "$as": "a", "$flat": True}, _ITEMS)
@example({"$merge": [{"k": "x", "l": "s"}, {"k": {"$nullable": "missing"}}, "a[2]"]}, _ITEMS)
@example({"$concat": ["a[*].b", "x", [{"$lit": "y"}], None]}, _ITEMS)
@example({"$let": {"v": "a[0]"}, "$in": {"$first": ["$v.missing", "$v.a", {"$lit": "z"}]}}, _ITEMS)
@example({"$switch": "s", "$cases": {"user": {"$table": "roles", "$of": "s"}, "null": 0}, "$default": "x"}, _ITEMS)
@example({"$if": "a[?b == `2`]", "$then": {"$table": "roles", "$of": "s"}, "$else": {"$fail": "refused"}}, _ITEMS)
def test_random_templates_mean_what_the_reference_says(node, doc):
    fn = _compiled(copy.deepcopy(node))
    want = _outcome_of_reference(node, copy.deepcopy(doc))
    assert _outcome_of_generated(fn, copy.deepcopy(doc)) == want


def test_the_reference_comparison_can_fail():
    # a generator that drops null-kept keys would be caught: NULL must become a kept null
    node = {"k": {"$nullable": "missing"}}
    assert _outcome_of_reference(node, {}) == ("ok", {"k": None}) == _run(_compiled(node), {})
    assert _outcome_of_reference({"k": "missing"}, {}) == ("ok", {}) != _outcome_of_reference(node, {})

"""The generated Python (engine/codegen.py) means what the closure compiler means.

The server runs the rules as Python generated at load; the closures of engine/template.py
and engine/constructs.py are the language's definition (and what the linter and the
migration run). Every golden input and corpus item, toward every protocol, must give the
same wire output or the same rejection -- message, client field and rule file:line --
through both.
"""
from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings

from test_expr_closures import DOCS, EXPRESSIONS

import engine
from engine import template
from engine.tables import Table
from engine.ruleset import load_rules
from golden import generate as G


def _closure_engine() -> engine.Engine:
    previous = template.CODEGEN
    template.CODEGEN = False
    try:
        rules, problems = load_rules()
    finally:
        template.CODEGEN = previous
    assert not problems
    return engine.Engine(rules.codecs, rules.streams, rules.tables, rules.enums)


def _outputs(eng, monkeypatch) -> list[dict]:
    monkeypatch.setattr(G, "_ENGINE", eng)
    monkeypatch.setattr(G, "_rejection", lambda err: {"status": err.status, "message": err.message,
                                                      "param": err.param, "rule": err.rule})
    return [*G.codec_lines(G.read_cases()), *G.fixture_lines(), *G.corpus_lines()]


def test_generated_rules_translate_every_golden_input_as_the_closures_do(monkeypatch):
    fast = engine.Engine.load()
    slow = _closure_engine()
    assert fast.codecs[("request.decode", "openai_chat_completions")].first_reject is not None  # generated
    assert slow.codecs[("request.decode", "openai_chat_completions")].first_reject is None  # closures
    got, want = _outputs(fast, monkeypatch), _outputs(slow, monkeypatch)
    assert len(got) == len(want) > 1000
    assert any("error" in line and line["error"]["rule"] for line in want)  # rejections with their rule compared
    for a, b in zip(got, want):
        assert a == b, (a.get("case"), a.get("to"))


# one table for the $table cases: a hit, a miss with and without $default
_TABLES = {"roles": Table("roles", "test.roles", {"user": "human", "assistant": "ai"})}


def _compiled(src: str):
    """One template compiled both ways, in a file named t.yaml."""
    from engine.registry import HOOKS
    from engine.yamlsrc import load

    node, _ = load(src, "t.yaml")
    slow = template.Compiler("t.yaml", HOOKS, _TABLES)
    slow.fast = False
    fast = template.Compiler("t.yaml", HOOKS, _TABLES)
    return slow.build(node), fast.build(node)


def _run(fn, data, error_class=engine.InvalidRequest):
    scope = template.Scope(data, {"root": data}, "", engine.Context("a", "b"), template.Run(error_class))
    try:
        return ("ok", fn(scope))
    except engine.TranslationError as err:
        return ("error", type(err).__name__, err.message, err.param, err.rule)
    except Exception as err:  # noqa: BLE001 - outside a fallible construct, as raised
        return ("raised", type(err).__name__)


@pytest.mark.parametrize("src, data", [
    # a malformed item inside a $map: the rule of the $map, the client's field of the item
    ("{$map: messages, $as: {$hook: text.join, $args: {values: content}}}", {"messages": [{"content": ["a"]}, {"content": 3}]}),
    ("{$map: messages, $as: {$switch: role, $cases: {user: !lit u}}}", {"messages": [{"role": "user"}, {"role": "tool"}]}),
    ("{$map: messages}", {"messages": "not a list"}),
    ("{$map: messages, $as: {$table: roles, $of: role}}", {"messages": [{"role": "assistant"}, {"role": "tool"}]}),
    ("{$map: messages, $as: {$table: roles, $of: role, $default: !lit other}}", {"messages": [{"role": "user"}, {"role": "tool"}]}),
    ("{a: {$first: [x, y, !lit z]}, b: {$nullable: q}, c: {$if: \"x && y\", $then: [x, y], $else: {$merge: [{k: x}, {j: y}]}}}",
     {"x": 1, "y": "2"}),
    ("{$let: {v: x}, $in: {$concat: [$v, [y], \"items[?k == 'a'].v\", \"length(items)\"]}}",
     {"x": [1], "y": 2, "items": [{"k": "a", "v": 1}, {"k": "b", "v": 2}]}),
    ("{$map: items, $where: \"k != 'b'\", $flat: true, $as: [v, $index, $parent.x]}", {"x": 0, "items": [{"k": "a", "v": 1}, {"k": "b"}]}),
    ("{$fail: \"{param} is not supported\", $param: thing}", {}),
])
def test_one_template_means_the_same_generated_and_as_closures(src, data):
    slow, fast = _compiled(src)
    assert fast is not slow
    assert _run(fast, copy.deepcopy(data)) == _run(slow, copy.deepcopy(data))


def test_generated_code_is_named_after_its_rule():
    eng = engine.Engine.load()
    fn = eng.codecs[("request.decode", "openai_chat_completions")].first_reject
    assert fn.__code__.co_filename.startswith("<conditions rules/openai_chat_completions/request.decode.yaml")


@pytest.mark.parametrize("text", EXPRESSIONS + ["$root.a", "$root.a[0].b", "{x: a, y: [b, c], z: {$nullable: d}}"])
@settings(max_examples=40, deadline=None, derandomize=True)
@given(doc=DOCS)
def test_generated_selectors_agree_with_the_closures(text, doc):
    slow, fast = _compiled(text if text.startswith("{") else repr(text) if "'" not in text else '"' + text + '"')
    assert _run(fast, doc) == _run(slow, doc)

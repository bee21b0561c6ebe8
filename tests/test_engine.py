"""The rules engine itself: every template construct, tables, loading and layering, the stream pipeline."""
import collections
import json
import textwrap

import pytest

import engine
from engine import yamlsrc
from engine.hooks import HOOKS
from engine.ruleset import read_dirs
from engine.stream import BlockSerializer
from engine.template import Compiler, Run, Scope

SSE = collections.namedtuple("SSE", "event data")


@pytest.fixture(scope="module")
def tables():
    return engine.Engine.load().tables


def run(template_yaml, data, tables, ctx=None, annotate=False, named=None, error_class=engine.InvalidRequest):
    doc, _ = yamlsrc.load(textwrap.dedent(template_yaml), "t.yaml")
    compiler = Compiler("t.yaml", HOOKS, tables, named or {})
    fn = compiler.compile(doc["t"], doc)
    ctx = ctx or engine.Context("openai_chat_completions", "anthropic_messages", provider_name="p")
    scope = Scope(data, {"root": data, "ctx": ctx.vars()}, "", ctx, Run(error_class, annotate))
    return fn(scope)


def test_selector_literal_and_object_dropping_nulls(tables):
    out = run("t: {a: x.y, b: !lit lit, c: missing, d: 3, e: true}", {"x": {"y": 1}}, tables)
    assert out == {"a": 1, "b": "lit", "d": 3, "e": True}


def test_jmespath_and_variables(tables):
    out = run("t: {n: length(items), first: 'items[?k==`2`].v | [0]', mx: $ctx.max_tokens_default, root: $root.z}",
              {"items": [{"k": 1, "v": "a"}, {"k": 2, "v": "b"}], "z": 9}, tables)
    assert out == {"n": 2, "first": "b", "mx": engine.DEFAULT_MAX_TOKENS, "root": 9}


def test_map_with_where_flat_parent_and_index(tables):
    out = run("""
    t:
      $map: xs
      $where: "keep"
      $as: {v: v, i: $index, p: $parent.tag}
    """, {"tag": "T", "xs": [{"v": 1, "keep": True}, {"v": 2, "keep": False}, {"v": 3, "keep": True}]}, tables)
    assert out == [{"v": 1, "i": 0, "p": "T"}, {"v": 3, "i": 2, "p": "T"}]
    flat = run("t: {$map: xs, $as: [v, v], $flat: true}", {"xs": [{"v": 1}, {"v": 2}]}, tables)
    assert flat == [1, 1, 2, 2]


def test_map_over_non_list_is_an_error_naming_the_field(tables):
    with pytest.raises(engine.InvalidRequest) as err:
        run("t: {$map: messages}", {"messages": "hi"}, tables)
    assert err.value.param == "messages"


def test_switch_dispatch_default_and_error_path(tables):
    template = """
    t:
      $map: messages
      $as:
        $map: content
        $as:
          $switch: type
          $what: content part type
          $cases: {text: {k: !lit T}, image_url: {k: !lit I}}
    """
    assert run(template, {"messages": [{"content": [{"type": "text"}, {"type": "image_url"}]}]}, tables) == [[{"k": "T"}, {"k": "I"}]]
    with pytest.raises(engine.InvalidRequest) as err:
        run(template, {"messages": [{"content": []}, {"content": [{"type": "text"}, {"type": "input_audio"}]}]}, tables)
    assert err.value.param == "messages[1].content[1]"
    assert "content part type 'input_audio'" in err.value.message
    assert err.value.rule.startswith("t.yaml:")
    assert run("t: {$switch: flag, $cases: {'true': !lit yes}, $default: !lit no}", {"flag": True}, tables) == "yes"
    assert run("t: {$switch: flag, $cases: {'true': !lit yes}, $default: !lit no}", {"flag": 3}, tables) == "no"


def test_if_uses_jmespath_truthiness(tables):
    t = "t: {$if: v, $then: !lit y, $else: !lit n}"
    assert [run(t, {"v": v}, tables) for v in (0, 1, "", "a", [], [1], None, False)] == ["y", "y", "n", "y", "n", "y", "n", "n"]


def test_first_table_hook_let_merge_concat_lit(tables):
    data = {"b": 2, "stop": "max_tokens", "args": '{"x": 1}', "o1": {"a": 1}, "o2": {"b": 2}, "l": [1]}
    out = run("""
    t:
      first: {$first: [a, b]}
      stop: {$table: anthropic_messages.stop_reason->ir.stop, $of: stop}
      parsed: {$hook: arguments.parse, $args: {text: args}}
      let: {$let: {v: b}, $in: {got: $v}}
      merged: {$merge: [o1, o2]}
      cat: {$concat: [l, b, l]}
      lit: {$lit: "a.b"}
    """, data, tables)
    assert out == {"first": 2, "stop": "max_tokens", "parsed": {"x": 1}, "let": {"got": 2},
                   "merged": {"a": 1, "b": 2}, "cat": [1, 2, 1], "lit": "a.b"}


def test_table_miss_is_an_error_unless_defaulted(tables):
    with pytest.raises(engine.UpstreamProtocolError) as err:
        run("t: {$table: anthropic_messages.stop_reason->ir.stop, $of: s}", {"s": "weird"}, tables,
            error_class=engine.UpstreamProtocolError)
    assert "weird" in err.value.message
    assert run("t: {$table: anthropic_messages.stop_reason->ir.stop, $of: s, $default: !lit x}", {"s": "weird"}, tables) == "x"


def test_reject_names_the_path_and_error_is_upstream(tables):
    with pytest.raises(engine.InvalidRequest) as err:
        run("t: {$map: tools, $as: {$fail: 'custom tools cannot be expressed', $param: custom}}", {"tools": [{}]}, tables)
    assert (err.value.param, err.value.message) == ("tools[0].custom", "custom tools cannot be expressed")
    with pytest.raises(engine.UpstreamProtocolError):
        run("t: {$fail: 'bad upstream'}", {}, tables, error_class=engine.UpstreamProtocolError)


def test_ref_allows_recursion(tables):
    named_doc, _ = yamlsrc.load("node: {v: v, kids: {$map: kids, $as: {$ref: node}}}", "t.yaml")
    out = run("t: {$ref: node}", {"v": 1, "kids": [{"v": 2, "kids": [{"v": 3}]}]}, tables, named=named_doc)
    assert out == {"v": 1, "kids": [{"v": 2, "kids": [{"v": 3}]}]}


def test_decode_annotates_paths_and_encoder_reports_them(tables):
    ir = run("t: {$map: messages, $as: {role: role}}", {"messages": [{"role": "user"}]}, tables, annotate=True)
    assert ir == [{"role": "user", "_path": "messages[0]"}]
    with pytest.raises(engine.InvalidRequest) as err:
        run("t: {$map: msgs, $as: {$fail: 'no'}}", {"msgs": ir}, tables)
    assert err.value.param == "messages[0]"


def test_foreign_exceptions_become_translation_errors_with_location(tables):
    with pytest.raises(engine.InvalidRequest) as err:
        run("t: {$hook: math.minus_floor0, $args: {value: a, minus: b}}", {"a": "x", "b": [1]}, tables)
    assert err.value.rule == "t.yaml:1"
    assert isinstance(err.value.__cause__, TypeError)


def test_unknown_construct_hook_and_option_fail_at_compile_time(tables):
    for text, problem in [("t: {$nope: 1}", "unknown construct"), ("t: {$hook: no.hook}", "unknown hook"),
                          ("t: {$map: a, $cases: {}}", "does not take"), ("t: 'a ||'", "bad jmespath")]:
        with pytest.raises(engine.RuleError) as err:
            run(text, {}, tables)
        assert problem in str(err.value) and "t.yaml:1" in str(err.value)


def test_yaml_on_is_a_key_not_a_boolean():
    doc, _ = yamlsrc.load("on: {yes: no}\nflag: true\n", "f.yaml")
    assert doc == {"on": {"yes": "no"}, "flag": True}


def test_broken_rule_file_stops_loading_with_file_and_line(tmp_path):
    (tmp_path / "bad.yaml").write_text("kind: response.decode\nprotocol: openai_responses\noutput:\n  id: {$hook: nope}\n")
    with pytest.raises(engine.RuleError) as err:
        engine.Engine.load(override_dir=tmp_path)
    assert "bad.yaml:4" in str(err.value) and "unknown hook 'nope'" in str(err.value)


def test_override_table_entry_layers_over_builtin(tmp_path):
    (tmp_path / "stop.yaml").write_text(
        "kind: tables\ntables:\n  - name: ir.stop->openai_chat_completions.finish_reason\n"
        "    from: ir.stop\n    map:\n      pause_turn: length\n")
    base = engine.Engine.load().tables["ir.stop->openai_chat_completions.finish_reason"]
    over = engine.Engine.load(override_dir=tmp_path).tables["ir.stop->openai_chat_completions.finish_reason"]
    assert base["pause_turn"] == "stop" and over["pause_turn"] == "length"
    assert over["end_turn"] == "stop"  # the rest of the table is untouched


def test_override_codec_section_merges_key_by_key(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "s.yaml").write_text("kind: stream.decode\nprotocol: anthropic_messages\non:\n  ping: []\n  message_stop: []\n")
    over = tmp_path / "over"
    over.mkdir()
    (over / "s.yaml").write_text("kind: stream.decode\nprotocol: anthropic_messages\non:\n  ping:\n    - error: stop\n")
    layered, problems = read_dirs([base, over])
    assert not problems
    doc, _ = layered.codecs[("stream.decode", "anthropic_messages")]
    assert set(doc["on"]) == {"ping", "message_stop"} and doc["on"]["ping"][0]["error"] == "stop"


def test_serializer_holds_later_blocks_until_the_open_one_closes():
    s = BlockSerializer()
    ev = lambda t, i, **kw: {"type": t, "index": i, **kw}  # noqa: E731
    out = []
    for e in [ev("block_start", 0), ev("block_start", 1), ev("block_delta", 1, delta="b"), ev("block_delta", 0, delta="a"),
              ev("block_start", 2), ev("block_stop", 0), ev("block_delta", 2, delta="c"), ev("block_stop", 1),
              ev("block_stop", 2), {"type": "message_stop", "stop": "tool_use"}]:
        out.extend(s.push(e))
    order = [(e["type"], e.get("index"), e.get("delta")) for e in out]
    assert order == [("block_start", 0, None), ("block_delta", 0, "a"), ("block_stop", 0, None),
                     ("block_start", 1, None), ("block_delta", 1, "b"), ("block_stop", 1, None),
                     ("block_start", 2, None), ("block_delta", 2, "c"), ("block_stop", 2, None),
                     ("message_stop", None, None)]


def test_serializer_flushes_pending_blocks_at_message_stop():
    s = BlockSerializer()
    out = []
    for e in [{"type": "block_start", "index": 0}, {"type": "block_start", "index": 1},
              {"type": "block_delta", "index": 1, "delta": "x"}, {"type": "message_stop", "stop": "end_turn"}]:
        out.extend(s.push(e))
    assert [e["type"] for e in out] == ["block_start", "block_start", "block_delta", "message_stop"]


def test_a_failing_stream_condition_is_an_upstream_error_not_a_crash(tmp_path):
    (tmp_path / "d.yaml").write_text(
        "kind: stream.decode\nprotocol: anthropic_messages\non:\n  message_start:\n"
        "    - when: \"length(message) > `0`\"\n      steps: []\n")
    from engine.stream import StreamRun
    eng = engine.Engine.load(override_dir=tmp_path)
    ctx = engine.Context("openai_chat_completions", "anthropic_messages")
    run = StreamRun(eng.streams[("stream.decode", "anthropic_messages")], ctx)
    with pytest.raises(engine.UpstreamProtocolError) as err:
        run.decode({"type": "message_start", "message": 5})  # length() of a number
    assert "d.yaml:5" in err.value.rule


def test_advisory_paths_trace_nested_fields_by_the_clients_path(tmp_path):
    (tmp_path / "c.yaml").write_text(
        "kind: request.decode\nprotocol: openai_responses\n"
        "advisory: [top, 'items[*].hint', 'items[type=doc].cfg', 'ir[*].name']\n"
        "output: {ok: !lit yes}\n")
    eng = engine.Engine.load(override_dir=tmp_path)
    codec = eng.codecs[("request.decode", "openai_responses")]
    ctx = engine.Context("openai_responses", "anthropic_messages")
    body = {"input": "hi", "top": 1, "items": [{"hint": "SECRET", "type": "doc", "cfg": {"a": 1}}, {"type": "text", "cfg": {"a": 1}, "hint": None}],
            "ir": [{"name": "bob", "_path": "input[3]"}]}
    assert codec.apply(body, ctx) == {"ok": "yes"}
    fields = sorted(t.split()[3] for t in ctx.traces)
    assert fields == ["input[3].name", "items[0].cfg", "items[0].hint", "top"]
    assert not any("SECRET" in t or "bob" in t for t in ctx.traces)


def test_bad_advisory_path_is_a_rule_error(tmp_path):
    (tmp_path / "c.yaml").write_text("kind: request.decode\nprotocol: openai_responses\nadvisory: ['a[0]']\noutput: {}\n")
    with pytest.raises(engine.RuleError) as err:
        engine.Engine.load(override_dir=tmp_path)
    assert "c.yaml:3" in str(err.value)

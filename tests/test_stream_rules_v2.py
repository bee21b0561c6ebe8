"""Stream rules v2: ordered steps, bound hook results, per-stream objects with declared
fields, templates with declared params, and the rules/README.md worked example."""
from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest

import engine
from engine import yamlsrc
from engine.hooks import HOOKS, OBJECTS
from engine.stream import StreamRules, StreamRun, StreamTranslator
from engine.template import Compiler

from proxai.mock import Text, Turn

ROOT = Path(__file__).resolve().parent.parent
CHAT, ANTHROPIC = "openai_chat_completions", "anthropic_messages"
_ENGINE = engine.Engine.load()


def rules(text: str, name: str = "t.yaml") -> StreamRules:
    doc, _ = yamlsrc.load(text, name)
    return StreamRules(doc, Compiler(name, HOOKS, _ENGINE.tables, doc.get("templates") or {}))


def decode(text: str, *events) -> list:
    run = StreamRun(rules(text), engine.Context(CHAT, ANTHROPIC))
    return [ev for e in events for ev in run.decode(e)]


HEAD = "kind: stream.decode\nprotocol: anthropic_messages\n"


def test_steps_run_in_list_order():
    text = HEAD + """\
state: {n: 0}
on:
  ping:
    - steps:
        - emit: {type: !lit error, message: "$state.n"}
        - set: {n: 1}
        - emit: {type: !lit error, message: "$state.n"}
"""
    assert [e["message"] for e in decode(text, {"type": "ping"})] == [0, 1]


@pytest.mark.parametrize("order", ["a_first", "b_first"])
def test_keys_of_a_set_step_are_independent_of_their_order(order):
    # Every value is evaluated before any is assigned: swapping the keys changes nothing.
    pair = ["a: $state.b", "b: !lit new"]
    body = ", ".join(pair if order == "a_first" else pair[::-1])
    text = HEAD + f"""\
state: {{a: null, b: "old"}}
on:
  ping:
    - steps:
        - set: {{{body}}}
        - emit: {{type: !lit error, message: "$state.a", code: "$state.b"}}
"""
    (ev,) = decode(text, {"type": "ping"})
    assert (ev["message"], ev["code"]) == ("old", "new")


def test_a_let_binding_is_seen_by_the_steps_after_it():
    text = HEAD + """\
on:
  ping:
    - steps:
        - let: {said: {$hook: text.join, $args: {values: [!lit a, !lit b]}}}
        - emit: {type: !lit error, message: $said}
"""
    assert decode(text, {"type": "ping"}) == [{"type": "error", "message": "ab"}]


def test_a_name_read_before_its_let_is_a_load_error():
    text = HEAD + """\
on:
  ping:
    - steps:
        - emit: {type: !lit error, message: $said}
        - let: {said: !lit x}
"""
    with pytest.raises(engine.RuleError) as err:
        rules(text)
    assert "t.yaml:6" in str(err.value) and "$said" in str(err.value)


def test_a_v1_transition_is_a_load_error_saying_how_to_write_it():
    text = HEAD + """\
on:
  ping:
    - do: {$hook: trace, $args: {message: !lit x}}
      emit: []
"""
    with pytest.raises(engine.RuleError) as err:
        rules(text)
    assert "t.yaml:5" in str(err.value) and "steps:" in str(err.value)


def test_a_step_with_two_actions_is_a_load_error():
    text = HEAD + """\
on:
  ping:
    - steps:
        - {set: {a: 1}, emit: []}
"""
    with pytest.raises(engine.RuleError) as err:
        rules(text)
    assert "t.yaml:6" in str(err.value) and "exactly one of" in str(err.value)


def test_a_v1_override_in_rules_dir_stops_loading_with_file_and_line(tmp_path):
    (tmp_path / "old.yaml").write_text(
        "kind: stream.encode\nprotocol: openai_chat_completions\non:\n  block_opaque:\n"
        "    - do: {$hook: turn.opaque, $args: {index: index, opaque: opaque}}\n")
    with pytest.raises(engine.RuleError) as err:
        engine.Engine.load(override_dir=tmp_path)
    assert "old.yaml:5" in str(err.value) and "steps:" in str(err.value)


def test_template_inputs_are_declared_params_passed_by_the_caller():
    text = HEAD + """\
on:
  ping:
    - steps:
        - let: {x: !lit outer}
        - emit: [{$ref: t, $args: {p: !lit given}}, {$ref: t}]
templates:
  t:
    params: [p]
    body: {type: !lit error, message: {$first: [$p, !lit none]}}
"""
    # A param not passed is null, even where the caller has a name of its own.
    assert [e["message"] for e in decode(text, {"type": "ping"})] == ["given", "none"]


def test_a_template_reading_an_undeclared_variable_is_a_load_error():
    text = HEAD + """\
on:
  ping:
    - steps:
        - emit: {$ref: t}
templates:
  t: {type: !lit error, message: $delta}
"""
    with pytest.raises(engine.RuleError) as err:
        rules(text)
    assert "template 't'" in str(err.value) and "$delta" in str(err.value)


def test_a_ref_argument_the_template_does_not_declare_is_a_load_error():
    text = HEAD + """\
on:
  ping:
    - steps:
        - emit: {$ref: t, $args: {q: !lit x}}
templates:
  t: {params: [p], body: {type: !lit error, message: $p}}
"""
    with pytest.raises(engine.RuleError) as err:
        rules(text)
    assert "no parameter 'q'" in str(err.value)


def test_state_objects_are_declared_and_called_as_name_method():
    text = HEAD + """\
state:
  tools: {object: chat.tool_indexes}
on:
  ping:
    - steps:
        - let: {a: {$hook: tools.index, $args: {index: !lit x}}, b: {$hook: tools.index, $args: {index: !lit y}}}
        - let: {again: {$hook: tools.index, $args: {index: !lit x}}}
        - emit: {type: !lit error, message: [$a, $b, $again]}
"""
    compiled = rules(text)
    ctx = engine.Context(CHAT, ANTHROPIC)
    first, second = StreamRun(compiled, ctx), StreamRun(compiled, ctx)
    assert first.decode({"type": "ping"})[0]["message"] == [0, 1, 0]
    # One object per stream: a second stream starts from 0 again.
    assert second.decode({"type": "ping"})[0]["message"] == [0, 1, 0]
    assert "tools" not in first.state  # objects are not $state: templates see only their results


def test_an_unknown_object_or_method_is_a_load_error():
    with pytest.raises(engine.RuleError, match="unknown object 'chat.nope'"):
        rules(HEAD + "state:\n  x: {object: chat.nope}\non: {}\n")
    with pytest.raises(engine.RuleError, match="unknown hook 'tools.nope'"):
        rules(HEAD + "state:\n  tools: {object: chat.tool_indexes}\non:\n  ping:\n"
                     "    - steps: [{do: {$hook: tools.nope}}]\n")


@pytest.mark.parametrize("name", sorted(OBJECTS))
def test_every_stream_object_declares_its_fields_once(name):
    cls = OBJECTS[name]
    assert "__slots__" in cls.__dict__, f"{name}: fields are declared in __slots__"
    obj = cls(engine.Context(CHAT, ANTHROPIC))
    with pytest.raises(AttributeError):
        obj.undeclared = 1


def test_stateful_stream_hooks_are_gone_from_the_hook_table():
    # Per-stream state lives in objects; no registered hook keeps stream state.
    for old in ("chat.tool_index", "chat.turn_add", "chat.split", "anthropic.out_open", "anthropic.block_open",
                "responses.enc_item", "responses.dec_open", "responses.stamp"):
        assert old not in HOOKS


def test_shipped_stream_rules_write_every_transition_as_steps():
    for path in sorted((ROOT / "rules").glob("*/stream.*.yaml")):
        doc, _ = yamlsrc.load(path.read_text(encoding="utf-8"), str(path))
        for event, transitions in doc["on"].items():
            for t in transitions:
                assert set(t) <= {"when", "steps"}, f"{path.name} {event}"


# --- the rules/README.md worked example -------------------------------------------------

def _worked_example() -> str:
    text = (ROOT / "rules" / "README.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- worked-example: stream.encode openai_chat_completions -->\n```yaml\n(.*?)```", text, re.S)
    assert match, "rules/README.md has the worked example block"
    return match.group(1)


def _chat_chunks_from_anthropic(eng) -> list:
    ctx = engine.Context(CHAT, ANTHROPIC, provider_name="p")
    translator = eng.open_stream(ctx)
    from proxai.http.sse import SSEParser
    events = (b'event: message_start\ndata: {"type":"message_start","message":{"id":"m1","model":"claude-x","usage":{"input_tokens":3}}}\n\n'
              b'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
              b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}\n\n'
              b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
              b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1}}\n\n'
              b'event: message_stop\ndata: {"type":"message_stop"}\n\n')
    wire = []
    for sse in SSEParser().feed(events):
        wire += translator.feed(sse)
    wire += translator.eof()
    return [orjson.loads(w[6:]) for w in wire if w.startswith(b"data: {")]


def test_readme_worked_example_changes_the_stream_through_rules_dir(tmp_path):
    (tmp_path / "chat-first-chunk.yaml").write_text(_worked_example())
    before = _chat_chunks_from_anthropic(_ENGINE)
    after = _chat_chunks_from_anthropic(engine.Engine.load(override_dir=tmp_path))
    assert before[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert after[0]["choices"][0]["delta"] == {"role": "assistant"}
    # Everything else is the built-in mapping: same text, same finish, same chunk identity.
    assert after[0]["id"] == before[0]["id"] == "chatcmpl-m1"
    assert [c["choices"][0]["delta"] for c in after[1:]] == [c["choices"][0]["delta"] for c in before[1:]]
    assert after[-1]["choices"][0]["finish_reason"] == "stop"


def test_readme_worked_example_passes_lint(tmp_path):
    from engine import lint
    (tmp_path / "chat-first-chunk.yaml").write_text(_worked_example())
    assert lint.lint_dirs([tmp_path]) == []


def test_readme_worked_example_through_the_server(harness, start_proxy, mock, tmp_path):
    (tmp_path / "chat-first-chunk.yaml").write_text(_worked_example())
    config = harness.default_config()
    config["rules_dir"] = str(tmp_path)
    client = start_proxy(config).openai()
    mock.enqueue(Turn([Text("hello there")]))
    try:
        chunks = list(client.chat.completions.create(
            model="anthropic/claude-x", messages=[{"role": "user", "content": "hi"}], stream=True))
    finally:
        client.close()
    first = chunks[0].choices[0].delta
    assert first.role == "assistant" and first.content is None
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "hello there"
    assert mock.requests[-1].body["model"] == "claude-x"

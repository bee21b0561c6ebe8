"""Overrides in a rules_dir: partial (a file names only what it changes), checked against
the built-in rules (wire values, table names), and every problem reported, each at its
file:line; the server refuses to start on the first of them."""
import re
import shutil
import textwrap

import pytest

import engine
from engine import lint
from engine.ruleset import BUILTIN_RULES, display_path, load_rules


def write(tmp_path, name, text):
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / name).write_text(textwrap.dedent(text))
    return tmp_path


def problems(tmp_path):
    return lint.lint_dirs([tmp_path])


TOOL_ONLY = """\
    # Only the `tool` template: the output and every other template stay built in.
    kind: request.encode
    protocol: anthropic_messages
    templates:
      tool:
        name: name
        description: "join('', ['[checked] ', description || ''])"
        input_schema: parameters
    """


def test_a_templates_only_override_is_accepted_and_used(tmp_path):
    write(tmp_path, "tool.yaml", TOOL_ONLY)
    assert problems(tmp_path) == []
    eng = engine.Engine.load(tmp_path)
    ctx = engine.Context(client_protocol="openai_chat_completions", provider_protocol="anthropic_messages")
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "f", "description": "Weather",
                                                        "parameters": {"type": "object", "properties": {}}}}]}
    out = eng.translate_request(ctx, body)
    assert out["tools"][0]["description"] == "[checked] Weather"
    assert out["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]  # built in


def test_a_stream_override_may_name_one_event(tmp_path):
    write(tmp_path, "ping.yaml", """\
        kind: stream.decode
        protocol: anthropic_messages
        on:
          ping: []
        """)
    assert problems(tmp_path) == []


def test_a_codec_no_built_in_file_provides_needs_its_output(tmp_path):
    builtin = tmp_path / "builtin"
    shutil.copytree(BUILTIN_RULES, builtin)
    (builtin / "anthropic_messages" / "request.encode.yaml").unlink()
    overrides = write(tmp_path / "overrides", "tool.yaml", TOOL_ONLY)
    _, found = load_rules(overrides, builtin)
    assert [str(p) for p in found] == [
        f"{display_path(overrides / 'tool.yaml')}:2: `output` is required: "
        "no built-in request.encode file for anthropic_messages provides it"]


def test_a_misspelt_protocol_is_named_as_such(tmp_path):
    write(tmp_path, "x.yaml", "kind: request.encode\nprotocol: anthropic_message\ntemplates: {}\n")
    [message] = problems(tmp_path)
    assert "x.yaml:2: " in message and message.endswith("did you mean anthropic_messages?")


WRONG_VALUE = """\
    kind: tables
    tables:
      - name: ir.stop->openai_chat_completions.finish_reason
        from: ir.stop
        map:
          refusal: stopp
    """


def test_a_wrong_wire_value_is_a_lint_and_load_error_at_its_line(tmp_path):
    write(tmp_path, "stop.yaml", WRONG_VALUE)
    expected = ("stop.yaml:6: table ir.stop->openai_chat_completions.finish_reason: stopp is not a "
                "openai_chat_completions.finish_reason: one of stop, length, tool_calls, content_filter, function_call")
    [message] = problems(tmp_path)
    assert expected in message and message.endswith("; did you mean stop?")
    with pytest.raises(engine.RuleError) as err:
        engine.Engine.load(tmp_path)
    assert str(err.value) == message


def test_a_sentinel_value_of_the_built_in_table_is_accepted(tmp_path):
    # protocol_error is what the built-in table maps failures to (the answer fails).
    write(tmp_path, "stop.yaml", WRONG_VALUE.replace("stopp", "protocol_error"))
    assert problems(tmp_path) == []


def test_an_override_cannot_change_a_tables_target(tmp_path):
    write(tmp_path, "stop.yaml", """\
        kind: tables
        tables:
          - name: ir.stop->openai_chat_completions.finish_reason
            from: ir.stop
            to: ir.stop
            map:
              refusal: end_turn
        """)
    assert any("stop.yaml:5: table ir.stop->openai_chat_completions.finish_reason: the built-in table's values "
               "are openai_chat_completions.finish_reason, an override cannot change `to`" in m for m in problems(tmp_path))


def test_an_override_keeps_the_built_in_default(tmp_path):
    # The built-in table has `default: api_error`: one entry is total once layered.
    write(tmp_path, "errors.yaml", """\
        kind: tables
        tables:
          - name: http_status->anthropic_messages.error_type
            from: http_status
            map:
              429: overloaded_error
        """)
    assert problems(tmp_path) == []


def test_a_misspelt_table_is_named_as_such(tmp_path):
    write(tmp_path, "stop.yaml", """\
        kind: tables
        tables:
          - name: ir.stop->openai_chat_completion.finish_reason
            from: ir.stop
            map:
              pause_turn: length
        """)
    assert problems(tmp_path) == [
        f"{display_path(tmp_path / 'stop.yaml')}:3: no built-in table named ir.stop->openai_chat_completion.finish_reason; "
        "did you mean ir.stop->openai_chat_completions.finish_reason?"]


def test_a_new_table_that_a_rule_uses_is_not_a_misspelling(tmp_path):
    write(tmp_path, "tables.yaml", """\
        kind: tables
        tables:
          - name: ir.stop->openai_chat_completions.finish_reasons
            from: ir.stop
            default: stop
            map: {refusal: content_filter}
        """)
    write(tmp_path, "encode.yaml", """\
        kind: response.encode
        protocol: openai_chat_completions
        templates:
          finish: {$table: ir.stop->openai_chat_completions.finish_reasons, $of: stop}
        """)
    assert problems(tmp_path) == []


@pytest.mark.parametrize("text,expected", [
    ("kind: request.encod\nprotocol: anthropic_messages\n", ":1: kind: 'request.encod' is not one of"),
    ("kind: stream.encode\nprotocol: openai_chat_completions\nsse: nammed\n", ":3: sse: 'nammed' is not one of"),
])
def test_a_misspelt_enum_value_gets_a_did_you_mean(tmp_path, text, expected):
    (tmp_path / "x.yaml").write_text(text)
    [message] = problems(tmp_path)
    assert expected in message and message.endswith("did you mean " + ("request.encode?" if "kind" in expected else "named?"))


def test_a_misspelt_key_gets_a_did_you_mean_at_its_line(tmp_path):
    write(tmp_path, "x.yaml", """\
        kind: request.encode
        protocol: anthropic_messages
        templats:
          tool: name
        """)
    [message] = problems(tmp_path)
    assert message.endswith("x.yaml:3: (top): Additional properties are not allowed ('templats' was unexpected); "
                            "did you mean templates?"), message


MANY = """\
    kind: response.encode
    protocol: openai_chat_completions
    templates:
      one: {$hook: no.such_hook}
      two: {$table: ir.stop->openai_chat_completion.finish_reason, $of: stop}
    output:
      id: id
      a: {$ref: missing_template}
      b: "foo[?"
      c:
        d: {$ref: one}
    """


def test_lint_reports_every_problem_of_a_codec_file(tmp_path):
    write(tmp_path, "many.yaml", MANY)
    found = [(int(m.split(":")[1]), m.split(": ", 1)[1]) for m in problems(tmp_path)]
    assert [line for line, _ in found] == [4, 5, 8, 9]
    assert found[0][1] == "unknown hook 'no.such_hook'"
    assert found[1][1].startswith("unknown table 'ir.stop->openai_chat_completion.finish_reason'")
    assert found[2][1].startswith("unknown template 'missing_template'")
    assert found[3][1].startswith("bad jmespath expression 'foo[?'")


STREAM = """\
    kind: stream.encode
    protocol: openai_chat_completions
    on:
      message_start:
        - when: "$nope"
          steps:
            - let: {x: $unbound}
            - emit: {a: $x}
            - emit: $third
    """


def test_lint_reports_every_problem_of_a_stream_file(tmp_path):
    write(tmp_path, "stream.yaml", STREAM)
    # $x is bound by the broken `let`: the step that reads it is not blamed.
    assert sorted(re.search(r"reads \$(\w+)", m).group(1) for m in problems(tmp_path)) == ["nope", "third", "unbound"]


def test_lint_reports_every_problem_of_a_stream_file_each_on_its_line(tmp_path):
    write(tmp_path, "stream.yaml", STREAM)
    messages = problems(tmp_path)
    assert all(re.match(r"^.+\.yaml:[1-9]\d*: ", m) for m in messages), messages   # never line 0, never no line
    found = {int(m.split(":")[1]): m.split(": ", 1)[1].split(",")[0] for m in messages}
    # $x is bound by the broken `let`: the step that reads it is not blamed.
    assert found == {5: "`when` reads $nope", 7: "`let` reads $unbound", 9: "`emit` reads $third"}


@pytest.mark.parametrize("template,line,expected", [
    ("{$table: ir.stop->openai_chat_completion.finish_reason, $of: stop}", 4,
     "unknown table 'ir.stop->openai_chat_completion.finish_reason'; did you mean ir.stop->openai_chat_completions.finish_reason?"),
    ("{$hook: chat.upstream_faild}", 4, "unknown hook 'chat.upstream_faild'; did you mean chat.upstream_failed?"),
    ("{$ref: protocol.usage_ot}", 4, "unknown template 'protocol.usage_ot'; did you mean protocol.usage_out?"),
])
def test_an_unknown_name_in_a_template_gets_a_did_you_mean(tmp_path, template, line, expected):
    write(tmp_path, "x.yaml", f"""\
        kind: response.encode
        protocol: openai_chat_completions
        templates:
          one: {template}
        """)
    [message] = problems(tmp_path)
    assert message.endswith(f"x.yaml:{line}: {expected}"), message


def test_an_unknown_before_hook_is_placed_at_its_item(tmp_path):
    write(tmp_path, "x.yaml", """\
        kind: request.encode
        protocol: openai_chat_completions
        before:
          - fit.capabilities
          - fit.toolz
        """)
    [message] = problems(tmp_path)
    assert message.endswith("x.yaml:5: unknown hook 'fit.toolz'; did you mean fit.tools?"), message


def test_the_server_refuses_to_start_on_the_first_problem(tmp_path):
    write(tmp_path, "many.yaml", MANY)
    with pytest.raises(engine.RuleError) as err:
        engine.Engine.load(tmp_path)
    assert str(err.value) == problems(tmp_path)[0]

"""A user's rules_dir changes one table entry, and the running server behaves accordingly."""
import pytest

from proxai.mock import Text, Turn

OVERRIDE = """\
# Report Anthropic pause_turn to Chat clients as `length` instead of `stop`.
kind: tables
tables:
  - name: ir.stop->openai_chat_completions.finish_reason
    from: ir.stop
    map:
      pause_turn: length
"""


@pytest.fixture
def overridden(harness, start_proxy, tmp_path):
    (tmp_path / "stop.yaml").write_text(OVERRIDE)
    config = harness.default_config()
    config["rules_dir"] = str(tmp_path)
    return start_proxy(config)


@pytest.mark.parametrize("stream", [False, True])
def test_override_changes_the_finish_reason(overridden, proxy, mock, stream):
    def ask(handle):
        mock.enqueue(Turn([Text("partial")], stop="pause_turn"))
        client = handle.openai()
        try:
            if stream:
                chunks = list(client.chat.completions.create(
                    model="anthropic/claude-x", messages=[{"role": "user", "content": "hi"}], stream=True))
                return [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason][-1]
            done = client.chat.completions.create(model="anthropic/claude-x", messages=[{"role": "user", "content": "hi"}])
            return done.choices[0].finish_reason
        finally:
            client.close()

    assert ask(proxy) == "stop"          # built-in rules: pause_turn is a normal completion
    assert ask(overridden) == "length"   # the override's one entry
    assert mock.requests[-1].body["model"] == "claude-x"


def test_broken_override_stops_startup_with_file_and_line(harness, tmp_path):
    (tmp_path / "bad.yaml").write_text("kind: tables\ntables:\n  - name: x->y\n    from: ir.stop\n    map: {}\n")
    config = harness.default_config()
    config["rules_dir"] = str(tmp_path)
    with pytest.raises(Exception) as err:
        harness.start_proxy(config)
    assert "bad.yaml:" in str(err.value)


def test_override_of_the_error_table_applies_to_http_and_in_stream_errors(harness, start_proxy, mock, tmp_path):
    import anthropic

    from proxai.mock import Error

    (tmp_path / "errors.yaml").write_text(
        "kind: tables\ntables:\n  - name: http_status->anthropic_messages.error_type\n"
        "    from: http_status\n    default: api_error\n    map:\n      429: overloaded_error\n      502: timeout_error\n")
    config = harness.default_config()
    config["rules_dir"] = str(tmp_path)
    client = start_proxy(config).anthropic()
    messages = [{"role": "user", "content": "hi"}]
    # An OpenAI provider's 429, answered to an Anthropic client: the type comes from the table.
    mock.enqueue(Error(429, headers={"retry-after": "1"}))
    with pytest.raises(anthropic.RateLimitError) as err:
        client.messages.create(model="chat/x", max_tokens=5, messages=messages)
    assert err.value.body["error"]["type"] == "overloaded_error"
    # Same-protocol pass-through cut short: the proxy's own in-stream error uses the table too.
    mock.enqueue(Turn([Text("partial answer")], cut_after=3))
    with pytest.raises(anthropic.APIStatusError) as err:
        with client.messages.stream(model="claude-x", max_tokens=5, messages=messages) as s:
            for _ in s:
                pass
    assert err.value.body["error"]["type"] == "timeout_error"


TOOL_TEMPLATE_ONLY = """\
# One template of the Anthropic request encoder; its output and other templates stay built in.
kind: request.encode
protocol: anthropic_messages
templates:
  tool:
    name: name
    description: "join('', ['[checked] ', description || ''])"
    input_schema: parameters
"""


def test_a_templates_only_override_changes_what_the_provider_receives(harness, start_proxy, mock, tmp_path):
    (tmp_path / "tool.yaml").write_text(TOOL_TEMPLATE_ONLY)
    config = harness.default_config()
    config["rules_dir"] = str(tmp_path)
    client = start_proxy(config).openai()
    mock.enqueue(Turn([Text("ok")]))
    tool = {"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                             "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
    try:
        done = client.chat.completions.create(model="anthropic/claude-x", messages=[{"role": "user", "content": "hi"}],
                                              tools=[tool])
    finally:
        client.close()
    assert done.choices[0].message.content == "ok"
    sent = mock.requests[-1].body
    assert sent["tools"] == [{"name": "get_weather", "description": "[checked] Weather",
                              "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    assert sent["model"] == "claude-x" and sent["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]

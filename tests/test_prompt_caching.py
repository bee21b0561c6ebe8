"""Prompt caching across protocols, end to end with the official SDKs.

Toward Anthropic providers the proxy places ``cache_control`` breakpoints (policy
``prompt_caching``: auto / passthrough / off); toward OpenAI providers an Anthropic
client's conversation gets a derived ``prompt_cache_key``; cache usage is reported
exactly in every direction, in the log line and in the metrics. Every test checks
what the provider received.
"""
from __future__ import annotations

import json
import re

import pytest

from engine import Context, Engine
from proxai.tools.cli import main
from proxai.mock import Text, ToolCall, Turn, Usage
from test_metrics import scrape, value
from test_observability import LogCapture, summary
from test_passthrough_e2e import raw_post

SONNET = "anthropic/claude-sonnet-4-5"   # minimum cacheable prefix 1024 tokens
HAIKU = "anthropic/claude-haiku-4-5"     # 4096

# The shape coding agents send: a long system prompt, a tool list, a tool loop.
SYSTEM = " ".join(f"Rule {i}: read the file before editing it, keep the diff small and run the tests." for i in range(110))
TOOL_NAMES = ["read_file", "write_file", "run_shell", "search_code", "list_dir"]


def chat_tools():
    return [{"type": "function", "function": {
        "name": name, "description": f"{name}: " + "Operates on the workspace; paths are relative to the repository root. " * 12,
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "arg": {"type": "string"}}}}}
        for name in TOOL_NAMES]


def responses_tools():
    return [{"type": "function", **t["function"]} for t in chat_tools()]


def chat_history(turns: int = 2):
    """system, user, then `turns` x (assistant tool call, tool result)."""
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Fix the failing test in tests/test_app.py."}]
    for i in range(turns):
        msgs.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{i}", "type": "function", "function": {"name": "read_file", "arguments": json.dumps({"path": f"f{i}.py"})}}]})
        msgs.append({"role": "tool", "tool_call_id": f"call_{i}", "content": f"contents of f{i}.py " * 20})
    return msgs


def responses_input(turns: int = 2):
    items = [{"role": "user", "content": [{"type": "input_text", "text": "Fix the failing test in tests/test_app.py."}]}]
    for i in range(turns):
        items.append({"type": "function_call", "call_id": f"call_{i}", "name": "read_file", "arguments": json.dumps({"path": f"f{i}.py"})})
        items.append({"type": "function_call_output", "call_id": f"call_{i}", "output": f"contents of f{i}.py " * 20})
    return items


def breakpoints(body: dict) -> list[tuple[str, str]]:
    """Every cache_control of an Anthropic request as (position, ttl), in prefix order."""
    out = []

    def ttl(cc):
        assert cc["type"] == "ephemeral" and set(cc) <= {"type", "ttl"}, cc
        return cc.get("ttl", "5m")

    for i, tool in enumerate(body.get("tools") or ()):
        if "cache_control" in tool:
            out.append((f"tools[{i}]", ttl(tool["cache_control"])))
    if isinstance(body.get("system"), list):
        for i, block in enumerate(body["system"]):
            if "cache_control" in block:
                out.append((f"system[{i}]", ttl(block["cache_control"])))
    for i, msg in enumerate(body["messages"]):
        for j, block in enumerate(msg["content"] if isinstance(msg["content"], list) else ()):
            if "cache_control" in block:
                out.append((f"messages[{i}].content[{j}]", ttl(block["cache_control"])))
            for k, inner in enumerate(block.get("content") or () if isinstance(block.get("content"), list) else ()):
                assert "cache_control" not in inner, "breakpoints sit on the tool_result block itself"
    if "cache_control" in body:
        out.append(("cache_control", ttl(body["cache_control"])))
    return out


def sent(mock) -> dict:
    return mock.requests[-1].body


def provider_config(harness, policy: str | None) -> dict:
    config = harness.default_config()
    for name in ("anthropic", "responses", "chat"):
        if policy is not None:
            config["providers"][name]["prompt_caching"] = policy
    return config


@pytest.fixture
def proxy_for(harness, start_proxy):
    def make(policy: str | None = None, **top):
        return start_proxy({**provider_config(harness, policy), **top})
    return make


AGENT_LAYOUT = [("tools[4]", "5m"), ("system[0]", "5m"), ("messages[2].content[0]", "5m"), ("messages[4].content[0]", "5m")]


# --- auto: Chat and Responses clients toward Anthropic ---------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_chat_client_auto_breakpoints(openai_client, mock, stream):
    mock.enqueue(Turn([Text("Done.")]))
    kw = dict(model=SONNET, messages=chat_history(), tools=chat_tools())
    if stream:
        assert list(openai_client.chat.completions.create(stream=True, **kw))
    else:
        assert openai_client.chat.completions.create(**kw).choices[0].message.content == "Done."
    body = sent(mock)
    # End of the tools, end of the system prompt, the previous and the last tool-result turn.
    assert breakpoints(body) == AGENT_LAYOUT
    assert body["system"][0]["text"] == SYSTEM
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user", "assistant", "user"]
    assert body["messages"][4]["content"][0]["type"] == "tool_result"


def test_auto_rolls_forward_with_the_conversation(openai_client, mock):
    """Turn n+1 marks turn n's last position again: the prefix the last request wrote."""
    mock.enqueue(Turn([Text("a")]), Turn([Text("b")]))
    openai_client.chat.completions.create(model=SONNET, messages=chat_history(2), tools=chat_tools())
    first = sent(mock)
    openai_client.chat.completions.create(model=SONNET, messages=chat_history(3), tools=chat_tools())
    second = sent(mock)
    assert breakpoints(first)[-1] == ("messages[4].content[0]", "5m")
    assert breakpoints(second)[-2:] == [("messages[4].content[0]", "5m"), ("messages[6].content[0]", "5m")]
    strip = lambda ms: json.dumps([[{k: v for k, v in b.items() if k != "cache_control"} for b in m["content"]] for m in ms])
    assert strip(first["messages"]) == strip(second["messages"][:5])


def test_chat_retention_24h_means_1h_breakpoints(openai_client, mock):
    mock.enqueue(Turn([Text("ok")]))
    openai_client.chat.completions.create(model=SONNET, messages=chat_history(), tools=chat_tools(),
                                          extra_body={"prompt_cache_retention": "24h"})
    assert breakpoints(sent(mock)) == [(where, "1h") for where, _ in AGENT_LAYOUT]


@pytest.mark.parametrize("stream", [False, True])
def test_responses_client_auto_breakpoints(openai_client, mock, stream):
    mock.enqueue(Turn([Text("Done.")]))
    kw = dict(model=SONNET, instructions=SYSTEM, input=responses_input(), tools=responses_tools())
    if stream:
        events = list(openai_client.responses.create(stream=True, **kw))
        assert events[-1].type == "response.completed"
    else:
        assert openai_client.responses.create(**kw).output_text == "Done."
    assert breakpoints(sent(mock)) == AGENT_LAYOUT


def test_responses_retention_24h_in_auto(openai_client, mock):
    mock.enqueue(Turn([Text("ok")]))
    openai_client.responses.create(model=SONNET, instructions=SYSTEM, input=responses_input(), tools=responses_tools(),
                                   prompt_cache_retention="24h")
    assert breakpoints(sent(mock)) == [(where, "1h") for where, _ in AGENT_LAYOUT]


def test_short_prompt_gets_no_breakpoint(openai_client, mock):
    """Below the model's minimum cacheable prefix a breakpoint would only use a slot."""
    mock.enqueue(Turn([Text("hi")]))
    openai_client.chat.completions.create(model=SONNET, messages=[{"role": "system", "content": "Be brief."},
                                                                  {"role": "user", "content": "hi"}])
    body = sent(mock)
    assert breakpoints(body) == []
    assert body["system"] == "Be brief."


def test_minimum_prefix_depends_on_the_model(openai_client, mock):
    """~2,600 estimated tokens of system prompt: cacheable on Sonnet 4.5 (1024), not on Haiku 4.5 (4096)."""
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}]
    mock.enqueue(Turn([Text("a")]), Turn([Text("b")]))
    openai_client.chat.completions.create(model=SONNET, messages=msgs)
    assert breakpoints(sent(mock)) == [("system[0]", "5m"), ("messages[0].content[0]", "5m")]
    openai_client.chat.completions.create(model=HAIKU, messages=msgs)
    assert breakpoints(sent(mock)) == []


# --- client hints ----------------------------------------------------------------------


def hinted_chat(ttl: str | None = None):
    """Chat messages with OpenRouter/LiteLLM-style cache_control on the system text and the last user part."""
    cc = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    return [
        {"role": "system", "content": [{"type": "text", "text": SYSTEM, "cache_control": cc}]},
        {"role": "user", "content": [{"type": "text", "text": "Here is the file."},
                                     {"type": "text", "text": "Fix it.", "cache_control": {"type": "ephemeral"}}]},
    ]


@pytest.mark.parametrize("policy", [None, "passthrough"])
def test_chat_client_hints_are_respected(proxy_for, mock, policy):
    """auto stands down when the client placed its own; passthrough forwards exactly those."""
    client = proxy_for(policy).openai()
    mock.enqueue(Turn([Text("ok")]))
    client.chat.completions.create(model=SONNET, messages=hinted_chat("1h"), tools=chat_tools())
    body = sent(mock)
    assert breakpoints(body) == [("system[0]", "1h"), ("messages[0].content[1]", "5m")]
    assert body["messages"][0]["content"][1]["text"] == "Fix it."


def test_tool_and_tool_message_hints(openai_client, mock):
    tools = chat_tools()
    tools[1]["cache_control"] = {"type": "ephemeral"}
    msgs = chat_history(1)
    msgs[-1] = {"role": "tool", "tool_call_id": "call_0", "content": [{"type": "text", "text": "data", "cache_control": {"type": "ephemeral"}}]}
    mock.enqueue(Turn([Text("ok")]))
    openai_client.chat.completions.create(model=SONNET, messages=msgs, tools=tools)
    assert breakpoints(sent(mock)) == [("tools[1]", "5m"), ("messages[2].content[0]", "5m")]


def test_openai_prompt_cache_breakpoint_is_an_explicit_hint(openai_client, mock):
    mock.enqueue(Turn([Text("ok")]))
    openai_client.responses.create(model=SONNET, instructions=SYSTEM, input=[
        {"role": "user", "content": [{"type": "input_text", "text": "context " * 50, "prompt_cache_breakpoint": {"mode": "explicit"}},
                                     {"type": "input_text", "text": "question"}]}])
    assert breakpoints(sent(mock)) == [("messages[0].content[0]", "5m")]


def test_never_more_than_four_breakpoints(openai_client, mock):
    cc = {"type": "ephemeral"}
    msgs = [{"role": "system", "content": [{"type": "text", "text": SYSTEM, "cache_control": cc}]}]
    for i in range(6):
        msgs.append({"role": "user", "content": [{"type": "text", "text": f"part {i}", "cache_control": cc}]})
        msgs.append({"role": "assistant", "content": f"answer {i}"})
    msgs.pop()
    mock.enqueue(Turn([Text("ok")]))
    openai_client.chat.completions.create(model=SONNET, messages=msgs)
    # The last four: they hold the longest prefixes, and the one the next turn reads.
    assert breakpoints(sent(mock)) == [(f"messages[{i}].content[0]", "5m") for i in (4, 6, 8, 10)]


def test_ttl_order_is_made_valid(openai_client, mock):
    """Anthropic wants 1h breakpoints before 5m ones: an earlier 5m one is lifted."""
    msgs = [{"role": "system", "content": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]},
            {"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
                                         {"type": "text", "text": "y", "cache_control": {"type": "ephemeral"}}]}]
    mock.enqueue(Turn([Text("ok")]))
    openai_client.chat.completions.create(model=SONNET, messages=msgs)
    assert breakpoints(sent(mock)) == [("system[0]", "1h"), ("messages[0].content[0]", "1h"), ("messages[0].content[1]", "5m")]


def test_passthrough_without_hints_sends_none(proxy_for, mock):
    client = proxy_for("passthrough").openai()
    mock.enqueue(Turn([Text("ok")]))
    client.chat.completions.create(model=SONNET, messages=chat_history(), tools=chat_tools())
    assert breakpoints(sent(mock)) == []


def test_passthrough_responses_retention_is_a_top_level_1h_hint(proxy_for, mock):
    client = proxy_for("passthrough").openai()
    mock.enqueue(Turn([Text("ok")]))
    client.responses.create(model=SONNET, instructions=SYSTEM, input=responses_input(), tools=responses_tools(),
                            prompt_cache_retention="24h")
    # Anthropic's top-level cache_control marks the last cacheable block itself.
    assert breakpoints(sent(mock)) == [("cache_control", "1h")]


@pytest.mark.parametrize("client_kind", ["chat", "responses"])
def test_off_sends_no_breakpoint_at_all(proxy_for, mock, client_kind):
    client = proxy_for("off").openai()
    mock.enqueue(Turn([Text("ok")]))
    if client_kind == "chat":
        client.chat.completions.create(model=SONNET, messages=hinted_chat("1h") + chat_history()[1:], tools=chat_tools(),
                                       extra_body={"prompt_cache_retention": "24h"})
    else:
        client.responses.create(model=SONNET, instructions=SYSTEM, input=responses_input(), tools=responses_tools(),
                                prompt_cache_retention="24h")
    body = sent(mock)
    assert breakpoints(body) == []
    assert "cache_control" not in json.dumps(body)


def test_hint_on_an_empty_or_thinking_block_is_dropped():
    """Anthropic refuses cache_control there; the pass removes it rather than fail the request."""
    eng = Engine.load()
    ir = {"model": "claude-sonnet-4-5", "messages": [
        {"role": "user", "content": [{"type": "text", "text": SYSTEM}]},
        {"role": "assistant", "content": [{"type": "text", "text": "", "cache": {"ttl": "5m"}},
                                          {"type": "tool_call", "id": "c1", "name": "f", "arguments": "{}"}]},
        {"role": "tool", "content": [{"type": "tool_result", "call_id": "c1", "content": [{"type": "text", "text": "r"}]}]}]}
    ctx = Context("openai_chat_completions", "anthropic_messages", prompt_caching="passthrough")
    out = eng.encode_request(ctx, ir)
    assert breakpoints(out) == []
    ir["messages"][1]["content"][0] = {"type": "text", "text": "thinking aloud", "cache": {"ttl": "5m"}}
    ctx = Context("openai_chat_completions", "anthropic_messages", prompt_caching="passthrough")
    assert breakpoints(eng.encode_request(ctx, ir)) == [("messages[1].content[0]", "5m")]
    assert ctx.cache_breakpoints == ["messages[1].content[0] ttl=5m"]


# --- Anthropic clients toward OpenAI providers: prompt_cache_key ------------------------

SESSION = "c31ac7cf-56a7-4c0a-b363-2b726377687d"
LEGACY_USER = f"user_{'ab' * 32}_account__session_{SESSION}"
JSON_USER = json.dumps({"device_id": "ab" * 32, "account_uuid": "", "session_id": SESSION})


def claude_code_request(anthropic_client, mock, model, user_id=None, system="You are Claude Code.", **kw):
    mock.enqueue(Turn([Text("ok")]))
    anthropic_client.messages.create(model=model, max_tokens=100, system=system,
                                     messages=[{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}],
                                     **({"metadata": {"user_id": user_id}} if user_id else {}), **kw)
    return sent(mock)


@pytest.mark.parametrize("provider,model", [("responses", "responses/gpt-5"), ("chat", "chat/gpt-5")])
def test_prompt_cache_key_from_claude_code_session(anthropic_client, mock, provider, model):
    a = claude_code_request(anthropic_client, mock, model, LEGACY_USER)["prompt_cache_key"]
    b = claude_code_request(anthropic_client, mock, model, JSON_USER, system="Another system prompt")["prompt_cache_key"]
    other = claude_code_request(anthropic_client, mock, model, LEGACY_USER.replace("c31a", "d41a"))["prompt_cache_key"]
    # One session, one key, whatever the user_id format or the prompt; another session, another key.
    assert a == b and a != other
    assert re.fullmatch(r"pck_[0-9a-f]{32}", a)
    assert SESSION not in a and SESSION.replace("-", "") not in a


def test_prompt_cache_key_from_system_and_tools(anthropic_client, mock):
    tools = [{"name": "f", "description": "d", "input_schema": {"type": "object", "properties": {}}}]
    a = claude_code_request(anthropic_client, mock, "responses/gpt-5", tools=tools)["prompt_cache_key"]
    b = claude_code_request(anthropic_client, mock, "responses/gpt-5", tools=tools)["prompt_cache_key"]
    c = claude_code_request(anthropic_client, mock, "responses/gpt-5", system="Different.", tools=tools)["prompt_cache_key"]
    assert a == b != c and a.startswith("pck_")
    assert "Claude Code" not in a


def test_prompt_cache_key_depends_on_the_deployment_secret(harness, start_proxy, mock):
    keys = []
    for secret in ("one", "two"):
        p = start_proxy({**harness.default_config(), "continuation": {"secret": secret}})
        keys.append(claude_code_request(p.anthropic(), mock, "responses/gpt-5", LEGACY_USER)["prompt_cache_key"])
    assert keys[0] != keys[1]


def test_prompt_cache_key_override_header(proxy, mock):
    client = proxy.anthropic(default_headers={"x-proxai-prompt-cache-key": "team-a.repo-1"})
    assert claude_code_request(client, mock, "responses/gpt-5", LEGACY_USER)["prompt_cache_key"] == "team-a.repo-1"
    bad = proxy.anthropic(default_headers={"x-proxai-prompt-cache-key": "has space"})
    with pytest.raises(Exception) as err:
        bad.messages.create(model="responses/gpt-5", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert getattr(err.value, "status_code", None) == 400
    assert "x-proxai-prompt-cache-key" in str(err.value)


@pytest.mark.parametrize("policy", ["passthrough", "off"])
def test_no_derived_key_unless_auto(proxy_for, mock, policy):
    client = proxy_for(policy).anthropic()
    body = claude_code_request(client, mock, "responses/gpt-5", LEGACY_USER)
    assert "prompt_cache_key" not in body


def test_chat_client_key_and_retention_reach_a_responses_provider(openai_client, mock):
    mock.enqueue(Turn([Text("ok")]))
    openai_client.chat.completions.create(model="responses/gpt-5", messages=[{"role": "user", "content": "hi"}],
                                          prompt_cache_key="k1", extra_body={"prompt_cache_retention": "24h"})
    assert sent(mock)["prompt_cache_key"] == "k1" and sent(mock)["prompt_cache_retention"] == "24h"


# --- usage: exact, every direction, streaming and not ------------------------------------

CACHED = Usage(input_tokens=5000, output_tokens=7, cached_tokens=3000, cache_write_tokens=1500, cache_write_long_tokens=1000)


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_cache_usage_to_a_chat_client(openai_client, mock, stream):
    mock.enqueue(Turn([Text("ok")], usage=CACHED))
    if stream:
        chunks = list(openai_client.chat.completions.create(model=SONNET, messages=[{"role": "user", "content": "hi"}], stream=True,
                                                            stream_options={"include_usage": True}))
        usage = [c.usage for c in chunks if c.usage][-1]
    else:
        usage = openai_client.chat.completions.create(model=SONNET, messages=[{"role": "user", "content": "hi"}]).usage
    assert usage.prompt_tokens == 5000 and usage.completion_tokens == 7
    assert usage.prompt_tokens_details.cached_tokens == 3000
    assert usage.prompt_tokens_details.cache_write_tokens == 1500


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_cache_usage_to_a_responses_client_keeps_the_ttl_split(openai_client, mock, stream):
    mock.enqueue(Turn([Text("ok")], usage=CACHED))
    if stream:
        events = list(openai_client.responses.create(model=SONNET, input="hi", stream=True))
        usage = events[-1].response.usage
    else:
        usage = openai_client.responses.create(model=SONNET, input="hi").usage
    d = usage.input_tokens_details
    assert usage.input_tokens == 5000 and d.cached_tokens == 3000 and d.cache_write_tokens == 1500
    # Anthropic 5m / 1h writes in Responses' default / extended retention slots.
    assert (d.cache_write_tokens_details.ttl_30m_tokens, d.cache_write_tokens_details.ttl_12h_tokens) == (500, 1000)


@pytest.mark.parametrize("stream", [False, True])
def test_responses_cache_usage_to_an_anthropic_client(anthropic_client, mock, stream):
    mock.enqueue(Turn([Text("ok")], usage=CACHED))
    kw = dict(model="responses/gpt-5", max_tokens=50, messages=[{"role": "user", "content": "hi"}])
    if stream:
        with anthropic_client.messages.stream(**kw) as s:
            usage = s.get_final_message().usage
        # The TTL split rides in the final message_delta's usage (the counts are known only there).
        delta = [json.loads(line[6:]) for line in mock_last_stream(anthropic_client, mock, kw) if line.startswith("data: ")]
        final = [e for e in delta if e["type"] == "message_delta"][-1]["usage"]
        assert final["cache_creation"] == {"ephemeral_5m_input_tokens": 500, "ephemeral_1h_input_tokens": 1000}
    else:
        usage = anthropic_client.messages.create(**kw).usage
        assert (usage.cache_creation.ephemeral_5m_input_tokens, usage.cache_creation.ephemeral_1h_input_tokens) == (500, 1000)
    # Anthropic input_tokens exclude cache reads and writes.
    assert (usage.input_tokens, usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (500, 3000, 1500)


def mock_last_stream(anthropic_client, mock, kw):
    """The raw SSE lines of one more identical streamed request."""
    mock.enqueue(Turn([Text("ok")], usage=CACHED))
    with anthropic_client.messages.with_streaming_response.create(stream=True, **kw) as r:
        return [line for line in r.iter_lines()]


@pytest.mark.parametrize("stream", [False, True])
def test_cache_counts_in_the_log_line_and_metrics(start_proxy, mock, stream):
    p = start_proxy()
    client = p.openai()
    mock.enqueue(Turn([Text("ok")], usage=CACHED))
    rid = f"cache-log-{stream}"
    with LogCapture("json") as cap:
        kw = dict(model=SONNET, messages=chat_history(), tools=chat_tools(), extra_headers={"x-request-id": rid})
        if stream:
            list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
        else:
            client.chat.completions.create(**kw)
        line = summary(cap, rid)
    assert (line["input_tokens"], line["cache_read_tokens"], line["cache_write_tokens"]) == (5000, 3000, 1500)
    assert line["cache_breakpoints"] == 4
    s = scrape(p.url)
    labels = dict(client_protocol="openai_chat_completions", provider_protocol="anthropic_messages", provider="anthropic",
                  route="anthropic", upstream_model="(from model)")
    assert value(s, "proxai_tokens_total", kind="cache_read", **labels) == 3000
    assert value(s, "proxai_tokens_total", kind="cache_write", **labels) == 1500
    assert value(s, "proxai_tokens_total", kind="input", **labels) == 5000


def test_pass_through_cache_counts_are_logged(proxy, mock):
    mock.enqueue(Turn([Text("ok")], usage=CACHED))
    with LogCapture("json") as cap:
        proxy.anthropic().messages.create(model="claude-x", max_tokens=10, messages=[{"role": "user", "content": "hi"}],
                                          extra_headers={"x-request-id": "cache-pt"})
        line = summary(cap, "cache-pt")
    assert (line["input_tokens"], line["cache_read_tokens"], line["cache_write_tokens"]) == (5000, 3000, 1500)


# --- proxai translate shows the placement ------------------------------------------------


def test_translate_trace_names_the_breakpoints(capsys, tmp_path):
    path = tmp_path / "req.json"
    path.write_text(json.dumps({"model": "claude-sonnet-4-5", "messages": chat_history(), "tools": chat_tools()}))
    assert main(["translate", "--from", "openai_chat_completions", "--to", "anthropic_messages", str(path)]) == 0
    out, err = capsys.readouterr()
    assert breakpoints(json.loads(out)) == AGENT_LAYOUT
    assert ("trace: prompt caching (auto): cache breakpoints at tools[4] ttl=5m, system[0] ttl=5m, "
            "messages[2].content[0] ttl=5m, messages[4].content[0] ttl=5m") in err
    assert main(["translate", "--prompt-caching", "off", "--from", "openai_chat_completions", "--to", "anthropic_messages", str(path)]) == 0
    out, err = capsys.readouterr()
    assert breakpoints(json.loads(out)) == [] and "cache breakpoints at none" in err


def test_translate_trace_names_the_key_source_not_the_key(capsys, tmp_path):
    path = tmp_path / "req.json"
    path.write_text(json.dumps({"model": "gpt-5", "max_tokens": 10, "metadata": {"user_id": LEGACY_USER},
                                "messages": [{"role": "user", "content": "hi"}]}))
    assert main(["translate", "--from", "anthropic_messages", "--to", "openai_responses", str(path)]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["prompt_cache_key"].startswith("pck_")
    assert "trace: prompt caching (auto): prompt_cache_key derived from the Claude Code session id in metadata.user_id" in err
    assert SESSION not in err


def test_config_rejects_an_unknown_policy(harness):
    from proxai.routing.config import load_dict
    from proxai.http.errors import ConfigError
    config = provider_config(harness, "always")
    with pytest.raises(ConfigError) as err:
        load_dict(config, {})
    assert "providers.anthropic.prompt_caching" in str(err.value)

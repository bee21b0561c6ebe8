"""End to end, with the official anthropic SDK: tool search (deferred tools, Anthropic's
regex / BM25 search tools, tool_reference blocks) toward Chat, Responses and Gemini
providers, which have none. With `tool_search: emulate` (the default) the provider gets
only the tools that are not deferred plus the proxy's search tool; the proxy runs the
search when the model calls it, loads the tools it found into the next provider call,
and the client gets the server_tool_use + tool_search_tool_result blocks Anthropic's API
sends. Every test checks what the provider received on each call.
"""
from __future__ import annotations

import json

import anthropic
import pytest

from engine.hooks import tool_search
from gemini_helpers import gemini_config
from proxai.mock import Text, ToolCall, Turn

C, R, G = "chat", "responses", "gemini"
PROVIDERS = (C, R, G)


def schema(**props):
    return {"type": "object", "properties": {k: {"type": "string", "description": v} for k, v in props.items()}}


BASH = {"name": "Bash", "description": "Run a shell command.", "input_schema": schema(command="the command")}
DEFERRED = [
    {"name": "get_weather", "description": "Current weather of a city.", "input_schema": schema(city="the city"), "defer_loading": True},
    {"name": "send_email", "description": "Send an email message.", "input_schema": schema(to="recipient address"), "defer_loading": True},
    {"name": "list_calendar_events", "description": "List the events of a calendar.", "input_schema": schema(day="which day"),
     "defer_loading": True},
]
REGEX = {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}
BM25 = {"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"}
ASK = [{"role": "user", "content": "weather in Paris?"}]


@pytest.fixture
def client(start_proxy, harness):
    return start_proxy(gemini_config(harness.mock_url)).anthropic()


def tool_names(provider: str, body: dict) -> list[str]:
    if provider == C:
        return [t["function"]["name"] for t in body.get("tools") or []]
    if provider == G:
        return [f["name"] for t in body.get("tools") or [] for f in t.get("functionDeclarations") or []]
    return [t["name"] for t in body.get("tools") or []]


def search_result_text(provider: str, body: dict) -> str:
    """The text of the search tool's result the provider got in its history."""
    if provider == C:
        return next(m["content"] for m in body["messages"] if m["role"] == "tool")
    if provider == R:
        return next(i["output"] for i in body["input"] if i.get("type") == "function_call_output")
    parts = [p for c in body["contents"] for p in c["parts"] if "functionResponse" in p]
    return json.dumps(parts[0]["functionResponse"]["response"])


def call(client, provider, stream, tools, messages=ASK, **kw):
    kw = dict(model=f"{provider}/up-model", max_tokens=200, messages=messages, tools=tools, **kw)
    if stream:
        with client.messages.stream(**kw) as s:
            return s.get_final_message()
    return client.messages.create(**kw)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_regex_search_run_by_the_proxy_loads_the_found_tool(client, mock, provider, stream):
    mock.enqueue(Turn([Text("Let me look."), ToolCall("call_s1", "tool_search_tool_regex", '{"pattern": "(?i)weather"}')]))
    mock.enqueue(Turn([ToolCall("call_w1", "get_weather", '{"city": "Paris"}')]))
    r = call(client, provider, stream, [BASH, REGEX, *DEFERRED])
    first, second = (m.body for m in mock.requests[-2:])
    assert len(mock.requests) == 2
    # First call: the tools that are not deferred, and the proxy's search tool in the client's one's place.
    assert tool_names(provider, first) == ["Bash", "tool_search_tool_regex"]
    # Second call: the tool the search found is loaded; the model sees its search and the result.
    assert tool_names(provider, second) == ["Bash", "tool_search_tool_regex", "get_weather"]
    assert "get_weather" in search_result_text(provider, second)
    assert "defer_loading" not in json.dumps(second)
    # The client: the search as Anthropic's server-tool blocks, then the model's call of the loaded tool.
    assert [b.type for b in r.content] == ["text", "server_tool_use", "tool_search_tool_result", "tool_use"]
    use, result, tool_use = r.content[1:]
    assert isinstance(use, anthropic.types.ServerToolUseBlock) and use.name == "tool_search_tool_regex"
    assert use.input == {"pattern": "(?i)weather"} and result.tool_use_id == use.id
    assert isinstance(result, anthropic.types.ToolSearchToolResultBlock)
    assert [ref.tool_name for ref in result.content.tool_references] == ["get_weather"]
    assert tool_use.name == "get_weather" and tool_use.input == {"city": "Paris"}
    assert r.stop_reason == "tool_use"
    assert r.usage.input_tokens == 20 and r.usage.output_tokens == 10  # both provider calls


@pytest.mark.parametrize("provider", PROVIDERS)
def test_history_with_a_search_reloads_its_tools(client, mock, provider):
    """The client's next request carries the search blocks: the provider gets the search as
    its tool's call and result, and the tools it found, again."""
    mock.enqueue(Turn([Text("Sunny.")]))
    history = [
        *ASK,
        {"role": "assistant", "content": [
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "tool_search_tool_regex", "input": {"pattern": "weather"}},
            {"type": "tool_search_tool_result", "tool_use_id": "srvtoolu_1", "content": {
                "type": "tool_search_tool_search_result", "tool_references": [{"type": "tool_reference", "tool_name": "get_weather"}]}},
            {"type": "tool_use", "id": "toolu_w", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_w", "content": "18C, sun"}]},
    ]
    r = call(client, provider, False, [BASH, REGEX, *DEFERRED], messages=history)
    assert r.content[0].text == "Sunny."
    body = mock.requests[-1].body
    assert tool_names(provider, body) == ["Bash", "tool_search_tool_regex", "get_weather"]
    assert "get_weather" in search_result_text(provider, body)
    if provider == C:
        assert [m["role"] for m in body["messages"]] == ["user", "assistant", "tool", "assistant", "tool"]
        assert body["messages"][1]["tool_calls"][0]["function"]["name"] == "tool_search_tool_regex"
        assert body["messages"][1]["tool_calls"][0]["id"] == body["messages"][2]["tool_call_id"] == "srvtoolu_1"


@pytest.mark.parametrize("stream", [False, True])
def test_bm25_search_and_an_empty_result(client, mock, stream):
    mock.enqueue(Turn([ToolCall("call_b", "tool_search_tool_bm25", '{"query": "send an email"}')]))
    mock.enqueue(Turn([ToolCall("call_n", "tool_search_tool_bm25", '{"query": "quantum teleport"}')]))
    mock.enqueue(Turn([Text("done")]))
    r = call(client, C, stream, [BASH, BM25, *DEFERRED])
    assert [tool_names(C, m.body) for m in mock.requests] == [
        ["Bash", "tool_search_tool_bm25"], ["Bash", "tool_search_tool_bm25", "send_email"],
        ["Bash", "tool_search_tool_bm25", "send_email"]]
    kinds = [b.type for b in r.content]
    assert kinds == ["server_tool_use", "tool_search_tool_result", "server_tool_use", "tool_search_tool_result", "text"]
    assert [t.tool_name for t in r.content[1].content.tool_references] == ["send_email"]
    assert r.content[3].content.tool_references == []
    assert r.stop_reason == "end_turn"


def test_an_invalid_pattern_is_an_error_result(client, mock):
    mock.enqueue(Turn([ToolCall("call_x", "tool_search_tool_regex", '{"pattern": "(unclosed"}')]))
    mock.enqueue(Turn([Text("sorry")]))
    r = call(client, C, False, [BASH, REGEX, *DEFERRED])
    error = r.content[1].content
    assert error.type == "tool_search_tool_result_error" and error.error_code == "invalid_tool_input"
    assert "valid regular expression" in search_result_text(C, mock.requests[-1].body)


def test_client_side_search_sends_only_what_tool_references_loaded(client, mock):
    """Claude Code runs its own ToolSearch tool and answers with tool_reference blocks:
    deferred tools reach the provider once a reference loaded them."""
    tool_search_tool = {"name": "ToolSearch", "description": "Load deferred tools.", "input_schema": schema(query="q")}
    mock.enqueue(Turn([ToolCall("call_1", "ToolSearch", '{"query": "select:get_weather"}')]))
    call(client, C, False, [BASH, tool_search_tool, *DEFERRED])
    assert tool_names(C, mock.requests[-1].body) == ["Bash", "ToolSearch"]
    mock.enqueue(Turn([Text("ok")]))
    history = [*ASK,
               {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "ToolSearch", "input": {"query": "select:get_weather"}}]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                             "content": [{"type": "tool_reference", "tool_name": "get_weather"}]}]}]
    call(client, C, False, [BASH, tool_search_tool, *DEFERRED], messages=history)
    assert tool_names(C, mock.requests[-1].body) == ["Bash", "ToolSearch", "get_weather"]


def _policy_client(start_proxy, harness, policy):
    config = gemini_config(harness.mock_url)
    config["routing"]["routes"].insert(0, {"name": "p", "model_pattern": "p-*", "provider": "chat",
                                           "upstream_model": "up", "tool_search": policy})
    return start_proxy(config).anthropic()


def test_eager_sends_every_deferred_tool(start_proxy, harness, mock):
    client = _policy_client(start_proxy, harness, "eager")
    mock.enqueue(Turn([Text("ok")]))
    raw = client.messages.with_raw_response.create(model="p-1", max_tokens=10, messages=ASK, tools=[BASH, REGEX, *DEFERRED])
    assert raw.parse().content[0].text == "ok"
    assert tool_names(C, mock.requests[-1].body) == ["Bash", "get_weather", "send_email", "list_calendar_events"]
    assert raw.headers["x-proxai-dropped-tools"] == "tool_search_tool_regex_20251119"


def test_reject_names_the_search_tool(start_proxy, harness, mock):
    client = _policy_client(start_proxy, harness, "reject")
    with pytest.raises(anthropic.BadRequestError) as err:
        client.messages.create(model="p-1", max_tokens=10, messages=ASK, tools=[BASH, REGEX, *DEFERRED])
    message = err.value.body["error"]["message"]
    assert "tool_search: reject" in message and message.endswith("(at tools[1])")
    assert mock.requests == []


def test_out_of_searches_the_answer_pauses_the_turn(client, mock):
    limit = tool_search.setting(__import__("engine").Engine.load().tables, "max_searches")
    for i in range(limit + 1):
        mock.enqueue(Turn([ToolCall(f"call_{i}", "tool_search_tool_regex", '{"pattern": "nothing"}')]))
    r = call(client, C, False, [BASH, REGEX, *DEFERRED])
    assert len(mock.requests) == limit + 1
    assert r.stop_reason == "pause_turn"
    assert [b.type for b in r.content].count("server_tool_use") == limit + 1


# --- the searches themselves -------------------------------------------------------------

CATALOG = [{"name": d["name"], "description": d["description"], "parameters": d["input_schema"]} for d in DEFERRED]


def test_regex_reads_names_descriptions_and_parameters():
    tables = __import__("engine").Engine.load().tables
    assert tool_search.search("regex", {"pattern": "calendar"}, CATALOG, tables) == ["list_calendar_events"]
    assert tool_search.search("regex", {"pattern": "recipient"}, CATALOG, tables) == ["send_email"]  # a parameter's description
    assert tool_search.search("regex", {"pattern": "Weather"}, CATALOG, tables) == []  # re.search is case-sensitive
    assert tool_search.search("regex", {"pattern": "(?i)WEATHER|email"}, CATALOG, tables) == ["get_weather", "send_email"]
    assert tool_search.search("regex", {"pattern": ".", "limit": 2}, CATALOG, tables) == ["get_weather", "send_email"]
    with pytest.raises(tool_search.SearchError):
        tool_search.search("regex", {"pattern": "x" * 201}, CATALOG, tables)


def test_bm25_ranks_by_terms_of_names_and_descriptions():
    tables = __import__("engine").Engine.load().tables
    assert tool_search.search("bm25", {"query": "calendar events today"}, CATALOG, tables)[0] == "list_calendar_events"
    assert tool_search.search("bm25", {"query": "weather in a city"}, CATALOG, tables)[0] == "get_weather"
    assert tool_search.search("bm25", {"query": "zebra"}, CATALOG, tables) == []
    assert tool_search.words("listCalendarEvents get_weather") == ["list", "calendar", "events", "get", "weather"]

"""The server-tool loop toward a streaming client (proxai/http/server_tools/): every
provider call is streamed and the client's stream is written as events arrive. The mock
provider holds its second call until the client has received the first call's text and
the proxy's server-tool blocks: a proxy that buffered the answer would never release it.
Also web search and tool search in one request; the client's stream checked by the
SDKs' own accumulation and the Open Responses schema.

The real server process (the mock upstream and the mock search backend run in the test's
loop, which the hold blocks), the official SDKs, Chat, Responses and Gemini providers.
"""

from __future__ import annotations

import json
import threading

import anthropic
import httpx2 as httpx
import openai
import pytest

from gemini_helpers import gemini_config
from harness import CLIENT_KEY
from proxai.mock import Error, Text, ToolCall, Turn
from proxai.mock.search import DEFAULT_RESULTS
from server_process import ServerProcess
from test_open_responses_compliance import EVENTS, RESOURCE, schema_errors
from test_tool_search_e2e import BASH, DEFERRED, REGEX, search_result_text, tool_names
from test_web_search import search, server  # noqa: F401  (fixtures: the mock search backend, the server process using it)

QUERY = "what is proxai"
WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}
PROVIDERS = ["chat", "responses", "gemini"]


class Hold:
    """A mock reply that waits, up to `secs`, for the client to say it has what it expected."""

    def __init__(self, turn: Turn, secs: float = 8.0):
        self.turn, self.secs = turn, secs
        self.seen = threading.Event()
        self.released: bool | None = None

    def __call__(self, record):
        self.released = self.seen.wait(self.secs)
        return self.turn


def first_turn():
    return Turn([Text("Let me look."), ToolCall("call_ws1", "web_search", json.dumps({"query": QUERY}))])


@pytest.mark.parametrize("provider", PROVIDERS)
def test_anthropic_stream_is_written_before_the_next_provider_call(server, mock, search, provider):
    search[0].reset()
    hold = Hold(Turn([Text("ProxAI is a proxy.")]))
    mock.enqueue(first_turn(), hold)
    client = anthropic.Anthropic(base_url=server.url, api_key=CLIENT_KEY, max_retries=0)
    with client.messages.stream(model=f"{provider}/m", max_tokens=200, tools=[WEB_SEARCH],
                                messages=[{"role": "user", "content": "search"}]) as s:
        events = []
        for event in s:
            events.append(event)
            if event.type == "content_block_start" and event.content_block.type == "web_search_tool_result":
                assert any(e.type == "content_block_delta" and e.delta.type == "text_delta" for e in events)
                hold.seen.set()
        message = s.get_final_message()
    assert hold.released is True  # the client had the text and the search before the second call was answered
    types = [e.type for e in events if e.type.startswith("message") or e.type.startswith("content_block_start")]
    assert types.count("message_start") == 1 and types[-2:] == ["message_delta", "message_stop"]
    assert types.count("message_delta") == 1
    starts = [e.index for e in events if e.type == "content_block_start"]
    assert starts == list(range(4))
    assert [b.type for b in message.content] == ["text", "server_tool_use", "web_search_tool_result", "text"]
    text, use, result, answer = message.content
    assert text.text == "Let me look." and answer.text == "ProxAI is a proxy."
    assert use.input == {"query": QUERY} and result.tool_use_id == use.id
    assert [r.url for r in result.content] == [r["url"] for r in DEFAULT_RESULTS]
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens == 20 and message.usage.output_tokens == 10  # both provider calls
    # Both provider calls streamed; the second carried the search's results.
    first, second = mock.requests[-2:]
    for sent in (first, second):
        assert (":streamGenerateContent" in sent.path) if provider == "gemini" else sent.body["stream"] is True
    assert DEFAULT_RESULTS[0]["url"] in json.dumps(second.body)


@pytest.mark.parametrize("provider", ["chat", "anthropic", "gemini"])
def test_responses_stream_is_written_before_the_next_provider_call(server, mock, search, provider):
    search[0].reset()
    hold = Hold(Turn([Text("ProxAI is a proxy.")]))
    mock.enqueue(first_turn(), hold)
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=CLIENT_KEY, max_retries=0)
    events = []
    with client.responses.stream(model=f"{provider}/m", input="search", tools=[{"type": "web_search"}]) as s:
        for event in s:
            events.append(event)
            if event.type == "response.web_search_call.completed":
                assert any(e.type == "response.output_text.delta" for e in events)
                hold.seen.set()
        response = s.get_final_response()
    assert hold.released is True
    types = [e.type for e in events]
    assert types.count("response.created") == 1 and types.count("response.completed") == 1
    assert types[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    added = [e.output_index for e in events if e.type == "response.output_item.added"]
    assert added == list(range(3))
    # The Open Responses document has no web search (the hosted tool, its call item and events are
    # OpenAI's; the SDK's types parsed them): everything else validates.
    assert {t for t in types if t not in EVENTS} == {"response.web_search_call.in_progress", "response.web_search_call.searching",
                                                     "response.web_search_call.completed"}
    problems = [p for i, e in enumerate(events) if e.type in EVENTS
                for p in schema_errors(EVENTS[e.type], e.model_dump(mode="json", exclude_unset=True), f"event {i} ({e.type})")]
    problems += schema_errors(RESOURCE, events[-1].response.model_dump(mode="json", exclude_unset=True), "response")
    problems = [p for p in problems if "{'type': 'web_search'}" not in p and "'type': 'web_search_call'}" not in p]
    assert not problems, "\n".join(problems[:10])
    assert [i.type for i in response.output] == ["message", "web_search_call", "message"]
    call = response.output[1]
    assert call.action.query == QUERY and [x.url for x in call.action.sources] == [r["url"] for r in DEFAULT_RESULTS]
    assert response.output_text.endswith("ProxAI is a proxy.")
    assert response.usage.input_tokens == 20 and response.usage.output_tokens == 10


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_web_search_and_tool_search_in_one_request(server, mock, search, provider, stream):
    search[0].reset()
    mock.enqueue(Turn([ToolCall("call_ws1", "web_search", json.dumps({"query": QUERY})),
                       ToolCall("call_ts1", "tool_search_tool_regex", '{"pattern": "(?i)weather"}')]))
    mock.enqueue(Turn([ToolCall("call_w1", "get_weather", '{"city": "Paris"}')]))
    client = anthropic.Anthropic(base_url=server.url, api_key=CLIENT_KEY, max_retries=0)
    args = dict(model=f"{provider}/m", max_tokens=200, tools=[BASH, REGEX, *DEFERRED, WEB_SEARCH],
                messages=[{"role": "user", "content": "weather in Paris, and what is proxai?"}])
    if stream:
        with client.messages.stream(**args) as s:
            indexes = [e.index for e in s if e.type == "content_block_start"]
            message = s.get_final_message()
        assert indexes == list(range(5))
    else:
        message = client.messages.create(**args)
    assert [b.type for b in message.content] == [
        "server_tool_use", "web_search_tool_result", "server_tool_use", "tool_search_tool_result", "tool_use"]
    ws_use, ws_result, ts_use, ts_result, tool_use = message.content
    assert ws_use.name == "web_search" and ws_result.tool_use_id == ws_use.id
    assert ts_use.name == "tool_search_tool_regex" and ts_result.tool_use_id == ts_use.id
    assert [r.tool_name for r in ts_result.content.tool_references] == ["get_weather"]
    assert tool_use.name == "get_weather" and message.stop_reason == "tool_use"
    first, second = (m.body for m in mock.requests[-2:])
    assert tool_names(provider, first) == ["Bash", "tool_search_tool_regex", "web_search"]
    assert tool_names(provider, second) == ["Bash", "tool_search_tool_regex", "get_weather", "web_search"]
    assert "get_weather" in search_result_text(provider, second)
    assert DEFAULT_RESULTS[0]["url"] in json.dumps(second)
    assert [(r.path, r.query["q"]) for r in search[0].requests] == [("/search", QUERY)]


def test_a_failed_provider_call_after_a_run_ends_the_clients_stream_with_an_error(server, mock, search):
    # The client has its 200 and the first call's blocks: the failure of the next call is an
    # error event in its stream, after what it already got.
    search[0].reset()
    mock.enqueue(first_turn(), Error(500, "upstream broke"))
    client = anthropic.Anthropic(base_url=server.url, api_key=CLIENT_KEY, max_retries=0)
    events = []
    with pytest.raises(anthropic.APIStatusError) as failed:
        with client.messages.stream(model="chat/m", max_tokens=200, tools=[WEB_SEARCH],
                                    messages=[{"role": "user", "content": "search"}]) as s:
            for event in s:
                events.append(event)
    assert "upstream broke" in str(failed.value)
    assert [e.content_block.type for e in events if e.type == "content_block_start"] == [
        "text", "server_tool_use", "web_search_tool_result"]
    assert not any(e.type == "message_stop" for e in events)


@pytest.fixture(scope="module")
def beating_server(harness, search, tmp_path_factory):
    config = gemini_config(harness.mock_url)
    config["web_search"] = {"backend": "searxng", "url": search[1], "max_results": 2}
    config["server"] = {"stream_heartbeat_secs": 0.2}
    process = ServerProcess(tmp_path_factory.mktemp("server-tools-heartbeat"), config)
    yield process
    process.stop()


def test_heartbeats_go_out_while_a_search_runs(beating_server, mock, search):
    search[0].reset()
    search[0].delay_secs = 1.0
    mock.enqueue(first_turn(), Turn([Text("ProxAI is a proxy.")]))
    body = {"model": "chat/m", "max_tokens": 200, "stream": True, "tools": [WEB_SEARCH],
            "messages": [{"role": "user", "content": "search"}]}
    with httpx.stream("POST", beating_server.url + "/v1/messages", json=body, timeout=20,
                      headers={"x-api-key": CLIENT_KEY, "anthropic-version": "2023-06-01"}) as r:
        assert r.status_code == 200
        data = b"".join(r.iter_bytes()).decode()
    before, _, after = data.partition('"web_search_tool_result"')
    assert after and '"text_delta"' in before
    # The comments come after the model's text, while the backend is quiet.
    assert before[before.rindex('"text_delta"'):].count(": keep-alive") >= 2
    assert data.count("event: message_start") == 1 and data.count("event: message_stop") == 1

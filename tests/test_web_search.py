"""Web search on translated routes (docs/web-search.md): with `web_search:` the proxy offers
the provider a function tool in place of the client's hosted web search, runs the model's
searches against the backend and continues the model; the client gets Anthropic's
server_tool_use + web_search_tool_result blocks or Responses web_search_call items.
Without a backend the tool is left out and the provider's system prompt says so.

The real server process, the official SDKs, Chat, Responses, Gemini and Anthropic
providers (the mock upstream), a local mock search backend; streaming and not.
"""

from __future__ import annotations

import json

import aiohttp
import pytest

from gemini_helpers import gemini_config
from harness import CLIENT_KEY, _serve
from proxai.mock import Text, ToolCall, Turn
from proxai.mock.search import DEFAULT_RESULTS, MockSearch
from proxai.http.web_search import backends
from proxai.http.web_search.backends import Settings
from server_process import ServerProcess

STREAMS = pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
ANTHROPIC_TOOL = {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}
QUERY = "what is proxai"
ANSWER = "ProxAI is a protocol proxy [example.org]."


@pytest.fixture(scope="module")
def search(harness):
    mock = MockSearch()
    from aiohttp import web

    served = harness.loop.run(_serve(web.AppRunner(mock.app, handle_signals=False, access_log=None)))
    yield mock, served.url
    harness.loop.run(served.runner.cleanup())


@pytest.fixture(scope="module")
def server(harness, search, tmp_path_factory):
    config = gemini_config(harness.mock_url)
    config["web_search"] = {"backend": "searxng", "url": search[1], "max_results": 2}
    config["logging"] = {"level": "debug"}
    process = ServerProcess(tmp_path_factory.mktemp("web-search"), config)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def bare_server(harness, tmp_path_factory):
    config = gemini_config(harness.mock_url)
    process = ServerProcess(tmp_path_factory.mktemp("no-web-search"), config)
    yield process
    process.stop()


@pytest.fixture
def searched(search):
    search[0].reset()
    return search[0]


def script(mock) -> None:
    """The model searches once, then answers."""
    mock.enqueue(Turn([ToolCall("call_ws1", "web_search", json.dumps({"query": QUERY}))]))
    mock.enqueue(Turn([Text(ANSWER)]))


def provider_tools(body: dict) -> list[str]:
    if "contents" in body:  # Gemini
        return [d["name"] for t in body.get("tools") or () for d in t.get("functionDeclarations", [])]
    return [(t.get("function") or t).get("name") for t in body.get("tools") or ()]


def tool_result_text(body: dict) -> str:
    """What the provider's second request carries as the search's result."""
    return json.dumps(body)


def anthropic_client(server):
    import anthropic

    return anthropic.Anthropic(base_url=server.url, api_key=CLIENT_KEY, max_retries=0)


@STREAMS
@pytest.mark.parametrize("provider", ["chat", "responses", "gemini"])
def test_anthropic_client_gets_server_tool_blocks(server, mock, searched, provider, stream):
    script(mock)
    client = anthropic_client(server)
    args = dict(model=f"{provider}/m", max_tokens=200, tools=[ANTHROPIC_TOOL],
                messages=[{"role": "user", "content": "Search: what is proxai?"}])
    if stream:
        with client.messages.stream(**args) as s:
            events = list(s)
            message = s.get_final_message()
        assert [e.type for e in events].count("content_block_start") == 3
    else:
        message = client.messages.create(**args)
    kinds = [b.type for b in message.content]
    assert kinds == ["server_tool_use", "web_search_tool_result", "text"], kinds
    use, result, text = message.content
    assert use.name == "web_search" and use.input == {"query": QUERY} and use.id.startswith("srvtoolu_")
    assert result.tool_use_id == use.id
    assert [r.url for r in result.content] == [r["url"] for r in DEFAULT_RESULTS]
    assert result.content[0].title == DEFAULT_RESULTS[0]["title"] and result.content[0].page_age == "2026-01-15"
    assert text.text == ANSWER and message.stop_reason == "end_turn" and message.model == f"{provider}/m"
    # The backend got the model's query; the provider was offered a function and got the results.
    assert [(r.path, r.query) for r in searched.requests] == [("/search", {"q": QUERY, "format": "json"})]
    first, second = mock.requests[-2].body, mock.requests[-1].body
    assert provider_tools(first) == ["web_search"]
    assert DEFAULT_RESULTS[0]["url"] in tool_result_text(second) and DEFAULT_RESULTS[0]["snippet"] in tool_result_text(second)
    # Each provider call streams when the client asked for a stream.
    for sent in mock.requests[-2:]:
        assert (":streamGenerateContent" in sent.path if provider == "gemini" else sent.body.get("stream") is True) == stream


@STREAMS
@pytest.mark.parametrize("provider", ["chat", "anthropic", "gemini"])
def test_responses_client_gets_web_search_call_items(server, mock, searched, provider, stream):
    import openai

    script(mock)
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=CLIENT_KEY, max_retries=0)
    args = dict(model=f"{provider}/m", input="Search: what is proxai?", tools=[{"type": "web_search"}])
    if stream:
        events = list(client.responses.create(**args, stream=True))
        types = [e.type for e in events]
        assert {"response.web_search_call.in_progress", "response.web_search_call.searching",
                "response.web_search_call.completed"} <= set(types)
        response = events[-1].response
        assert types[-1] == "response.completed"
        assert [e.sequence_number for e in events] == list(range(len(events)))
    else:
        response = client.responses.create(**args)
    call, message = response.output
    assert call.type == "web_search_call" and call.status == "completed" and call.id.startswith("ws_")
    assert call.action.type == "search" and call.action.query == QUERY
    assert [s.url for s in call.action.sources] == [r["url"] for r in DEFAULT_RESULTS]
    assert message.type == "message" and response.output_text == ANSWER
    assert provider_tools(mock.requests[-2].body) == ["web_search"]
    assert DEFAULT_RESULTS[1]["url"] in tool_result_text(mock.requests[-1].body)


def test_a_failing_backend_is_a_search_error_the_model_sees(server, mock, searched):
    searched.status = 500
    script(mock)
    message = anthropic_client(server).messages.create(
        model="chat/m", max_tokens=200, tools=[ANTHROPIC_TOOL], messages=[{"role": "user", "content": "search"}])
    result = message.content[1]
    assert result.type == "web_search_tool_result" and result.content.error_code == "unavailable"
    assert "The search failed (unavailable)" in tool_result_text(mock.requests[-1].body)


def test_client_tools_beside_web_search_reach_the_client(server, mock, searched):
    # The model searches and calls the client's tool in one turn: the search runs, the
    # client's call ends the answer (the client runs it and comes back).
    mock.enqueue(Turn([ToolCall("call_ws1", "web_search", json.dumps({"query": QUERY})),
                       ToolCall("call_r1", "Read", json.dumps({"path": "a.txt"}))]))
    mock.enqueue(Turn([ToolCall("call_r1", "Read", json.dumps({"path": "a.txt"}))]))
    read = {"name": "Read", "description": "read", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}
    message = anthropic_client(server).messages.create(
        model="chat/m", max_tokens=200, tools=[ANTHROPIC_TOOL, read], messages=[{"role": "user", "content": "go"}])
    assert [b.type for b in message.content][-1] == "tool_use" and message.stop_reason == "tool_use"


def test_the_search_history_goes_back_to_the_provider_as_text(server, mock, searched):
    script(mock)
    client = anthropic_client(server)
    first = client.messages.create(model="chat/m", max_tokens=200, tools=[ANTHROPIC_TOOL],
                                   messages=[{"role": "user", "content": "search"}])
    mock.enqueue(Turn([Text("later")]))
    history = [{"role": "user", "content": "search"},
               {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
               {"role": "user", "content": "thanks"}]
    client.messages.create(model="chat/m", max_tokens=200, tools=[ANTHROPIC_TOOL], messages=history)
    sent = json.dumps(mock.requests[-1].body)
    assert f'Searched the web for \\"{QUERY}\\"' in sent and DEFAULT_RESULTS[0]["url"] in sent


@pytest.mark.parametrize("provider", ["chat", "responses", "gemini"])
def test_without_a_backend_the_provider_is_told(bare_server, mock, provider):
    import anthropic

    mock.enqueue(Turn([Text("I cannot search.")]))
    client = anthropic.Anthropic(base_url=bare_server.url, api_key=CLIENT_KEY, max_retries=0)
    raw = client.messages.with_raw_response.create(model=f"{provider}/m", max_tokens=100, tools=[ANTHROPIC_TOOL],
                                                   messages=[{"role": "user", "content": "search"}])
    assert raw.headers["x-proxai-dropped-tools"] == "web_search_20250305"
    body = mock.requests[-1].body
    assert provider_tools(body) == []
    assert "Web search is not available in this session" in json.dumps(body)


# --- the backends' request and answer shapes --------------------------------------------


@pytest.mark.parametrize("backend", ["searxng", "brave", "tavily"])
def test_each_backend_against_the_mock(harness, search, backend):
    mock, url = search
    mock.reset()
    settings = Settings(backend=backend, url=url, api_key="k-123", max_results=1)

    async def run():
        async with aiohttp.ClientSession() as http:
            return await backends.search(settings, http, "q 1")

    results = harness.loop.run(run())
    assert results == [backends.Result(DEFAULT_RESULTS[0]["url"], DEFAULT_RESULTS[0]["title"], DEFAULT_RESULTS[0]["snippet"], "2026-01-15")]
    sent = mock.requests[-1]
    if backend == "searxng":
        assert (sent.method, sent.path, sent.query) == ("GET", "/search", {"q": "q 1", "format": "json"})
    elif backend == "brave":
        assert (sent.method, sent.path, sent.query) == ("GET", "/res/v1/web/search", {"q": "q 1", "count": "1"})
        assert sent.headers["X-Subscription-Token"] == "k-123"
    else:
        assert (sent.method, sent.path, sent.body) == ("POST", "/search", {"query": "q 1", "max_results": 1, "search_depth": "basic"})
        assert sent.headers["Authorization"] == "Bearer k-123"


def test_public_endpoints_are_the_defaults():
    assert backends.request_for(Settings("brave", api_key="k"), "x").url == "https://api.search.brave.com/res/v1/web/search"
    assert backends.request_for(Settings("tavily", api_key="k"), "x").url == "https://api.tavily.com/search"
    assert "k-secret" not in repr(Settings("brave", api_key="k-secret"))


def test_answers_of_another_shape_are_a_search_failure():
    with pytest.raises(backends.SearchFailed):
        backends.results_from(Settings("brave", api_key="k"), {"results": []})  # Brave's are under web
    with pytest.raises(backends.SearchFailed):
        backends.results_from(Settings("searxng", url="http://x"), [])
    kept = backends.results_from(Settings("tavily", api_key="k"), {"results": [{"title": "t"}, {"url": "https://u", "title": None}]})
    assert kept == [backends.Result("https://u", "https://u", "", None)]


def test_a_responses_history_with_a_web_search_call_goes_back_as_text(server, mock, searched):
    import openai

    script(mock)
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=CLIENT_KEY, max_retries=0)
    first = client.responses.create(model="chat/m", input="search", tools=[{"type": "web_search"}], store=False)
    mock.enqueue(Turn([Text("later")]))
    history = [{"role": "user", "content": "search"}, *[item.model_dump(exclude_none=True) for item in first.output],
               {"role": "user", "content": "thanks"}]
    client.responses.create(model="chat/m", input=history, tools=[{"type": "web_search"}], store=False)
    sent = json.dumps(mock.requests[-1].body)
    assert f'Searched the web for \\"{QUERY}\\"' in sent and provider_tools(mock.requests[-1].body) == ["web_search"]

"""End to end, with the official openai SDK: a Responses client's tool search (a hosted
`tool_search` tool over `defer_loading` functions and namespaces) toward Chat, Anthropic
and Gemini providers, which cannot run it. With `tool_search: emulate` (the default) the
provider gets only the tools that are not deferred plus the proxy's `tool_search` function,
whose description lists what can be loaded; when the model calls it with `paths`, the proxy
loads those tools into the next provider call and the client gets the tool_search_call and
tool_search_output items OpenAI's API sends (the SDK's types), streaming and not. The next
request's history carries those items back, and the tools are loaded again.
"""
from __future__ import annotations

import json

import openai
import pytest
from openai.types.responses import ResponseFunctionToolCall, ResponseToolSearchCall, ResponseToolSearchOutputItem

from gemini_helpers import gemini_config
from proxai.mock import Text, ToolCall, Turn

C, A, G = "chat", "anthropic", "gemini"
MODELS = {C: "chat/up", A: "anthropic/claude-sonnet-4-5", G: "gemini/gemini-3-pro-preview"}


def params(**props):
    return {"type": "object", "properties": {k: {"type": "string", "description": v} for k, v in props.items()},
            "required": list(props), "additionalProperties": False}


SHELL = {"type": "function", "name": "shell", "description": "Run a shell command.", "parameters": params(command="the command")}
CRM = {"type": "namespace", "name": "crm", "description": "CRM tools for customer lookup and order management.", "tools": [
    {"type": "function", "name": "lookup_customer", "description": "Find a customer by id.", "parameters": params(id="customer id"),
     "defer_loading": True},
    {"type": "function", "name": "list_open_orders", "description": "List open orders of a customer.",
     "parameters": params(id="customer id"), "defer_loading": True}]}
WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather of a city.",
           "parameters": params(city="the city"), "defer_loading": True}
TOOLS = [SHELL, CRM, WEATHER, {"type": "tool_search"}]
ASK = "What does customer 7 have on order?"


@pytest.fixture
def client(start_proxy, harness):
    c = start_proxy(gemini_config(harness.mock_url)).openai()
    yield c
    c.close()


def declared(provider: str, body: dict) -> dict:
    """name -> description of the tools the provider was offered."""
    if provider == C:
        return {t["function"]["name"]: t["function"].get("description") for t in body.get("tools") or []}
    if provider == G:
        return {f["name"]: f.get("description") for t in body.get("tools") or [] for f in t.get("functionDeclarations") or []}
    return {t["name"]: t.get("description") for t in body.get("tools") or []}


def create(client, provider: str, stream: bool, input, tools=TOOLS):
    kw = dict(model=MODELS[provider], input=input, tools=tools)
    if stream:
        with client.responses.stream(**kw) as s:
            events = [e.type for e in s]
            return s.get_final_response(), events
    return client.responses.create(**kw), None


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("provider", [C, A, G])
def test_the_proxy_answers_the_search_and_loads_the_namespace(client, mock, provider, stream):
    mock.enqueue(Turn([ToolCall("call_s1", "tool_search", '{"queries": ["crm"]}')]))
    mock.enqueue(Turn([ToolCall("call_l1", "crm__lookup_customer", '{"id": "7"}')]))
    before = len(mock.requests)
    r, events = create(client, provider, stream, ASK)
    assert len(mock.requests) == before + 2
    first, second = (declared(provider, m.body) for m in mock.requests[-2:])
    # First call: the tool that is not deferred and the proxy's search, listing what it can load.
    assert list(first) == ["shell", "tool_search"]
    assert "- crm: CRM tools for customer lookup" in first["tool_search"]
    assert "- get_weather: Current weather of a city." in first["tool_search"]
    # Second call: the namespace's tools (where the client declared them), flattened as any
    # namespace is toward these providers.
    assert list(second) == ["shell", "crm__lookup_customer", "crm__list_open_orders", "tool_search"]
    assert "crm__lookup_customer" in json.dumps(mock.requests[-1].body["messages" if provider != G else "contents"])
    # The client: OpenAI's search items, then the model's call of the loaded tool.
    call, output, fn = r.output
    assert isinstance(call, ResponseToolSearchCall) and isinstance(output, ResponseToolSearchOutputItem)
    assert call.execution == "server" and call.status == "completed" and call.arguments == {"queries": ["crm"]}
    assert output.call_id == call.call_id == "call_s1"
    [namespace] = output.tools
    assert namespace.type == "namespace" and namespace.name == "crm"
    assert [t.name for t in namespace.tools] == ["lookup_customer", "list_open_orders"]
    assert isinstance(fn, ResponseFunctionToolCall)
    assert (fn.namespace, fn.name, json.loads(fn.arguments)) == ("crm", "lookup_customer", {"id": "7"})
    assert r.usage.input_tokens == 20  # both provider calls
    if stream:
        assert events.count("response.output_item.added") == 3 and events.count("response.output_item.done") == 3
        assert events[-1] == "response.completed"


@pytest.mark.parametrize("provider", [C, A, G])
def test_history_with_the_search_items_loads_the_tools_again(client, mock, provider):
    # A description of what is wanted, ranked (BM25) over the deferred tools.
    mock.enqueue(Turn([ToolCall("call_s1", "tool_search", '{"queries": ["city weather"]}')]))
    mock.enqueue(Turn([ToolCall("call_w1", "get_weather", '{"city": "Paris"}')]))
    r, _ = create(client, provider, False, "weather in Paris?")
    assert [type(i) for i in r.output] == [ResponseToolSearchCall, ResponseToolSearchOutputItem, ResponseFunctionToolCall]
    assert [t.name for t in r.output[1].tools] == ["get_weather"]
    mock.enqueue(Turn([Text("Sunny, 18C.")]))
    history = ["weather in Paris?", *r.output, {"type": "function_call_output", "call_id": "call_w1", "output": "18C, sun"}]
    history = [{"role": "user", "content": history[0]},
               *(i.model_dump(exclude_none=True) for i in history[1:-1]), history[-1]]
    again, _ = create(client, provider, False, history)
    assert again.output_text == "Sunny, 18C."
    body = mock.requests[-1].body
    assert list(declared(provider, body)) == ["shell", "get_weather", "tool_search"]
    history_sent = json.dumps(body["contents" if provider == G else "messages"])
    # The search reaches the provider as its tool's call (with its queries) and result.
    assert "Tools loaded and callable now: get_weather" in history_sent and "city weather" in history_sent
    if provider == C:
        assert [m["role"] for m in body["messages"]] == ["user", "assistant", "tool", "assistant", "tool"]
        assert body["messages"][1]["tool_calls"][0]["function"]["name"] == "tool_search"


def test_without_the_search_tool_deferred_tools_are_sent(client, mock):
    """Nothing could load them: sent as with tool_search: eager."""
    mock.enqueue(Turn([Text("ok")]))
    create(client, C, False, ASK, tools=[SHELL, WEATHER])
    assert list(declared(C, mock.requests[-1].body)) == ["shell", "get_weather"]


def test_a_client_run_search_is_not_emulated(client, mock):
    """execution: client: the client runs its own search; the proxy cannot answer for it."""
    mock.enqueue(Turn([Text("ok")]))
    raw = client.responses.with_raw_response.create(model=MODELS[C], input=ASK,
                                                    tools=[SHELL, WEATHER, {"type": "tool_search", "execution": "client"}])
    assert list(declared(C, mock.requests[-1].body)) == ["shell", "get_weather"]
    assert raw.headers["x-proxai-dropped-tools"] == "tool_search"


def test_a_search_that_finds_nothing_loads_nothing(client, mock):
    mock.enqueue(Turn([ToolCall("call_s1", "tool_search", '{"queries": ["billing"]}')]))
    mock.enqueue(Turn([Text("No billing tools.")]))
    r, _ = create(client, C, False, ASK)
    assert r.output[1].tools == [] and r.output_text == "No billing tools."
    assert list(declared(C, mock.requests[-1].body)) == ["shell", "tool_search"]
    assert "No tools matched" in json.dumps(mock.requests[-1].body["messages"])


def test_toward_a_responses_provider_the_search_passes_through(client, mock):
    mock.enqueue(Turn([Text("ok")]))
    client.responses.create(model="responses/up", input=ASK, tools=TOOLS)
    sent = mock.requests[-1].body["tools"]
    assert sent[-1] == {"type": "tool_search"} and sent[1]["tools"][0]["defer_loading"] is True


def test_reject_names_the_search_tool(start_proxy, harness, mock):
    config = gemini_config(harness.mock_url)
    config["routing"]["routes"].insert(0, {"name": "p", "model_pattern": "p-*", "provider": "chat",
                                           "upstream_model": "up", "tool_search": "reject"})
    c = start_proxy(config).openai()
    with pytest.raises(openai.BadRequestError) as err:
        c.responses.create(model="p-1", input=ASK, tools=TOOLS)
    assert "tool_search: reject" in err.value.body["message"] and err.value.body["param"] == "tools[3]"
    assert mock.requests == []


def test_openai_s_own_search_items_without_call_ids_replay_in_order(client, mock):
    """OpenAI's server-run search answers with items that have no call_id (older models
    call it with `paths`): each output goes with the call before it."""
    mock.enqueue(Turn([Text("ok")]))
    history = [{"role": "user", "content": ASK},
               {"type": "tool_search_call", "id": "tsc_1", "execution": "server", "status": "completed",
                "arguments": {"paths": ["crm"]}},
               {"type": "tool_search_output", "id": "tso_1", "execution": "server", "status": "completed",
                "tools": [{**CRM, "tools": CRM["tools"][:1]}]}]
    create(client, C, False, history)
    body = mock.requests[-1].body
    assert list(declared(C, body)) == ["shell", "crm__lookup_customer", "tool_search"]
    call, result = body["messages"][1], body["messages"][2]
    assert call["tool_calls"][0]["function"] == {"name": "tool_search", "arguments": '{"paths":["crm"]}'}
    assert result == {"role": "tool", "tool_call_id": call["tool_calls"][0]["id"],
                      "content": "Tools loaded and callable now: crm__lookup_customer"}


def test_a_search_by_name_or_description():
    from engine import Engine
    from engine.hooks import tool_search

    tables = Engine.load().tables
    catalog = [{"name": "crm__lookup_customer", "short_name": "lookup_customer", "namespace": "crm",
                "description": "Find a customer by id."},
               {"name": "get_weather", "description": "Current weather of a city."}]
    run = lambda **a: tool_search.search("names", a, catalog, tables)  # noqa: E731
    assert run(queries=["crm"]) == run(paths=["crm.lookup_customer"]) == ["crm__lookup_customer"]
    assert run(queries=["get_weather", "crm__lookup_customer"]) == ["get_weather", "crm__lookup_customer"]
    assert run(queries=["weather forecast"]) == ["get_weather"]
    with pytest.raises(tool_search.SearchError):
        run(queries=[])

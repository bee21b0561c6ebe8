"""Responses compaction toward every provider protocol, with the official openai SDK through
the real server: `responses.compact(...)` and a `compaction_trigger` input item (Codex's
remote compaction), streaming and not. Toward Chat, Anthropic and Gemini the routed model is
asked for the summary (the provider receives the history and the summarisation prompt), the
answer is exactly one `compaction` item whose encrypted_content is the proxy's signed
envelope, and a later request that carries the item back sends the summary in its place.
Toward a Responses provider both are passed through (the provider compacts)."""

from __future__ import annotations

import json

import httpx2 as httpx
import openai
import pytest
from openai.types.responses import ResponseCompactionItem

from gemini_helpers import gemini_config
from harness import CLIENT_KEY
from proxai.mock import Error, Json, Text, Turn, Usage
from test_open_responses_compliance import EVENTS, RESOURCE, schema_errors

TRANSLATED = ["chat", "anthropic", "gemini"]
SUMMARY = "The user asked to fix the parser; parser.py line 3 divides by zero; next: add a guard."
PROMPT_WORDS = "Summarise it."  # from rules/tables/context_management.yaml's prompt
PREFIX = "The conversation before this point was compacted into the following summary:"
HISTORY = [
    {"type": "message", "role": "user", "content": "Fix the parser bug in parser.py"},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Looking at parser.py now."}]},
    {"type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": '{"path": "parser.py"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "x = 1 / 0"},
]
TOOLS = [{"type": "function", "name": "read_file", "strict": False,
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}]


def model(route: str) -> str:
    return f"{route}/up-model"


@pytest.fixture
def proxy(harness, start_proxy, mock):
    doc = gemini_config(harness.mock_url)
    doc["state"] = {"backend": "memory"}
    doc["continuation"] = {"secret": "compaction-test-secret"}
    return start_proxy(doc)


@pytest.fixture
def client(proxy):
    c = proxy.openai()
    yield c
    c.close()


def summary_turn() -> Turn:
    return Turn([Text(f"<summary>{SUMMARY}</summary>")], usage=Usage(input_tokens=120, output_tokens=30))


def sent(mock) -> str:
    return json.dumps(mock.requests[-1].body)


def without_compaction_items(resource: dict) -> dict:
    # Open Responses defines no compaction item: the resource is checked without it, the
    # item against the SDK's own type.
    return {**resource, "output": [i for i in resource["output"] if i.get("type") != "compaction"]}


def the_compaction_item(output) -> ResponseCompactionItem:
    assert [item.type for item in output] == ["compaction"], output
    item = ResponseCompactionItem.model_validate(output[0].model_dump())
    assert item.encrypted_content.startswith("pxc1.") and SUMMARY not in item.encrypted_content
    return item


def assert_summarisation_request(mock) -> None:
    assert len(mock.requests) == 1
    text = sent(mock)
    assert PROMPT_WORDS in text  # the summarisation prompt, as the last user turn
    for said in ("Fix the parser bug in parser.py", "Looking at parser.py now.", "x = 1 / 0"):
        assert said in text  # the whole history reached the provider's model
    assert "compaction_trigger" not in text


# --- the compaction_trigger input item (Codex's remote compaction) -------------------------


@pytest.mark.parametrize("route", TRANSLATED)
def test_compaction_trigger_is_answered_with_exactly_one_compaction_item(client, mock, route):
    mock.enqueue(summary_turn())
    raw = client.responses.with_raw_response.create(model=model(route), input=[*HISTORY, {"type": "compaction_trigger"}],
                                                    tools=TOOLS, store=False)
    response = raw.parse()
    assert response.status == "completed"
    the_compaction_item(response.output)
    assert response.usage.input_tokens == 120 and response.usage.output_tokens == 30
    assert schema_errors(RESOURCE, without_compaction_items(json.loads(raw.text)), "resource") == []
    assert_summarisation_request(mock)


@pytest.mark.parametrize("route", TRANSLATED)
def test_streamed_compaction_trigger_emits_the_item_and_completes(client, mock, route):
    mock.enqueue(summary_turn())
    events = list(client.responses.create(model=model(route), input=[*HISTORY, {"type": "compaction_trigger"}],
                                          tools=TOOLS, store=False, stream=True))
    kinds = [e.type for e in events]
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.output_item.done", "response.completed"], kinds
    assert events[2].item.type == events[3].item.type == "compaction"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    item = the_compaction_item(final.output)
    assert item.encrypted_content == events[3].item.encrypted_content
    assert_summarisation_request(mock)


@pytest.mark.parametrize("route", TRANSLATED)
def test_streamed_compaction_events_validate_against_open_responses(proxy, mock, route):
    mock.enqueue(summary_turn())
    with httpx.Client(base_url=proxy.url, headers={"Authorization": f"Bearer {CLIENT_KEY}"}) as http:
        text = http.post("/v1/responses", json={"model": model(route), "stream": True, "store": False,
                                                "input": [*HISTORY, {"type": "compaction_trigger"}]}).text
    events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
    assert [e["type"] for e in events][2:] == ["response.output_item.added", "response.output_item.done",
                                               "response.completed"], text[:300]
    for event in events:
        if event["type"] in ("response.output_item.added", "response.output_item.done"):
            ResponseCompactionItem.model_validate(event["item"])  # no Open Responses item type for it
        else:
            checked = {**event, "response": without_compaction_items(event["response"])} if "response" in event else event
            assert schema_errors(EVENTS[event["type"]], checked, event["type"]) == []


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("route", TRANSLATED)
def test_a_later_request_sends_the_summary_in_place_of_the_compaction_item(client, mock, route, stream):
    mock.enqueue(summary_turn())
    compacted = client.responses.create(model=model(route), input=[*HISTORY, {"type": "compaction_trigger"}],
                                        tools=TOOLS, store=False)
    item = compacted.output[0].model_dump(exclude_none=True)
    mock.reset()
    mock.enqueue(Turn([Text("Guard added.")]))
    later = [*HISTORY, item, {"type": "message", "role": "user", "content": "Now add the guard."}]
    if stream:
        with client.responses.stream(model=model(route), input=later, tools=TOOLS, store=False) as s:
            list(s)
            answer = s.get_final_response()
    else:
        answer = client.responses.create(model=model(route), input=later, tools=TOOLS, store=False)
    assert answer.output_text == "Guard added."
    text = sent(mock)
    assert PREFIX in text and SUMMARY in text
    assert text.index("Fix the parser bug") < text.index(SUMMARY) < text.index("Now add the guard.")
    assert "pxc1." not in text and "encrypted_content" not in text
    # what the summary replaced is left out; the user's messages before it stay
    assert "Looking at parser.py now." not in text and "x = 1 / 0" not in text


@pytest.mark.parametrize("route", TRANSLATED)
def test_a_compaction_item_the_proxy_did_not_make_is_a_400_naming_it(client, mock, route):
    for value in ("gAAAA-provider-opaque", "pxc1.e30"):
        with pytest.raises(openai.BadRequestError) as err:
            client.responses.create(model=model(route), store=False, input=[
                HISTORY[0], {"type": "compaction", "encrypted_content": value},
                {"type": "message", "role": "user", "content": "go on"}])
        assert err.value.body["param"] == "input[1].encrypted_content", err.value.body
        assert "compaction item" in err.value.body["message"]
    assert mock.requests == []


def test_a_compaction_item_signed_with_another_secret_is_refused(harness, start_proxy, client, mock):
    mock.enqueue(summary_turn())
    item = client.responses.create(model=model("chat"), store=False,
                                   input=[*HISTORY, {"type": "compaction_trigger"}], tools=TOOLS).output[0]
    doc = gemini_config(harness.mock_url)
    doc["continuation"] = {"secret": "another-secret"}
    other = start_proxy(doc).openai()
    mock.reset()
    with pytest.raises(openai.BadRequestError) as err:
        other.responses.create(model=model("chat"), store=False,
                               input=[item.model_dump(exclude_none=True), {"role": "user", "content": "go on"}])
    assert err.value.body["param"] == "input[0].encrypted_content"
    assert mock.requests == []
    other.close()


@pytest.mark.parametrize("route", TRANSLATED)
def test_compaction_trigger_must_be_the_final_input_item(client, mock, route):
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model=model(route), store=False,
                                input=[{"type": "compaction_trigger"}, *HISTORY[:1]])
    assert err.value.body["param"] == "input[0]"
    assert "final input item" in err.value.body["message"]
    assert mock.requests == []


@pytest.mark.parametrize("stream", [False, True])
def test_compaction_trigger_toward_a_responses_provider_is_passed_through(client, mock, stream):
    mock.enqueue(Turn([Text("provider compacted")]))
    body = dict(model=model("responses"), input=[*HISTORY, {"type": "compaction_trigger"}], store=False)
    if stream:
        list(client.responses.create(**body, stream=True))
    else:
        client.responses.create(**body)
    assert len(mock.requests) == 1
    assert mock.requests[0].body["input"][-1] == {"type": "compaction_trigger"}
    assert PROMPT_WORDS not in sent(mock)


def test_a_stored_compaction_continues_with_previous_response_id(client, mock):
    mock.enqueue(summary_turn())
    compacted = client.responses.create(model=model("anthropic"), input=[*HISTORY, {"type": "compaction_trigger"}],
                                        tools=TOOLS)
    mock.reset()
    mock.enqueue(Turn([Text("ok")]))
    client.responses.create(model=model("anthropic"), previous_response_id=compacted.id, tools=TOOLS,
                            input=[{"role": "user", "content": "Now add the guard."}])
    text = sent(mock)
    # the stored turn's input (with its trigger left out) and its compaction item: the
    # provider gets the summary where the item stands
    assert SUMMARY in text and text.index("Fix the parser bug") < text.index(SUMMARY) < text.index("Now add the guard.")
    assert "Looking at parser.py now." not in text and "x = 1 / 0" not in text


# --- POST /v1/responses/compact -------------------------------------------------------------


@pytest.mark.parametrize("route", TRANSLATED)
def test_responses_compact_answers_the_user_messages_and_one_compaction_item(client, mock, route):
    mock.enqueue(summary_turn())
    compacted = client.responses.compact(model=model(route), input=HISTORY, instructions="You are a coding agent.")
    assert compacted.object == "response.compaction"
    assert [item.type for item in compacted.output] == ["message", "compaction"]
    assert compacted.output[0].role == "user"
    the_compaction_item(compacted.output[1:])
    assert compacted.usage.input_tokens == 120 and compacted.usage.total_tokens == 150
    assert_summarisation_request(mock)
    assert "You are a coding agent." in sent(mock)
    # the compacted output is the next request's history
    mock.reset()
    mock.enqueue(Turn([Text("Guard added.")]))
    next_input = [item.model_dump(exclude_none=True) for item in compacted.output]
    client.responses.create(model=model(route), store=False,
                            input=[*next_input, {"role": "user", "content": "Now add the guard."}])
    assert SUMMARY in sent(mock) and "x = 1 / 0" not in sent(mock)


def test_responses_compact_resolves_previous_response_id(client, mock):
    mock.enqueue(Turn([Text("Looking at parser.py now.")]))
    first = client.responses.create(model=model("gemini"), input="Fix the parser bug in parser.py")
    mock.reset()
    mock.enqueue(summary_turn())
    compacted = client.responses.compact(model=model("gemini"), previous_response_id=first.id,
                                         input=[{"role": "user", "content": "and keep it short"}])
    assert [item.type for item in compacted.output] == ["message", "message", "compaction"]
    text = sent(mock)
    assert text.index("Fix the parser bug") < text.index("Looking at parser.py now.") < text.index("keep it short")


def test_responses_compact_toward_a_responses_provider_is_passed_through(client, mock):
    mock.enqueue(Json({"id": "cmp_up", "object": "response.compaction", "created_at": 1,
                       "output": [{"type": "compaction", "id": "cmp_item", "encrypted_content": "provider-opaque"}],
                       "usage": {"input_tokens": 3, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 2,
                                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 5}}))
    compacted = client.responses.compact(model=model("responses"), input=HISTORY)
    assert compacted.output[0].encrypted_content == "provider-opaque"
    assert [r.path for r in mock.requests] == ["/v1/responses/compact"]
    assert mock.requests[0].body["model"] == "up-model" and mock.requests[0].body["input"] == HISTORY


def test_responses_compact_errors_name_the_field(proxy, mock):
    http = httpx.Client(base_url=proxy.url, headers={"Authorization": f"Bearer {CLIENT_KEY}"})
    for body, param in [({"input": HISTORY}, "model"),
                        ({"model": model("chat"), "input": HISTORY, "stream": True}, "stream"),
                        ({"model": model("chat"), "input": [{"type": "compaction", "encrypted_content": "x"}]},
                         "input[0].encrypted_content")]:
        response = http.post("/v1/responses/compact", json=body)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == param and error["type"] == "invalid_request_error", error
    http.close()
    assert mock.requests == []


@pytest.mark.parametrize("writer, path", [("chat", "/v1/chat/completions"), ("responses", "/v1/responses")])
def test_compaction_model_writes_the_summary(harness, start_proxy, mock, writer, path):
    doc = gemini_config(harness.mock_url)
    for route in doc["routing"]["routes"]:
        if route["name"] == "anthropic":
            route["compaction_model"] = f"{writer}/summariser"
    client = start_proxy(doc).openai()
    mock.enqueue(summary_turn())
    compacted = client.responses.compact(model=model("anthropic"), input=HISTORY)
    the_compaction_item(compacted.output[1:])
    assert [r.path for r in mock.requests] == [path]
    assert mock.requests[0].body["model"] == "summariser" and PROMPT_WORDS in sent(mock)
    # the item is the proxy's whoever wrote it: the routed provider reads the summary
    mock.reset()
    mock.enqueue(Turn([Text("ok")]))
    client.responses.create(model=model("anthropic"), store=False,
                            input=[compacted.output[1].model_dump(exclude_none=True), {"role": "user", "content": "go on"}])
    assert [r.path for r in mock.requests] == ["/v1/messages"] and SUMMARY in sent(mock)
    client.close()


def test_responses_compact_on_a_key_pool_goes_on_with_the_next_key(harness, start_proxy, mock):
    doc = gemini_config(harness.mock_url)
    chat = doc["providers"]["chat"]
    chat.pop("api_key", None)
    chat["api_keys"] = ["sk-compact-A-SECRET", "sk-compact-B-SECRET"]
    client = start_proxy(doc).openai()
    mock.enqueue(Error(429, headers={"Retry-After": "30"}, message="rate limited"), summary_turn())
    compacted = client.responses.compact(model=model("chat"), input=HISTORY)
    the_compaction_item(compacted.output[1:])
    keys = [r.headers["authorization"] for r in mock.requests]
    assert len(keys) == 2 and keys[0] != keys[1]  # the rested key, then the other one
    client.close()

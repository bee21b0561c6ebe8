"""The Interactions mock upstream speaks Google's Interactions API as the SDK types it: the real
google-genai client (`client.interactions.*`), pointed straight at the mock, parses every body
and event; the mock refuses what the real API refuses (each refusal seen here); and it keeps
the interactions it served for GET, DELETE, cancel, background runs and previous_interaction_id."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import httpx2 as httpx
import pytest
from google import genai
from google.genai._gaos.types import interactions as sdk
from google.genai._interactions_errors import APIStatusError

from proxai.mock import Error, Hang, Json, MockUpstream, Reasoning, Text, ToolCall, Turn, Usage, render_interactions
from proxai.mock.turn import Image

ROOT = Path(__file__).resolve().parent.parent
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n-mock-image").decode()
SIGNATURE = "sig-" + "Q" * 40
WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}


@pytest.fixture(scope="module")
def served():
    mock = MockUpstream()
    with mock.serve() as url:
        yield mock, url


@pytest.fixture
def mock(served):
    m, _ = served
    m.reset()
    yield m
    m.reset()


@pytest.fixture
def url(served):
    return served[1]


@pytest.fixture
def client(url, mock):
    return genai.Client(api_key="K", http_options={"base_url": url, "retry_options": {"attempts": 1}})


def post(url: str, body: dict, path: str = "/v1beta/interactions") -> httpx.Response:
    return httpx.post(url + path, json=body, headers={"x-goog-api-key": "K"})


def thinking_call_turn() -> Turn:
    args = json.dumps({"city": "Paris"})
    return Turn([Reasoning("Weather needs the tool.", signature=SIGNATURE), Text("Checking. "),
                 ToolCall("call_1", "get_weather", args, chunks=[args[:4], args[4:]])],
                usage=Usage(input_tokens=20, output_tokens=15, cached_tokens=6, reasoning_tokens=5))


# --- the bodies and events validate against the SDK's types ---


def test_a_body_is_an_interaction_the_sdk_parses(client, mock):
    mock.enqueue(thinking_call_turn())
    r = client.interactions.create(model="gemini-3-flash-preview", input="weather in Paris?", tools=[WEATHER])
    assert isinstance(r, sdk.Interaction) and r.id.startswith("v1_")
    assert r.status == "requires_action"  # a turn of function calls waits for their results
    assert [s.type for s in r.steps] == ["thought", "model_output", "function_call"]
    thought, text, call = r.steps
    assert thought.signature == SIGNATURE and thought.summary[0].text == "Weather needs the tool."
    assert text.content[0].text == "Checking. "
    assert (call.id, call.name, call.arguments) == ("call_1", "get_weather", {"city": "Paris"})
    u = r.usage
    assert (u.total_input_tokens, u.total_cached_tokens, u.total_output_tokens, u.total_thought_tokens, u.total_tokens) \
        == (20, 6, 10, 5, 35)
    assert mock.requests[0].method == "POST" and mock.requests[0].path == "/v1/interactions"
    assert mock.requests[0].protocol == "gemini_interactions"


def test_a_stream_is_the_events_the_sdk_parses(client, mock):
    mock.enqueue(thinking_call_turn())
    events = list(client.interactions.create(model="m", input="weather?", tools=[WEATHER], stream=True))
    kinds = [e.event_type for e in events]
    assert kinds[0] == "interaction.created" and kinds[-1] == "interaction.completed"
    assert not any(type(e).__name__.startswith("Unknown") for e in events)
    assert len({e.event_id for e in events}) == len(events)  # every event has its own id
    assert events[0].interaction.status == "in_progress" and events[-1].interaction.status == "requires_action"
    assert events[-1].interaction.usage.total_thought_tokens == 5
    starts = [e for e in events if e.event_type == "step.start"]
    assert [s.step.type for s in starts] == ["thought", "model_output", "function_call"]
    deltas = [e.delta for e in events if e.event_type == "step.delta"]
    assert [d.signature for d in deltas if d.type == "thought_signature"] == [SIGNATURE]
    assert "".join(d.content.text for d in deltas if d.type == "thought_summary") == "Weather needs the tool."
    partial = [d.arguments for d in deltas if d.type == "arguments_delta"]
    assert len(partial) == 2 and json.loads("".join(partial)) == {"city": "Paris"}
    # every step that starts stops, with its index
    assert [e.index for e in events if e.event_type == "step.stop"] == [s.index for s in starts] == [0, 1, 2]
    assert mock.requests[0].headers["accept"] == "text/event-stream" and mock.requests[0].body["stream"] is True


def test_image_output_and_statuses(client, mock):
    mock.enqueue(Turn([Text("Here it is."), Image(PNG)]))
    r = client.interactions.create(model="m", input="draw")
    assert r.status == "completed" and r.steps[1].content[0].data == PNG and r.steps[1].content[0].mime_type == "image/png"
    mock.enqueue(Turn([Image(PNG)]))
    deltas = [e.delta for e in client.interactions.create(model="m", input="draw", stream=True) if e.event_type == "step.delta"]
    assert [(d.type, d.data) for d in deltas] == [("image", PNG)]
    # the output limit: incomplete (the demo's demo-length model)
    assert client.interactions.create(model="demo-length", input="x").status == "incomplete"


def test_a_thought_without_summaries_keeps_its_signature(client, mock):
    mock.enqueue(thinking_call_turn())
    r = client.interactions.create(model="m", input="x", generation_config={"thinking_summaries": "none"})
    assert r.steps[0].signature == SIGNATURE and not r.steps[0].summary


def test_errors_are_the_apis_error_bodies(client, mock):
    mock.enqueue(Error(429, message="slow down"))
    with pytest.raises(APIStatusError) as raised:
        client.interactions.create(model="m", input="x")
    assert getattr(raised.value, "status_code", None) == 429
    assert getattr(raised.value, "body", None) == {"error": {"code": "rate_limit_exceeded", "message": "slow down"}}


def test_a_failed_stream_ends_with_an_error_event_and_a_cut_one_with_nothing(client, mock):
    mock.enqueue(Turn([Text("hello there world")], error_after=3))
    events = list(client.interactions.create(model="m", input="x", stream=True))
    assert [e.event_type for e in events] == ["interaction.created", "step.start", "step.delta", "error"]
    assert events[-1].error.code == "api_error"
    mock.enqueue(Turn([Text("hello there world")], cut_after=3))
    kinds = [e.event_type for e in client.interactions.create(model="m", input="x", stream=True)]
    assert kinds == ["interaction.created", "step.start", "step.delta"]  # no fake completion


def test_a_stream_stalls_where_the_turn_says(url, mock):
    mock.enqueue(Turn([Text("slow")], stall_after=1, stall_secs=0.3))
    with pytest.raises(httpx.ReadTimeout):
        with httpx.stream("POST", url + "/v1beta/interactions", json={"model": "m", "input": "x", "stream": True},
                          timeout=httpx.Timeout(5, read=0.1)) as r:
            for _ in r.iter_bytes():
                pass


def test_a_hang_answers_nothing(url, mock):
    mock.enqueue(Hang(2.0), Hang(2.0, after_headers=True))
    with pytest.raises(httpx.ReadTimeout):
        post_timeout = httpx.Timeout(5, read=0.2)
        httpx.post(url + "/v1beta/interactions", json={"model": "m", "input": "x"}, timeout=post_timeout)
    with pytest.raises(httpx.ReadTimeout):
        with httpx.stream("POST", url + "/v1beta/interactions", json={"model": "m", "input": "x", "stream": True},
                          timeout=httpx.Timeout(5, read=0.2)) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            for _ in r.iter_bytes():
                pass


def test_the_mock_asserts_what_it_sends():
    """A bug in the mock does not pass silently: a status the SDK does not know is refused."""
    with pytest.raises(AssertionError, match="status"):
        render_interactions.body(Turn([Text("x")], stop={"gemini_interactions": "finished"}), {"model": "m"})
    with pytest.raises(AssertionError, match="event"):
        render_interactions.events(Turn([Text("x")], stop={"gemini_interactions": "finished"}), {"model": "m"})
    with pytest.raises(AssertionError, match="error body"):
        render_interactions.error_body(400, "x", code=400)  # the code is a string (google.rpc's number is not)


def test_the_mock_serves_without_the_sdk_installed():
    """google-genai is a test dependency: demo mode in a bare install still has the mock."""
    code = ("import sys; sys.modules['google.genai'] = None\n"
            "from proxai.mock import Text, Turn, render_interactions\n"
            "from proxai.mock.interactions_schema import check_request\n"
            "check_request({'model': 'm', 'input': 'x'})\n"
            "print(render_interactions.body(Turn([Text('hi')]), {'model': 'm'})['status'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip() == "completed", done.stderr


# --- what the mock refuses ---


@pytest.mark.parametrize("body, field, code", [
    ({"model": "m", "input": "x", "max_tokens": 5}, 'Unknown name "max_tokens"', "parameter_unknown"),
    ({"model": "m", "input": "x", "generation_config": {"max_output_tokens": "many"}},
     "generation_config.max_output_tokens", "invalid_request"),
    ({"model": "m", "input": "x", "stream": "yes"}, "stream", "invalid_request"),
    ({"model": "m", "input": "x", "generation_config": {"thinking_level": "extreme"}},
     "generation_config.thinking_level", "invalid_request"),
    ({"model": "m", "input": [{"type": "user_turn", "content": []}]}, "input[0]", "invalid_request"),
    ({"model": "m", "input": [{"type": "function_call", "id": "c", "name": "f", "arguments": {}, "args": {}}]},
     'input[0]: Unknown name "args"', "parameter_unknown"),
    ({"model": "m", "tools": [{"type": "function", "name": "f", "parameters": {}, "strict": True}], "input": "x"},
     'tools[0]: Unknown name "strict"', "parameter_unknown"),
    ({"input": "x"}, "model", "invalid_request"),
])
def test_a_body_the_sdk_types_refuse_is_a_400_naming_the_field(url, mock, body, field, code):
    mock.enqueue(Turn([Text("never sent")]))
    r = post(url, body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == code and field in error["message"], error
    assert mock.pending == 1  # a refused request takes no reply


def test_a_signature_must_come_back_byte_identical(client, url, mock):
    mock.enqueue(thinking_call_turn())
    first = client.interactions.create(model="m", input="weather?", tools=[WEATHER], store=False)
    thought, _, call = first.steps
    history = [{"type": "user_input", "content": [{"type": "text", "text": "weather?"}]},
               {"type": "thought", "signature": thought.signature},
               {"type": "function_call", "id": call.id, "name": call.name, "arguments": call.arguments},
               {"type": "function_result", "call_id": call.id, "name": call.name, "result": "sunny"}]
    altered = [dict(s) for s in history]
    altered[1]["signature"] = thought.signature[:-1] + "R"
    r = post(url, {"model": "m", "input": altered})
    assert r.status_code == 400 and "input[1].signature" in r.json()["error"]["message"]
    unsigned = [s for s in history]
    unsigned[1] = {"type": "thought", "summary": [{"type": "text", "text": "thinking"}]}
    r = post(url, {"model": "m", "input": unsigned})
    assert r.status_code == 400 and "input[1].signature" in r.json()["error"]["message"]
    mock.enqueue(Turn([Text("It is sunny.")]))
    assert client.interactions.create(model="m", input=history).steps[0].content[0].text == "It is sunny."


def test_a_signature_generate_content_issued_is_good_here_and_an_anthropic_one_is_not(url, mock):
    """The same models sign on both Google APIs; another family's signatures mean nothing here."""
    mock.enqueue(Turn([Reasoning("hm", signature="gemini-sig"), Text("hi")]),
                 Turn([Reasoning("hm", signature="claude-sig"), Text("hi")]))
    assert httpx.post(url + "/v1beta/models/m:generateContent", json={"contents": [{"role": "user", "parts": [{"text": "x"}]}]}).status_code == 200
    assert httpx.post(url + "/v1/messages", json={"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]}).status_code == 200
    steps = [{"type": "user_input", "content": [{"type": "text", "text": "x"}]}]
    assert post(url, {"model": "m", "input": [*steps, {"type": "thought", "signature": "gemini-sig"}]}).status_code == 200
    r = post(url, {"model": "m", "input": [*steps, {"type": "thought", "signature": "claude-sig"}]})
    assert r.status_code == 400 and "input[1].signature" in r.json()["error"]["message"]


def test_a_function_result_must_name_an_earlier_call(client, url, mock):
    r = post(url, {"model": "m", "input": [{"type": "function_result", "call_id": "call_x", "result": "ok"}]})
    assert r.status_code == 400 and "input[0].call_id" in r.json()["error"]["message"]
    # the call is in the interaction it continues
    mock.enqueue(thinking_call_turn())
    first = client.interactions.create(model="m", input="weather?", tools=[WEATHER])
    mock.enqueue(Turn([Text("Sunny.")]))
    second = client.interactions.create(model="m", previous_interaction_id=first.id,
                                        input=[{"type": "function_result", "call_id": "call_1", "result": "sunny"}])
    assert second.status == "completed" and second.previous_interaction_id == first.id
    r = post(url, {"model": "m", "previous_interaction_id": first.id,
                   "input": [{"type": "function_result", "call_id": "call_2", "result": "ok"}]})
    assert r.status_code == 400 and "'call_2'" in r.json()["error"]["message"]


def test_previous_interaction_id_names_only_what_the_mock_stored(client, url, mock):
    r = post(url, {"model": "m", "input": "x", "previous_interaction_id": "v1_from_elsewhere"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    unstored = client.interactions.create(model="m", input="x", store=False)
    r = post(url, {"model": "m", "input": "y", "previous_interaction_id": unstored.id})
    assert r.status_code == 404
    stored = client.interactions.create(model="m", input="x")
    assert client.interactions.create(model="m", input="y", previous_interaction_id=stored.id).status == "completed"


# --- the resource endpoints ---


def test_get_delete_and_include_input(client, url, mock):
    created = client.interactions.create(model="m", input="hello")
    got = client.interactions.get(created.id)
    assert got.id == created.id and got.steps[0].content[0].text == created.steps[0].content[0].text
    with_input = httpx.get(url + f"/v1beta/interactions/{created.id}?include_input=true").json()
    assert with_input["input"] == [{"type": "user_input", "content": [{"type": "text", "text": "hello"}]}]
    client.interactions.delete(created.id)
    assert httpx.get(url + f"/v1beta/interactions/{created.id}").status_code == 404
    assert [(r.method, r.path) for r in mock.requests[1:]] == [
        ("GET", f"/v1/interactions/{created.id}"), ("GET", f"/v1beta/interactions/{created.id}"),
        ("DELETE", f"/v1/interactions/{created.id}"), ("GET", f"/v1beta/interactions/{created.id}")]
    assert httpx.delete(url + "/v1beta/interactions/v1_unknown").status_code == 404


def test_a_stream_resumes_after_its_last_event_id(client, mock):
    mock.enqueue(thinking_call_turn())
    events = list(client.interactions.create(model="m", input="x", stream=True))
    ident = events[0].interaction.id
    again = list(client.interactions.get(ident, stream=True, last_event_id=events[2].event_id))
    assert [e.event_id for e in again] == [e.event_id for e in events[3:]]
    assert mock.requests[-1].query == f"last_event_id={events[2].event_id}&stream=true"
    # a stored interaction that was not streamed still streams on a GET
    plain = client.interactions.create(model="m", input="x")
    replayed = list(client.interactions.get(plain.id, stream=True))
    assert replayed[-1].event_type == "interaction.completed" and replayed[1].step.content[0].text == plain.steps[0].content[0].text


def test_background_runs_finish_on_get_and_cancel(client, url, mock):
    started = client.interactions.create(model="m", input="long job", background=True)
    assert started.status == "in_progress" and not started.steps
    done = client.interactions.get(started.id)
    assert done.status == "completed" and done.steps[0].content[0].text.startswith("Hello from the ProxAI demo")
    second = client.interactions.create(model="m", input="another", background=True)
    cancelled = client.interactions.cancel(second.id)
    assert cancelled.status == "cancelled" and client.interactions.get(second.id).status == "cancelled"
    assert mock.requests[-2].method == "POST" and mock.requests[-2].path == f"/v1/interactions/{second.id}/cancel"
    # a background run is stored, so it cannot be store: false
    r = post(url, {"model": "m", "input": "x", "background": True, "store": False})
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("store:")
    # only an interaction in progress can be cancelled
    r = httpx.post(url + f"/v1beta/interactions/{done.id}/cancel")
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request"


def test_a_scripted_resource_can_be_continued(client, mock):
    resource = {"id": "v1_scripted", "status": "completed", "model": "m",
                "steps": [{"type": "model_output", "content": [{"type": "text", "text": "hi"}]}]}
    mock.enqueue(Json(resource))
    assert client.interactions.create(model="m", input="x").id == "v1_scripted"
    assert client.interactions.create(model="m", input="y", previous_interaction_id="v1_scripted").status == "completed"


# --- demo mode ---


def test_demo_mode_answers_an_interactions_client(harness):
    p = harness.start_demo()
    try:
        c = genai.Client(api_key="any", http_options={"base_url": p.url, "retry_options": {"attempts": 1}})
        hello = c.interactions.create(model="demo", input="hi there")
        assert 'Gemini Interactions upstream! You said: "hi there"' in hello.steps[0].content[0].text
        call = c.interactions.create(model="interactions/demo-tools", input="weather?", tools=[WEATHER])
        assert call.status == "requires_action" and call.steps[-1].name == "get_weather"
        answer = c.interactions.create(model="interactions/demo-tools", previous_interaction_id=call.id, input=[
            {"type": "function_result", "call_id": call.steps[-1].id, "name": "get_weather", "result": "sunny"}])
        assert answer.steps[-1].content[0].text == "The tool answered: sunny"
        kinds = [e.event_type for e in c.interactions.create(model="demo", input="hi", stream=True)]
        assert kinds[0] == "interaction.created" and kinds[-1] == "interaction.completed"
        # a prefix crosses to another protocol's mock
        for prefix, name in (("chat/", "OpenAI Chat Completions"), ("responses/", "OpenAI Responses"),
                             ("anthropic/", "Anthropic Messages"), ("gemini/", "Gemini generateContent")):
            text = c.interactions.create(model=prefix + "demo", input="hi").steps[-1].content[0].text
            assert f"demo {name} upstream" in text
    finally:
        p.stop()

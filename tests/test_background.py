"""Background responses end to end: the official OpenAI SDK's `responses.create(background=True)`,
`responses.retrieve` (polled, and streamed from a sequence number), and `responses.cancel`
against the real server, toward Chat, Anthropic, Gemini and Responses mock upstreams, checking
what the provider received; every Response validates against the Open Responses OpenAPI."""

from __future__ import annotations

import json
import logging
import time

import openai
import pytest

from gemini_helpers import gemini_config
from harness import CLIENT_KEY, slow_turn, wait_final
from proxai.mock import Text, Turn
from test_open_responses_compliance import RESOURCE, event_errors, schema_errors

PROVIDERS = ["chat", "anthropic", "gemini", "responses"]
FINAL = ("completed", "incomplete", "failed", "cancelled")


@pytest.fixture
def proxy(harness, start_proxy, mock):
    doc = gemini_config(harness.mock_url)
    doc["state"] = {"backend": "memory"}
    return start_proxy(doc)


@pytest.fixture
def client(proxy):
    c = proxy.openai()
    yield c
    c.close()


def valid(response) -> None:
    assert schema_errors(RESOURCE, response.model_dump(mode="json", exclude_unset=True), "response") == []


def upstream_streamed(mock) -> None:
    """The provider got an ordinary streamed request: no background for it to run."""
    sent = mock.requests[-1]
    assert "background" not in (sent.body or {})
    if sent.path.startswith("/v1beta/"):
        assert sent.path.endswith(":streamGenerateContent")
    else:
        assert sent.body["stream"] is True


@pytest.mark.parametrize("provider", PROVIDERS)
def test_background_polls_to_completion_and_continues(client, mock, provider):
    mock.enqueue(slow_turn(6, 0.05))
    created = client.responses.create(model=f"{provider}/m", input="Say six words.", background=True)
    assert created.background is True
    assert created.status in ("queued", "in_progress")
    assert created.output == [] or created.status == "in_progress"
    valid(created)
    done = wait_final(client.responses.retrieve, created.id, FINAL)
    assert done.status == "completed", done.error
    assert done.id == created.id and done.background is True
    assert done.output_text == "w0 w1 w2 w3 w4 w5"
    valid(done)
    upstream_streamed(mock)
    assert "Say six words." in json.dumps(mock.requests[-1].body)
    # The finished run is a stored response like any other: the next turn continues from it.
    mock.enqueue(Turn(blocks=[Text("next")]))
    follow = client.responses.create(model=f"{provider}/m", input="And then?", previous_response_id=created.id)
    assert follow.output_text == "next"
    if provider != "responses":  # toward Responses the provider holds the history (its own id)
        sent = json.dumps(mock.requests[-1].body)
        assert sent.index("Say six words.") < sent.index("w0 w1 w2 w3 w4 w5") < sent.index("And then?")
    else:
        assert mock.requests[-1].body["previous_response_id"] == created.id


@pytest.mark.parametrize("provider", PROVIDERS)
def test_background_stream_survives_the_client_and_resumes_from_a_sequence_number(client, mock, provider):
    mock.enqueue(slow_turn(12, 0.1))
    first: list = []
    with client.responses.create(model=f"{provider}/m", input="Count.", background=True, stream=True) as stream:
        for event in stream:
            first.append(event)
            if event.type == "response.output_text.delta":
                break  # the client goes away mid-answer
    response_id = first[0].response.id
    assert first[0].type == "response.created" and first[0].response.background is True
    cut = first[-1].sequence_number
    resumed = list(client.responses.retrieve(response_id, stream=True, starting_after=cut))
    numbers = [e.sequence_number for e in resumed]
    assert numbers == list(range(cut + 1, cut + 1 + len(numbers)))  # nothing lost, nothing repeated
    assert resumed[-1].type == "response.completed"
    assert resumed[-1].response.id == response_id and resumed[-1].response.background is True
    text = "".join(e.delta for e in first + resumed if e.type == "response.output_text.delta")
    assert text == " ".join(f"w{i}" for i in range(12))
    assert event_errors([e.model_dump(mode="json", exclude_unset=True) for e in first + resumed]) == []
    # Once it is done the same call replays it from the start.
    replay = list(client.responses.retrieve(response_id, stream=True))
    assert [e.sequence_number for e in replay] == list(range(len(replay)))
    assert replay[-1].type == "response.completed"
    assert wait_final(client.responses.retrieve, response_id, FINAL).output_text == text
    upstream_streamed(mock)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_cancel_stops_the_provider_call(client, mock, provider):
    mock.enqueue(slow_turn(60, 0.2))  # twelve seconds of answer
    created = client.responses.create(model=f"{provider}/m", input="Talk for a while.", background=True)
    deadline = time.monotonic() + 10
    while client.responses.retrieve(created.id).status != "in_progress" and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    started = time.monotonic()
    cancelled = client.responses.cancel(created.id)
    assert cancelled.status == "cancelled" and cancelled.id == created.id
    assert time.monotonic() - started < 3
    valid(cancelled)
    deadline = time.monotonic() + 3
    while mock.cut_short == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mock.cut_short == 1  # the proxy closed the provider's stream
    assert client.responses.retrieve(created.id).status == "cancelled"
    assert client.responses.cancel(created.id).status == "cancelled"  # again: the same answer
    # A resumed stream of a cancelled run replays what there was and ends.
    events = list(client.responses.retrieve(created.id, stream=True))
    assert events and events[0].type == "response.created"
    assert all(e.type not in ("response.completed", "response.failed") for e in events)


def test_background_needs_store(client, mock):
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="chat/m", input="hi", background=True, store=False)
    assert err.value.body["param"] == "background" and "store" in err.value.body["message"]
    assert mock.requests == []


def test_cancelling_a_synchronous_response_is_a_400(client, mock):
    mock.enqueue(Turn(blocks=[Text("done")]))
    plain = client.responses.create(model="anthropic/m", input="hi")
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.cancel(plain.id)
    assert "synchronous" in err.value.body["message"]
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_nothing_here")


def test_a_failing_provider_ends_the_run_failed(client, mock):
    from proxai.mock import Error

    mock.enqueue(Error(400, message="the provider says no"))
    created = client.responses.create(model="anthropic/m", input="hi", background=True)
    done = wait_final(client.responses.retrieve, created.id, FINAL)
    assert done.status == "failed" and "the provider says no" in done.error.message
    valid(done)


def test_the_run_is_logged_and_counted_with_its_usage(proxy, client, mock, caplog):
    mock.enqueue(slow_turn(3, 0.05))
    with caplog.at_level(logging.INFO, logger="proxai.request"):
        created = client.responses.create(model="chat/m", input="hi", background=True)
        wait_final(client.responses.retrieve, created.id, FINAL)
        time.sleep(0.2)
    runs = [r.fields for r in caplog.records if getattr(r, "fields", {}).get("method") == "BACKGROUND"]
    assert len(runs) == 1
    assert runs[0]["path"] == f"/v1/responses/{created.id}" and runs[0]["provider"] == "chat"
    assert runs[0]["output_tokens"] and runs[0]["status"] == 200
    # ... and counted: the provider's tokens are in the metrics (the creating POST reported none).
    import httpx2 as httpx

    metrics = httpx.get(proxy.url + "/metrics").text
    output = [line for line in metrics.splitlines()
              if line.startswith("proxai_tokens_total{") and 'kind="output"' in line and 'provider="chat"' in line]
    assert output and float(output[0].rsplit(" ", 1)[1]) == runs[0]["output_tokens"]


def test_another_tenant_cannot_see_or_cancel_a_run(proxy, client, mock, harness, start_proxy):
    doc = gemini_config(harness.mock_url)
    doc["state"] = {"backend": "memory"}
    doc["server"] = {"api_keys": ["key-a", "key-b"]}
    keyed = start_proxy(doc)
    a = openai.OpenAI(base_url=keyed.url + "/v1", api_key="key-a", max_retries=0)
    b = openai.OpenAI(base_url=keyed.url + "/v1", api_key="key-b", max_retries=0)
    mock.enqueue(slow_turn(20, 0.1))
    created = a.responses.create(model="chat/m", input="hi", background=True)
    with pytest.raises(openai.NotFoundError):
        b.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        b.responses.cancel(created.id)
    assert a.responses.cancel(created.id).status == "cancelled"


def test_a_run_holds_one_of_its_clients_concurrent_streams(harness, start_proxy, mock):
    doc = gemini_config(harness.mock_url)
    doc["state"] = {"backend": "memory"}
    doc["server"] = {"api_keys": [{"name": "team-a", "key": "key-a", "limits": {"concurrent_streams": 1}}]}
    keyed = start_proxy(doc)
    c = openai.OpenAI(base_url=keyed.url + "/v1", api_key="key-a", max_retries=0)
    mock.enqueue(slow_turn(10, 0.1))
    created = c.responses.create(model="anthropic/m", input="hi", background=True)
    with pytest.raises(openai.RateLimitError) as err:
        c.responses.create(model="anthropic/m", input="again", background=True)
    assert "concurrent_streams (1)" in err.value.body["message"]
    assert wait_final(c.responses.retrieve, created.id, FINAL).status == "completed"
    time.sleep(0.2)  # the slot is freed when the run ends
    mock.enqueue(Turn(blocks=[Text("ok")]))
    again = c.responses.create(model="anthropic/m", input="again", background=True)
    assert wait_final(c.responses.retrieve, again.id, FINAL).output_text == "ok"


@pytest.mark.parametrize("provider", ["gemini", "responses"])
def test_a_background_turn_of_a_conversation_is_added_to_it(client, mock, provider):
    conversation = client.conversations.create(items=[{"type": "message", "role": "user", "content": "Earlier."}])
    mock.enqueue(slow_turn(3, 0.05))
    created = client.responses.create(model=f"{provider}/m", input="Now.", conversation=conversation.id, background=True)
    assert created.conversation.id == conversation.id
    done = wait_final(client.responses.retrieve, created.id, FINAL)
    assert done.status == "completed" and done.conversation.id == conversation.id
    sent = json.dumps(mock.requests[-1].body)
    assert sent.index("Earlier.") < sent.index("Now.")
    items = client.conversations.items.list(conversation.id, order="asc").data
    assert [item.type for item in items] == ["message", "message", "message"]
    assert items[-1].role == "assistant" and items[-1].content[0].text == "w0 w1 w2"


def test_a_quiet_run_keeps_its_followers_connection_alive(harness, start_proxy, mock):
    import httpx2 as httpx

    doc = gemini_config(harness.mock_url)
    doc["state"] = {"backend": "memory"}
    doc["server"] = {"stream_heartbeat_secs": 0.2}
    proxy = start_proxy(doc)
    c = proxy.openai()
    mock.enqueue(Turn(blocks=[Text("after a pause")], stall_after=2, stall_secs=1.0))
    created = c.responses.create(model="anthropic/m", input="hi", background=True)
    with httpx.stream("GET", f"{proxy.url}/v1/responses/{created.id}", params={"stream": "true"},
                      headers={"Authorization": f"Bearer {CLIENT_KEY}"}, timeout=10) as response:
        body = b"".join(response.iter_bytes())
    assert b": keep-alive\n\n" in body  # while the provider was silent
    assert body.rstrip().endswith(b"}") and b"event: response.completed" in body
    assert wait_final(c.responses.retrieve, created.id, FINAL).output_text == "after a pause"

"""Answers carry the model name the client asked for when a route renames the model
(routing.routes[].response_model: client, the default), or the provider's (upstream).

The real server process, the official SDKs of all four client protocols, each provider
protocol, translated and pass-through, streaming and not. The provider answers under a
versioned name of its own, so the test sees whose name reaches the client.
"""

from __future__ import annotations

import json

import pytest
from google import genai
from google.genai import types

from gemini_helpers import gemini_config
from harness import CLIENT_KEY
from proxai.http import response_model
from proxai.mock import Text, Turn
from server_process import ServerProcess
from test_passthrough_e2e import raw_post

PROVIDERS = ("chat", "responses", "anthropic", "gemini")
CLIENTS = ("chat", "responses", "anthropic", "gemini")
ANSWERED = "upstream-model-2025-01-01"  # what the provider calls itself in its answers
STREAMS = pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])


@pytest.fixture(scope="module")
def server(harness, tmp_path_factory):
    config = gemini_config(harness.mock_url)
    config["routing"]["routes"] += [
        {"name": f"keep-{p}", "model_pattern": f"^keep-{p}/(.+)$", "provider": p, "upstream_model": "$1",
         "response_model": "upstream"}
        for p in PROVIDERS
    ]
    process = ServerProcess(tmp_path_factory.mktemp("response-model"), config)
    yield process
    process.stop()


def models_seen(server, client: str, model: str, stream: bool) -> list[str]:
    """Every model name the client's SDK reads in the answer (each stream event that carries one)."""
    if client == "gemini":
        g = genai.Client(api_key=CLIENT_KEY, http_options=types.HttpOptions(base_url=server.url))
        if not stream:
            return [g.models.generate_content(model=model, contents="hi").model_version]
        return [c.model_version for c in g.models.generate_content_stream(model=model, contents="hi")]
    if client == "anthropic":
        import anthropic

        a = anthropic.Anthropic(base_url=server.url, api_key=CLIENT_KEY, max_retries=0)
        args = dict(model=model, max_tokens=50, messages=[{"role": "user", "content": "hi"}])
        if not stream:
            return [a.messages.create(**args).model]
        return [e.message.model for e in a.messages.create(**args, stream=True) if e.type == "message_start"]
    import openai

    o = openai.OpenAI(base_url=server.url + "/v1", api_key=CLIENT_KEY, max_retries=0)
    if client == "chat":
        args = dict(model=model, messages=[{"role": "user", "content": "hi"}])
        if not stream:
            return [o.chat.completions.create(**args).model]
        return [c.model for c in o.chat.completions.create(**args, stream=True)]
    if not stream:
        return [o.responses.create(model=model, input="hi").model]
    return [e.response.model for e in o.responses.create(model=model, input="hi", stream=True) if hasattr(e, "response")]


def upstream_model_sent(mock) -> str:
    record = mock.requests[-1]
    return record.body.get("model") or record.path.split("/models/", 1)[1].split(":", 1)[0]


@STREAMS
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("client", CLIENTS)
def test_answers_carry_the_clients_model_name(server, mock, client, provider, stream):
    mock.enqueue(Turn([Text("Hello")], model=ANSWERED))
    seen = models_seen(server, client, f"{provider}/up-model", stream)
    assert upstream_model_sent(mock) == "up-model"  # the route still renames the model upstream
    assert seen and set(seen) == {f"{provider}/up-model"}, seen


@STREAMS
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("client", CLIENTS)
def test_response_model_upstream_keeps_the_providers_name(server, mock, client, provider, stream):
    mock.enqueue(Turn([Text("Hello")], model=ANSWERED))
    seen = models_seen(server, client, f"keep-{provider}/up-model", stream)
    assert upstream_model_sent(mock) == "up-model"
    assert seen and set(seen) == {ANSWERED}, seen


@STREAMS
def test_a_route_that_does_not_rename_leaves_the_answer_alone(server, mock, stream):
    # No rename (the default provider): the provider's own versioned name goes through.
    mock.enqueue(Turn([Text("Hello")], model=ANSWERED))
    assert set(models_seen(server, "anthropic", "claude-plain", stream)) == {ANSWERED}


def test_passthrough_stream_changes_only_the_model_value(server, mock):
    # Everything but the model's value is relayed byte for byte.
    mock.enqueue(Turn([Text('say "model": "x"')], model=ANSWERED))
    status, _, renamed = raw_post(server.url, "/v1/messages", {
        "model": "anthropic/up-model", "max_tokens": 20, "stream": True,
        "messages": [{"role": "user", "content": "hi"}]}, {"x-api-key": CLIENT_KEY})
    assert status == 200
    mock.enqueue(Turn([Text('say "model": "x"')], model=ANSWERED))
    _, _, plain = raw_post(server.url, "/v1/messages", {
        "model": "keep-anthropic/up-model", "max_tokens": 20, "stream": True,
        "messages": [{"role": "user", "content": "hi"}]}, {"x-api-key": CLIENT_KEY})
    ids = [json.loads(line[5:])["message"]["id"] for body in (renamed, plain) for line in body.split(b"\n")
           if line.startswith(b"data:") and b"message_start" in line]
    expected = plain.replace(ids[1].encode(), ids[0].encode()).replace(
        f'"model":"{ANSWERED}"'.encode(), b'"model":"anthropic/up-model"')
    assert renamed == expected


def test_rewriter_takes_the_first_unescaped_key_only():
    rewrite = response_model.rewriter("model", "client/m")
    assert rewrite(b'{"id":"1","model" : "up","tools":[{"model":"gpt-image-1"}]}') == \
        b'{"id":"1","model" : "client/m","tools":[{"model":"gpt-image-1"}]}'
    escaped = b'{"delta":{"partial_json":"{\\"model\\":\\"x\\"}"}}'
    assert rewrite(escaped) is escaped
    assert rewrite(b'{"model":"a\\"b"}') == b'{"model":"client/m"}'
    assert response_model.rewriter("modelVersion", 'q"m')(b'{"modelVersion":"up"}') == b'{"modelVersion":"q\\"m"}'


def test_rewriter_gives_every_event_of_a_stream_what_the_pattern_gives():
    """The rewriter remembers the last value it replaced (a stream repeats it in every event):
    each event still comes out as a fresh rewriter makes it."""
    events = [b'{"id":"c","model":"up","choices":[]}', b'{"id":"c","model":"up","choices":[{"delta":{}}]}',
              b'{"id":"c","model" : "up","choices":[]}', b'{"id":"c","model":"other","choices":[]}',
              b'{"id":"c","model":"other"}', b'{"delta":"x"}', b'{"model":null,"x":{"model":"up"}}',
              b'{"a":"\\"model\\":\\"up\\"","model":"up"}', b'{"id":"c","model":"up"}']
    rewrite = response_model.rewriter("model", "client/m")
    assert [rewrite(e) for e in events] == [response_model.rewriter("model", "client/m")(e) for e in events]
    assert rewrite(events[0]) == b'{"id":"c","model":"client/m","choices":[]}'

"""The provider's request id reaches each client under the header its SDK reads as
`request_id` (`x-request-id` for OpenAI SDKs, `request-id` for the Anthropic SDK), beside
its original name; the proxy's own id travels as `x-proxai-request-id`."""

from __future__ import annotations

import anthropic
import openai
import pytest

from proxai.mock import Error, Text, Turn
from test_passthrough_e2e import MESSAGES


def test_openai_client_sees_an_anthropic_providers_id_on_a_429(openai_client, mock):
    mock.enqueue(Error(429, headers={"request-id": "req_ant_429"}, message="slow down"))
    with pytest.raises(openai.RateLimitError) as info:
        openai_client.chat.completions.create(model="anthropic/claude", messages=MESSAGES,
                                              extra_headers={"x-request-id": "mine-a"})
    assert info.value.request_id == "req_ant_429"
    headers = info.value.response.headers
    assert headers["request-id"] == "req_ant_429"  # its original name too
    assert headers["x-proxai-request-id"] == "mine-a"
    assert "x-upstream-request-id" not in headers
    assert mock.requests[-1].path == "/v1/messages"


def test_openai_client_sees_an_openai_providers_id_on_a_429(openai_client, mock):
    mock.enqueue(Error(429, headers={"x-request-id": "req_oai_429"}, message="You exceeded your current quota"))
    with pytest.raises(openai.RateLimitError) as info:
        openai_client.responses.create(model="chat/gpt", input="hi")
    assert info.value.request_id == "req_oai_429"
    assert info.value.response.headers["x-proxai-request-id"].startswith("req_")
    assert info.value.response.headers["x-proxai-request-id"] != "req_oai_429"


def test_anthropic_client_sees_an_openai_providers_id(anthropic_client, mock):
    mock.enqueue(Error(429, headers={"x-request-id": "req_oai_7"}, message="slow down"))
    with pytest.raises(anthropic.RateLimitError) as info:
        anthropic_client.messages.create(model="chat/gpt", max_tokens=5, messages=MESSAGES,
                                         extra_headers={"x-request-id": "mine-b"})
    assert info.value.request_id == "req_oai_7"
    headers = info.value.response.headers
    assert headers["request-id"] == "req_oai_7" and headers["x-request-id"] == "req_oai_7"
    assert headers["x-proxai-request-id"] == "mine-b"


@pytest.mark.parametrize("stream", [False, True])
def test_successful_answers_carry_the_providers_id(openai_client, anthropic_client, mock, stream):
    mock.enqueue(Turn([Text("ok")], headers={"request-id": "req_ant_ok"}))
    raw = openai_client.chat.completions.with_raw_response.create(
        model="anthropic/claude", messages=MESSAGES, stream=stream, extra_headers={"x-request-id": "mine-c"})
    assert raw.headers["x-request-id"] == "req_ant_ok"
    assert raw.headers["x-proxai-request-id"] == "mine-c"
    raw.parse()
    mock.enqueue(Turn([Text("ok")], headers={"x-request-id": "req_oai_ok"}))
    raw = anthropic_client.messages.with_raw_response.create(
        model="responses/gpt", max_tokens=5, messages=MESSAGES, stream=stream)
    assert raw.headers["request-id"] == "req_oai_ok"
    assert raw.headers["x-proxai-request-id"].startswith("req_")


@pytest.mark.parametrize("stream", [False, True])
def test_pass_through_keeps_the_providers_id_under_the_sdk_header(openai_client, anthropic_client, mock, stream):
    mock.enqueue(Turn([Text("ok")], headers={"x-request-id": "req_oai_pt"}))
    raw = openai_client.chat.completions.with_raw_response.create(
        model="chat/gpt", messages=MESSAGES, stream=stream, extra_headers={"x-request-id": "mine-d"})
    assert raw.headers["x-request-id"] == "req_oai_pt" and raw.headers["x-proxai-request-id"] == "mine-d"
    raw.parse()
    mock.enqueue(Error(529, headers={"request-id": "req_ant_pt"}, message="overloaded"))
    with pytest.raises(anthropic.APIStatusError) as info:
        anthropic_client.messages.create(model="anthropic/claude", max_tokens=5, messages=MESSAGES, stream=stream)
    assert info.value.request_id == "req_ant_pt"
    assert info.value.response.headers["x-proxai-request-id"].startswith("req_")


def test_without_a_provider_answer_our_id_stands_in(openai_client, anthropic_client):
    with pytest.raises(openai.BadRequestError) as info:
        openai_client.chat.completions.create(model="chat/gpt", messages="not a list",
                                              extra_headers={"x-request-id": "mine-e"})
    assert info.value.request_id == "mine-e"
    assert info.value.response.headers["x-proxai-request-id"] == "mine-e"
    with pytest.raises(anthropic.BadRequestError) as info:
        anthropic_client.messages.create(model="anthropic/claude", max_tokens=5, messages="nope",
                                         extra_headers={"x-request-id": "mine-f"})
    assert info.value.request_id == "mine-f"

"""Output limits above the upstream model's ceiling (rules/tables/output_ceilings.yaml):
clamped on translated requests, with the mocks refusing what the real APIs refuse.
Every client SDK toward every other provider protocol, streaming and not."""
from __future__ import annotations

import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from gemini_helpers import gemini_config
from harness import CLIENT_KEY
from proxai.mock import output_ceilings

STREAMS = pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
# Provider kind -> (routed model, the field the provider gets, its ceiling).
PROVIDERS = {
    "chat": ("chat/gpt-4.1", ("max_completion_tokens",), 32768),
    "responses": ("responses/gpt-4o", ("max_output_tokens",), 16384),
    "gemini": ("gemini/gemini-2.5-flash", ("generationConfig", "maxOutputTokens"), 65536),
    "anthropic": ("anthropic/claude-opus-4-1", ("max_tokens",), 32000),
}
CLIENTS = ("chat", "responses", "anthropic", "gemini")
PAIRS = [pytest.param(c, p, id=f"{c}-to-{p}") for c in CLIENTS for p in PROVIDERS if c != p]
ASKED = 128000  # what Claude Code 2.1.328 sends


@pytest.fixture
def proxy(harness, start_proxy):
    return start_proxy(gemini_config(harness.mock_url))


def ask(proxy, client: str, model: str, stream: bool, limit: int | None) -> str:
    """One request from `client`'s SDK with output limit `limit` (None: none); the answer's text."""
    if client == "chat":
        kw = {"max_completion_tokens": limit} if limit else {}
        c = proxy.openai()
        if stream:
            return "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hi"}], stream=True, **kw) if ch.choices)
        return c.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], **kw).choices[0].message.content
    if client == "responses":
        kw = {"max_output_tokens": limit} if limit else {}
        c = proxy.openai()
        if stream:
            events = list(c.responses.create(model=model, input="hi", stream=True, **kw))
            assert events[-1].type == "response.completed"
            return events[-1].response.output_text
        return c.responses.create(model=model, input="hi", **kw).output_text
    if client == "anthropic":
        c = proxy.anthropic()
        if stream:
            with c.messages.stream(model=model, max_tokens=limit, messages=[{"role": "user", "content": "hi"}]) as s:
                return "".join(s.text_stream)
        # an explicit timeout: the SDK refuses a large max_tokens without streaming otherwise
        return c.messages.create(model=model, max_tokens=limit, messages=[{"role": "user", "content": "hi"}],
                                 timeout=60).content[0].text
    g = genai.Client(api_key=CLIENT_KEY, http_options=types.HttpOptions(base_url=proxy.url))
    cfg = types.GenerateContentConfig(max_output_tokens=limit) if limit else None
    if stream:
        return "".join(ch.text or "" for ch in g.models.generate_content_stream(model=model, contents="hi", config=cfg))
    return g.models.generate_content(model=model, contents="hi", config=cfg).text


def received(mock, path):
    value = mock.requests[-1].body
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


@STREAMS
@pytest.mark.parametrize("client,provider", PAIRS)
def test_a_limit_above_the_ceiling_is_clamped(proxy, mock, client, provider, stream):
    model, field, ceiling = PROVIDERS[provider]
    assert output_ceilings.ceiling(model.split("/", 1)[1]) == ceiling  # the mock would refuse more
    assert ask(proxy, client, model, stream, ASKED)
    assert received(mock, field) == ceiling


@STREAMS
@pytest.mark.parametrize("client,provider", [p for p in PAIRS if p.values[1] != "anthropic"])
def test_a_limit_within_the_ceiling_is_kept(proxy, mock, client, provider, stream):
    model, field, _ = PROVIDERS[provider]
    assert ask(proxy, client, model, stream, 1000)
    assert received(mock, field) == 1000


@STREAMS
@pytest.mark.parametrize("client", ["chat", "responses", "gemini"])
def test_no_limit_toward_anthropic_is_the_models_ceiling(proxy, mock, client, stream):
    assert ask(proxy, client, "anthropic/claude-sonnet-4-5-20250929", stream, None)
    assert received(mock, ("max_tokens",)) == 64000
    # A model the table does not know keeps the old default.
    assert ask(proxy, client, "anthropic/claude-next", stream, None)
    assert received(mock, ("max_tokens",)) == 4096


def test_no_limit_and_no_ceiling_toward_other_providers_stays_absent(proxy, mock):
    ask(proxy, "chat", "responses/gpt-4o", False, None)
    assert "max_output_tokens" not in mock.requests[-1].body


def test_the_providers_max_tokens_default_wins_within_the_ceiling(harness, start_proxy, mock):
    config = harness.default_config()
    config["providers"]["anthropic"]["max_tokens_default"] = 2000
    p = start_proxy(config)
    ask(p, "chat", "anthropic/claude-sonnet-4-5", False, None)
    assert received(mock, ("max_tokens",)) == 2000


@pytest.mark.parametrize("setting", [100000, 20000])
def test_a_route_setting_overrides_the_table(harness, start_proxy, mock, setting):
    """max_output_tokens on a route: the demanding user's own ceiling, above or below the table's."""
    config = harness.default_config()
    config["routing"]["routes"].insert(0, {"name": "big", "model_pattern": "big", "match_kind": "exact",
                                           "provider": "anthropic", "upstream_model": "claude-opus-4-1",
                                           "max_output_tokens": setting})
    p = start_proxy(config)
    ask(p, "chat", "big", False, ASKED)
    assert received(mock, ("max_tokens",)) == setting


# --- the mocks refuse what the real APIs refuse ------------------------------------------


def test_mock_chat_refuses_a_limit_above_the_ceiling(harness, mock):
    client = openai.OpenAI(api_key="k", base_url=harness.mock_url + "/v1", max_retries=0)
    for field in ("max_tokens", "max_completion_tokens"):
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model="gpt-4.1", messages=[{"role": "user", "content": "hi"}],
                                           **{field: ASKED})
        assert info.value.body == {
            "message": f"{field} is too large: 128000. This model supports at most 32768 completion tokens, "
                       "whereas you provided 128000.",
            "type": "invalid_request_error", "param": field, "code": "invalid_value"}
    assert client.chat.completions.create(model="gpt-4.1", messages=[{"role": "user", "content": "hi"}],
                                          max_tokens=32768).choices[0].message.content


def test_mock_responses_refuses_a_limit_above_the_ceiling(harness, mock):
    client = openai.OpenAI(api_key="k", base_url=harness.mock_url + "/v1", max_retries=0)
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="gpt-4o", input="hi", max_output_tokens=ASKED)
    assert info.value.body["param"] == "max_output_tokens" and info.value.body["type"] == "invalid_request_error"
    assert "Expected a value <= 16384, but got 128000" in info.value.body["message"]
    assert client.responses.create(model="gpt-4o", input="hi", max_output_tokens=16384).output_text


def test_mock_gemini_refuses_a_limit_above_the_ceiling(harness, mock):
    g = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=harness.mock_url))
    cfg = types.GenerateContentConfig(max_output_tokens=ASKED)
    for call in (lambda: g.models.generate_content(model="gemini-2.5-pro", contents="hi", config=cfg),
                 lambda: list(g.models.generate_content_stream(model="gemini-2.5-pro", contents="hi", config=cfg))):
        with pytest.raises(genai_errors.ClientError) as info:
            call()
        assert info.value.code == 400 and info.value.status == "INVALID_ARGUMENT"
        assert "maxOutputTokens value of 128000" in info.value.message and "65537 (exclusive)" in info.value.message
    ok = types.GenerateContentConfig(max_output_tokens=65536)
    assert g.models.generate_content(model="gemini-2.5-pro", contents="hi", config=ok).text


def test_mock_leaves_unknown_models_alone(harness, mock):
    client = openai.OpenAI(api_key="k", base_url=harness.mock_url + "/v1", max_retries=0)
    assert client.chat.completions.create(model="local-model", messages=[{"role": "user", "content": "hi"}],
                                          max_tokens=10**6).choices[0].message.content

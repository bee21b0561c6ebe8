"""Small cross-protocol mappings, end to end with the official SDKs and the real server,
streaming and not, asserting what the provider received and what the client got:

- Anthropic's `speed: "fast"` <-> OpenAI's `service_tier: "priority"` (fast mode only on
  the models with a generally available one, rules/tables/model_features.yaml);
- Claude Code's per-request billing line in `system[0]` left out toward other providers
  and out of the derived prompt_cache_key, so the provider's prefix cache holds.
Each drop is traced."""
from __future__ import annotations

import pytest

from harness import traced

from gemini_helpers import MODEL as GEMINI_MODEL, gemini_config, sent as gemini_sent
from proxai.mock import Text, Turn

STREAMS = pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])


def received(mock) -> dict:
    return mock.requests[-1].body


def ask(client, stream, **kw) -> str:
    kw = {"max_tokens": 100, "messages": [{"role": "user", "content": "hi"}], **kw}
    if not stream:
        return "".join(b.text for b in client.messages.create(**kw).content if b.type == "text")
    with client.messages.stream(**kw) as s:
        return s.get_final_message().content[0].text


def chat(client, stream, **kw) -> str:
    kw = {"messages": [{"role": "user", "content": "hi"}], **kw}
    if not stream:
        return client.chat.completions.create(**kw).choices[0].message.content
    return "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(stream=True, **kw) if c.choices)


@pytest.fixture(scope="module")
def gemini_proxy(harness):
    p = harness.start_proxy(gemini_config(harness.mock_url))
    yield p
    p.stop()


# --- speed: "fast" <-> service_tier: "priority" -------------------------------------------


@STREAMS
@pytest.mark.parametrize("model", ["chat/gpt-5", "responses/gpt-5"])
def test_anthropic_fast_mode_is_openai_priority(anthropic_client, mock, stream, model):
    mock.enqueue(Turn([Text("quick")]))
    assert ask(anthropic_client, stream, model=model, speed="fast") == "quick"
    assert received(mock)["service_tier"] == "priority"
    mock.enqueue(Turn([Text("slow")]))
    assert ask(anthropic_client, stream, model=model, speed="standard") == "slow"
    assert "service_tier" not in received(mock)


@STREAMS
def test_anthropic_fast_mode_toward_gemini_is_dropped_with_a_trace(gemini_proxy, mock, stream, caplog):
    mock.enqueue(Turn([Text("quick")]))
    with caplog.at_level("DEBUG", logger="proxai"):
        assert ask(gemini_proxy.anthropic(), stream, model=GEMINI_MODEL, speed="fast") == "quick"
        assert traced(caplog, "dropped advisory field service_tier (no slot in gemini_generate_content)")
    body = gemini_sent(mock, stream)
    assert "speed" not in str(body) and "priority" not in str(body)


@STREAMS
@pytest.mark.parametrize("upstream,speed,note", [
    ("claude-opus-5-5", "fast", None),
    ("claude-opus-4-8", None, "service_tier priority dropped for claude-opus-4-8: its fast mode needs the fast-mode beta header"),
    ("claude-sonnet-4-6", None, "service_tier priority dropped for claude-sonnet-4-6: it has no fast mode"),
])
def test_openai_priority_is_anthropic_fast_mode_where_the_model_has_one(openai_client, mock, stream, upstream, speed, note, caplog):
    mock.enqueue(Turn([Text("ok")]))
    with caplog.at_level("DEBUG", logger="proxai"):
        assert chat(openai_client, stream, model=f"anthropic/{upstream}", service_tier="priority") == "ok"
        if note:
            assert traced(caplog, note)
    body = received(mock)
    assert body.get("speed") == speed
    assert "service_tier" not in body  # priority has no Anthropic service_tier value


@STREAMS
def test_responses_priority_is_anthropic_fast_mode(openai_client, mock, stream):
    mock.enqueue(Turn([Text("ok")]))
    kw = dict(model="anthropic/claude-fable-5-2", input="hi", service_tier="priority")
    if stream:
        assert "".join(e.delta for e in openai_client.responses.create(stream=True, **kw) if e.type == "response.output_text.delta") == "ok"
    else:
        assert openai_client.responses.create(**kw).output_text == "ok"
    assert received(mock)["speed"] == "fast"


# --- Claude Code's billing line ---------------------------------------------------------

PROMPT = "You are Claude Code, Anthropic's official CLI for Claude."


def claude_code_system(build: str) -> list:
    # As Claude Code 2.1.197 sends it (tests/fixtures/clients/claude-code-*.json): the hash
    # after the version changes every request.
    return [{"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.197.{build}; cc_entrypoint=sdk-cli;"},
            {"type": "text", "text": PROMPT, "cache_control": {"type": "ephemeral"}}]


def system_text(model: str, body: dict) -> list:
    if model.startswith("chat/"):
        first = body["messages"][0]
        assert first["role"] == "system"
        return [first["content"]] if isinstance(first["content"], str) else [p["text"] for p in first["content"]]
    return [body["instructions"]]


@STREAMS
@pytest.mark.parametrize("model", ["chat/gpt-5", "responses/gpt-5"])
def test_the_billing_line_stays_out_of_the_prompt_and_the_cache_key(anthropic_client, mock, stream, model, caplog):
    keys = []
    for build in ("3fe", "931"):
        mock.enqueue(Turn([Text("ok")]))
        with caplog.at_level("DEBUG", logger="proxai"):
            assert ask(anthropic_client, stream, model=model, system=claude_code_system(build)) == "ok"
            assert traced(caplog, "billing line (x-anthropic-billing-header) left out")
        body = received(mock)
        assert system_text(model, body) == [PROMPT]
        assert "x-anthropic-billing-header" not in str(body)
        keys.append(body["prompt_cache_key"])
    # derived from the system prompt and tools (no Claude Code session id here): one key
    assert keys[0] == keys[1] and keys[0].startswith("pck_")


@STREAMS
def test_the_billing_line_stays_out_of_gemini_system_instruction(gemini_proxy, mock, stream):
    mock.enqueue(Turn([Text("ok")]))
    assert ask(gemini_proxy.anthropic(), stream, model=GEMINI_MODEL, system=claude_code_system("994")) == "ok"
    assert [p["text"] for p in gemini_sent(mock, stream)["systemInstruction"]["parts"]] == [PROMPT]


# --- stop_details: Anthropic's refusal explanation and category --------------------------

CATEGORY_DROPPED = "stop_details.category cyber dropped: no other protocol names a refusal category"


@STREAMS
def test_an_anthropic_refusal_explanation_is_the_chat_refusal_and_its_category_is_traced(openai_client, mock, stream, caplog):
    from proxai.mock import Refusal

    mock.enqueue(Turn([Refusal("", explanation="This looks like malware.", category="cyber")]))
    kw = dict(model="anthropic/claude-opus-4-8", messages=[{"role": "user", "content": "write malware"}])
    with caplog.at_level("DEBUG", logger="proxai"):
        if stream:
            chunks = list(openai_client.chat.completions.create(stream=True, **kw))
            refusal = "".join(c.choices[0].delta.refusal or "" for c in chunks if c.choices)
            content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            message = openai_client.chat.completions.create(**kw).choices[0].message
            refusal, content = message.refusal, message.content or ""
        assert traced(caplog, CATEGORY_DROPPED)
    assert refusal == "This looks like malware." and content == ""


@STREAMS
def test_an_anthropic_refusal_explanation_is_a_responses_refusal_part(openai_client, mock, stream, caplog):
    from proxai.mock import Refusal

    mock.enqueue(Turn([Refusal("", explanation="This looks like malware.", category="cyber")]))
    kw = dict(model="anthropic/claude-opus-4-8", input="write malware")
    with caplog.at_level("DEBUG", logger="proxai"):
        if stream:
            events = list(openai_client.responses.create(stream=True, **kw))
            # a refusal ends the response incomplete (content_filter), as a Responses refusal does
            response = next(e.response for e in events if e.type in ("response.completed", "response.incomplete"))
        else:
            response = openai_client.responses.create(**kw)
        assert traced(caplog, CATEGORY_DROPPED)
    parts = [p for item in response.output if item.type == "message" for p in item.content]
    assert [(p.type, getattr(p, "refusal", None)) for p in parts] == [("refusal", "This looks like malware.")]


@STREAMS
def test_a_chat_refusal_reaches_an_anthropic_client_as_a_refusal_stop(anthropic_client, mock, stream):
    from proxai.mock import Refusal

    mock.enqueue(Turn([Refusal("I can't help with that.")]))
    kw = dict(model="chat/gpt-5", max_tokens=50, messages=[{"role": "user", "content": "write malware"}])
    if stream:
        with anthropic_client.messages.stream(**kw) as s:
            message = s.get_final_message()
    else:
        message = anthropic_client.messages.create(**kw)
    assert message.stop_reason == "refusal"
    # the wording stays the model's text; nothing is invented for category or explanation
    assert [b.text for b in message.content] == ["I can't help with that."]
    assert message.stop_details is not None and message.stop_details.type == "refusal"
    assert (message.stop_details.category, message.stop_details.explanation) == (None, None)

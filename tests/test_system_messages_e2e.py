"""Instructions after the first turn, end to end with the official SDKs and the real
server, streaming and not, asserting what the provider received and what the client got.

Toward Anthropic a system/developer message after the first turn goes in place (a
`role: "system"` message in `messages`) when the model takes one, else folded into the
top-level `system` (mid_conversation_system: native | fold, default by model name).
The mock refuses a misplaced system message the way Anthropic does
(proxai/mock/anthropic_system.py). Chat and Responses providers keep them in place;
Gemini folds them into systemInstruction. Folds and moves are traced."""
from __future__ import annotations

import pytest

from harness import traced

from gemini_helpers import MODEL as GEMINI_MODEL, gemini_config, sent as gemini_sent
from proxai.mock import Text, Turn

STREAMS = pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
NATIVE_MODEL = "anthropic/claude-opus-4-8"   # takes system messages in place
OLDER_MODEL = "anthropic/claude-sonnet-4-6"  # does not
FRENCH = "From now on answer in French."


def received(mock) -> dict:
    return mock.requests[-1].body


def texts(blocks) -> list:
    if isinstance(blocks, str):
        return [blocks]
    return [b["text"] for b in blocks or ()]


def roles(body) -> list:
    return [m["role"] for m in body["messages"]]


# --- Chat clients ---------------------------------------------------------------------


def chat(client, model, messages, stream) -> str:
    if not stream:
        return client.chat.completions.create(model=model, messages=messages).choices[0].message.content
    return "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model=model, messages=messages, stream=True) if c.choices)


CHAT_HISTORY = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "hello"},
    {"role": "user", "content": "how are you?"},
    {"role": "developer", "content": FRENCH},
]


@STREAMS
def test_chat_developer_message_after_a_user_turn_reaches_anthropic_in_place(openai_client, mock, stream):
    mock.enqueue(Turn([Text("Bien.")]))
    assert chat(openai_client, NATIVE_MODEL, CHAT_HISTORY, stream) == "Bien."
    body = received(mock)
    assert texts(body["system"]) == ["Be brief."]  # the leading one stays the top-level prompt
    assert roles(body) == ["user", "assistant", "user", "system"]
    assert body["messages"][-1] == {"role": "system", "content": [{"type": "text", "text": FRENCH}]}


@STREAMS
def test_chat_system_message_after_an_assistant_turn_moves_after_the_next_user_turn(openai_client, mock, stream, caplog):
    history = CHAT_HISTORY[:3] + [{"role": "system", "content": FRENCH}, {"role": "user", "content": "how are you?"}]
    mock.enqueue(Turn([Text("Bien.")]))
    with caplog.at_level("DEBUG", logger="proxai"):
        assert chat(openai_client, NATIVE_MODEL, history, stream) == "Bien."  # not the mock's 400
        assert traced(caplog, "1 system message moved after the next user turn")
    body = received(mock)
    assert roles(body) == ["user", "assistant", "user", "system"]
    assert texts(body["messages"][2]["content"]) == ["how are you?"]
    assert texts(body["messages"][3]["content"]) == [FRENCH]


@STREAMS
def test_chat_system_message_folds_for_a_model_without_them(openai_client, mock, stream, caplog):
    mock.enqueue(Turn([Text("Fine.")]))
    with caplog.at_level("DEBUG", logger="proxai"):
        assert chat(openai_client, OLDER_MODEL, CHAT_HISTORY, stream) == "Fine."
        assert traced(caplog, "folded into the top-level system (mid_conversation_system: fold for claude-sonnet-4-6)")
    body = received(mock)
    assert texts(body["system"]) == ["Be brief.", FRENCH]
    assert roles(body) == ["user", "assistant", "user"]


@STREAMS
def test_the_route_and_provider_settings_override_the_model_table(harness, start_proxy, openai_client, mock, stream):
    harness_client = openai_client  # the default config: no setting
    config = harness.default_config()
    config["providers"]["anthropic"]["mid_conversation_system"] = "native"
    config["routing"]["routes"].insert(0, {"name": "folded", "model_pattern": "folded/(.+)", "provider": "anthropic",
                                           "upstream_model": "$1", "mid_conversation_system": "fold"})
    p = start_proxy(config)
    client = p.openai()
    # a model the table does not know folds by default; the provider's native sends it in place
    # (an Anthropic-compatible server that takes them)
    mock.enqueue(Turn([Text("a")]))
    chat(client, "anthropic/compat-model", CHAT_HISTORY, stream)
    assert roles(received(mock))[-1] == "system"
    mock.enqueue(Turn([Text("a")]))
    chat(harness_client, "anthropic/compat-model", CHAT_HISTORY, stream)
    assert roles(received(mock)) == ["user", "assistant", "user"]
    # the route's fold wins over the provider's native and the model table
    mock.enqueue(Turn([Text("b")]))
    chat(client, "folded/claude-opus-4-8", CHAT_HISTORY, stream)
    assert roles(received(mock)) == ["user", "assistant", "user"]
    assert texts(received(mock)["system"]) == ["Be brief.", FRENCH]


def test_a_wrong_setting_is_a_config_error(harness, start_proxy):
    config = harness.default_config()
    config["providers"]["anthropic"]["mid_conversation_system"] = "inline"
    with pytest.raises(Exception, match="mid_conversation_system"):
        start_proxy(config)
    config = harness.default_config()
    config["providers"]["chat"]["mid_conversation_system"] = "native"
    with pytest.raises(Exception, match="only valid for anthropic_messages providers"):
        start_proxy(config)


# --- Responses clients ----------------------------------------------------------------


def respond(client, model, items, stream, **kw) -> str:
    if not stream:
        return client.responses.create(model=model, input=items, **kw).output_text
    out = ""
    for ev in client.responses.create(model=model, input=items, stream=True, **kw):
        if ev.type == "response.output_text.delta":
            out += ev.delta
    return out


@STREAMS
@pytest.mark.parametrize("model,in_place", [(NATIVE_MODEL, True), (OLDER_MODEL, False)], ids=["native", "fold"])
def test_responses_developer_item_mid_list_toward_anthropic(openai_client, mock, stream, model, in_place):
    items = [
        {"role": "user", "content": "hi"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hello"}]},
        {"role": "user", "content": "next?"},
        {"role": "developer", "content": FRENCH},
    ]
    mock.enqueue(Turn([Text("Suivant.")]))
    assert respond(openai_client, model, items, stream, instructions="Be brief.") == "Suivant."
    body = received(mock)
    if in_place:
        assert texts(body["system"]) == ["Be brief."]
        assert roles(body) == ["user", "assistant", "user", "system"]
        assert texts(body["messages"][-1]["content"]) == [FRENCH]
    else:
        assert texts(body["system"]) == ["Be brief.", FRENCH]
        assert roles(body) == ["user", "assistant", "user"]


# --- Anthropic clients (SystemMessageParam) toward Chat, Responses and Gemini ------------

ANTHROPIC_HISTORY = [
    {"role": "user", "content": "hi"},
    {"role": "system", "content": FRENCH},
    {"role": "assistant", "content": "bonjour"},
    {"role": "user", "content": [{"type": "text", "text": "ça va?"}]},
]


def ask(client, model, stream) -> str:
    kw = dict(model=model, max_tokens=100, system="Be brief.", messages=ANTHROPIC_HISTORY)
    if not stream:
        return "".join(b.text for b in client.messages.create(**kw).content if b.type == "text")
    with client.messages.stream(**kw) as s:
        return s.get_final_message().content[0].text


@STREAMS
def test_anthropic_system_message_reaches_a_chat_provider_in_place(anthropic_client, mock, stream):
    mock.enqueue(Turn([Text("Oui.")]))
    assert ask(anthropic_client, "chat/gpt-5", stream) == "Oui."
    body = received(mock)
    assert [m["role"] for m in body["messages"]] == ["system", "user", "system", "assistant", "user"]
    assert body["messages"][2]["content"] == FRENCH


@STREAMS
def test_anthropic_system_message_reaches_a_responses_provider_in_place(anthropic_client, mock, stream):
    mock.enqueue(Turn([Text("Oui.")]))
    assert ask(anthropic_client, "responses/gpt-5", stream) == "Oui."
    body = received(mock)
    assert body["instructions"] == "Be brief."
    assert [i.get("role") for i in body["input"]] == ["user", "system", "assistant", "user"]
    assert body["input"][1]["content"] == [{"type": "input_text", "text": FRENCH}]


@pytest.fixture(scope="module")
def gemini_proxy(harness):
    p = harness.start_proxy(gemini_config(harness.mock_url))
    yield p
    p.stop()


@STREAMS
def test_anthropic_system_message_folds_into_gemini_system_instruction(gemini_proxy, mock, stream, caplog):
    client = gemini_proxy.anthropic()
    mock.enqueue(Turn([Text("Oui.")]))
    with caplog.at_level("DEBUG", logger="proxai"):
        assert ask(client, GEMINI_MODEL, stream) == "Oui."
        assert traced(caplog, "1 system/developer message after the first turn folded into systemInstruction")
    body = gemini_sent(mock, stream)
    assert [p["text"] for p in body["systemInstruction"]["parts"]] == ["Be brief.", FRENCH]
    assert [c["role"] for c in body["contents"]] == ["user", "model", "user"]


@STREAMS
def test_chat_developer_message_folds_into_gemini_system_instruction(gemini_proxy, mock, stream):
    client = gemini_proxy.openai()
    mock.enqueue(Turn([Text("Fine.")]))
    assert chat(client, GEMINI_MODEL, CHAT_HISTORY, stream) == "Fine."
    body = gemini_sent(mock, stream)
    assert [p["text"] for p in body["systemInstruction"]["parts"]] == ["Be brief.", FRENCH]
    assert [c["role"] for c in body["contents"]] == ["user", "model", "user"]


# --- the mock enforces Anthropic's placement ----------------------------------------------

U, S, AS = ({"role": r, "content": r} for r in ("user", "system", "assistant"))


@pytest.mark.parametrize("model,messages,error", [
    ("claude-opus-4-8", [U, S, U], "messages.1: role 'system' must precede an 'assistant' message"),
    ("claude-opus-4-8", [U, AS, S], "messages.2: role 'system' must follow a 'user' message"),
    ("claude-opus-4-8", [S, U], "messages.0: use the top-level 'system' parameter"),
    ("claude-sonnet-4-6", [U, S, AS], "messages.1: role 'system' is not supported on this model"),
    ("claude-opus-4-8", [U, S, AS], None),
])
def test_the_mock_refuses_misplaced_system_messages_like_anthropic(harness, mock, model, messages, error):
    import anthropic

    mock.enqueue(Turn([Text("ok")]))
    upstream = anthropic.Anthropic(base_url=harness.mock_url, api_key="k", max_retries=0)
    if error is None:
        assert upstream.messages.create(model=model, max_tokens=5, messages=messages).content[0].text == "ok"
    else:
        with pytest.raises(anthropic.BadRequestError, match=error):
            upstream.messages.create(model=model, max_tokens=5, messages=messages)


@STREAMS
def test_a_system_message_after_tool_results_keeps_the_thinking_rule_of_the_turn(openai_client, mock, stream, caplog):
    """A system message in place ends the request, after the tool results: the tool-use turn
    is still the one in progress, and with no thinking block to restore thinking goes off
    (the mock, as Anthropic, refuses it otherwise)."""
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}]
    history = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
        {"role": "developer", "content": FRENCH},
    ]
    mock.enqueue(Turn([Text("Ensoleillé.")]))
    kw = dict(model=NATIVE_MODEL, messages=history, tools=tools, reasoning_effort="high")
    with caplog.at_level("DEBUG", logger="proxai"):
        if stream:
            text = "".join(c.choices[0].delta.content or "" for c in openai_client.chat.completions.create(stream=True, **kw) if c.choices)
        else:
            text = openai_client.chat.completions.create(**kw).choices[0].message.content
        assert traced(caplog, "thinking off for this request")
    assert text == "Ensoleillé."
    body = received(mock)
    assert roles(body) == ["user", "assistant", "user", "system"] and "thinking" not in body

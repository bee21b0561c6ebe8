"""A run through every pair, streaming and not, errors included, logged at DEBUG in both formats:
no key, Authorization value, prompt or answer text may appear in the logs."""

from __future__ import annotations

import logging

import pytest

from harness import CLIENT_KEY, PROVIDER_KEYS
from proxai.mock import Error, Text, ToolCall, Turn
from test_observability import LogCapture
from test_passthrough_e2e import raw_post

PROMPT = "PROMPT-zanzibar-7731 my password is hunter2"
SYSTEM = "SYSTEM-secret-instructions-5512"
ANSWER = "ANSWER-quokka-9904"
TOOL_ARGS = '{"city": "ARGS-timbuktu-3141"}'
INBOUND_KEY = "sk-inbound-proxy-key-SECRET-4242"
SECRETS = [CLIENT_KEY, INBOUND_KEY, *PROVIDER_KEYS.values(), PROMPT, "hunter2", SYSTEM, ANSWER, "ARGS-timbuktu-3141"]

CHAT, RESPONSES, ANTHROPIC = "openai_chat_completions", "openai_responses", "anthropic_messages"
PATH = {CHAT: "/v1/chat/completions", RESPONSES: "/v1/responses", ANTHROPIC: "/v1/messages"}


def body(client: str, provider: str, stream: bool) -> dict:
    model = f"{ {CHAT: 'chat', RESPONSES: 'responses', ANTHROPIC: 'anthropic'}[provider]}/m"
    if client == CHAT:
        return {"model": model, "stream": stream, "messages": [{"role": "system", "content": SYSTEM},
                                                               {"role": "user", "content": PROMPT}]}
    if client == RESPONSES:
        return {"model": model, "stream": stream, "instructions": SYSTEM, "input": PROMPT}
    return {"model": model, "stream": stream, "max_tokens": 50, "system": SYSTEM,
            "messages": [{"role": "user", "content": PROMPT}]}


@pytest.mark.parametrize("fmt", ["human", "json"])
def test_full_run_leaks_nothing(harness, start_proxy, mock, tmp_path, monkeypatch, fmt):
    monkeypatch.setenv("PROXAI_HOME", str(tmp_path))
    doc = harness.default_config()
    doc["server"] = {"api_keys": [INBOUND_KEY]}
    doc["capture"] = dict.fromkeys(("inbound_request", "provider_request", "upstream_response", "outbound_response"), True)
    p = start_proxy(doc)
    auth = {"Authorization": f"Bearer {INBOUND_KEY}"}
    statuses = []
    with LogCapture(fmt, level=logging.DEBUG) as cap:
        for client in PATH:
            for provider in PATH:
                for stream in (False, True):
                    mock.enqueue(Turn([Text(ANSWER), ToolCall("call_1", "get_weather", TOOL_ARGS)]))
                    statuses.append(raw_post(p.url, PATH[client], body(client, provider, stream), auth)[0])
                    # the provider refuses, quoting the prompt back
                    mock.enqueue(Error(400, message=f"bad prompt: {PROMPT}"))
                    statuses.append(raw_post(p.url, PATH[client], body(client, provider, stream), auth)[0])
                    # a stream cut mid-answer
                    mock.enqueue(Turn([Text(ANSWER + " more", chunks=[ANSWER, " more"])], cut_after=3))
                    raw_post(p.url, PATH[client], body(client, provider, True), auth)
        # wrong inbound key, client key sent as x-api-key, malformed JSON quoting the prompt
        statuses.append(raw_post(p.url, PATH[ANTHROPIC], body(ANTHROPIC, ANTHROPIC, False), {"x-api-key": CLIENT_KEY})[0])
        statuses.append(raw_post(p.url, PATH[CHAT], f'{{"model": "m", "messages": "{PROMPT}"'.encode(), auth)[0])
        # a request the target cannot express, naming prompt text in the rejected value
        statuses.append(raw_post(p.url, PATH[CHAT], {**body(CHAT, ANTHROPIC, False), "n": 2}, auth)[0])
        cap.lines_with("proxai.request", count=9 * 6 + 3)
    text = cap.text
    assert statuses.count(200) == 18 and statuses.count(400) == 18 + 2 and 401 in statuses
    assert text.count("client_protocol") >= 9 * 6  # the run was logged
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} leaked into the {fmt} logs"
    assert "Bearer" not in text and "[redacted]" not in text
    # the captures did record the conversation (that is their job) but no key
    captured = b"".join(f.read_bytes() for f in (tmp_path / "captures").iterdir())
    assert PROMPT.encode() in captured and ANSWER.encode() in captured
    for key in (CLIENT_KEY, INBOUND_KEY, *PROVIDER_KEYS.values()):
        assert key.encode() not in captured

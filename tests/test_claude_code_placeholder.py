"""Claude Code 2.1.328 toward providers of other protocols: its DeferredToolPlaceholder tool
(kept only so Anthropic's deferred tool loading stays on; "never call this tool") is left
out, and the output_config of its in-place system messages is dropped with a trace.

The real server process, the official Anthropic SDK, Chat, Responses and Gemini providers,
streaming and not; the tool as Claude Code 2.1.328 builds it.
"""

from __future__ import annotations

import time

import anthropic
import pytest

from gemini_helpers import gemini_config
from harness import CLIENT_KEY
from proxai.mock import Text, Turn
from server_process import ServerProcess

PLACEHOLDER = {"name": "DeferredToolPlaceholder",
               "description": "Reserved placeholder that keeps deferred tool loading active; never call this tool.",
               "input_schema": {"type": "object", "properties": {}}, "defer_loading": True}
READ = {"name": "Read", "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}
PROVIDERS = ("chat", "responses", "gemini")
STREAMS = pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])


@pytest.fixture(scope="module")
def server(harness, tmp_path_factory):
    config = gemini_config(harness.mock_url)
    config["logging"] = {"level": "debug"}  # translation notes are DEBUG lines
    process = ServerProcess(tmp_path_factory.mktemp("placeholder"), config)
    yield process
    process.stop()


def provider_tool_names(provider: str, body: dict) -> list[str]:
    tools = body.get("tools") or []
    if provider == "gemini":
        return [d["name"] for t in tools for d in t.get("functionDeclarations", [])]
    if provider == "chat":
        return [t["function"]["name"] for t in tools]
    return [t["name"] for t in tools]


def ask(server, model: str, stream: bool, request_id: str, **extra) -> None:
    client = anthropic.Anthropic(base_url=server.url, api_key=CLIENT_KEY, max_retries=0,
                                 default_headers={"x-request-id": request_id})
    args = dict(model=model, max_tokens=100, messages=[{"role": "user", "content": "hi"}], **extra)
    if stream:
        assert any(e.type == "message_stop" for e in client.messages.create(**args, stream=True))
    else:
        assert client.messages.create(**args).content[0].text == "ok"


def notes(server, request_id: str, wait: float = 5.0) -> list[str]:
    """The request's log messages, once its request line is written: a stream ends on the
    server just after the client has read its last event."""
    deadline = time.monotonic() + wait
    while True:
        records = [r for r in server.records() if r.get("request_id") == request_id]
        if any(r.get("logger") == "proxai.request" for r in records) or time.monotonic() > deadline:
            return [r.get("msg", "") for r in records]
        time.sleep(0.05)


@STREAMS
@pytest.mark.parametrize("provider", PROVIDERS)
def test_placeholder_tool_is_left_out_with_a_trace(server, mock, provider, stream):
    mock.enqueue(Turn([Text("ok")]))
    rid = f"placeholder-{provider}-{stream}"
    ask(server, f"{provider}/m", stream, rid, tools=[READ, PLACEHOLDER])
    assert provider_tool_names(provider, mock.requests[-1].body) == ["Read"]
    assert any("DeferredToolPlaceholder left out" in n for n in notes(server, rid)), notes(server, rid)


def test_a_tool_of_that_name_without_defer_loading_is_an_ordinary_tool(server, mock):
    mock.enqueue(Turn([Text("ok")]))
    own = {k: v for k, v in PLACEHOLDER.items() if k != "defer_loading"}
    ask(server, "chat/m", False, "placeholder-own", tools=[own])
    assert provider_tool_names("chat", mock.requests[-1].body) == ["DeferredToolPlaceholder"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_system_message_output_config_is_dropped_with_a_trace(server, mock, provider):
    mock.enqueue(Turn([Text("ok")]))
    rid = f"output-config-{provider}"
    messages = [{"role": "user", "content": "hi"},
                {"role": "system", "content": "The user changed the effort.",
                 "output_config": {"effort": "low", "timing": {"now": "2026-01-01T10:00:00Z"}}}]
    client = anthropic.Anthropic(base_url=server.url, api_key=CLIENT_KEY, max_retries=0,
                                 default_headers={"x-request-id": rid})
    client.messages.create(model=f"{provider}/m", max_tokens=100, messages=messages)
    assert "output_config" not in str(mock.requests[-1].body)
    assert any("messages[1].output_config" in n for n in notes(server, rid)), notes(server, rid)

"""Request details real providers insist on, end to end with the official SDKs: what the
client got and what the provider received.

- a reasoning effort toward Anthropic turns thinking on (mappings.md §9)
- an Anthropic document toward OpenAI carries a filename
- a Responses request with no input is refused before any provider is called
"""
from __future__ import annotations

import base64
import logging

import anthropic
import openai
import pytest

from harness import default_config
from proxai.mock import Reasoning, Text, Turn

HI = [{"role": "user", "content": "hi"}]
PDF = base64.b64encode(b"%PDF-1.4 tiny").decode()


def sent(mock) -> dict:
    return mock.requests[-1].body


# --- 1. reasoning effort -> thinking --------------------------------------------------------


@pytest.mark.parametrize("effort", ["low", "medium", "high", "xhigh", "max"])
def test_chat_reasoning_effort_turns_adaptive_thinking_on(openai_client, mock, effort):
    mock.enqueue(Turn([Reasoning("let me see", signature="sig-1"), Text("4")]))
    out = openai_client.chat.completions.create(model="anthropic/claude-opus-4-6", messages=HI, reasoning_effort=effort)
    assert out.choices[0].message.content == "4"
    body = sent(mock)
    assert body["thinking"] == {"type": "adaptive"}
    assert body["output_config"] == {"effort": effort}


@pytest.mark.parametrize("effort", ["none", "minimal"])
def test_chat_no_reasoning_disables_thinking(openai_client, mock, effort):
    mock.enqueue(Turn([Text("4")]))
    openai_client.chat.completions.create(model="anthropic/claude", messages=HI, reasoning_effort=effort)
    body = sent(mock)
    assert body["thinking"] == {"type": "disabled"} and "output_config" not in body


def test_responses_effort_without_summary_turns_thinking_on(openai_client, mock):
    mock.enqueue(Turn([Reasoning("hmm", signature="sig-2"), Text("ok")]))
    out = openai_client.responses.create(model="anthropic/claude", input="hi", reasoning={"effort": "high"})
    assert out.output_text == "ok"
    assert sent(mock)["thinking"] == {"type": "adaptive"} and sent(mock)["output_config"] == {"effort": "high"}
    mock.enqueue(Turn([Reasoning("hmm", signature="sig-3"), Text("ok")]))
    list(openai_client.responses.create(model="anthropic/claude", input="hi", stream=True,
                                        reasoning={"effort": "low", "summary": "auto"}))
    assert sent(mock)["thinking"] == {"type": "adaptive", "display": "summarized"}
    assert sent(mock)["output_config"] == {"effort": "low"}


@pytest.fixture
def budget_proxy(start_proxy, harness):
    config = default_config(harness.mock_url)
    config["providers"]["anthropic"]["thinking_mode"] = "budget"
    return start_proxy(config)


@pytest.mark.parametrize("effort,max_tokens,budget", [
    ("low", None, 1024), ("medium", None, 2048), ("high", 16000, 8192), ("max", 10000, 9999)])
def test_budget_thinking_mode_sends_a_budget_below_max_tokens(budget_proxy, mock, effort, max_tokens, budget):
    mock.enqueue(Turn([Reasoning("t", signature="s"), Text("ok")]))
    extra = {"max_completion_tokens": max_tokens} if max_tokens else {}
    budget_proxy.openai().chat.completions.create(model="anthropic/claude-3-7-sonnet", messages=HI,
                                                  reasoning_effort=effort, **extra)
    body = sent(mock)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert body["thinking"]["budget_tokens"] < body["max_tokens"]
    assert "output_config" not in body


def test_budget_thinking_mode_is_anthropic_only(harness):
    from proxai.routing.config import ConfigError, load_dict

    config = default_config(harness.mock_url)
    config["providers"]["chat"]["thinking_mode"] = "budget"
    with pytest.raises(ConfigError) as err:
        load_dict(config, {})
    assert "providers.chat.thinking_mode" in str(err.value)
    config = default_config(harness.mock_url)
    config["providers"]["anthropic"]["thinking_mode"] = "sometimes"
    with pytest.raises(ConfigError):
        load_dict(config, {})


def test_anthropic_to_anthropic_thinking_untouched(anthropic_client, mock):
    mock.enqueue(Turn([Text("ok")]))
    anthropic_client.messages.create(model="anthropic/claude", max_tokens=64, messages=HI,
                                     output_config={"effort": "low"})
    body = sent(mock)
    assert "thinking" not in body and body["output_config"] == {"effort": "low"}


# --- 3. documents toward OpenAI need a filename --------------------------------------------


def _doc_request(client, model, **doc):
    return client.messages.create(model=model, max_tokens=64, messages=[{"role": "user", "content": [
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}, **doc},
        {"type": "text", "text": "summarise"}]}])


def test_document_to_chat_gets_a_filename(anthropic_client, mock):
    mock.enqueue(Turn([Text("a summary")]))
    out = _doc_request(anthropic_client, "chat/gpt")
    assert out.content[0].text == "a summary"
    part = sent(mock)["messages"][0]["content"][0]
    assert part == {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{PDF}", "filename": "document.pdf"}}
    mock.enqueue(Turn([Text("a summary")]))
    _doc_request(anthropic_client, "chat/gpt", title="Q3 report.pdf")
    assert sent(mock)["messages"][0]["content"][0]["file"]["filename"] == "Q3 report.pdf"


def test_document_to_responses_gets_a_filename(anthropic_client, mock):
    mock.enqueue(Turn([Text("a summary")]))
    _doc_request(anthropic_client, "responses/gpt")
    part = sent(mock)["input"][0]["content"][0]
    assert part["type"] == "input_file" and part["filename"] == "document.pdf"
    assert part["file_data"] == f"data:application/pdf;base64,{PDF}"
    mock.enqueue(Turn([Text("a summary")]))
    _doc_request(anthropic_client, "responses/gpt", title="contract")
    assert sent(mock)["input"][0]["content"][0]["filename"] == "contract.pdf"  # OpenAI reads the type from it


# --- 4. a Responses request with no input ---------------------------------------------------


@pytest.mark.parametrize("provider", ["anthropic", "chat"])
@pytest.mark.parametrize("extra", [{}, {"input": []}, {"input": ""}])
def test_responses_without_input_is_a_400_naming_input(openai_client, mock, provider, extra):
    before = len(mock.requests)
    with pytest.raises(openai.BadRequestError) as err:
        openai_client.responses.create(model=f"{provider}/m", instructions="be brief", **extra)
    assert err.value.body["param"] == "input"
    assert "input" in err.value.body["message"]
    assert len(mock.requests) == before  # the provider was not called


# --- 9. Anthropic agent fields toward OpenAI: traced or refused ------------------------------


@pytest.mark.parametrize("provider", ["chat", "responses"])
def test_anthropic_beta_fields_are_dropped_with_a_trace_line(anthropic_client, mock, provider):
    from test_observability import LogCapture

    mock.enqueue(Turn([Text("ok")]))
    with LogCapture(level=logging.DEBUG) as cap:  # one DEBUG line per note; INFO has their count
        out = anthropic_client.beta.messages.create(
            model=f"{provider}/gpt", max_tokens=64, messages=HI, container="container_1",
            context_management={"edits": [{"type": "clear_tool_uses_20250919"}]},
            thinking={"type": "adaptive"}, extra_headers={"x-request-id": f"beta-{provider}"})
        lines = cap.lines_with("request_id=beta-" + provider, count=4)
    assert out.content[0].text == "ok"
    body = sent(mock)
    for name in ("container", "context_management", "thinking", "reasoning", "reasoning_effort"):
        assert name not in body
    notes = "\n".join(lines)
    # context_management is run by the proxy (tests/test_context_management_e2e.py): below its trigger, nothing goes
    assert "dropped advisory field container" in notes
    assert "context_management run by the proxy: clear_tool_uses_20250919 cleared nothing" in notes
    assert "thinking adaptive has no OpenAI equivalent" in notes


def test_anthropic_mcp_servers_toward_openai_is_a_400_naming_it(anthropic_client, mock):
    before = len(mock.requests)
    with pytest.raises(anthropic.BadRequestError) as err:
        anthropic_client.beta.messages.create(
            model="responses/gpt", max_tokens=64, messages=HI,
            mcp_servers=[{"type": "url", "url": "https://mcp.example/sse", "name": "example"}])
    assert "mcp_servers" in err.value.message
    assert len(mock.requests) == before

"""Fidelity details where the documentation and the wire must agree, end to end with the
official SDKs against the real server: what the provider received and what the client got.

- a Chat provider that repeats a tool call's name in later chunks (recorded traffic)
- Responses `include` values with no counterpart toward other providers: traced
- where an Anthropic refusal's wording goes for Chat and Responses clients (decisions.md #5)
- what is dropped rather than refused gets a trace line (and hosted tools a header)
- seed and penalties toward Gemini
- a document title's extension is recognised in any case
- no page still counts three protocols, six stream conversions or nine pairs
- demo mode lists every model name it routes, gemini/demo included
- the Gemini snippets (README, docs/clients/google-genai.md) point at the server's default port
- spans name the system and operation by the OpenTelemetry GenAI conventions' values
"""
from __future__ import annotations

import base64
import logging
import re
from pathlib import Path

import anthropic
import httpx2 as httpx
import openai
import pytest

from gemini_helpers import gemini_config
from harness import CLIENT_KEY
from proxai.mock import Reasoning, Refusal, Stream, Text, Turn
from test_observability import LogCapture

CORPUS = Path(__file__).parent / "corpus"
# OpenRouter (Novita, kimi-k2): every chunk of the call carries function.name again.
REPEATED_NAME = CORPUS / "llm/openai_chat_completions/stream/test_tools_streaming_variant_a.0.sse"
HI = [{"role": "user", "content": "hi"}]
VERSION_TOOL = {"name": "llm_version", "description": "v", "input_schema": {"type": "object", "properties": {}}}


def sent(mock) -> dict:
    return mock.requests[-1].body


def chat_chunk(tool_call: dict | None = None, finish: str | None = None) -> dict:
    delta = {"tool_calls": [tool_call]} if tool_call else {}
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


# --- a tool call's name repeated in later chunks ----------------------------------------------


def test_recorded_stream_repeating_a_tool_name_gives_the_name_once(anthropic_client, mock):
    raw = REPEATED_NAME.read_bytes()
    assert raw.count(b'"name":"llm_version"') == 2  # the recorded quirk itself
    mock.enqueue(Stream(raw=[raw]))
    with LogCapture(level=logging.DEBUG) as cap:
        with anthropic_client.messages.stream(model="chat/kimi-k2", max_tokens=200, messages=HI, tools=[VERSION_TOOL],
                                              extra_headers={"x-request-id": "repeated-name"}) as stream:
            message = stream.get_final_message()
        lines = cap.lines_with("request_id=repeated-name", count=2)
    (call,) = [b for b in message.content if b.type == "tool_use"]
    assert (call.name, call.input) == ("llm_version", {})  # not "llm_versionllm_version"
    assert sent(mock)["tools"][0]["function"]["name"] == "llm_version"
    notes = [line for line in lines if "repeated a tool call's function.name" in line]
    assert len(notes) == 1, lines


def test_recorded_stream_repeating_a_tool_name_to_a_responses_client(openai_client, mock):
    mock.enqueue(Stream(raw=[REPEATED_NAME.read_bytes()]))
    events = list(openai_client.responses.create(model="chat/kimi-k2", input="hi", stream=True, tools=[
        {"type": "function", "name": "llm_version", "parameters": {"type": "object", "properties": {}}}]))
    added = [e.item.name for e in events if e.type == "response.output_item.added" and e.item.type == "function_call"]
    done = events[-1]
    assert added == ["llm_version"]
    assert [(i.name, i.arguments) for i in done.response.output if i.type == "function_call"] == [("llm_version", "{}")]


def test_a_tool_name_that_changes_mid_call_ends_the_stream_with_an_error(anthropic_client, mock):
    # A name split over chunks cannot be amended once the client has the call's start: the
    # stream fails rather than run a tool named by the first piece.
    mock.enqueue(Stream(events=[
        (None, chat_chunk({"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_", "arguments": ""}})),
        (None, chat_chunk({"index": 0, "function": {"name": "weather", "arguments": "{}"}})),
        (None, chat_chunk(finish="tool_calls")),
        (None, "[DONE]"),
    ]))
    with pytest.raises(anthropic.APIStatusError) as err:
        with anthropic_client.messages.stream(model="chat/m", max_tokens=50, messages=HI, tools=[VERSION_TOOL]) as stream:
            stream.get_final_message()
    assert "function.name" in str(err.value)


# --- Responses include values with no counterpart ----------------------------------------------

# Every ResponseIncludable of the SDK but the two with a counterpart.
NO_COUNTERPART = ["file_search_call.results", "web_search_call.results", "web_search_call.action.sources",
                  "message.input_image.image_url", "computer_call_output.output.image_url",
                  "code_interpreter_call.outputs"]


def test_the_sdk_includables_are_the_ones_decided():
    from typing import get_args

    from openai.types.responses import ResponseIncludable

    assert set(get_args(ResponseIncludable)) == {*NO_COUNTERPART, "reasoning.encrypted_content",
                                                  "message.output_text.logprobs"}


@pytest.fixture(scope="module")
def gemini_proxy(harness):
    p = harness.start_proxy(gemini_config(harness.mock_url))
    yield p
    p.stop()


def include_notes(lines: list[str]) -> list[str]:
    return sorted(line.split("dropped include value ", 1)[1].split(" ", 1)[0]
                  for line in lines if "dropped include value " in line)


@pytest.mark.parametrize("provider,protocol", [("chat", "openai_chat_completions"), ("anthropic", "anthropic_messages"),
                                               ("gemini", "gemini_generate_content")])
@pytest.mark.parametrize("stream", [False, True])
def test_include_values_without_a_counterpart_are_traced(gemini_proxy, mock, provider, protocol, stream):
    client = gemini_proxy.openai()
    rid = f"include-{provider}-{stream}"
    mock.enqueue(Turn([Reasoning("let me see", signature="sig-1"), Text("ok")]))
    with LogCapture(level=logging.DEBUG) as cap:
        kw = dict(model=f"{provider}/m", input="hi", include=[*NO_COUNTERPART, "reasoning.encrypted_content"],
                  reasoning={"effort": "low"}, extra_headers={"x-request-id": rid})
        if stream:
            with client.responses.stream(**kw) as s:
                out = s.get_final_response()
        else:
            out = client.responses.create(**kw)
        lines = cap.lines_with("request_id=" + rid, count=len(NO_COUNTERPART) + 1)
    client.close()
    assert out.output_text == "ok"
    assert include_notes(lines) == sorted(NO_COUNTERPART), lines
    assert all(f"(no counterpart in {protocol})" in line for line in lines if "dropped include value" in line)
    # reasoning.encrypted_content is honoured: the reasoning item carries the envelope
    if provider != "chat":  # a Chat provider's reasoning has no state to carry
        (reasoning,) = [i for i in out.output if i.type == "reasoning"]
        assert reasoning.encrypted_content and reasoning.encrypted_content.startswith("pxc1.")
    body = sent(mock)
    assert "include" not in body and "logprobs" not in body
    assert "responseLogprobs" not in (body.get("generationConfig") or {})


def test_include_logprobs_toward_chat_is_logprobs_and_not_traced(openai_client, mock):
    mock.enqueue(Turn([Text("ok")]))
    with LogCapture(level=logging.DEBUG) as cap:
        openai_client.responses.create(model="chat/m", input="hi", top_logprobs=2, extra_headers={"x-request-id": "inc-lp"},
                                       include=["message.output_text.logprobs", "code_interpreter_call.outputs"])
        lines = cap.lines_with("request_id=inc-lp", count=2)
    assert include_notes(lines) == ["code_interpreter_call.outputs"]
    body = sent(mock)
    assert body["logprobs"] is True and body["top_logprobs"] == 2 and "include" not in body


def test_encrypted_reasoning_include_is_traced_when_continuation_is_off(start_proxy, harness, mock):
    doc = harness.default_config()
    doc["continuation"] = {"enabled": False}
    client = start_proxy(doc).openai()
    mock.enqueue(Turn([Reasoning("let me see", signature="sig-1"), Text("ok")]))
    with LogCapture(level=logging.DEBUG) as cap:
        out = client.responses.create(model="anthropic/m", input="hi", include=["reasoning.encrypted_content"],
                                      reasoning={"effort": "low"}, extra_headers={"x-request-id": "inc-off"})
        lines = cap.lines_with("request_id=inc-off", count=2)
    client.close()
    assert out.output_text == "ok"
    assert not any(getattr(i, "encrypted_content", None) for i in out.output)
    (note,) = [line for line in lines if "dropped include value" in line]
    assert "dropped include value reasoning.encrypted_content (continuation is off)" in note


# --- an Anthropic refusal toward Chat and Responses clients (docs/decisions.md #5) -------------

REFUSED = "I can't help with that."


def chat_refusal(client, stream: bool) -> tuple[str, str | None, str | None]:
    """(finish_reason, content, refusal) as the client got them."""
    kw = dict(model="anthropic/claude", messages=HI)
    if not stream:
        choice = client.chat.completions.create(**kw).choices[0]
        return choice.finish_reason, choice.message.content, choice.message.refusal
    chunks = [c.choices[0] for c in client.chat.completions.create(stream=True, **kw) if c.choices]
    content = "".join(c.delta.content or "" for c in chunks) or None
    refusal = "".join(c.delta.refusal or "" for c in chunks) or None
    return [c.finish_reason for c in chunks if c.finish_reason][0], content, refusal


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_refusal_text_stays_content_for_a_chat_client(openai_client, mock, stream):
    mock.enqueue(Turn([Refusal(REFUSED, explanation="policy")]))
    assert chat_refusal(openai_client, stream) == ("content_filter", REFUSED, None)
    assert mock.requests[-1].path == "/v1/messages"
    # With no text, the explanation is the refusal.
    mock.enqueue(Turn([Refusal("", explanation="policy")]))
    assert chat_refusal(openai_client, stream) == ("content_filter", None, "policy")


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_refusal_text_stays_output_text_for_a_responses_client(openai_client, mock, stream):
    for blocks, parts in (([Refusal(REFUSED, explanation="policy")], [("output_text", REFUSED)]),
                          ([Refusal("", explanation="policy")], [("refusal", "policy")])):
        mock.enqueue(Turn(blocks))
        if stream:
            out = list(openai_client.responses.create(model="anthropic/claude", input="hi", stream=True))[-1].response
        else:
            out = openai_client.responses.create(model="anthropic/claude", input="hi")
        assert (out.status, out.incomplete_details.reason) == ("incomplete", "content_filter")
        assert [(c.type, getattr(c, "text", None) or getattr(c, "refusal", None))
                for i in out.output if i.type == "message" for c in i.content] == parts


# --- dropped, never silently -----------------------------------------------------------------


def test_gemini_client_drops_are_traced_and_hosted_tools_named_in_a_header(proxy, mock):
    mock.enqueue(Turn([Text("ok")]))
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "generationConfig": {"topK": 64, "temperature": 0.5},
            "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
            "tools": [{"googleSearch": {}}]}
    with LogCapture(level=logging.DEBUG) as cap:
        r = httpx.post(proxy.url + "/v1beta/models/chat/m:generateContent", json=body,
                       headers={"x-goog-api-key": CLIENT_KEY, "x-request-id": "gem-drops"})
        lines = cap.lines_with("request_id=gem-drops", count=4)
    assert r.status_code == 200, r.text
    assert r.json()["candidates"][0]["content"]["parts"][0]["text"] == "ok"
    upstream = sent(mock)
    assert upstream["temperature"] == 0.5
    assert not {"top_k", "tools", "safetySettings", "safety_settings"} & set(upstream)
    notes = "\n".join(lines)
    assert "generationConfig.topK dropped" in notes
    assert "dropped advisory field safetySettings" in notes
    assert "hosted tool" in notes and "left out" in notes
    assert r.headers["x-proxai-dropped-tools"]
    # advisory fields and topK have their trace line only, no header
    assert [h for h in r.headers if h.lower().startswith("x-proxai-dropped")] == ["x-proxai-dropped-tools"]


# --- seed and penalties toward Gemini ---------------------------------------------------------


def test_seed_and_penalties_reach_a_gemini_provider(gemini_proxy, mock):
    client = gemini_proxy.openai()
    mock.enqueue(Turn([Text("ok")]))
    out = client.chat.completions.create(model="gemini/m", messages=HI, seed=7, presence_penalty=0.5, frequency_penalty=0.25)
    assert out.choices[0].message.content == "ok"
    config = sent(mock)["generationConfig"]
    assert (config["seed"], config["presencePenalty"], config["frequencyPenalty"]) == (7, 0.5, 0.25)
    for provider in ("anthropic", "responses"):
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(model=f"{provider}/m", messages=HI, seed=7)
        assert err.value.body["param"] == "seed"
    client.close()


# --- a document title's extension, in any case -----------------------------------------------

PDF = base64.b64encode(b"%PDF-1.4 tiny").decode()


def document_request(client, model: str, title: str) -> None:
    client.messages.create(model=model, max_tokens=64, messages=[{"role": "user", "content": [
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}, "title": title},
        {"type": "text", "text": "summarise"}]}])


@pytest.mark.parametrize("title,filename", [("Q3 REPORT.PDF", "Q3 REPORT.PDF"), ("notes.Pdf", "notes.Pdf"),
                                            ("contract", "contract.pdf"), ("scan.pdf.txt", "scan.pdf.txt.pdf")])
def test_a_document_title_keeps_its_extension_in_any_case(anthropic_client, mock, title, filename):
    mock.enqueue(Turn([Text("a summary")]))
    document_request(anthropic_client, "chat/gpt", title)
    assert sent(mock)["messages"][0]["content"][0]["file"]["filename"] == filename
    mock.enqueue(Turn([Text("a summary")]))
    document_request(anthropic_client, "responses/gpt", title)
    assert sent(mock)["input"][0]["content"][0]["filename"] == filename


# --- protocol counts in the documentation ---------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
STALE_COUNTS = re.compile(r"three (wire )?protocols|six stream|\b(9|nine) \(client|\b3 pass-through|all 6 conversions"
                          r"|three `request\.encode`", re.I)


def test_no_page_counts_three_protocols():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "rules").rglob("*.md")),
             *sorted((ROOT / "rules").rglob("*.yaml"))]
    stale = [f"{page.relative_to(ROOT)}:{n}: {line.strip()}" for page in pages
             for n, line in enumerate(page.read_text().splitlines(), 1) if STALE_COUNTS.search(line)]
    assert stale == []


# --- demo mode's model list; the Gemini snippets ---------------------------------------------


def test_demo_mode_lists_gemini_demo_for_every_client(harness):
    p = harness.start_demo()
    try:
        oa = p.openai()
        assert "gemini/demo" in [m.id for m in oa.models.list()]
        assert oa.chat.completions.create(model="gemini/demo", messages=HI).choices[0].message.content
        assert "gemini/demo" in [m.id for m in p.anthropic().models.list()]
        r = httpx.get(p.url + "/v1beta/models", headers={"x-goog-api-key": "anything"})
        assert "models/gemini/demo" in [m["name"] for m in r.json()["models"]]
    finally:
        p.stop()


def test_gemini_snippets_use_the_default_port():
    from proxai.routing.config import DEFAULT_PORT

    # The google-genai page's "Gemini clients" section, and the README's google-genai snippet.
    text = (ROOT / "docs" / "clients" / "google-genai.md").read_text()
    section = text.split("## Gemini clients", 1)[1].split("\n## ", 1)[0]
    readme = (ROOT / "README.md").read_text()
    readme_snippet = readme.split("from google import genai", 1)[1].split("```", 1)[0]
    for snippet in (section, readme_snippet):
        ports = re.findall(r"base_url=\"http://127\.0\.0\.1:(\d+)\"", snippet)
        assert ports and set(ports) == {str(DEFAULT_PORT)}


# --- tracing: the GenAI conventions' system and operation values ------------------------------


@pytest.fixture
def traced_gemini(harness, start_proxy):
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from proxai.observability import tracing
    doc = gemini_config(harness.mock_url)
    doc["tracing"] = {"enabled": True, "exporter": "none"}
    p = start_proxy(doc)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    p.proxy.tracing = tracing.setup(p.proxy.config.tracing, provider=provider)
    return p, exporter


def spans_when(exporter, count: int) -> dict:
    import time

    deadline = time.monotonic() + 5
    while len(exporter.get_finished_spans()) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return {s.name: s for s in exporter.get_finished_spans()}


def test_gemini_spans_use_the_conventions_values(traced_gemini, mock):
    from opentelemetry.semconv._incubating.attributes.gen_ai_attributes import GenAiOperationNameValues, GenAiSystemValues

    proxy, exporter = traced_gemini
    mock.enqueue(Turn([Text("ok")]))
    client = proxy.openai()
    client.chat.completions.create(model="gemini/gem-x", messages=HI)
    client.close()
    spans = spans_when(exporter, 4)
    upstream = spans["generate_content gem-x"]
    assert upstream.attributes["gen_ai.system"] == GenAiSystemValues.GCP_GEMINI.value == "gcp.gemini"
    assert upstream.attributes["gen_ai.provider.name"] == "gcp.gemini"
    assert upstream.attributes["gen_ai.operation.name"] == GenAiOperationNameValues.GENERATE_CONTENT.value
    root = spans["POST /v1/chat/completions"]
    assert (root.attributes["gen_ai.system"], root.attributes["gen_ai.provider.name"]) == ("openai", "openai")
    assert root.attributes["gen_ai.operation.name"] == "chat"

    exporter.clear()
    mock.enqueue(Turn([Text("ok")]))
    r = httpx.post(proxy.url + "/v1beta/models/anthropic/claude-x:generateContent", headers={"x-goog-api-key": CLIENT_KEY},
                   json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
    assert r.status_code == 200
    spans = spans_when(exporter, 4)
    upstream = spans["chat claude-x"]
    assert (upstream.attributes["gen_ai.system"], upstream.attributes["gen_ai.provider.name"]) == ("anthropic", "anthropic")
    root = next(s for name, s in spans.items() if name.startswith("POST "))
    assert (root.attributes["gen_ai.system"], root.attributes["gen_ai.operation.name"]) == ("gcp.gemini", "generate_content")

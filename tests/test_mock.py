"""The mock upstreams speak the exact wire format: the official SDKs, pointed straight at them,
parse every reply, and their streaming helpers accept the event order."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp

import anthropic
import httpx2 as httpx
import openai
import pydantic
import pytest
from aiohttp import web
from anthropic.types import Message, RawMessageStreamEvent
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent

from proxai.mock import (
    Error,
    Hang,
    Json,
    MockUpstream,
    Reasoning,
    RedactedReasoning,
    Refusal,
    Stream,
    Text,
    ToolCall,
    Turn,
    Usage,
)
from proxai.mock import render_anthropic, render_chat, render_responses

CHAT, RESP, ANT = "openai_chat_completions", "openai_responses", "anthropic_messages"
PATHS = {CHAT: "/v1/chat/completions", RESP: "/v1/responses", ANT: "/v1/messages"}
RESPONSES_EVENT = pydantic.TypeAdapter(ResponseStreamEvent)
ANTHROPIC_EVENT = pydantic.TypeAdapter(RawMessageStreamEvent)
USER = [{"role": "user", "content": "hi"}]
UNICODE = "héllo wörld — 日本語のテキスト 🎉🚀 ok"


@pytest.fixture(scope="module")
def server():
    mock = MockUpstream()
    with mock.serve() as url:
        yield mock, url


@pytest.fixture
def mock(server):
    server[0].reset()
    return server[0]


@pytest.fixture
def url(server):
    return server[1]


@pytest.fixture
def oai(url):
    return openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0, timeout=5)


@pytest.fixture
def ant(url):
    return anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0, timeout=5)


def request_body(protocol: str, stream: bool, **extra) -> dict:
    if protocol == RESP:
        body = {"model": "m-1", "input": "hi"}
    else:
        body = {"model": "m-1", "messages": USER}
    if protocol == ANT:
        body["max_tokens"] = 100
    if stream:
        body["stream"] = True
    body.update(extra)
    return body


def raw_post(url: str, protocol: str, stream: bool = True, **extra) -> httpx.Response:
    return httpx.post(url + PATHS[protocol], json=request_body(protocol, stream, **extra), timeout=5)


def parse_sse(data: bytes) -> list[tuple[str | None, str]]:
    """Strict SSE split: events end at a blank line; trailing bytes without one are not an event."""
    text = data.decode("utf-8").replace("\r\n", "\n")
    blocks = text.split("\n\n")
    events = []
    for block in blocks[:-1]:
        event, datas = None, []
        for line in block.split("\n"):
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                datas.append(line[6:])
        events.append((event, "\n".join(datas)))
    return events


def validate_stream(protocol: str, events) -> list:
    """Every event parses as the SDK's own type; `event:` equals data.type where the protocol names it."""
    out = []
    for name, data in events:
        if data == "[DONE]":
            assert protocol == CHAT
            out.append("[DONE]")
            continue
        obj = json.loads(data) if isinstance(data, str) else data
        if protocol == CHAT:
            assert name is None
            if "error" not in obj:
                ChatCompletionChunk.model_validate(obj)
        else:
            assert name == obj["type"]
            if protocol == RESP:
                RESPONSES_EVENT.validate_python(obj)
            elif obj["type"] not in ("ping", "error"):
                ANTHROPIC_EVENT.validate_python(obj)
        out.append(obj)
    return out


RICH = [
    Reasoning("Let me think… 🤔", signature="sig-abc", encrypted_content="enc-abc"),
    Text("Hello, "),
    Text("world"),
    ToolCall("call_1", "get_weather", '{"city": "Paris"}'),
    ToolCall("call_2", "get_time", '{"tz": "Europe/Paris"}'),
]


# ---------------------------------------------------------------- renderer shapes


@pytest.mark.parametrize(
    "blocks",
    [
        [Text("hi")],
        RICH,
        [Reasoning("sum", summary=True, encrypted_content="e")],
        [RedactedReasoning("opaque"), Text("x")],
        [Refusal("I can't help with that.", explanation="policy", category="cyber")],
        [Text("partial"), Refusal("", explanation="no")],
        [],
    ],
)
@pytest.mark.parametrize("interleave", [False, True])
def test_every_rendering_validates_against_sdk_types(blocks, interleave):
    turn = Turn(blocks, usage=Usage(20, 7, cached_tokens=5, cache_write_tokens=3, reasoning_tokens=2),
                interleave_tools=interleave, include_usage=True)
    req = {"model": "m-1"}
    ChatCompletion.model_validate(render_chat.body(turn, req))
    Response.model_validate(render_responses.body(turn, req))
    Message.model_validate(render_anthropic.body(turn, req))
    validate_stream(CHAT, render_chat.events(turn, req))
    validate_stream(RESP, render_responses.events(turn, req))
    validate_stream(ANT, render_anthropic.events(turn, req))


# ---------------------------------------------------------------- basic API


def test_demo_reply_names_protocol_and_repeats_user_text(mock, oai, ant):
    c = oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "ping one"}])
    assert "Chat Completions" in c.choices[0].message.content and "ping one" in c.choices[0].message.content
    with oai.responses.stream(model="m", input=[{"role": "user", "content": "ping two"}]) as s:
        text = s.get_final_response().output_text
    assert "Responses" in text and "ping two" in text
    m = ant.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": [
        {"type": "text", "text": "ping three"}]}])
    assert "Anthropic Messages" in m.content[0].text and "ping three" in m.content[0].text
    assert [r.protocol for r in mock.requests] == [CHAT, RESP, ANT]


def test_queue_is_fifo_and_records_requests(mock, oai, url):
    mock.enqueue(Json({"id": "a", "object": "chat.completion", "created": 1, "model": "m", "choices": []}))
    mock.enqueue(lambda rec: Turn([Text("seen " + rec.body["model"])]))
    assert oai.chat.completions.create(model="first", messages=USER).id == "a"
    second = oai.chat.completions.create(model="second", messages=USER, extra_headers={"X-Trace": "t1"})
    assert second.choices[0].message.content == "seen second"
    assert mock.pending == 0
    rec = mock.requests[1]
    assert rec.protocol == CHAT and rec.path == "/v1/chat/completions"
    assert rec.headers["authorization"] == "Bearer sk-test" and rec.headers["x-trace"] == "t1"
    assert rec.body == {"model": "second", "messages": USER}
    assert json.loads(rec.raw) == rec.body
    httpx.post(url + "/v1/messages", content=b"not json", timeout=5)
    assert mock.requests[-1].body is None and mock.requests[-1].raw == b"not json"
    mock.enqueue(Turn([Text("x")]))
    mock.reset()
    assert mock.requests == [] and mock.pending == 0


def test_unknown_path_is_404_in_that_protocols_shape(mock, url):
    bad = anthropic.Anthropic(base_url=url + "/v1", api_key="k", max_retries=0, timeout=5)
    with pytest.raises(anthropic.NotFoundError) as err:
        bad.messages.create(model="m", max_tokens=5, messages=USER)
    assert err.value.body["error"]["type"] == "not_found_error"
    assert mock.requests[-1].path == "/v1/v1/messages"
    r = httpx.post(url + "/v1/chat/nope", json={}, timeout=5)
    assert r.status_code == 404 and r.json()["error"]["message"]
    r = httpx.get(url + "/v1/responses", timeout=5)
    assert r.status_code == 405 and "error" in r.json()


def test_native_errors_raise_the_sdk_status_classes(mock, oai, ant):
    mock.enqueue(Error(429, headers={"retry-after": "7", "x-request-id": "req_1"}, message="slow down"))
    with pytest.raises(openai.RateLimitError) as err:
        oai.chat.completions.create(model="m", messages=USER)
    assert err.value.response.headers["retry-after"] == "7"
    assert err.value.body["message"] == "slow down"
    mock.enqueue(Error(529))
    with pytest.raises(anthropic.APIStatusError) as aerr:
        ant.messages.create(model="m", max_tokens=5, messages=USER)
    assert aerr.value.status_code == 529 and aerr.value.body["error"]["type"] == "overloaded_error"
    mock.enqueue(Error(400, {"error": {"message": "bad field", "type": "invalid_request_error",
                                       "param": "input", "code": None}}))
    with pytest.raises(openai.BadRequestError) as berr:
        oai.responses.create(model="m", input="x")
    assert berr.value.param == "input"


def test_raw_error_bodies(mock, url):
    mock.enqueue(Error(502, "<html><body>Bad gateway</body></html>", content_type="text/html"),
                 Error(500, None), Error(503, b"\xff" * 100_000))
    r = httpx.post(url + PATHS[CHAT], json={}, timeout=5)
    assert r.status_code == 502 and r.headers["content-type"].startswith("text/html") and "Bad gateway" in r.text
    r = httpx.post(url + PATHS[CHAT], json={}, timeout=5)
    assert r.status_code == 500 and r.content == b""
    r = httpx.post(url + PATHS[CHAT], json={}, timeout=5)
    assert r.status_code == 503 and len(r.content) == 100_000


def test_raw_stream_events_and_bytes(mock, url):
    mock.enqueue(Stream(events=[("custom", {"type": "custom", "n": 1}), (None, "[DONE]")]))
    r = raw_post(url, CHAT)
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.content == b'event: custom\ndata: {"type":"custom","n":1}\n\ndata: [DONE]\n\n'
    mock.enqueue(Stream(raw=[b"data: {\"a\"", b": 1}\n\n", b"junk-without-end"]))
    assert raw_post(url, CHAT).content == b'data: {"a": 1}\n\njunk-without-end'


def test_serves_on_a_running_loop_and_as_a_sub_application():
    async def scenario():
        inner = MockUpstream()
        root = web.Application()
        root.add_subapp("/mock/", inner.app)
        runner = web.AppRunner(root)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port = runner.addresses[0][1]
        standalone = MockUpstream()
        url = await standalone.astart()
        try:
            async with aiohttp.ClientSession() as session:
                async with session.post(f"http://127.0.0.1:{port}/mock/v1/messages", json=request_body(ANT, False)) as r:
                    Message.model_validate(await r.json())
                async with session.post(url + PATHS[RESP], json=request_body(RESP, False)) as r:
                    Response.model_validate(await r.json())
        finally:
            await standalone.astop()
            await runner.cleanup()
        return inner.requests, standalone.requests

    inner, standalone = asyncio.run(scenario())
    assert [(r.protocol, r.path) for r in inner] == [(ANT, "/v1/messages")]
    assert [(r.protocol, r.path) for r in standalone] == [(RESP, "/v1/responses")]


def test_hang_makes_the_sdk_time_out(mock, url):
    quick = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=0.3)
    mock.enqueue(Hang(5))
    start = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        quick.chat.completions.create(model="m", messages=USER)
    mock.enqueue(Hang(5, after_headers=True))
    with pytest.raises(openai.APITimeoutError):
        with quick.chat.completions.stream(model="m", messages=USER) as s:
            s.get_final_completion()
    assert time.monotonic() - start < 3


def test_stall_and_delay_timing(mock, url):
    mock.enqueue(Turn([Text("abc", chunks=["a", "b", "c"])], stall_after=2, stall_secs=0.3))
    with httpx.stream("POST", url + PATHS[ANT], json=request_body(ANT, True), timeout=5) as r:
        t0 = time.monotonic()
        seen = []
        for line in r.iter_lines():
            if line.startswith("event: "):
                seen.append((line[7:], time.monotonic() - t0))
    names = [n for n, _ in seen]
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert seen[1][1] < 0.2 and seen[2][1] >= 0.25  # silence before event 2 only
    mock.enqueue(Stream(events=[(None, "1"), (None, "2"), (None, "3")], delay_secs=0.1))
    t0 = time.monotonic()
    assert parse_sse(raw_post(url, CHAT).content) == [(None, "1"), (None, "2"), (None, "3")]
    assert time.monotonic() - t0 >= 0.2


# ---------------------------------------------------------------- Chat Completions


def test_chat_text_non_stream_and_usage(mock, oai, url):
    usage = Usage(100, 20, cached_tokens=30, cache_write_tokens=10, reasoning_tokens=4)
    mock.enqueue(Turn([Text("Hello there")], usage=usage, id="chatcmpl-fixed"))
    c = oai.chat.completions.create(model="gpt-x", messages=USER)
    assert c.id == "chatcmpl-fixed" and c.model == "gpt-x" and c.object == "chat.completion"
    assert c.choices[0].message.content == "Hello there" and c.choices[0].finish_reason == "stop"
    assert c.usage.prompt_tokens == 100 and c.usage.completion_tokens == 20 and c.usage.total_tokens == 120
    assert c.usage.prompt_tokens_details.cached_tokens == 30
    assert c.usage.prompt_tokens_details.cache_write_tokens == 10
    assert c.usage.completion_tokens_details.reasoning_tokens == 4
    mock.enqueue(Turn([Text("x")], model="other-model"))
    assert oai.chat.completions.create(model="gpt-x", messages=USER).model == "other-model"


def test_chat_stream_grammar(mock, url):
    mock.enqueue(Turn([Text("Hello world", chunks=["Hel", "lo ", "world"])]))
    events = validate_stream(CHAT, parse_sse(raw_post(url, CHAT, stream_options={"include_usage": True}).content))
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert len({(c["id"], c["created"], c["model"], c["object"]) for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all("role" not in c["choices"][0]["delta"] for c in chunks[1:] if c["choices"])
    assert [c["choices"][0]["delta"].get("content") for c in chunks[1:4]] == ["Hel", "lo ", "world"]
    assert chunks[-2]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 15
    assert all(c["usage"] is None for c in chunks[:-1])
    # without include_usage: no usage chunk, no usage key
    mock.enqueue(Turn([Text("x")]))
    events = validate_stream(CHAT, parse_sse(raw_post(url, CHAT).content))
    assert events[-2]["choices"][0]["finish_reason"] == "stop" and "usage" not in events[-2]
    mock.enqueue(Turn([Text("x")], omit_done=True, include_usage=True))
    events = validate_stream(CHAT, parse_sse(raw_post(url, CHAT).content))
    assert events[-1]["choices"] == [] and "[DONE]" not in events


@pytest.mark.parametrize("interleave", [False, True])
def test_chat_parallel_tool_calls(mock, oai, url, interleave):
    calls = [ToolCall("call_a", "f", '{"x": 1}', chunks=['{"x"', ": 1}"]),
             ToolCall("call_b", "g", '{"y": "ü"}', chunks=['{"y"', ': "ü"}'])]
    mock.enqueue(Turn(list(calls), interleave_tools=interleave))
    with oai.chat.completions.stream(model="m", messages=USER) as s:
        final = s.get_final_completion()
    msg = final.choices[0].message
    assert final.choices[0].finish_reason == "tool_calls"
    assert [(t.id, t.type, t.function.name, t.function.arguments) for t in msg.tool_calls] == [
        ("call_a", "function", "f", '{"x": 1}'), ("call_b", "function", "g", '{"y": "ü"}')]
    mock.enqueue(Turn(list(calls), interleave_tools=interleave))
    frags = [c["choices"][0]["delta"]["tool_calls"][0] for c in validate_stream(CHAT, parse_sse(
        raw_post(url, CHAT).content))[:-1] if c["choices"] and "tool_calls" in c["choices"][0]["delta"]]
    order = [f["index"] for f in frags]
    assert order == ([0, 1, 0, 1, 0, 1] if interleave else [0, 0, 0, 1, 1, 1])
    assert [("id" in f, "name" in f.get("function", {})) for f in frags].count((True, True)) == 2
    mock.enqueue(Turn(list(calls)))
    c = oai.chat.completions.create(model="m", messages=USER)
    assert [t.function.arguments for t in c.choices[0].message.tool_calls] == ['{"x": 1}', '{"y": "ü"}']
    assert c.choices[0].message.content is None


def test_chat_reasoning_and_redacted(mock, oai, url):
    mock.enqueue(Turn([Reasoning("think", signature="s"), RedactedReasoning("opaque"), Text("answer")]))
    c = oai.chat.completions.create(model="m", messages=USER)
    assert c.choices[0].message.model_extra["reasoning_content"] == "think"
    assert c.choices[0].message.content == "answer"
    assert "opaque" not in json.dumps(c.model_dump())
    mock.enqueue(Turn([Reasoning("think", chunks=["th", "ink"]), Text("answer")]))
    deltas = [c["choices"][0]["delta"] for c in validate_stream(CHAT, parse_sse(raw_post(url, CHAT).content))[:-1]]
    assert [d["reasoning_content"] for d in deltas if "reasoning_content" in d] == ["th", "ink"]


def test_chat_refusal(mock, oai):
    mock.enqueue(Turn([Refusal("I can't help with that.")]))
    c = oai.chat.completions.create(model="m", messages=USER)
    assert c.choices[0].message.refusal == "I can't help with that." and c.choices[0].message.content is None
    assert c.choices[0].finish_reason == "stop"
    mock.enqueue(Turn([Refusal("No.")], stop="content_filter"))
    with oai.chat.completions.stream(model="m", messages=USER) as s:
        for _ in s:
            pass
        snap = s.current_completion_snapshot
    assert snap.choices[0].message.refusal == "No." and snap.choices[0].finish_reason == "content_filter"


@pytest.mark.parametrize("stop", ["stop", "length", "tool_calls", "content_filter", "function_call"])
def test_chat_stop_values(mock, oai, stop):
    mock.enqueue(Turn([Text("t")], stop=stop), Turn([Text("t")], stop={CHAT: stop, ANT: "end_turn"}))
    assert oai.chat.completions.create(model="m", messages=USER).choices[0].finish_reason == stop
    chunks = list(oai.chat.completions.create(model="m", messages=USER, stream=True))
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [stop]


def test_chat_unicode_split_bytes_and_crlf(mock, oai, url):
    mock.enqueue(Turn([Text(UNICODE)], split_bytes=1), Turn([Text(UNICODE)], split_bytes=7, crlf=True))
    for _ in range(2):
        with oai.chat.completions.stream(model="m", messages=USER) as s:
            assert s.get_final_completion().choices[0].message.content == UNICODE
    mock.enqueue(Turn([Text(UNICODE)], crlf=True))
    raw = raw_post(url, CHAT).content
    assert raw.count(b"\r\n\r\n") > 3 and b"\n" not in raw.replace(b"\r\n", b"")


def test_chat_cut_after_has_no_finish(mock, oai, url):
    mock.enqueue(Turn([Text("abcdef")], cut_after=3))
    chunks = list(oai.chat.completions.create(model="m", messages=USER, stream=True))
    assert len(chunks) == 3 and all(c.choices[0].finish_reason is None for c in chunks)
    mock.enqueue(Stream(events=[(None, {"x": 1}), (None, {"x": 2}), (None, "[DONE]")], cut_after=1, abort=True))
    with pytest.raises(httpx.HTTPError):
        httpx.post(url + PATHS[CHAT], json={}, timeout=5).read()


def test_chat_error_after(mock, oai, url):
    mock.enqueue(Turn([Text("abcdef")], error_after=2, error={"message": "boom", "code": "overloaded"}))
    with pytest.raises(openai.APIError) as err:
        list(oai.chat.completions.create(model="m", messages=USER, stream=True))
    assert "boom" in str(err.value)
    mock.enqueue(Turn([Text("abcdef")], error_after=2))
    events = parse_sse(raw_post(url, CHAT).content)
    assert len(events) == 3 and "error" in json.loads(events[-1][1])


# ---------------------------------------------------------------- Responses


def test_responses_text_non_stream_and_usage(mock, oai):
    usage = Usage(100, 20, cached_tokens=30, cache_write_tokens=10, reasoning_tokens=4)
    mock.enqueue(Turn([Text("Hi "), Text("there")], usage=usage, id="resp_fixed"))
    r = oai.responses.create(model="gpt-x", input="hi", tools=[{"type": "function", "name": "f",
                                                                "parameters": {"type": "object"}}])
    assert r.id == "resp_fixed" and r.status == "completed" and r.model == "gpt-x" and r.output_text == "Hi there"
    assert [p.text for p in r.output[0].content] == ["Hi ", "there"] and len(r.output) == 1
    assert r.tools[0].name == "f" and r.parallel_tool_calls is True and r.tool_choice == "auto"
    assert (r.usage.input_tokens, r.usage.output_tokens, r.usage.total_tokens) == (100, 20, 120)
    assert r.usage.input_tokens_details.cached_tokens == 30
    assert r.usage.input_tokens_details.cache_write_tokens == 10
    assert r.usage.output_tokens_details.reasoning_tokens == 4


def test_responses_stream_grammar(mock, oai, url):
    mock.enqueue(Turn([Text("Hello world", chunks=["Hello", " world"])], id="resp_s"))
    events = validate_stream(RESP, parse_sse(raw_post(url, RESP).content))
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done", "response.completed"]
    for e in events[:2]:
        snap = e["response"]
        assert snap["status"] == "in_progress" and snap["output"] == [] and snap["usage"] is None
        assert snap["error"] is None and snap["incomplete_details"] is None and snap["tools"] == []
    assert events[-1]["response"]["usage"]["total_tokens"] == 15
    assert all(e["logprobs"] == [] for e in events if e["type"] == "response.output_text.delta")
    mock.enqueue(Turn([Text("Hello world")], id="resp_s"))
    with oai.responses.stream(model="m", input="hi") as s:
        final = s.get_final_response()
    assert final.id == "resp_s" and final.output_text == "Hello world"


@pytest.mark.parametrize("interleave", [False, True])
def test_responses_parallel_tool_calls(mock, oai, url, interleave):
    calls = [ToolCall("call_a", "f", '{"x": 1}', chunks=['{"x"', ": 1}"]),
             ToolCall("call_b", "g", '{"y": 2}', chunks=['{"y"', ": 2}"])]
    mock.enqueue(Turn([Text("calling")] + calls, interleave_tools=interleave))
    with oai.responses.stream(model="m", input="hi") as s:
        final = s.get_final_response()
    fcs = [o for o in final.output if o.type == "function_call"]
    assert [(f.id, f.call_id, f.name, f.arguments, f.status) for f in fcs] == [
        ("fc_call_a", "call_a", "f", '{"x": 1}', "completed"), ("fc_call_b", "call_b", "g", '{"y": 2}', "completed")]
    mock.enqueue(Turn(list(calls), interleave_tools=interleave))
    events = validate_stream(RESP, parse_sse(raw_post(url, RESP).content))
    deltas = [e["output_index"] for e in events if e["type"] == "response.function_call_arguments.delta"]
    assert deltas == ([0, 1, 0, 1] if interleave else [0, 0, 1, 1])
    mock.enqueue(Turn(list(calls)))
    r = oai.responses.create(model="m", input="hi")
    assert [o.call_id for o in r.output] == ["call_a", "call_b"]


def test_responses_reasoning_encrypted_summary_and_redacted(mock, oai, url):
    blocks = [Reasoning("deep thought", encrypted_content="enc-1", chunks=["deep", " thought"]),
              Reasoning("summary text", summary=True, encrypted_content="enc-2"),
              RedactedReasoning("enc-3"), Text("done")]
    mock.enqueue(Turn(list(blocks)))
    with oai.responses.stream(model="m", input="hi") as s:
        final = s.get_final_response()
    r0, r1, r2, msg = final.output
    assert r0.type == "reasoning" and r0.content[0].text == "deep thought" and r0.encrypted_content == "enc-1"
    assert r1.summary[0].text == "summary text" and r1.encrypted_content == "enc-2" and not r1.content
    assert r2.summary == [] and r2.encrypted_content == "enc-3" and not r2.content
    assert msg.content[0].text == "done"
    mock.enqueue(Turn(list(blocks)))
    types = [e["type"] for e in validate_stream(RESP, parse_sse(raw_post(url, RESP).content))]
    assert types.count("response.reasoning_text.delta") == 2
    assert "response.reasoning_summary_part.added" in types and "response.reasoning_summary_text.done" in types
    mock.enqueue(Turn(list(blocks)))
    r = oai.responses.create(model="m", input="hi")
    assert [o.type for o in r.output] == ["reasoning", "reasoning", "reasoning", "message"]


def test_responses_refusal(mock, oai, url):
    mock.enqueue(Turn([Refusal("I can't.")]))
    with oai.responses.stream(model="m", input="hi") as s:
        final = s.get_final_response()
    assert final.status == "completed" and final.output[0].content[0].refusal == "I can't."
    mock.enqueue(Turn([Refusal("I can't.")], stop="incomplete:content_filter"))
    events = validate_stream(RESP, parse_sse(raw_post(url, RESP).content))
    assert "response.refusal.delta" in [e["type"] for e in events]
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "content_filter"}


@pytest.mark.parametrize("stop,status,reason", [
    (None, "completed", None),
    ("incomplete:max_output_tokens", "incomplete", "max_output_tokens"),
    ("incomplete:content_filter", "incomplete", "content_filter"),
    ("failed", "failed", None),
])
def test_responses_stop_values(mock, oai, stop, status, reason):
    turn = Turn([Text("t")], stop={RESP: stop} if stop else None, error={"message": "it broke"})
    mock.enqueue(turn, turn)
    r = oai.responses.create(model="m", input="hi")
    assert r.status == status and (r.incomplete_details and r.incomplete_details.reason) == reason
    if status == "failed":
        assert r.error.code == "server_error" and r.error.message == "it broke"
    events = list(oai.responses.create(model="m", input="hi", stream=True))
    assert events[-1].type == f"response.{status}" and events[-1].response.status == status


def test_responses_unicode_split_bytes_and_crlf(mock, oai):
    mock.enqueue(Turn([Text(UNICODE)], split_bytes=1), Turn([Text(UNICODE)], split_bytes=5, crlf=True))
    for _ in range(2):
        with oai.responses.stream(model="m", input="hi") as s:
            assert s.get_final_response().output_text == UNICODE


def test_responses_cut_after_is_not_a_completion(mock, oai):
    mock.enqueue(Turn([Text("abcdef")], cut_after=5))
    with pytest.raises(RuntimeError, match="response.completed"):
        with oai.responses.stream(model="m", input="hi") as s:
            s.get_final_response()


def test_responses_error_after(mock, oai, url):
    mock.enqueue(Turn([Text("ab"), ToolCall("call_1", "f", "{}")], error_after=9,
                      error={"code": "rate_limit_exceeded", "message": "slow"}))
    events = validate_stream(RESP, parse_sse(raw_post(url, RESP).content))
    assert [e["type"] for e in events[-3:]] == ["response.output_item.done", "error", "response.failed"]
    assert events[-2]["code"] == "rate_limit_exceeded" and events[-2]["message"] == "slow"
    failed = events[-1]["response"]
    assert failed["status"] == "failed" and failed["error"] == {"code": "rate_limit_exceeded", "message": "slow"}
    assert [o["type"] for o in failed["output"]] == ["message"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    mock.enqueue(Turn([Text("abcdef")], error_after=4))
    with pytest.raises((openai.APIError, RuntimeError)):
        with oai.responses.stream(model="m", input="hi") as s:
            s.get_final_response()


# ---------------------------------------------------------------- Anthropic Messages


def test_anthropic_text_non_stream_and_usage(mock, ant):
    usage = Usage(100, 20, cached_tokens=30, cache_write_tokens=10, reasoning_tokens=4)
    mock.enqueue(Turn([Text("Hello")], usage=usage, id="msg_fixed"))
    m = ant.messages.create(model="claude-x", max_tokens=10, messages=USER)
    assert m.id == "msg_fixed" and m.model == "claude-x" and m.content[0].text == "Hello"
    assert m.stop_reason == "end_turn" and m.stop_sequence is None
    assert (m.usage.input_tokens, m.usage.cache_read_input_tokens, m.usage.cache_creation_input_tokens) == (60, 30, 10)
    assert m.usage.output_tokens == 20 and m.usage.output_tokens_details.thinking_tokens == 4


def test_anthropic_stream_grammar_and_usage(mock, ant, url):
    usage = Usage(100, 20, cached_tokens=30, cache_write_tokens=10)
    mock.enqueue(Turn([Text("Hello world", chunks=["Hello", " world"])], usage=usage))
    events = validate_stream(ANT, parse_sse(raw_post(url, ANT).content))
    assert [e["type"] for e in events] == [
        "message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta",
        "content_block_stop", "message_delta", "message_stop"]
    start = events[0]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["usage"]["input_tokens"] == 60
    assert events[-2]["usage"] == {"input_tokens": 60, "cache_creation_input_tokens": 10,
                                   "cache_read_input_tokens": 30, "output_tokens": 20}
    mock.enqueue(Turn([Text("Hello world")], usage=usage))
    with ant.messages.stream(model="m", max_tokens=10, messages=USER) as s:
        final = s.get_final_message()
    assert final.content[0].text == "Hello world" and final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 20 and final.usage.cache_read_input_tokens == 30


def test_anthropic_parallel_tool_calls(mock, ant, url):
    calls = [ToolCall("toolu_a", "f", '{"x": 1}', chunks=['{"x"', ": 1}"]),
             ToolCall("toolu_b", "g", '{"y": [1, 2]}')]
    mock.enqueue(Turn([Text("calling")] + calls, interleave_tools=True))
    with ant.messages.stream(model="m", max_tokens=10, messages=USER) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use"
    assert [(b.id, b.name, b.input) for b in final.content[1:]] == [("toolu_a", "f", {"x": 1}),
                                                                     ("toolu_b", "g", {"y": [1, 2]})]
    mock.enqueue(Turn(list(calls), interleave_tools=True))
    events = validate_stream(ANT, parse_sse(raw_post(url, ANT).content))
    idx = [(e["type"], e["index"]) for e in events if "index" in e]
    assert idx == sorted(idx, key=lambda p: p[1])  # blocks never overlap
    assert [e["index"] for e in events if e["type"] == "content_block_start"] == [0, 1]
    mock.enqueue(Turn(list(calls)))
    m = ant.messages.create(model="m", max_tokens=10, messages=USER)
    assert [b.input for b in m.content] == [{"x": 1}, {"y": [1, 2]}] and m.stop_reason == "tool_use"


def test_anthropic_thinking_signature_and_redacted(mock, ant, url):
    blocks = [Reasoning("hmm", signature="sig-1"), RedactedReasoning("opaque-data"), Text("answer")]
    mock.enqueue(Turn(list(blocks)))
    with ant.messages.stream(model="m", max_tokens=10, messages=USER) as s:
        final = s.get_final_message()
    t, r, x = final.content
    assert (t.type, t.thinking, t.signature) == ("thinking", "hmm", "sig-1")
    assert (r.type, r.data) == ("redacted_thinking", "opaque-data") and x.text == "answer"
    mock.enqueue(Turn(list(blocks)))
    events = validate_stream(ANT, parse_sse(raw_post(url, ANT).content))
    thinking = [e for e in events if e.get("index") == 0]
    assert thinking[0]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    assert thinking[-2]["delta"] == {"type": "signature_delta", "signature": "sig-1"}
    redacted = [e for e in events if e.get("index") == 1]
    assert [e["type"] for e in redacted] == ["content_block_start", "content_block_stop"]
    assert redacted[0]["content_block"]["data"] == "opaque-data"
    mock.enqueue(Turn(list(blocks)))
    m = ant.messages.create(model="m", max_tokens=10, messages=USER)
    assert [b.type for b in m.content] == ["thinking", "redacted_thinking", "text"]


def test_anthropic_refusal(mock, ant, url):
    refusal = Refusal("", explanation="Not allowed.", category="cyber")
    mock.enqueue(Turn([refusal]))
    m = ant.messages.create(model="m", max_tokens=10, messages=USER)
    assert m.stop_reason == "refusal" and m.content == []
    assert (m.stop_details.type, m.stop_details.category, m.stop_details.explanation) == (
        "refusal", "cyber", "Not allowed.")
    mock.enqueue(Turn([Text("Sure, "), Refusal("I can't continue.", explanation="x")]))
    with ant.messages.stream(model="m", max_tokens=10, messages=USER) as s:
        final = s.get_final_message()
    assert final.stop_reason == "refusal" and final.stop_details.explanation == "x"
    assert [b.text for b in final.content] == ["Sure, ", "I can't continue."]


@pytest.mark.parametrize("stop", ["end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal",
                                  "model_context_window_exceeded"])
def test_anthropic_stop_values(mock, ant, stop):
    turn = Turn([Text("t")], stop={ANT: stop, CHAT: "stop"})
    mock.enqueue(turn, turn)
    m = ant.messages.create(model="m", max_tokens=10, messages=USER, stop_sequences=["##"])
    assert m.stop_reason == stop and m.stop_sequence == ("##" if stop == "stop_sequence" else None)
    with ant.messages.stream(model="m", max_tokens=10, messages=USER) as s:
        assert s.get_final_message().stop_reason == stop


def test_anthropic_unicode_split_bytes_and_crlf(mock, ant):
    mock.enqueue(Turn([Text(UNICODE)], split_bytes=1), Turn([Text(UNICODE)], split_bytes=3, crlf=True))
    for _ in range(2):
        with ant.messages.stream(model="m", max_tokens=10, messages=USER) as s:
            assert s.get_final_text() == UNICODE


def test_anthropic_cut_after_is_not_a_completion(mock, ant, url):
    mock.enqueue(Turn([Text("abcdef")], cut_after=4))
    seen = []
    with ant.messages.stream(model="m", max_tokens=10, messages=USER) as s:
        seen = [e.type for e in s]
        snapshot = s.current_message_snapshot
    assert "message_stop" not in seen and snapshot.stop_reason is None
    mock.enqueue(Turn([Text("abcdef")], cut_after=4))
    assert len(parse_sse(raw_post(url, ANT).content)) == 4


def test_anthropic_error_after(mock, ant, url):
    mock.enqueue(Turn([Text("abcdef")], error_after=3))
    with pytest.raises(anthropic.APIStatusError) as err:
        with ant.messages.stream(model="m", max_tokens=10, messages=USER) as s:
            s.get_final_message()
    assert "Overloaded" in str(err.value)
    mock.enqueue(Turn([Text("abcdef")], error_after=3, error={"type": "api_error", "message": "bad"}))
    events = parse_sse(raw_post(url, ANT).content)
    assert events[-1] == ("error", '{"type":"error","error":{"type":"api_error","message":"bad"}}')
    assert len(events) == 4

"""End to end: the official google-genai SDK's Interactions API (`client.interactions.create`,
streaming and not) as the client, the real proxy, a Chat Completions, Responses, Anthropic
Messages, Gemini generateContent or Interactions provider behind it (the mock upstream).
Every test also checks what the provider received, read through `Upstream`, which knows
where each provider protocol keeps the system text, tools, calls, results and the rest."""
from __future__ import annotations

import base64
import json

import pytest
from google.genai import _interactions as interactions_errors  # where the SDK's Interactions errors live
from google.genai._gaos.errors.createinteraction import CreateInteractionClientErrorData, CreateInteractionServerErrorData

from interactions_clients import PROVIDER_MODELS, Interactions, StreamFailed, interactions_config
from proxai.mock import Error, Reasoning, Text, ToolCall, Turn, Usage

UNICODE = "héllo wörld — 日本語 🎉🚀 ok"
WEATHER = {"name": "get_weather", "description": "Weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
NOW = {"name": "get_time", "description": "The time now"}
HI = [("user", "hi")]
STREAMS = [pytest.param(False, id="json"), pytest.param(True, id="stream")]
PROVIDERS = list(PROVIDER_MODELS)
# The stop a Turn with tool calls carries, in each provider protocol's own words.
TOOL_STOP = {"openai_chat_completions": "tool_calls", "openai_responses": "completed", "anthropic_messages": "tool_use"}
UPSTREAM_PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages",
                  "interactions": "/v1beta/interactions"}


class Upstream:
    """What one provider received, read in its own protocol's fields."""

    def __init__(self, kind: str, record):
        self.kind, self.record, self.body = kind, record, record.body

    def messages(self) -> list:
        b = self.body
        return {"chat": lambda: b["messages"], "responses": lambda: b["input"], "anthropic": lambda: b["messages"],
                "gemini": lambda: b["contents"], "interactions": lambda: _steps(b["input"])}[self.kind]()

    def streamed(self) -> bool:
        if self.kind == "gemini":
            return self.record.path.endswith(":streamGenerateContent")
        return bool(self.body.get("stream"))

    def system(self):
        b = self.body
        if self.kind == "chat":
            first = b["messages"][0]
            return first["content"] if first["role"] in ("system", "developer") else None
        if self.kind == "responses":
            return b.get("instructions")
        if self.kind == "anthropic":
            s = b.get("system")
            return "".join(x["text"] for x in s) if isinstance(s, list) else s
        if self.kind == "gemini":
            return "".join(p["text"] for p in b["systemInstruction"]["parts"]) if "systemInstruction" in b else None
        return b.get("system_instruction")

    def user_texts(self) -> list[str]:
        out = []
        for m in self.messages():
            role = m.get("role") or m.get("type")
            if role not in ("user", "user_input"):
                continue
            content = m.get("content", m.get("parts"))
            if isinstance(content, str):
                out.append(content)
                continue
            out.extend(p["text"] for p in content if isinstance(p, dict) and "text" in p
                       and p.get("type", "text") in ("text", "input_text"))
        return out

    def max_tokens(self):
        b = self.body
        return {"chat": lambda: b.get("max_completion_tokens", b.get("max_tokens")),
                "responses": lambda: b.get("max_output_tokens"), "anthropic": lambda: b.get("max_tokens"),
                "gemini": lambda: b.get("generationConfig", {}).get("maxOutputTokens"),
                "interactions": lambda: b.get("generation_config", {}).get("max_output_tokens")}[self.kind]()

    def tools(self) -> list[tuple]:
        b = self.body
        if self.kind == "chat":
            return [(t["function"]["name"], t["function"].get("parameters")) for t in b.get("tools", ())]
        if self.kind == "responses":
            return [(t["name"], t.get("parameters")) for t in b.get("tools", ())]
        if self.kind == "anthropic":
            return [(t["name"], t.get("input_schema")) for t in b.get("tools", ())]
        if self.kind == "gemini":
            return [(d["name"], d.get("parametersJsonSchema", d.get("parameters")))
                    for t in b.get("tools", ()) for d in t.get("functionDeclarations", ())]
        return [(t["name"], t.get("parameters")) for t in b.get("tools", ())]

    def calls(self) -> list[tuple]:
        """(id, name, arguments) of every call in the history; Gemini's id may be absent (None)."""
        out = []
        for m in self.messages():
            if self.kind == "chat":
                out += [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
                        for c in m.get("tool_calls") or ()]
            elif self.kind == "responses" and m.get("type") == "function_call":
                out.append((m["call_id"], m["name"], json.loads(m["arguments"])))
            elif self.kind == "anthropic" and isinstance(m["content"], list):
                out += [(c["id"], c["name"], c["input"]) for c in m["content"] if c["type"] == "tool_use"]
            elif self.kind == "gemini":
                out += [(p["functionCall"].get("id"), p["functionCall"]["name"], p["functionCall"].get("args", {}))
                        for p in m["parts"] if "functionCall" in p]
            elif self.kind == "interactions" and m["type"] == "function_call":
                out.append((m["id"], m["name"], m["arguments"]))
        return out

    def results(self) -> list[tuple]:
        """(call id, the result as JSON text) of every tool result, in order."""
        out = []
        for m in self.messages():
            if self.kind == "chat" and m["role"] == "tool":
                out.append((m["tool_call_id"], json.dumps(m["content"])))
            elif self.kind == "responses" and m.get("type") == "function_call_output":
                out.append((m["call_id"], json.dumps(m["output"])))
            elif self.kind == "anthropic" and isinstance(m["content"], list):
                out += [(c["tool_use_id"], json.dumps(c["content"])) for c in m["content"] if c["type"] == "tool_result"]
            elif self.kind == "gemini":
                out += [(p["functionResponse"].get("id"), json.dumps(p["functionResponse"]["response"]))
                        for p in m["parts"] if "functionResponse" in p]
            elif self.kind == "interactions" and m["type"] == "function_result":
                out.append((m["call_id"], json.dumps(m["result"])))
        return out

    def images(self) -> list[tuple[str, str]]:
        """(media type, standard or URL-safe base64) of every image of the user turns."""
        out = []
        for m in self.messages():
            for p in m.get("content", m.get("parts")) or ():
                if not isinstance(p, dict):
                    continue
                if p.get("type") in ("image_url", "input_image"):
                    url = p["image_url"]["url"] if p["type"] == "image_url" else p["image_url"]
                    head, data = url.split(",", 1)
                    out.append((head.removeprefix("data:").removesuffix(";base64"), data))
                elif p.get("type") == "image" and "source" in p:
                    out.append((p["source"]["media_type"], p["source"]["data"]))
                elif p.get("type") == "image":
                    out.append((p["mime_type"], p["data"]))
                elif "inlineData" in p:
                    out.append((p["inlineData"]["mimeType"], p["inlineData"]["data"]))
        return out

    def schema(self):
        b = self.body
        if self.kind == "chat":
            return b["response_format"]["json_schema"]["schema"]
        if self.kind == "responses":
            return b["text"]["format"]["schema"]
        if self.kind == "anthropic":
            return b["output_config"]["format"]["schema"]
        if self.kind == "gemini":
            return b["generationConfig"]["responseJsonSchema"]
        f = b["response_format"]
        return (f[0] if isinstance(f, list) else f)["schema"]

    def reasoning_state(self) -> list[str]:
        """The opaque reasoning state replayed in the history (signatures, encrypted content)."""
        out = []
        for m in self.messages():
            if self.kind == "anthropic" and isinstance(m["content"], list):
                out += [c["signature"] for c in m["content"] if c["type"] == "thinking"]
            elif self.kind == "responses" and m.get("type") == "reasoning":
                out.append(m.get("encrypted_content"))
            elif self.kind == "gemini":  # not the documented skip value on a call that came unsigned
                out += [p["thoughtSignature"] for p in m["parts"]
                        if p.get("thoughtSignature") not in (None, "skip_thought_signature_validator")]
            elif self.kind == "interactions" and m["type"] == "thought":
                out.append(m.get("signature"))
        return out


def _steps(value):
    if isinstance(value, str):
        return [{"type": "user_input", "content": [{"type": "text", "text": value}]}]
    return value


@pytest.fixture(scope="module")
def iproxy(harness):
    p = harness.start_proxy(interactions_config(harness.mock_url))
    yield p
    p.stop()


@pytest.fixture
def client(iproxy, mock):
    return Interactions(iproxy)


@pytest.fixture(params=PROVIDERS)
def kind(request):
    return request.param


def upstream(mock, kind, stream) -> Upstream:
    """The last request the provider received, its path, key and streaming checked."""
    assert mock.requests, "the provider received nothing"
    record = mock.requests[-1]
    if kind == "gemini":
        method = "streamGenerateContent" if stream else "generateContent"
        assert record.path == f"/v1beta/models/gemini-3-pro-preview:{method}", record.path
    else:
        assert record.path == UPSTREAM_PATHS[kind], record.path
    assert "client-key" not in json.dumps(record.headers)
    u = Upstream(kind, record)
    assert u.streamed() == stream
    if kind == "interactions":
        from interactions_clients import check_request

        check_request(record.body)
    return u


# --- text, system, settings ------------------------------------------------------------------


@pytest.mark.parametrize("stream", STREAMS)
def test_text_with_system_and_settings(client, mock, kind, stream):
    mock.enqueue(Turn([Text(UNICODE)], split_bytes=3, usage=Usage(input_tokens=30, output_tokens=9)))
    r = client.ask(PROVIDER_MODELS[kind], HI, stream=stream, system="be brief", max_tokens=256, temperature=0.3)
    assert r.text == UNICODE and r.stop == "end_turn"
    assert r.interaction["status"] == "completed" and r.interaction["id"]
    assert r.usage["input"] == 30 and r.usage["output"] == 9
    u = upstream(mock, kind, stream)
    assert u.system() == "be brief" and u.user_texts() == ["hi"] and u.max_tokens() == 256
    if stream:
        kinds = [e["event_type"] for e in r.interaction["events"]]
        assert kinds[0] == "interaction.created" and kinds[-1] == "interaction.completed"
        assert {"step.start", "step.delta", "step.stop"} <= set(kinds)
        ids = [e["event_id"] for e in r.interaction["events"]]
        assert len(set(ids)) == len(ids)


@pytest.mark.parametrize("stream", STREAMS)
def test_plain_string_input(client, mock, kind, stream):
    mock.enqueue(Turn([Text("ok")]))
    kw = {"model": PROVIDER_MODELS[kind], "input": "just a string", "store": False}
    if stream:
        events = list(client.client.interactions.create(stream=True, **kw))
        assert events[-1].event_type == "interaction.completed"
    else:
        r = client.client.interactions.create(**kw)
        assert r.status == "completed" and r.steps[-1].content[0].text == "ok"
    assert upstream(mock, kind, stream).user_texts() == ["just a string"]


# --- tools -----------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", STREAMS)
def test_single_tool_call_then_its_result_linked_by_id(client, mock, kind, stream):
    mock.enqueue(Turn([ToolCall("call_1", "get_weather", '{"city": "Paris"}', chunks=['{"ci', 'ty": "Pa', 'ris"}'])],
                      stop=TOOL_STOP))
    r = client.ask(PROVIDER_MODELS[kind], HI, stream=stream, tools=[WEATHER])
    assert r.stop == "tool_use" and r.interaction["status"] == "requires_action"
    assert r.calls == [("call_1", "get_weather", {"city": "Paris"})]
    call_id = "call_1"
    assert upstream(mock, kind, stream).tools() == [("get_weather", WEATHER["parameters"])]

    mock.enqueue(Turn([Text("Sunny in Paris.")]))
    r2 = client.ask(PROVIDER_MODELS[kind], HI + [("assistant", r), ("tool", call_id, "sunny")], stream=stream,
                    tools=[WEATHER])
    assert r2.text == "Sunny in Paris." and r2.stop == "end_turn"
    u = upstream(mock, kind, stream)
    ((up_id, up_name, up_args),) = u.calls()
    assert (up_name, up_args) == ("get_weather", {"city": "Paris"})
    ((result_id, result),) = u.results()
    assert up_id == result_id == "call_1" and "sunny" in result


@pytest.mark.parametrize("stream", STREAMS)
def test_parallel_and_no_argument_calls(client, mock, kind, stream):
    mock.enqueue(Turn([Text("Checking."), ToolCall("call_a", "get_weather", '{"city": "Paris"}'),
                       ToolCall("call_b", "get_weather", '{"city": "Oslo"}'), ToolCall("call_c", "get_time", "{}")],
                      stop=TOOL_STOP, interleave_tools=True))
    r = client.ask(PROVIDER_MODELS[kind], HI, stream=stream, tools=[WEATHER, NOW])
    assert r.text == "Checking." and r.stop == "tool_use"
    assert [(n, a) for _, n, a in r.calls] == [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Oslo"}),
                                               ("get_time", {})]
    ids = [i for i, _, _ in r.calls]
    assert len(set(ids)) == 3
    tools = upstream(mock, kind, stream).tools()
    assert tools[0] == ("get_weather", WEATHER["parameters"]) and tools[1][0] == "get_time"
    assert tools[1][1] in (None, {"type": "object", "properties": {}}, {"type": "object"})

    mock.enqueue(Turn([Text("Paris sunny, Oslo rainy, noon.")]))
    history = HI + [("assistant", r), ("tool", ids[1], "rainy"), ("tool", ids[0], "sunny"), ("tool", ids[2], "noon")]
    r2 = client.ask(PROVIDER_MODELS[kind], history, stream=stream, tools=[WEATHER, NOW])
    assert r2.text == "Paris sunny, Oslo rainy, noon."
    u = upstream(mock, kind, stream)
    calls = u.calls()
    assert [(n, a) for _, n, a in calls] == [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Oslo"}),
                                             ("get_time", {})]
    results = u.results()
    # Each result reaches the provider naming the call it answers, in the client's order.
    assert [i for i, _, _ in calls] == ["call_a", "call_b", "call_c"]
    assert [i for i, _ in results] == ["call_b", "call_a", "call_c"]
    assert ["rainy" in results[0][1], "sunny" in results[1][1], "noon" in results[2][1]] == [True] * 3


# --- reasoning with signatures replayed ---------------------------------------------------------

SIG = base64.b64encode(b"\xfb\xef\xbe opaque reasoning state \xff\xfe").decode()
# Where each provider's mock carries the opaque state of a reasoning block.
REASONING = {"anthropic": lambda: Reasoning("Look it up.", signature=SIG),
             "gemini": lambda: Reasoning("Look it up.", signature=SIG),
             "interactions": lambda: Reasoning("Look it up.", signature=SIG),
             "responses": lambda: Reasoning("Look it up.", encrypted_content=SIG, summary=True),
             "chat": lambda: Reasoning("Look it up.")}


@pytest.mark.parametrize("stream", STREAMS)
def test_reasoning_state_is_replayed_byte_identical(client, mock, kind, stream):
    mock.enqueue(Turn([REASONING[kind](), ToolCall("call_1", "get_weather", '{"city": "Paris"}')], stop=TOOL_STOP,
                      usage=Usage(input_tokens=20, output_tokens=30, reasoning_tokens=18)))
    r = client.ask(PROVIDER_MODELS[kind], HI, stream=stream, tools=[WEATHER], effort="high")
    assert r.reasoning == ["Look it up."] and r.stop == "tool_use"
    (thought,) = [s for s in r.raw["steps"] if s["type"] == "thought"]
    if kind == "chat":
        assert "signature" not in thought
    else:
        # Another family's state rides in the proxy's envelope, never raw.
        assert thought["signature"] and (thought["signature"] == SIG) == (kind == "interactions")
    ((call_id, _, _),) = r.calls

    mock.enqueue(Turn([Text("Sunny.")]))
    r2 = client.ask(PROVIDER_MODELS[kind], HI + [("assistant", r), ("tool", call_id, "sunny")], stream=stream,
                    tools=[WEATHER], effort="high")
    assert r2.text == "Sunny."
    u = upstream(mock, kind, stream)
    if kind != "chat":
        assert u.reasoning_state() == [SIG]


# --- usage, media, structured output -----------------------------------------------------------


@pytest.mark.parametrize("stream", STREAMS)
def test_usage_with_cached_and_thought_tokens(client, mock, kind, stream):
    mock.enqueue(Turn([Reasoning("hm", signature=SIG if kind in ("anthropic", "gemini", "interactions") else None),
                       Text("ok")], usage=Usage(input_tokens=100, output_tokens=30, cached_tokens=40, reasoning_tokens=12)))
    r = client.ask(PROVIDER_MODELS[kind], HI, stream=stream)
    assert r.text == "ok"
    assert r.usage["input"] == 100 and r.usage["cached"] == 40 and r.usage["reasoning"] == 12
    # total_output_tokens: what the model wrote besides its thoughts (as candidatesTokenCount).
    assert r.usage["output"] == 18
    upstream(mock, kind, stream)


RAW_IMAGE = b"\x89PNG\r\n\x1a\n\xfb\xff\xfe\xfa"
STANDARD = base64.b64encode(RAW_IMAGE).decode()


@pytest.mark.parametrize("stream", STREAMS)
def test_image_input(client, mock, kind, stream):
    mock.enqueue(Turn([Text("A tiny PNG.")]))
    r = client.ask(PROVIDER_MODELS[kind], [("user", [{"type": "text", "text": "what is it?"},
                                                     {"type": "image", "media_type": "image/png", "data": STANDARD}])],
                   stream=stream)
    assert r.text == "A tiny PNG."
    u = upstream(mock, kind, stream)
    assert u.user_texts() == ["what is it?"]
    ((media_type, data),) = u.images()
    assert media_type == "image/png"
    assert base64.b64decode(data + "=" * (-len(data) % 4), altchars=b"-_" if "-" in data or "_" in data else None) == RAW_IMAGE


SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "temp": {"type": "number"}},
          "required": ["city", "temp"], "additionalProperties": False}


@pytest.mark.parametrize("stream", STREAMS)
def test_structured_output(client, mock, kind, stream):
    answer = json.dumps({"city": "Paris", "temp": 18.5})
    mock.enqueue(Turn([Text(answer, chunks=[answer[:7], answer[7:19], answer[19:]])]))
    r = client.ask(PROVIDER_MODELS[kind], HI, stream=stream, schema=SCHEMA)
    assert json.loads(r.text) == {"city": "Paris", "temp": 18.5}
    assert upstream(mock, kind, stream).schema() == SCHEMA


# --- the output limit ------------------------------------------------------------------------------

LIMIT_STOP = {"openai_chat_completions": "length", "openai_responses": "incomplete:max_output_tokens",
              "anthropic_messages": "max_tokens", "gemini_generate_content": "MAX_TOKENS",
              "gemini_interactions": "incomplete"}


@pytest.mark.parametrize("stream", STREAMS)
def test_output_limit_is_incomplete(client, mock, kind, stream):
    mock.enqueue(Turn([Text("cut off mid")], stop=LIMIT_STOP))
    r = client.ask(PROVIDER_MODELS[kind], HI, stream=stream, max_tokens=3)
    assert r.text == "cut off mid" and r.interaction["status"] == "incomplete"
    assert upstream(mock, kind, stream).max_tokens() == 3


# --- upstream errors, streams cut short or stalled -----------------------------------------------

# The SDK's class and the Interactions API's error code for each status.
ERRORS = {400: ("BadRequestError", "invalid_request"), 404: ("NotFoundError", "not_found"),
          429: ("RateLimitError", "rate_limit_exceeded"), 500: ("InternalServerError", "api_error")}


def interactions_error(e, status: int) -> dict:
    """The error body, checked as the SDK's own error data (a string code, a message)."""
    assert type(e).__name__ == ERRORS[status][0] and e.status_code == status
    data = CreateInteractionServerErrorData if status >= 500 else CreateInteractionClientErrorData
    data.model_validate(e.body)
    return e.body["error"]


@pytest.mark.parametrize("stream", STREAMS)
@pytest.mark.parametrize("status", [400, 500, pytest.param(404, marks=pytest.mark.slow),
                                    pytest.param(429, marks=pytest.mark.slow)])
def test_upstream_error_is_an_interactions_error(client, mock, kind, stream, status):
    mock.enqueue(Error(status, message=f"upstream says {status}"))
    with pytest.raises(interactions_errors.APIStatusError) as err:
        client.ask(PROVIDER_MODELS[kind], HI, stream=stream)
    body = interactions_error(err.value, status)
    assert body["code"] == ERRORS[status][1] and f"upstream says {status}" in body["message"]
    upstream(mock, kind, stream)


@pytest.mark.parametrize("cut", [2, 4])
def test_stream_cut_short_ends_in_an_error_event(client, mock, kind, cut):
    # Five deltas: every provider's stream is longer than four events.
    mock.enqueue(Turn([Text("a partial answer cut here", chunks=["a", " partial", " answer", " cut", " here"])],
                      cut_after=cut))
    with pytest.raises(StreamFailed) as err:
        client.ask(PROVIDER_MODELS[kind], HI, stream=True)
    events = json.loads(str(err.value))
    assert events[-1]["event_type"] == "error" and events[-1]["error"]["message"]
    assert "interaction.completed" not in [e["event_type"] for e in events]
    upstream(mock, kind, True)


def test_in_stream_provider_error_ends_in_an_error_event(client, mock, kind):
    mock.enqueue(Turn([Text("a partial answer cut here", chunks=["a", " partial", " answer", " cut", " here"])],
                      error_after=3))
    with pytest.raises(StreamFailed) as err:
        client.ask(PROVIDER_MODELS[kind], HI, stream=True)
    events = json.loads(str(err.value))
    assert events[-1]["event_type"] == "error" and events[-1]["error"]["code"] and events[-1]["error"]["message"]
    assert "interaction.completed" not in [e["event_type"] for e in events]
    upstream(mock, kind, True)


@pytest.mark.slow  # waits out the idle timeout
@pytest.mark.parametrize("kind", ["anthropic", "interactions"])
def test_stalled_stream_ends_in_the_idle_timeout_error(harness, mock, kind):
    p = harness.start_proxy(_idle(harness.mock_url, kind))
    try:
        mock.enqueue(Turn([Text("slow answer", chunks=["slow", " answer"])], stall_after=3, stall_secs=3))
        with pytest.raises(StreamFailed) as err:
            Interactions(p).ask(PROVIDER_MODELS[kind], HI, stream=True)
        events = json.loads(str(err.value))
        assert events[-1]["event_type"] == "error" and "sent nothing for 0.5s" in events[-1]["error"]["message"]
        upstream(mock, kind, True)
    finally:
        p.stop()


def _idle(mock_url, kind):
    config = interactions_config(mock_url)
    config["providers"][kind]["read_idle_timeout_secs"] = 0.5
    return config


@pytest.mark.parametrize("kw,field", [
    # The SDK sends a dict that is not a Step as the content of a user_input step.
    ({"input": [{"type": "bogus_step"}]}, "unsupported content type 'bogus_step' (at input[0].content[0])"),
    ({"input": "hi", "extra_body": {"input": [{"type": "bogus_step"}]}},
     "unknown input step type: bogus_step (not a Step type of the Interactions API) (at input[0].type)"),
    ({"input": "hi", "extra_body": {"tools": "get_weather"}}, "tools"),  # past the SDK's own checks
], ids=["unknown-content-type", "unknown-step-type", "tools-not-a-list"])
def test_bad_input_is_a_400_naming_the_field(iproxy, mock, kw, field):
    client = Interactions(iproxy)
    with pytest.raises(interactions_errors.APIStatusError) as err:
        client.client.interactions.create(model=PROVIDER_MODELS["chat"], store=False, **kw)
    body = interactions_error(err.value, 400)
    assert body["code"] == "invalid_request" and field in body["message"]
    assert mock.requests == []

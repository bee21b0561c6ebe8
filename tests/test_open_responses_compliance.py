"""The Open Responses compliance suite, ported: its seven cases (basic text, streaming, system
prompt, tool calling, streaming tool calling, image input, multi-turn; the openresponses
project's src/lib/compliance-tests.ts), each sent by the official OpenAI SDK to the real
proxy with /v1/responses routed to each of the five provider protocols (the mock upstream
speaks that provider's wire format; Responses is the pass-through).

As the suite does, the Response resource (the JSON body, or the terminal event's snapshot)
must validate against the Open Responses `ResponseResource` schema and every streamed event
against its streaming event schema (tests/data/open-responses/openapi.json, `$ref`s resolved
in the document's components), and then pass the case's semantic checks. Beyond the suite,
each case checks what the provider received and that the SDK read the scripted answer, and
a translated answer's incomplete and failed snapshots are checked the same way.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import httpx2 as httpx
import openai
import pytest
from jsonschema import Draft202012Validator

from interactions_clients import interactions_config
from harness import CLIENT_KEY
from proxai.mock import Text, ToolCall, Turn, Usage

DOC = json.loads((Path(__file__).parent / "data" / "open-responses" / "openapi.json").read_text())
SCHEMAS = DOC["components"]["schemas"]

# Route name (harness and gemini_helpers configs) -> the provider protocol it speaks.
PROVIDERS = {
    "chat": "openai_chat_completions",
    "anthropic": "anthropic_messages",
    "gemini": "gemini_generate_content",
    "responses": "openai_responses",
    "interactions": "gemini_interactions",
}
UPSTREAM_MODEL = "compliance-model"


def _validator(name: str) -> Draft202012Validator:
    # OpenAPI 3.1 schemas are JSON Schema 2020-12; "#/components/..." refs resolve in this root.
    return Draft202012Validator({"$ref": f"#/components/schemas/{name}", "components": DOC["components"]})


RESOURCE = _validator("ResponseResource")
# Event type -> its schema, read off the document (every *StreamingEvent names its one type).
EVENTS = {schema["properties"]["type"]["enum"][0]: _validator(name)
          for name, schema in SCHEMAS.items() if name.endswith("StreamingEvent")}


def schema_errors(validator: Draft202012Validator, instance, what: str) -> list[str]:
    return [f"{what} at /{'/'.join(map(str, e.absolute_path))}: {e.message[:300]}"
            for e in validator.iter_errors(instance)]


# --- the seven cases ---------------------------------------------------------------------

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather for a location",
    "parameters": {
        "type": "object",
        "properties": {"location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"}},
        "required": ["location"],
    },
}
WEATHER_ARGS = '{"location":"San Francisco, CA"}'
# The suite's image: a 32x32 PNG of a red heart on a white background.
IMAGE_URL = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAACAAAAAgCAIAAAD8GO2jAAABmklEQVR42tyWAaTyUBzFew/eG4AHz+MBSAHKBiJRGFKwIgQQJKLUIioBIhCA"
    "iCAAEizAQIAECaASqFFJq84nudjnaqvuPnxzgP9xfrq5938csPn7PwHTKSoViCIEAYEAMhmoKsU2mUCWEQqB5xEMIp/HaGQG2G6RSuH9HQ7H34rFrtPbdz4jl6PbwmEs"
    "l3QA1mt4vcRKk8dz9eg6IpF7tt9fzGY0gCgafFRFo5Blc5vLhf3eCOj1yNhM5GRMVK0aATxPZoz09YXjkQDmczJgquGQAPp9WwCNBgG027YACgUC6HRsAZRKBDAY2AJo"
    "Nv/ZnwzA6WScznG3p4UAymXGAEkyXrTFAh8fLAGqagQAyGaZpYsi7bHTNPz8MEj//LxuFPo+UBS8vb0KaLXubrRa7aX0RMLCykwmn0z3+XA4WACcTpCkh9MFAZpmuVXo"
    "+mO/w+/HZvNgbblcUCxaSo/Hyck80Yu6XXDcvfVZr79cvMZjuN2U9O9vKAqjZrfbIZ0mV4TUi9Xqz6jddNy//7+e3n8Fhf/Llo2kxi8AQyGRoDkmAhAAAAAASUVORK5C"
    "YII="
)


def user(content) -> dict:
    return {"type": "message", "role": "user", "content": content}


@dataclass
class Sent:
    """What the provider received, whatever its protocol: instructions, text turns, images
    (as data URLs) and the names of the tools declared."""
    system: str | None
    turns: list[tuple[str, str]]
    images: list[str]
    tools: list[str]


@dataclass(frozen=True)
class Case:
    id: str
    input: list
    reply: Turn
    checks: tuple  # the suite's validators: (response, events) -> error messages
    sent: Callable[[Sent], None]
    stream: bool = False
    tools: list | None = None


def has_output(response, events) -> list[str]:
    return [] if response.get("output") else ["Response has no output items"]


def completed_status(response, events) -> list[str]:
    status = response.get("status")
    return [] if status == "completed" else [f'Expected status "completed" but got "{status}"']


def has_output_type(kind: str):
    def check(response, events) -> list[str]:
        found = any(item.get("type") == kind for item in response.get("output") or ())
        return [] if found else [f'Expected output item of type "{kind}" but none found']
    return check


def streaming_events(response, events) -> list[str]:
    return [] if events else ["No streaming events received"]


def function_call_events(response, events) -> list[str]:
    types = [e.get("type") for e in events]
    errors = []
    if not any(e.get("type") == "response.output_item.added" and (e.get("item") or {}).get("type") == "function_call"
               for e in events):
        errors.append("Missing response.output_item.added event with function_call item")
    for needed in ("response.function_call_arguments.delta", "response.function_call_arguments.done"):
        if needed not in types:
            errors.append(f"Missing {needed} event")
    if not any(e.get("type") == "response.output_item.done" and (e.get("item") or {}).get("type") == "function_call"
               for e in events):
        errors.append("Missing response.output_item.done event with function_call item")
    return errors


def only_user(text: str):
    def check(sent: Sent) -> None:
        assert sent.system is None and sent.turns == [("user", text)] and sent.images == []
    return check


def weather_question(sent: Sent) -> None:
    assert sent.turns == [("user", "What's the weather like in San Francisco?")]
    assert sent.tools == ["get_weather"]


def pirate(sent: Sent) -> None:
    assert sent.system == "You are a pirate. Always respond in pirate speak."
    assert sent.turns == [("user", "Say hello.")]


def image_question(sent: Sent) -> None:
    assert sent.turns == [("user", "What do you see in this image? Answer in one sentence.")]
    assert sent.images == [IMAGE_URL]


def alice(sent: Sent) -> None:
    assert sent.turns == [("user", "My name is Alice."),
                          ("assistant", "Hello Alice! Nice to meet you. How can I help you today?"),
                          ("user", "What is my name?")]


def answer(text: str, chunks=None) -> Turn:
    return Turn([Text(text, chunks=chunks)], usage=Usage(input_tokens=21, output_tokens=9))


def weather_call(chunks=None) -> Turn:
    return Turn([ToolCall("call_weather_sf", "get_weather", WEATHER_ARGS, chunks=chunks)],
                usage=Usage(input_tokens=60, output_tokens=18))


CASES = [
    Case("basic-response", [user("Say hello in exactly 3 words.")], answer("Hello, dear friend."),
         (has_output, completed_status), only_user("Say hello in exactly 3 words.")),
    Case("streaming-response", [user("Count from 1 to 5.")], answer("1, 2, 3, 4, 5", chunks=["1, ", "2, 3", ", 4, 5"]),
         (streaming_events, completed_status), only_user("Count from 1 to 5."), stream=True),
    Case("system-prompt",
         [{"type": "message", "role": "system", "content": "You are a pirate. Always respond in pirate speak."},
          user("Say hello.")],
         answer("Ahoy, matey!"), (has_output, completed_status), pirate),
    Case("tool-calling", [user("What's the weather like in San Francisco?")], weather_call(),
         (has_output, has_output_type("function_call")), weather_question, tools=[WEATHER_TOOL]),
    Case("tool-calling-streaming", [user("What's the weather like in San Francisco?")],
         weather_call(chunks=['{"location":', '"San Francisco, ', 'CA"}']),
         (streaming_events, function_call_events), weather_question, stream=True, tools=[WEATHER_TOOL]),
    Case("image-input",
         [user([{"type": "input_text", "text": "What do you see in this image? Answer in one sentence."},
                {"type": "input_image", "image_url": IMAGE_URL}])],
         answer("A red heart on a white background."), (has_output, completed_status), image_question),
    Case("multi-turn",
         [user("My name is Alice."),
          {"type": "message", "role": "assistant", "content": "Hello Alice! Nice to meet you. How can I help you today?"},
          user("What is my name?")],
         answer("Your name is Alice."), (has_output, completed_status), alice),
]


# --- what the provider received, per protocol ---------------------------------------------


def _texts(content, text_types=("text", "input_text", "output_text")) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [p["text"] for p in content or () if isinstance(p, dict) and p.get("type") in text_types]


def _joined(texts: list[str]) -> str | None:
    return "\n".join(texts) if texts else None


def _sent_chat(body: dict) -> Sent:
    system, turns, images = [], [], []
    for msg in body["messages"]:
        if msg["role"] in ("system", "developer"):
            system += _texts(msg["content"])
            continue
        turns += [(msg["role"], t) for t in _texts(msg.get("content"))]
        if isinstance(msg.get("content"), list):
            images += [p["image_url"]["url"] for p in msg["content"] if p.get("type") == "image_url"]
    return Sent(_joined(system), turns, images, [t["function"]["name"] for t in body.get("tools") or ()])


def _sent_anthropic(body: dict) -> Sent:
    turns, images = [], []
    for msg in body["messages"]:
        turns += [(msg["role"], t) for t in _texts(msg["content"])]
        if isinstance(msg["content"], list):
            images += [f"data:{b['source']['media_type']};base64,{b['source']['data']}"
                       for b in msg["content"] if b.get("type") == "image"]
    system = body.get("system")
    return Sent(_joined(_texts(system)) if system else None, turns, images, [t["name"] for t in body.get("tools") or ()])


def _sent_gemini(body: dict) -> Sent:
    turns, images = [], []
    for content in body["contents"]:
        role = {"user": "user", "model": "assistant"}[content["role"]]
        turns += [(role, p["text"]) for p in content["parts"] if "text" in p]
        images += [f"data:{p['inlineData']['mimeType']};base64,{p['inlineData']['data']}"
                   for p in content["parts"] if "inlineData" in p]
    system = body.get("systemInstruction")
    tools = [f["name"] for t in body.get("tools") or () for f in t.get("functionDeclarations") or ()]
    return Sent(_joined([p["text"] for p in system["parts"]]) if system else None, turns, images, tools)


def _sent_responses(body: dict) -> Sent:
    system, turns, images = [], [], []
    if body.get("instructions"):
        system.append(body["instructions"])
    for item in body["input"]:
        if item.get("role") in ("system", "developer"):
            system += _texts(item["content"])
            continue
        turns += [(item["role"], t) for t in _texts(item["content"])]
        if isinstance(item["content"], list):
            images += [p["image_url"] for p in item["content"] if p.get("type") == "input_image"]
    return Sent(_joined(system), turns, images, [t["name"] for t in body.get("tools") or ()])


def _sent_interactions(body: dict) -> Sent:
    roles = {"user_input": "user", "model_output": "assistant"}
    steps = body["input"] if isinstance(body["input"], list) else [{"type": "user_input", "content": body["input"]}]
    turns, images = [], []
    for step in steps:
        if step.get("type") in roles:
            turns += [(roles[step["type"]], t) for t in _texts(step.get("content"))]
            images += [f"data:{c['mime_type']};base64,{c['data']}"
                       for c in step.get("content") or () if isinstance(c, dict) and c.get("type") == "image"]
    return Sent(body.get("system_instruction"), turns, images, [t["name"] for t in body.get("tools") or ()])


SENT = {"openai_chat_completions": _sent_chat, "anthropic_messages": _sent_anthropic,
        "gemini_generate_content": _sent_gemini, "openai_responses": _sent_responses,
        "gemini_interactions": _sent_interactions}


# --- the client's side: the SDK, with the bytes it read kept -------------------------------


class _Tee(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, sink: bytearray):
        self._inner, self._sink = inner, sink

    def __iter__(self):
        for chunk in self._inner:
            self._sink.extend(chunk)
            yield chunk

    def close(self) -> None:
        self._inner.close()


class Tap(httpx.BaseTransport):
    """An HTTP transport that keeps the body of every response the SDK read."""

    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport()
        self.bodies: list[bytearray] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._inner.handle_request(request)
        sink = bytearray()
        self.bodies.append(sink)
        return httpx.Response(response.status_code, headers=response.headers,
                              stream=_Tee(response.stream, sink), extensions=response.extensions)

    def close(self) -> None:
        self._inner.close()


def sse_data(raw: bytes) -> list[dict]:
    """The JSON data of each SSE event (the `[DONE]` sentinel skipped, as the suite does)."""
    events = []
    for frame in raw.decode().replace("\r\n", "\n").split("\n\n"):
        data = "\n".join(line[5:].strip() for line in frame.split("\n") if line.startswith("data:"))
        if data and data != "[DONE]":
            events.append(json.loads(data))
    return events


@pytest.fixture(scope="module")
def compliance_proxy(harness):
    proxy = harness.start_proxy(interactions_config(harness.mock_url))
    yield proxy
    proxy.stop()


@dataclass
class Client:
    sdk: openai.OpenAI
    tap: Tap


@pytest.fixture
def client(compliance_proxy, mock):
    tap = Tap()
    sdk = openai.OpenAI(base_url=compliance_proxy.url + "/v1", api_key=CLIENT_KEY, max_retries=0,
                        http_client=openai.DefaultHttpxClient(transport=tap))
    yield Client(sdk, tap)
    sdk.close()


def run(client: Client, case: Case, route: str):
    """The case's request through the SDK: (the Response resource as sent, the events as sent,
    the SDK's own parsed final Response)."""
    request = {"model": f"{route}/{UPSTREAM_MODEL}", "input": case.input}
    if case.tools:
        request["tools"] = case.tools
    if not case.stream:
        parsed = client.sdk.responses.create(**request)
        return json.loads(bytes(client.tap.bodies[-1])), [], parsed
    with client.sdk.responses.stream(**request) as stream:
        for _ in stream:
            pass
        parsed = stream.get_final_response()
    events = sse_data(bytes(client.tap.bodies[-1]))
    terminal = [e for e in events if e.get("type") in ("response.completed", "response.failed", "response.incomplete")]
    return (terminal[-1]["response"] if terminal else None), events, parsed


def event_errors(events: list[dict]) -> list[str]:
    errors = []
    for i, event in enumerate(events):
        validator = EVENTS.get(event.get("type"))
        if validator is None:
            errors.append(f"event {i}: {event.get('type')!r} is not an Open Responses streaming event")
        else:
            errors += schema_errors(validator, event, f"event {i} ({event['type']})")
    return errors


@pytest.mark.parametrize("route", list(PROVIDERS))
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_compliance_case(client, mock, case, route):
    mock.enqueue(case.reply)
    response, events, parsed = run(client, case, route)
    errors = event_errors(events) + schema_errors(RESOURCE, response, "response")
    if response is not None:
        errors += [e for check in case.checks for e in check(response, events)]
    assert not errors, "\n".join(errors)

    record = mock.requests[-1]
    assert record.protocol == PROVIDERS[route]
    case.sent(SENT[record.protocol](record.body))
    reply = case.reply.blocks[0]
    if isinstance(reply, Text):
        assert parsed.output_text == reply.text
    else:
        calls = [(i.call_id, i.name, i.arguments) for i in parsed.output if i.type == "function_call"]
        assert calls == [(reply.id, reply.name, reply.arguments)]


# --- beyond the suite: the other terminal snapshots of a translated answer ----------------

TRANSLATED = [route for route, protocol in PROVIDERS.items() if protocol != "openai_responses"]
MAX_TOKENS = {"openai_chat_completions": "length", "anthropic_messages": "max_tokens",
              "gemini_generate_content": "MAX_TOKENS", "gemini_interactions": "incomplete"}


def send(client: Client, route: str, text: str, stream: bool):
    """A plain request (the SDK's create, events parsed one by one when streaming): the
    Response resource or the events as sent, and the SDK's parsed answer or events."""
    request = {"model": f"{route}/{UPSTREAM_MODEL}", "input": [user(text)]}
    if not stream:
        parsed = client.sdk.responses.create(**request)
        return json.loads(bytes(client.tap.bodies[-1])), parsed
    parsed = list(client.sdk.responses.create(stream=True, **request))
    return sse_data(bytes(client.tap.bodies[-1])), parsed


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("route", TRANSLATED)
def test_an_incomplete_answer_is_a_valid_resource(client, mock, route, stream):
    mock.enqueue(Turn([Text("1, 2, 3")], stop=MAX_TOKENS, usage=Usage(input_tokens=8, output_tokens=16)))
    sent, parsed = send(client, route, "Count to 100.", stream)
    if stream:
        errors = event_errors(sent)
        assert not errors, "\n".join(errors)
        assert sent[-1]["type"] == parsed[-1].type == "response.incomplete"
        response, parsed = sent[-1]["response"], parsed[-1].response
    else:
        response = sent
    errors = schema_errors(RESOURCE, response, "response")
    assert not errors, "\n".join(errors)
    assert response["status"] == "incomplete" and response["completed_at"] is None
    assert parsed.incomplete_details.reason == "max_output_tokens"


@pytest.mark.parametrize("route", TRANSLATED)
def test_a_failed_stream_snapshot_is_a_valid_resource(client, mock, route):
    mock.enqueue(Turn([Text("partial answer", chunks=["partial", " answer"])], error_after=1))
    events, parsed = send(client, route, "Say something.", stream=True)
    assert [e["type"] for e in events][-2:] == [e.type for e in parsed][-2:] == ["error", "response.failed"]
    # The `error` event keeps the shape the OpenAI SDK types (code, message, param at the top),
    # which the Open Responses document nests under `error`: only the others are checked.
    errors = event_errors([e for e in events if e["type"] != "error"])
    assert not errors, "\n".join(errors)
    failed = events[-1]["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] and failed["completed_at"] is None


def test_every_streaming_event_schema_is_known():
    """The event table is read off the document: a renamed or missing schema shows here."""
    assert {"response.created", "response.in_progress", "response.completed", "response.output_item.added",
            "response.output_text.delta", "response.function_call_arguments.done", "error"} <= set(EVENTS)


def test_the_validator_catches_a_missing_required_field():
    """The schema check has teeth: a translated Response without one of the fields the
    ResponseResource requires fails."""
    minimal = {"id": "resp_1", "object": "response", "created_at": 1, "status": "completed", "model": "m",
               "output": [], "tools": [], "tool_choice": "auto", "parallel_tool_calls": True}
    missing = {e.message for e in RESOURCE.iter_errors(minimal)}
    assert "'completed_at' is a required property" in missing and "'truncation' is a required property" in missing

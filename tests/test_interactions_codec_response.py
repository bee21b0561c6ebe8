"""The Gemini Interactions response and stream codecs at engine level (no network):
Interaction resources and SSE events of an Interactions provider decoded to the IR, and
IR answers encoded as the Interaction resource and SSE events an Interactions client
gets. Every Interactions body and event here is checked strictly against the
google-genai SDK's own types (proxai.mock.interactions_schema)."""
from __future__ import annotations

import base64
import json

import jsonschema
import orjson
import pytest

import engine
from engine.ruleset import SCHEMAS
from engine.stream import StreamRun
from proxai.http.sse import SSEEvent, SSEParser
from proxai.mock.interactions_schema import assert_event, assert_interaction

GI = "gemini_interactions"
CHAT = "openai_chat_completions"
ANTHROPIC = "anthropic_messages"

IR_EVENT = jsonschema.Draft202012Validator({**json.loads((SCHEMAS / "ir.schema.json").read_text()), "$ref": "#/$defs/event"})
IR_RESPONSE = jsonschema.Draft202012Validator({**json.loads((SCHEMAS / "ir.schema.json").read_text()),
                                               "$ref": "#/$defs/response"})
SIGNED = {"protocol": GI, "provider": "gi"}


@pytest.fixture(scope="module")
def eng():
    return engine.Engine.load()


def provider_ctx(**kw):
    """An Interactions provider behind a Chat client."""
    return engine.Context(client_protocol=CHAT, provider_protocol=GI, provider_name="gi", **kw)


def client_ctx(provider=ANTHROPIC, **kw):
    """An Interactions client in front of another provider."""
    return engine.Context(client_protocol=GI, provider_protocol=provider, provider_name="p", upstream_model="m",
                          client_body={}, **kw)


def interaction(*steps, status="completed", usage=None, **extra):
    body = {"id": "v1_abc", "status": status, "model": "gemini-3-flash-preview", "steps": list(steps),
            "created": "2026-12-02T04:00:00Z", "updated": "2026-12-02T04:00:01Z", **extra}
    if usage is not None:
        body["usage"] = usage
    assert_interaction(body)
    return body


def decode(eng, body):
    ir = eng.decode_response(provider_ctx(), body)
    IR_RESPONSE.validate(ir)
    return ir


def encode(eng, ir, **kw):
    out = eng.encode_response(client_ctx(**kw), ir)
    assert_interaction(out)
    return out


THOUGHT = {"type": "thought", "signature": "U0lHLWJ5dGVz", "summary": [{"type": "text", "text": "Let me "},
                                                                    {"type": "text", "text": "see."}]}
USAGE = {"total_input_tokens": 120, "total_cached_tokens": 100, "total_output_tokens": 7, "total_thought_tokens": 30,
         "total_tokens": 157}


# -- response.decode: an Interactions provider's answer -> IR ------------------------------------

def test_decode_every_output_step(eng):
    ir = decode(eng, interaction(
        THOUGHT,
        {"type": "model_output", "content": [{"type": "text", "text": "Here: "},
                                             {"type": "image", "data": "iVBORw0K", "mime_type": "image/png"},
                                             {"type": "image", "uri": "https://x.test/a.png", "mime_type": "image/png"}]},
        usage=USAGE))
    assert ir["content"] == [
        {"type": "reasoning", "text": "Let me see.", "opaque": {**SIGNED, "signature": "U0lHLWJ5dGVz"}},
        {"type": "text", "text": "Here: "},
        {"type": "image", "source": "base64", "data": "iVBORw0K", "media_type": "image/png"},
        {"type": "image", "source": "url", "url": "https://x.test/a.png", "media_type": "image/png"}]
    assert ir["stop"] == "end_turn" and ir["id"] == "v1_abc" and ir["model"] == "gemini-3-flash-preview"
    # total_input_tokens counts the cached part; output is the answer plus the thoughts.
    assert ir["usage"] == {"input_tokens": 120, "cached_tokens": 100, "output_tokens": 37, "reasoning_tokens": 30}


def test_decode_function_calls_keep_their_ids_and_end_as_tool_use(eng):
    calls = [{"type": "function_call", "id": "fc_1", "name": "get_weather", "arguments": {"city": "Zürich"}},
             {"type": "function_call", "id": "fc_2", "name": "now", "arguments": {}}]
    for status in ("requires_action", "completed"):
        ir = decode(eng, interaction(*calls, status=status))
        assert ir["stop"] == "tool_use"
        assert ir["content"] == [
            {"type": "tool_call", "id": "fc_1", "name": "get_weather", "arguments": '{"city":"Zürich"}'},
            {"type": "tool_call", "id": "fc_2", "name": "now", "arguments": "{}"}]


@pytest.mark.parametrize("status, stop", [("completed", "end_turn"), ("incomplete", "max_tokens"),
                                          ("budget_exceeded", "incomplete"), ("cancelled", "cancelled"),
                                          ("in_progress", "protocol_error")])
def test_decode_status_is_the_stop_reason(eng, status, stop):
    ir = decode(eng, interaction({"type": "model_output", "content": [{"type": "text", "text": "x"}]}, status=status))
    assert ir["stop"] == stop


def test_decode_a_failed_interaction_keeps_the_service_words(eng):
    ir = decode(eng, interaction(status="failed", errors=[{"code": "INTERNAL", "message": "model overloaded"}]))
    assert ir["stop"] == "failed" and ir["error"] == {"code": "INTERNAL", "message": "model overloaded"}
    assert ir["content"] == []


def test_decode_refuses_steps_never_requested(eng):
    body = interaction({"type": "google_search_call", "id": "s1", "arguments": {"queries": ["q"]}})
    with pytest.raises(engine.UpstreamProtocolError, match="unexpected step"):
        eng.decode_response(provider_ctx(), body)


def test_a_provider_signature_goes_back_byte_identical_on_its_thought_step(eng):
    """The round trip through the IR: the signature an Interactions provider gave is what the
    next turn's request gives it back, on the same thought step (request.encode.yaml)."""
    ir = decode(eng, interaction(THOUGHT, {"type": "model_output", "content": [{"type": "text", "text": "ok"}]}))
    request = {"model": "m", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": ir["content"]},
        {"role": "user", "content": [{"type": "text", "text": "more"}]}]}
    out = eng.encode_request(provider_ctx(), request)
    thoughts = [s for s in out["input"] if isinstance(s, dict) and s.get("type") == "thought"]
    assert [t["signature"] for t in thoughts] == ["U0lHLWJ5dGVz"]


# -- response.encode: an IR answer -> the Interaction an Interactions client gets ---------------

ANTHROPIC_THINKING = {"type": "reasoning", "text": "hm", "opaque": {"protocol": ANTHROPIC, "provider": "p",
                                                                   "signature": "EqQBCkYIBRgCKkA"}}


def test_encode_steps_status_and_usage(eng):
    ir = {"id": "msg_1", "model": "claude-x", "created": 1796184000, "stop": "tool_use",
          "content": [ANTHROPIC_THINKING, {"type": "text", "text": "Two "}, {"type": "text", "text": "calls."},
                      {"type": "tool_call", "id": "toolu_1", "name": "f", "arguments": '{"a":1}'},
                      {"type": "tool_call", "id": "toolu_2", "name": "g", "arguments": ""}],
          "usage": {"input_tokens": 120, "cached_tokens": 100, "output_tokens": 37, "reasoning_tokens": 30}}
    out = encode(eng, ir)
    thought, answer, call1, call2 = out["steps"]
    assert out["id"] == "int_msg_1" and out["status"] == "requires_action" and out["model"] == "claude-x"
    assert out["created"] == out["updated"] == "2026-12-02T04:00:00Z"
    # Another family's signature rides only in the proxy's envelope (base64: the field is bytes).
    assert thought["summary"] == [{"type": "text", "text": "hm"}]
    envelope = base64.b64decode(thought["signature"]).decode()
    assert envelope.startswith("pxc1.") and "EqQBCkYIBRgCKkA" not in thought["signature"]
    # Runs of answer content are one model_output step.
    assert answer == {"type": "model_output", "content": [{"type": "text", "text": "Two "}, {"type": "text", "text": "calls."}]}
    assert call1 == {"type": "function_call", "id": "toolu_1", "name": "f", "arguments": {"a": 1}}
    assert call2 == {"type": "function_call", "id": "toolu_2", "name": "g", "arguments": {}}
    assert out["usage"] == {"total_input_tokens": 120, "total_cached_tokens": 100, "total_output_tokens": 7,
                            "total_thought_tokens": 30, "total_tokens": 157}


def test_the_envelope_comes_back_as_the_original_opaque_state(eng):
    """A client replays the thought step it got; request.decode.yaml unwraps the envelope
    into the Anthropic signature the provider gave."""
    out = encode(eng, {"id": "m1", "stop": "end_turn", "content": [ANTHROPIC_THINKING, {"type": "text", "text": "ok"}]})
    body = {"model": "m", "input": [
        {"type": "user_input", "content": [{"type": "text", "text": "hi"}]},
        *out["steps"],
        {"type": "user_input", "content": [{"type": "text", "text": "more"}]}]}
    ir = eng.decode_request(client_ctx(), body)
    reasoning = [{k: v for k, v in p.items() if not k.startswith("_")}
                 for m in ir["messages"] for p in m["content"] if p["type"] == "reasoning"]
    assert reasoning == [ANTHROPIC_THINKING]


def test_encode_images_refusals_and_no_output(eng):
    out = encode(eng, {"id": "r", "stop": "end_turn", "content": [
        {"type": "image", "source": "base64", "data": "iVBORw0K", "media_type": "image/png"},
        {"type": "refusal", "text": "I can't help with that."}]})
    assert out["steps"] == [{"type": "model_output", "content": [
        {"type": "image", "data": "iVBORw0K", "mime_type": "image/png"},
        {"type": "text", "text": "I can't help with that."}]}]
    empty = encode(eng, {"stop": "max_tokens", "content": [{"type": "reasoning", "text": None}]})
    assert empty["steps"] == [] and empty["status"] == "incomplete" and empty["id"].startswith("int_")


@pytest.mark.parametrize("stop, status", [("end_turn", "completed"), ("stop_sequence", "completed"),
                                          ("max_tokens", "incomplete"), ("tool_use", "requires_action"),
                                          ("refusal", "completed"), ("pause_turn", "incomplete"),
                                          ("context_window_exceeded", "incomplete")])
def test_encode_status_table(eng, stop, status):
    assert encode(eng, {"id": "r", "stop": stop, "content": [{"type": "text", "text": "x"}]})["status"] == status


def test_every_ir_stop_has_a_status_or_is_an_error(eng):
    table = eng.tables["ir.stop->gemini_interactions.status"]
    for stop in eng.enums["ir.stop"]:
        if stop in ("failed", "cancelled", "protocol_error"):
            with pytest.raises(engine.TranslationError):
                eng.encode_response(client_ctx(), {"id": "r", "stop": stop, "content": [],
                                                   "error": {"message": "boom"}})
        else:
            assert table.lookup(stop) in eng.enums["gemini_interactions.status"]


# -- stream.decode: an Interactions provider's SSE events -> IR events ------------------------------

def run(eng, events):
    r = StreamRun(eng.streams[("stream.decode", GI)], provider_ctx())
    out = []
    for ev in events:
        assert_event(ev)
        out.extend(r.decode(ev))
    if not any(e["type"] in ("message_stop", "error") for e in out):
        out.extend(r.handle_eof())
    for ev in out:
        IR_EVENT.validate(ev)
    return out


def created(**extra):
    return {"event_type": "interaction.created", "event_id": "e0",
            "interaction": {"id": "v1_s", "status": "in_progress", "model": "gemini-3-flash-preview", "object": "interaction",
                            **extra}}


def completed(status="completed", usage=None):
    body = {"id": "v1_s", "status": status, "object": "interaction"}
    if usage:
        body["usage"] = usage
    return {"event_type": "interaction.completed", "event_id": "e99", "interaction": body}


def delta(index, **d):
    return {"event_type": "step.delta", "index": index, "delta": d}


PROVIDER_STREAM = [
    created(),
    {"event_type": "interaction.status_update", "interaction_id": "v1_s", "status": "in_progress"},
    {"event_type": "step.start", "index": 0, "step": {"type": "thought"}},
    delta(0, type="thought_summary", content={"type": "text", "text": "Thinking"}),
    delta(0, type="thought_signature", signature="U0lH"),
    {"event_type": "step.stop", "index": 0},
    {"event_type": "step.start", "index": 1, "step": {"type": "model_output", "content": [{"type": "text", "text": "Hé"}]}},
    delta(1, type="text", text="llo"),
    {"event_type": "step.stop", "index": 1},
    {"event_type": "step.start", "index": 2, "step": {"type": "function_call", "id": "fc_1", "name": "f", "arguments": {}}},
    delta(2, type="arguments_delta", arguments='{"a":'),
    delta(2, type="arguments_delta", arguments="1}"),
    {"event_type": "step.stop", "index": 2},
    {"event_type": "step.start", "index": 3, "step": {"type": "function_call", "id": "fc_2", "name": "g", "arguments": {}}},
    {"event_type": "step.stop", "index": 3},
    completed("requires_action", USAGE),
]


def test_stream_decode_steps_in_order(eng):
    events = run(eng, PROVIDER_STREAM)
    assert [(e["type"], e.get("index"), e.get("kind")) for e in events] == [
        ("message_start", None, None),
        ("block_start", 0, "reasoning"), ("block_delta", 0, "reasoning"), ("block_opaque", 0, None), ("block_stop", 0, None),
        ("block_start", 1, "text"), ("block_delta", 1, "text"), ("block_delta", 1, "text"), ("block_stop", 1, None),
        ("block_start", 2, "tool_call"), ("block_delta", 2, "tool_call"), ("block_delta", 2, "tool_call"),
        ("block_stop", 2, None),
        # A call whose arguments never streamed gets "{}".
        ("block_start", 3, "tool_call"), ("block_delta", 3, "tool_call"), ("block_stop", 3, None),
        ("message_stop", None, None)]
    assert events[0]["id"] == "v1_s" and events[0]["model"] == "gemini-3-flash-preview"
    assert events[3]["opaque"] == {**SIGNED, "signature": "U0lH"}
    assert [e["delta"] for e in events if e["type"] == "block_delta" and e["kind"] == "text"] == ["Hé", "llo"]
    assert events[9]["id"] == "fc_1" and events[14]["delta"] == "{}"
    assert events[-1] == {"type": "message_stop", "stop": "tool_use",
                          "usage": {"input_tokens": 120, "cached_tokens": 100, "output_tokens": 37, "reasoning_tokens": 30}}


def test_stream_decode_whole_arguments_on_the_start(eng):
    events = run(eng, [created(), {"event_type": "step.start", "index": 0,
                                   "step": {"type": "function_call", "id": "fc_1", "name": "f", "arguments": {"q": "x"}}},
                       {"event_type": "step.stop", "index": 0}, completed()])
    assert [e["delta"] for e in events if e["type"] == "block_delta"] == ['{"q":"x"}']
    assert events[-1]["stop"] == "tool_use"  # completed, but it ended on a call


def test_stream_decode_usage_from_the_last_report(eng):
    events = run(eng, [created(), {"event_type": "interaction.status_update", "interaction_id": "v1_s",
                                   "status": "in_progress", "usage": {"total_input_tokens": 5, "total_output_tokens": 2}},
                       completed("incomplete")])
    assert events[-1] == {"type": "message_stop", "stop": "max_tokens", "usage": {"input_tokens": 5, "output_tokens": 2}}


def test_stream_decode_failures_are_errors(eng):
    failed = run(eng, [created(), {"event_type": "interaction.completed",
                                   "interaction": {"id": "v1_s", "status": "failed"}}])
    assert failed[-1]["type"] == "error" and failed[-1]["status"] == 502
    err = run(eng, [created(), {"event_type": "error", "error": {"code": "rate_limit_exceeded", "message": "quota"}}])
    assert err[-1] == {"type": "error", "status": 429, "error_type": "rate_limit_exceeded", "message": "quota"}
    google = run(eng, [created(), {"event_type": "error", "error": {"code": "UNAVAILABLE", "message": "busy"}}])
    assert google[-1]["status"] == 503
    cut = run(eng, [created(), {"event_type": "step.start", "index": 0, "step": {"type": "model_output", "content": []}},
                    delta(0, type="text", text="partial")])
    assert cut[-1]["type"] == "error" and cut[-1]["error_type"] == "incomplete_stream"
    with pytest.raises(engine.UpstreamProtocolError, match="unexpected step"):
        run(eng, [created(), {"event_type": "step.start", "index": 0,
                              "step": {"type": "code_execution_call", "id": "x", "arguments": {"code": "1"}}}])


# -- stream.encode: IR events -> the SSE events an Interactions client gets ---------------------------

def client_events(wire: list[bytes]) -> list[dict]:
    """Each SSE message: `event: <event_type>` and data JSON that validates as the SDK's event."""
    out = []
    for message in wire:
        head, _, data = message.partition(b"\ndata: ")
        assert head.startswith(b"event: ") and message.endswith(b"\n\n")
        event = orjson.loads(data)
        assert head[len(b"event: "):].decode() == event["event_type"]
        assert_event(event)
        out.append(event)
    return out


IR_STREAM = [
    {"type": "message_start", "id": "msg_1", "model": "claude-x", "created": 1796184000, "usage": {"input_tokens": 9}},
    {"type": "block_start", "index": 0, "kind": "reasoning"},
    {"type": "block_delta", "index": 0, "kind": "reasoning", "delta": "hm"},
    {"type": "block_opaque", "index": 0, "opaque": {"protocol": ANTHROPIC, "provider": "p", "signature": "EqQB"}},
    {"type": "block_stop", "index": 0},
    {"type": "block_start", "index": 1, "kind": "text", "text": "hé"},
    {"type": "block_delta", "index": 1, "kind": "text", "delta": "llo"},
    {"type": "block_stop", "index": 1},
    {"type": "block_start", "index": 2, "kind": "tool_call", "id": "toolu_1", "name": "f"},
    {"type": "block_delta", "index": 2, "kind": "tool_call", "delta": '{"a"'},
    {"type": "block_delta", "index": 2, "kind": "tool_call", "delta": ": 1}"},
    {"type": "block_stop", "index": 2},
    {"type": "message_stop", "stop": "tool_use",
     "usage": {"input_tokens": 9, "cached_tokens": 4, "output_tokens": 8, "reasoning_tokens": 3}},
]


def test_stream_encode_events_in_order_with_resumable_ids(eng):
    events = client_events(eng.open_stream(client_ctx()).push(IR_STREAM))
    assert [(e["event_type"], e.get("index")) for e in events] == [
        ("interaction.created", None),
        ("step.start", 0), ("step.delta", 0), ("step.delta", 0), ("step.stop", 0),
        ("step.start", 1), ("step.delta", 1), ("step.delta", 1), ("step.stop", 1),
        ("step.start", 2), ("step.delta", 2), ("step.delta", 2), ("step.stop", 2),
        ("interaction.completed", None)]
    assert [e["event_id"] for e in events] == [f"evt_{n}" for n in range(1, 15)]
    assert events[0]["interaction"] == {"id": "int_msg_1", "status": "in_progress", "model": "claude-x",
                                        "object": "interaction", "created": "2026-12-02T04:00:00Z",
                                        "updated": events[0]["interaction"]["updated"]}
    assert events[1]["step"] == {"type": "thought"}
    assert events[2]["delta"] == {"type": "thought_summary", "content": {"type": "text", "text": "hm"}}
    # The signature (the envelope of the text and the Anthropic signature) is the thought's last delta.
    assert events[3]["delta"]["type"] == "thought_signature"
    assert base64.b64decode(events[3]["delta"]["signature"]).startswith(b"pxc1.")
    assert events[5]["step"] == {"type": "model_output", "content": []}
    assert [e["delta"] for e in events[6:8]] == [{"type": "text", "text": "hé"}, {"type": "text", "text": "llo"}]
    assert events[9]["step"] == {"type": "function_call", "id": "toolu_1", "name": "f", "arguments": {}}
    assert "".join(e["delta"]["arguments"] for e in events[10:12]) == '{"a": 1}'
    done = events[-1]["interaction"]
    assert done["status"] == "requires_action" and done["id"] == "int_msg_1"
    assert done["usage"] == {"total_input_tokens": 9, "total_cached_tokens": 4, "total_output_tokens": 5,
                             "total_thought_tokens": 3, "total_tokens": 17}


def test_stream_encode_steps_are_numbered_in_start_order(eng):
    """IR block indexes need not be 0, 1, 2 (a server tool's blocks have no step); steps are."""
    events = client_events(eng.open_stream(client_ctx()).push([
        {"type": "message_start", "id": "m", "model": "x"},
        {"type": "block_start", "index": 0, "kind": "web_search_call", "id": "ws", "query": "q"},
        {"type": "block_stop", "index": 0},
        {"type": "block_start", "index": 5, "kind": "text"},
        {"type": "block_delta", "index": 5, "kind": "text", "delta": "a"},
        {"type": "block_stop", "index": 5},
        {"type": "message_stop", "stop": "max_tokens"}]))
    assert [(e["event_type"], e.get("index")) for e in events] == [
        ("interaction.created", None), ("step.start", 0), ("step.delta", 0), ("step.stop", 0),
        ("interaction.completed", None)]
    assert events[-1]["interaction"]["status"] == "incomplete"


def test_stream_encode_parallel_calls_one_step_at_a_time(eng):
    events = client_events(eng.open_stream(client_ctx(CHAT)).push([
        {"type": "message_start", "id": "c", "model": "x"},
        {"type": "block_start", "index": 0, "kind": "tool_call", "id": "c1", "name": "f"},
        {"type": "block_start", "index": 1, "kind": "tool_call", "id": "c2", "name": "g"},
        {"type": "block_delta", "index": 1, "kind": "tool_call", "delta": "{}"},
        {"type": "block_delta", "index": 0, "kind": "tool_call", "delta": '{"x":1}'},
        {"type": "block_stop", "index": 0},
        {"type": "block_stop", "index": 1},
        {"type": "message_stop", "stop": "tool_use"}]))
    steps = [(e["event_type"], e.get("index"), e.get("step", {}).get("id")) for e in events[1:-1]]
    assert steps == [("step.start", 0, "c1"), ("step.delta", 0, None), ("step.stop", 0, None),
                     ("step.start", 1, "c2"), ("step.delta", 1, None), ("step.stop", 1, None)]


@pytest.mark.parametrize("ending", [
    {"type": "error", "status": 429, "error_type": "rate_limit_error", "message": "slow down"},
    {"type": "message_stop", "stop": "failed"}])
def test_stream_encode_a_failure_ends_with_an_error_event(eng, ending):
    events = client_events(eng.open_stream(client_ctx()).push([IR_STREAM[0], IR_STREAM[5], ending]))
    assert events[-1]["event_type"] == "error"
    assert not any(e["event_type"] == "interaction.completed" for e in events)
    if ending["type"] == "error":
        assert events[-1]["error"] == {"code": "rate_limit_exceeded", "message": "slow down"}


def sse(events: list[dict]) -> bytes:
    return b"".join(b"event: " + e["event_type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in events)


def test_a_cut_upstream_ends_with_an_error_event_never_a_completion(eng):
    translator = eng.open_stream(engine.Context(client_protocol=GI, provider_protocol=GI, provider_name="gi",
                                                upstream_model="m", client_body={}))
    wire = []
    for ev in PROVIDER_STREAM[:8]:
        wire += translator.feed(SSEEvent(ev["event_type"], orjson.dumps(ev).decode()))
    wire += translator.eof()
    events = client_events(wire)
    assert events[-1]["event_type"] == "error" and "interaction.completed" not in [e["event_type"] for e in events]
    assert "ended before" in events[-1]["error"]["message"]


def test_unicode_split_across_network_chunks(eng):
    """A multi-byte character cut between two reads arrives whole, whichever byte the cut falls on."""
    text = "Grüße ✓ 🙂"
    stream = sse([created(), {"event_type": "step.start", "index": 0, "step": {"type": "model_output", "content": []}},
                  delta(0, type="text", text=text), {"event_type": "step.stop", "index": 0}, completed()])
    middle = stream.index(text.encode())
    for cut in range(middle, middle + len(text.encode()) + 1):
        translator = eng.open_stream(client_ctx(GI))
        parser, wire = SSEParser(), []
        for piece in (stream[:cut], stream[cut:]):
            for ev in parser.feed(piece):
                wire += translator.feed(ev)
        events = client_events(wire)
        assert "".join(e["delta"]["text"] for e in events if e["event_type"] == "step.delta") == text
        assert events[-1]["event_type"] == "interaction.completed"


def test_a_protocol_hooks_module_brings_its_stream_state_objects(tmp_path):
    """A protocol folder's hooks module lists its state objects in OBJECTS, named <protocol>.<name>,
    as stream files find them (engine/wire.py); another name is a rule error naming the module."""
    from engine.hooks import PROTOCOL_OBJECTS
    from engine.wire import protocol_hooks

    (tmp_path / "protocol.yaml").write_text("")
    (tmp_path / "h.py").write_text("class Box:\n    def __init__(self, ctx):\n        pass\n"
                                   "HOOKS = {}\nOBJECTS = {'toy_x.box': Box, 'other.box': Box}\n")
    hooks, problems = protocol_hooks({"toy_x": ({"hooks": "h.py"}, str(tmp_path / "protocol.yaml"))})
    assert hooks == {} and PROTOCOL_OBJECTS["toy_x.box"].__name__ == "Box" and "other.box" not in PROTOCOL_OBJECTS
    assert len(problems) == 1 and "state object 'other.box' must be named toy_x.<name>" in str(problems[0])
    assert "gemini_interactions.steps_out" in PROTOCOL_OBJECTS

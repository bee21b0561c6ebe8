"""The pass-through relay's reading of a stream is the stream.decode rules' reading.

The relay skips the events rules/tables/relay.yaml marks `skip` (content deltas). On
every recorded stream (the corpus, and every stream case of the codec tests) it must
reach exactly what it reaches when it decodes every event: the same outcome, usage,
stop, tool-argument state after each event, and the same bytes appended.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import engine
from proxai.http.relay import FRAGMENTS, SKIP, SKIP_REPEATS, Relay, relay_table_name
from proxai.http.sse import SSEEvent, SSEParser
from proxai.http.streaming import Outcome

TESTS = Path(__file__).parent
PROTOCOLS = ("openai_chat_completions", "openai_responses", "anthropic_messages")


@pytest.fixture(scope="module")
def eng():
    return engine.Engine.load()


def _recorded() -> list:
    streams = []
    for path in sorted((TESTS / "corpus").glob("*/*/stream/*.sse")):
        protocol = path.parent.parent.name
        events = SSEParser().feed(path.read_bytes())
        streams.append(pytest.param(protocol, [("event", e) for e in events] + [("eof", None)],
                                    id=str(path.relative_to(TESTS / "corpus"))))
    for line in (TESTS / "golden" / "cases.jsonl").read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        if case.get("kind") != "stream" or case["source"] not in PROTOCOLS:
            continue
        steps = []
        for step in case["steps"]:
            if "data" in step:
                steps.append(("event", SSEEvent(step.get("event"), step["data"])))
            elif step.get("eof"):
                steps.append(("eof", None))
            else:
                steps.append(("fail", step))
        streams.append(pytest.param(case["source"], steps, id=case["id"]))
    return streams


def _run(eng, protocol: str, steps: list, decode_all: bool) -> list:
    relay = Relay(protocol, eng, engine.Context(client_protocol=protocol, provider_protocol=protocol,
                                                provider_name="p", client_body={}))
    if decode_all:
        relay._plan = {k: v for k, v in relay._plan.items() if v not in (SKIP, SKIP_REPEATS, FRAGMENTS)}
    seen = []
    for kind, item in steps:
        if kind == "event":
            out = relay.feed(item)
        elif kind == "eof":
            out = relay.eof()
        else:
            out = relay.fail(Outcome.IDLE_TIMEOUT, "stalled")
        seen.append((relay.outcome, relay.in_tool_arguments, b"".join(out)))
    return [*seen, relay.usage, relay.stop]


@pytest.mark.parametrize("protocol, steps", _recorded())
def test_skipping_content_deltas_changes_nothing_the_relay_acts_on(eng, protocol, steps):
    assert _run(eng, protocol, steps, decode_all=False) == _run(eng, protocol, steps, decode_all=True)


def test_the_corpus_is_read(eng):
    recorded = _recorded()
    assert len([p for p in recorded if p.values[0] == "anthropic_messages"]) > 10
    complete = sum(_run(eng, p.values[0], p.values[1], decode_all=False)[-3][0] in (Outcome.COMPLETE, Outcome.COMPLETE_WITHOUT_DONE)
                   for p in recorded)
    assert complete > len(recorded) // 2


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_relay_table_names_events_the_decoder_knows(eng, protocol):
    table = eng.tables[relay_table_name(protocol)]
    decoder = eng.streams[("stream.decode", protocol)]
    assert table.default == "decode"
    for key, plan in table.map.items():
        assert plan in ("decode", "skip", "skip_repeats", "fragments", "end"), key
        if decoder.split is None:  # Chat's keys are the split's sub-events (openai_chat_completions.events)
            assert key in decoder.on, f"{key} is not an event of {decoder.file}"
    assert "end" in table.map.values()


def test_chat_tool_argument_fragments_are_decoded_once_per_call(eng):
    """The `fragments` plan: a call's later argument fragments are held and decoded as one."""
    protocol = "openai_chat_completions"
    relay = Relay(protocol, eng, engine.Context(client_protocol=protocol, provider_protocol=protocol,
                                                provider_name="p", client_body={}))
    handled = []
    handle = relay.decoder.handle
    relay.decoder.handle = lambda key, sub: handled.append((key, sub.get("arguments"))) or handle(key, sub)

    def chunk(delta=None, finish=None):
        return SSEEvent(None, json.dumps({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                                          "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}))

    def call(index, arguments, **start):
        fn = {"arguments": arguments, **({"name": start["name"]} if start else {})}
        return {"tool_calls": [{"index": index, **({"id": start["id"], "type": "function"} if start else {}),
                                "function": fn}]}

    events = [chunk(call(0, "", id="a", name="f")), chunk(call(1, "", id="b", name="g"))]
    for i in range(20):  # interleaved, as the bench's upstream sends them
        events += [chunk(call(0, '{"x": ' if i == 0 else "1" if i < 19 else "1}")),
                   chunk(call(1, '{"y": ' if i == 0 else "2" if i < 19 else "2}"))]
    events += [chunk(finish="tool_calls"), SSEEvent(None, "[DONE]")]
    states = []
    for e in events:
        relay.feed(e)
        states.append(relay.in_tool_arguments)
    assert relay.outcome is Outcome.COMPLETE and relay.stop == "tool_use"
    assert states[:-2] == [True] * (len(events) - 2) and states[-2:] == [False, False]
    calls = [args for key, args in handled if key == "tool_call"]
    assert calls == ["", "", '{"x": ' + "1" * 19 + "}", '{"y": ' + "2" * 19 + "}"]
    assert relay.objections == 0  # the rules saw whole, valid arguments

"""Fuzz: request bodies built from each protocol's own fields, with well-formed and arbitrary
values, sent to every pair. The proxy answers each with a success or a 4xx in the client's
protocol: never a 5xx, never a crash, and a refused request never reaches the upstream.

The budget is bounded (examples and time); under CI the examples are derandomized so a run
is reproducible.
"""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_passthrough_e2e import raw_post
from test_stream_integrity import ANTHROPIC, CHAT, PATH, PROTOCOLS, RESPONSES, SHORT, outcome

pytestmark = pytest.mark.fuzz

BUDGET = settings(
    max_examples=int(os.environ.get("PROXAI_FUZZ_EXAMPLES", "120")),
    deadline=None,
    derandomize=bool(os.environ.get("CI")),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)

# --- values ----------------------------------------------------------------------------------------

text = st.text(max_size=20)
json_value = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)


def either(good):
    """Mostly well-formed values (nine times in ten), sometimes anything at all."""
    return st.integers(0, 9).flatmap(lambda i: json_value if i == 0 else good)


schema = st.fixed_dictionaries({"type": st.just("object"),
                                "properties": st.dictionaries(st.text(min_size=1, max_size=5),
                                                              st.just({"type": "string"}), max_size=2)})
roles = st.sampled_from(["user", "assistant", "system", "developer", "tool", "function", "bogus"])
count = st.integers(0, 9).flatmap(lambda i: st.integers(min_value=-5, max_value=2**40) if i == 0
                                  else st.integers(min_value=1, max_value=4096))

chat_part = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": text}),
    st.fixed_dictionaries({"type": st.just("image_url"),
                           "image_url": st.fixed_dictionaries({"url": st.just("data:image/png;base64,AAAA")})}),
    st.fixed_dictionaries({"type": st.just("input_audio"), "input_audio": json_value}),
    json_value,
)
chat_call = st.fixed_dictionaries({"id": text, "type": st.just("function"),
                                   "function": st.fixed_dictionaries({"name": text,
                                                                      "arguments": st.sampled_from(["{}", '{"a": 1}', "", "not json", "[1]"])})})
chat_message = st.fixed_dictionaries(
    {"role": either(roles), "content": either(text | st.lists(chat_part, max_size=3) | st.none())},
    optional={"tool_calls": either(st.lists(chat_call, max_size=2)), "tool_call_id": either(text), "name": either(text),
              "refusal": either(text), "reasoning_content": either(text)},
)
chat_tool = st.fixed_dictionaries({"type": st.just("function"),
                                   "function": st.fixed_dictionaries({"name": text}, optional={"parameters": schema,
                                                                                            "description": text})})

anthropic_block = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": text}),
    st.fixed_dictionaries({"type": st.just("tool_use"), "id": text, "name": text, "input": either(st.dictionaries(text, text, max_size=2))}),
    st.fixed_dictionaries({"type": st.just("tool_result"), "tool_use_id": text,
                           "content": either(text | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": text}), max_size=2))}),
    st.fixed_dictionaries({"type": st.just("thinking"), "thinking": text, "signature": text}),
    st.fixed_dictionaries({"type": st.just("image"), "source": json_value}),
    json_value,
)
anthropic_message = st.fixed_dictionaries({"role": either(roles), "content": either(text | st.lists(anthropic_block, max_size=3))})
anthropic_tool = st.fixed_dictionaries({"name": text}, optional={"input_schema": schema, "description": text, "type": text})

responses_item = st.one_of(
    st.fixed_dictionaries({"role": either(roles), "content": either(text | st.lists(st.fixed_dictionaries(
        {"type": st.sampled_from(["input_text", "output_text", "input_image", "refusal", "bogus"]), "text": text}), max_size=2))},
        optional={"type": st.just("message")}),
    st.fixed_dictionaries({"type": st.just("function_call"), "call_id": text, "name": text,
                           "arguments": st.sampled_from(["{}", '{"a": 1}', "", "nope"])}),
    st.fixed_dictionaries({"type": st.just("function_call_output"), "call_id": text, "output": either(text)}),
    st.fixed_dictionaries({"type": st.just("reasoning"), "summary": json_value}, optional={"encrypted_content": text}),
    json_value,
)
responses_tool = st.fixed_dictionaries({"type": st.sampled_from(["function", "web_search", "bogus"]), "name": text},
                                       optional={"parameters": schema})

COMMON = {
    "temperature": either(st.floats(min_value=0, max_value=2)),
    "top_p": either(st.floats(min_value=0, max_value=1)),
    "metadata": either(st.dictionaries(st.text(max_size=5), text, max_size=2)),
    "user": either(text),
    "parallel_tool_calls": either(st.booleans()),
    "x_unknown_field": json_value,
}
FIELDS = {
    CHAT: (
        {"messages": either(st.lists(chat_message, min_size=1, max_size=4))},
        {**COMMON, "max_tokens": either(count), "max_completion_tokens": either(count), "n": either(st.integers(0, 200)),
         "stop": either(text | st.lists(text, max_size=3)), "tools": either(st.lists(chat_tool, max_size=2)),
         "tool_choice": either(st.sampled_from(["auto", "none", "required"]) | st.just({"type": "function", "function": {"name": "f"}})),
         "response_format": either(st.sampled_from([{"type": "json_object"}, {"type": "text"}, {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object"}}}])),
         "stream_options": either(st.just({"include_usage": True})), "seed": either(st.integers()),
         "reasoning_effort": either(st.sampled_from(["minimal", "low", "medium", "high"])),
         "logprobs": either(st.booleans()), "top_logprobs": either(st.integers(-1, 30))},
    ),
    RESPONSES: (
        {"input": either(text | st.lists(responses_item, max_size=4))},
        {**COMMON, "instructions": either(text), "max_output_tokens": either(count),
         "tools": either(st.lists(responses_tool, max_size=2)), "tool_choice": either(st.sampled_from(["auto", "none", "required"])),
         "reasoning": either(st.fixed_dictionaries({}, optional={"effort": st.sampled_from(["minimal", "low", "high", "x"]),
                                                                 "summary": st.sampled_from(["auto", "detailed"])})),
         "text": either(st.just({"format": {"type": "json_object"}})), "store": either(st.booleans()),
         "previous_response_id": either(text), "include": either(st.lists(text, max_size=2)),
         "truncation": either(st.sampled_from(["auto", "disabled"]))},
    ),
    ANTHROPIC: (
        {"messages": either(st.lists(anthropic_message, min_size=1, max_size=4)), "max_tokens": either(count)},
        {**COMMON, "system": either(text | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": text}), max_size=2)),
         "stop_sequences": either(st.lists(text, max_size=3)), "top_k": either(st.integers(-2, 500)),
         "tools": either(st.lists(anthropic_tool, max_size=2)),
         "tool_choice": either(st.sampled_from([{"type": "auto"}, {"type": "any"}, {"type": "tool", "name": "f"}, {"type": "none"}])),
         "thinking": either(st.sampled_from([{"type": "enabled", "budget_tokens": 1024}, {"type": "disabled"}, {"type": "enabled"}]))},
    ),
}


@st.composite
def requests(draw):
    client = draw(st.sampled_from(PROTOCOLS))
    provider = draw(st.sampled_from(PROTOCOLS))
    required, optional = FIELDS[client]
    body = draw(st.fixed_dictionaries(
        {"model": either(st.just(f"{SHORT[provider]}/m")), **required},
        optional={"stream": either(st.booleans()), **optional},
    ))
    # now and then drop a required field
    if draw(st.integers(0, 9)) == 0:
        body.pop(draw(st.sampled_from(sorted(body))), None)
    return client, provider, body


@BUDGET
@given(case=requests())
def test_fuzzed_requests_never_get_a_5xx(proxy, mock, case):
    client, provider, body = case
    before = len(mock.requests)
    status, headers, raw = raw_post(proxy.url, PATH[client], json.dumps(body).encode())
    assert status < 500, (status, raw[:500])
    if status >= 400:
        # Refused at the door; a pass-through pair checks only the top-level shape and
        # forwards the rest untouched, so there the provider's own 4xx may come back.
        assert len(mock.requests) == before or client == provider
        doc = json.loads(raw)
        assert (doc["type"] == "error" and doc["error"]["message"]) if client == ANTHROPIC else doc["error"]["message"]
    elif headers.get("content-type", "").startswith("text/event-stream"):
        assert outcome(client, raw) == "complete"
    else:
        json.loads(raw)


def test_the_proxy_is_still_healthy_after_fuzzing(proxy):
    status, _, _ = raw_post(proxy.url, "/healthz", b"", method="GET")
    assert status == 200
    assert proxy.proxy.active == 0

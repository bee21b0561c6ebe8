"""One outcome vocabulary for both kinds of stream, and the rule location of a translation failure.

Pass-through (client protocol == provider protocol) and translated streams end with the
same `outcome` names in the request log for the same upstream behaviour: a normal end,
a cut stream, the provider's own error event, a malformed event. A translation failure
logs the rule file:line that failed; the client never sees it.
"""

from __future__ import annotations

import json

import pytest

from proxai.mock import Stream, Text, Turn, render
from proxai.http.streaming import Outcome
from test_observability import LogCapture, summary
from test_stream_integrity import ANTHROPIC, CHAT, PATH, PROTOCOLS, RESPONSES, SHORT, request_body
from test_passthrough_e2e import raw_post

TURN = Turn([Text("The quick brown fox jumps.", chunks=["The ", "quick ", "brown ", "fox ", "jumps."])])

# Each client against its own protocol (pass-through) and against another (translated).
PAIRS = [pytest.param(c, p, id=f"{SHORT[c]}<-{SHORT[p]}")
         for c in PROTOCOLS for p in (c, PROTOCOLS[(PROTOCOLS.index(c) + 1) % 3])]


def _error_event(protocol: str, seq: int) -> list:
    if protocol == CHAT:
        return [(None, {"error": {"message": "Overloaded", "type": "server_error", "param": None, "code": None}})]
    if protocol == RESPONSES:
        return [("error", {"type": "error", "code": "server_error", "message": "Overloaded", "param": None,
                           "sequence_number": seq})]
    return [("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})]


_MALFORMED = {
    CHAT: (None, '{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":"x"'),
    RESPONSES: ("response.output_text.delta", "not json at all"),
    ANTHROPIC: ("content_block_delta", '["a", "list"]'),
}


def _reply(case: str):
    def reply(rec):
        events = render(rec.protocol, TURN, rec.body or {})
        if case == "complete":
            return Stream(events=events)
        if case == "cut":
            return Stream(events=events[:4])
        if case == "error_event":
            return Stream(events=[*events[:3], *_error_event(rec.protocol, 3)])
        return Stream(events=[*events[:3], _MALFORMED[rec.protocol], *events[3:]])
    return reply


@pytest.mark.parametrize("case, expected", [
    ("complete", Outcome.COMPLETE),
    ("cut", Outcome.EOF),
    ("error_event", Outcome.UPSTREAM_ERROR),
    ("malformed", Outcome.MALFORMED),
])
@pytest.mark.parametrize("client, provider", PAIRS)
def test_same_outcome_on_both_paths(proxy, mock, client, provider, case, expected):
    mock.enqueue(_reply(case))
    rid = f"oc-{case}-{SHORT[client]}-{SHORT[provider]}"
    with LogCapture("json") as cap:
        status, _, raw = raw_post(proxy.url, PATH[client], request_body(client, provider), {"x-request-id": rid})
        line = summary(cap, rid)
    assert status == 200
    assert line["outcome"] == expected.value
    assert line["level"] == ("warning" if expected.value.startswith("incomplete") else "info")
    if case == "malformed":
        assert b"not json at all" not in raw and b'"list"' not in raw


def test_chat_eof_after_finish_is_complete_without_done_on_both_paths(proxy, mock):
    def reply(rec):
        events = render(rec.protocol, TURN, rec.body or {})
        # No [DONE] and no usage chunk after the finish chunk (a usage chunk completes the stream itself).
        return Stream(events=[e for e in events if e[1] != "[DONE]" and (not isinstance(e[1], dict) or e[1].get("choices"))])

    for provider in (CHAT,):  # only Chat's rules accept an EOF after the finish chunk
        for client in (CHAT, ANTHROPIC):
            mock.enqueue(reply)
            rid = f"nodone-{SHORT[client]}"
            with LogCapture("json") as cap:
                status, _, _ = raw_post(proxy.url, PATH[client], request_body(client, provider), {"x-request-id": rid})
                line = summary(cap, rid)
            assert status == 200 and line["outcome"] == Outcome.COMPLETE_WITHOUT_DONE.value


def test_stream_translation_failure_logs_its_rule_not_to_the_client(proxy, mock):
    mock.enqueue(Stream(events=[
        ("message_start", {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant",
                                                                "model": "x", "content": [], "stop_reason": None,
                                                                "usage": {"input_tokens": 1, "output_tokens": 0}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "hologram_delta"}}),
    ]))
    with LogCapture("json") as cap:
        status, _, raw = raw_post(proxy.url, PATH[CHAT], request_body(CHAT, ANTHROPIC), {"x-request-id": "rule-stream"})
        line = summary(cap, "rule-stream")
    assert status == 200
    assert line["outcome"] == Outcome.MALFORMED.value
    assert "anthropic_messages/stream.decode.yaml:" in line["rule"]
    assert b"stream.decode.yaml" not in raw and b".yaml" not in raw
    error = json.loads(raw.split(b"data: ")[-1])["error"]
    assert error["message"] and "yaml" not in error["message"]


def test_rejected_request_logs_its_rule_not_to_the_client(proxy):
    body = {"model": "anthropic/x", "n": 2, "messages": [{"role": "user", "content": "hi"}]}
    with LogCapture("human") as cap:
        status, _, raw = raw_post(proxy.url, PATH[CHAT], body, {"x-request-id": "rule-400"})
        (line,) = cap.lines_with("request_id=rule-400")
    assert status == 400
    fields = dict(part.split("=", 1) for part in line.split(": ", 1)[1].split(" "))
    assert "anthropic_messages/request.encode.yaml:" in fields["rule"]
    answer = json.loads(raw)
    assert answer["error"]["param"] == "n" and "n > 1" in answer["error"]["message"]
    assert b".yaml" not in raw


def test_a_malformed_event_is_counted_alike_on_both_paths(start_proxy, mock):
    from test_metrics import scrape, value

    p = start_proxy()
    for provider in (ANTHROPIC, CHAT):  # translated, then pass-through, for a Chat client
        mock.enqueue(_reply("malformed"))
        status, _, _ = raw_post(p.url, PATH[CHAT], request_body(CHAT, provider))
        assert status == 200
    s = scrape(p.url)
    for provider in (ANTHROPIC, CHAT):
        assert value(s, "proxai_upstream_errors_total", provider=SHORT[provider], kind="stream_malformed") == 1
        assert value(s, "proxai_requests_total", client_protocol=CHAT, provider_protocol=provider, provider=SHORT[provider],
                     route=SHORT[provider], upstream_model="(from model)", status="200",
                     outcome=Outcome.MALFORMED.value) == 1

"""`resilience.deadline_secs` cuts a running attempt before the commit point (the client
gets a timeout in its own protocol, no fallback is started), and never a stream that
has already sent its first event. Official SDKs against mock upstreams."""

from __future__ import annotations

import anthropic
import openai
import pytest

from proxai.mock import Hang, Text, Turn
from test_resilience_e2e import ANTHROPIC, CHAT, RESPONSES, chat, config, metric, provider, upstreams  # noqa: F401

DEADLINE = {"deadline_secs": 0.5, "sync_secs": 0, "breaker": {"failures": 1, "window_secs": 30, "open_secs": 30}}


def slow_then_backup(upstreams, protocol: str = CHAT, backup_protocol: str = CHAT):
    slow, backup = upstreams(), upstreams()
    extra = {"max_tokens_default": 256} if protocol == ANTHROPIC else {}
    doc = config({"slow": provider(protocol, slow.url, read_idle_timeout_secs=10, **extra),
                  "backup": provider(backup_protocol, backup.url)}, "slow", ["backup"], resilience=DEADLINE)
    return slow, backup, doc


def test_a_non_streamed_attempt_past_the_deadline_is_cut_with_a_504(start_proxy, upstreams):
    slow, backup, doc = slow_then_backup(upstreams)
    p = start_proxy(doc)
    slow.enqueue(Hang(3))  # far longer than the deadline, shorter than the idle timeout
    with pytest.raises(openai.InternalServerError) as info:
        chat(p)
    assert info.value.status_code == 504
    assert "deadline_secs" in info.value.message
    assert info.value.body["type"] == "timeout_error"  # the Chat error shape
    assert len(slow.requests) == 1 and backup.requests == []  # no time left for a fallback
    assert metric(p, "proxai_upstream_attempts_total", provider="slow", outcome="deadline") == 1
    assert metric(p, "proxai_retry_budget_exhausted_total", limit="deadline") == 1
    # The cut counts toward the breaker: a deployment that hangs is taken out.
    assert metric(p, "proxai_breaker_state", provider="slow") == 2
    assert chat(p).choices[0].message.content.startswith("Hello from the ProxAI demo")
    assert len(slow.requests) == 1 and len(backup.requests) == 1


def test_a_stream_without_its_first_event_is_cut_in_the_anthropic_shape(start_proxy, upstreams):
    slow, backup, doc = slow_then_backup(upstreams, ANTHROPIC)
    p = start_proxy(doc)
    slow.enqueue(Hang(3, after_headers=True))  # 200 and headers, then no event
    with pytest.raises(anthropic.APIStatusError) as info:
        with p.anthropic().messages.stream(model="m", max_tokens=32, messages=[{"role": "user", "content": "hi"}]) as s:
            s.get_final_message()
    assert info.value.status_code == 504
    assert info.value.body["error"]["type"] == "timeout_error"
    assert backup.requests == []


def test_a_translated_responses_stream_is_cut_before_it_starts(start_proxy, upstreams):
    slow, backup, doc = slow_then_backup(upstreams, ANTHROPIC)
    p = start_proxy(doc)
    slow.enqueue(Hang(3))
    with pytest.raises(openai.InternalServerError) as info:
        with p.openai().responses.stream(model="m", input="hi") as s:
            s.get_final_response()
    assert info.value.status_code == 504
    assert slow.requests[0].path == "/v1/messages" and backup.requests == []


@pytest.mark.slow  # waits out a slow stream
def test_a_stream_past_its_first_event_is_not_cut_by_the_deadline(start_proxy, upstreams):
    """The stream takes about four times the deadline; once its first event reached the
    client the retry deadline no longer applies (only the provider's idle timeout)."""
    slow, backup, doc = slow_then_backup(upstreams)
    p = start_proxy(doc)
    words = ["one ", "two ", "three ", "four ", "five ", "six"]
    slow.enqueue(Turn([Text("".join(words), chunks=words)], delay_secs=0.25))
    text, finish = "", None
    for chunk in chat(p, stream=True):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    assert text == "one two three four five six" and finish == "stop"
    assert backup.requests == []
    assert metric(p, "proxai_upstream_attempts_total", provider="slow", outcome="deadline") is None


@pytest.mark.slow  # waits out a slow stream
def test_a_route_without_pool_or_fallbacks_is_not_cut(start_proxy, upstreams):
    """One provider with one key: nothing to retry, so the request runs as it always did."""
    up = upstreams()
    p = start_proxy(config({"one": provider(CHAT, up.url)}, "one", resilience={"deadline_secs": 0.3}))
    up.enqueue(Turn([Text("late but whole", chunks=["late ", "but ", "whole"])], delay_secs=0.15))
    assert chat(p).choices[0].message.content == "late but whole"

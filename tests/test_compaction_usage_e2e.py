"""The tokens of a compaction's summarisation call (compact_20260112 toward a provider
without it), end to end with the anthropic SDK's beta client: the client's usage reports
them apart in usage.iterations (the SDK's BetaCompactionIterationUsage, then
BetaMessageIterationUsage for the answer's own call; the top-level counts are that call's,
as Anthropic's), while the request's log line and proxai_tokens_total count both calls,
since both are billed. The same for a Responses client's compaction (responses.compact).
"""
from __future__ import annotations

import logging

import httpx2 as httpx
import pytest
from anthropic.types.beta import BetaCompactionIterationUsage, BetaMessageIterationUsage

from gemini_helpers import gemini_config
from proxai.mock import Text, Turn, Usage

BETAS = ["compact-2026-01-12"]
COMPACT = {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 500}}
HISTORY = [{"role": "user", "content": "OLD-REQUEST " + "context " * 800},
           {"role": "assistant", "content": "OLD-ANSWER"},
           {"role": "user", "content": "LATEST-QUESTION"}]
SUMMARY_USAGE = Usage(input_tokens=900, output_tokens=60, cached_tokens=100)
ANSWER_USAGE = Usage(input_tokens=120, output_tokens=7)


@pytest.fixture
def proxy(start_proxy, harness):
    return start_proxy(gemini_config(harness.mock_url))


def create(client, stream: bool, **kw):
    kw = dict(model="chat/gpt", max_tokens=256, messages=HISTORY, betas=BETAS, **kw)
    if stream:
        with client.beta.messages.stream(**kw) as s:
            for _ in s:
                pass
            return s.get_final_message()
    return client.beta.messages.create(**kw)


def logged(caplog) -> dict:
    [line] = [r.fields for r in caplog.records if getattr(r, "fields", {}).get("path") == "/v1/messages"]
    return line


def tokens_metric(proxy, kind: str) -> float:
    metrics = httpx.get(proxy.url + "/metrics").text
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith("proxai_tokens_total{") and f'kind="{kind}"' in line and 'provider="chat"' in line)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_the_summarisation_call_is_an_iteration_and_counted(proxy, mock, caplog, stream):
    mock.enqueue(Turn([Text("<summary>SUMMARY</summary>")], usage=SUMMARY_USAGE))
    mock.enqueue(Turn([Text("continued")], usage=ANSWER_USAGE))
    with caplog.at_level(logging.INFO, logger="proxai.request"):
        out = create(proxy.anthropic(), stream, context_management={"edits": [COMPACT]})
    assert [b.type for b in out.content] == ["compaction", "text"]
    # The top level is the answer's own call; the iterations are both, the compaction first.
    assert out.usage.input_tokens == 120 and out.usage.output_tokens == 7
    compaction, message = out.usage.iterations
    assert isinstance(compaction, BetaCompactionIterationUsage) and isinstance(message, BetaMessageIterationUsage)
    assert (compaction.input_tokens, compaction.cache_read_input_tokens, compaction.output_tokens) == (800, 100, 60)
    assert (message.input_tokens, message.output_tokens) == (120, 7)
    # Both calls are billed: the log line and the metrics count them.
    line = logged(caplog)
    assert (line["input_tokens"], line["output_tokens"], line["cache_read_tokens"]) == (1020, 67, 100)
    assert tokens_metric(proxy, "input") == 1020 and tokens_metric(proxy, "output") == 67


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_paused_compaction_is_its_one_iteration(proxy, mock, caplog, stream):
    mock.enqueue(Turn([Text("<summary>SUMMARY</summary>")], usage=SUMMARY_USAGE))
    with caplog.at_level(logging.INFO, logger="proxai.request"):
        out = create(proxy.anthropic(), stream,
                     context_management={"edits": [{**COMPACT, "pause_after_compaction": True}]})
    assert out.stop_reason == "compaction"
    [compaction] = out.usage.iterations
    assert compaction.type == "compaction" and compaction.output_tokens == 60
    line = logged(caplog)
    assert (line["input_tokens"], line["output_tokens"]) == (900, 60)  # counted once
    assert tokens_metric(proxy, "output") == 60


def test_no_compaction_no_iterations(proxy, mock):
    mock.enqueue(Turn([Text("short")], usage=ANSWER_USAGE))
    raw = proxy.anthropic().beta.messages.with_raw_response.create(
        model="chat/gpt", max_tokens=16, messages=[{"role": "user", "content": "hi"}], betas=BETAS,
        context_management={"edits": [COMPACT]})
    assert "iterations" not in raw.http_response.json()["usage"]


def test_a_responses_compaction_is_counted_once(proxy, mock, caplog):
    mock.enqueue(Turn([Text("<summary>SUMMARY</summary>")], usage=SUMMARY_USAGE))
    with caplog.at_level(logging.INFO, logger="proxai.request"):
        out = proxy.openai().responses.compact(model="chat/gpt", input="a long story " * 50)
    assert out.usage.output_tokens == 60
    [line] = [r.fields for r in caplog.records if getattr(r, "fields", {}).get("path") == "/v1/responses/compact"]
    assert (line["input_tokens"], line["output_tokens"]) == (900, 60)

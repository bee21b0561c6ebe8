"""The prompt caching cost benchmark on a real (short) session, so it keeps working."""

from __future__ import annotations

import asyncio

import pytest

from bench import agent_session, cache

pytestmark = pytest.mark.timeout(120)


def test_cache_benchmark_auto_is_within_five_points_of_a_direct_client():
    result = asyncio.run(cache.replay(turns=21))
    rows = {(r["client"], r["policy"]): r for r in result["rows"]}
    assert set(rows) == {(cache.CHAT, "auto"), (cache.CHAT, "off"), (cache.RESPONSES, "auto"),
                         (cache.RESPONSES, "off"), (cache.ANTHROPIC, "direct")}
    direct = rows[(cache.ANTHROPIC, "direct")]["read_fraction"]
    assert direct > 0.8
    for client in (cache.CHAT, cache.RESPONSES):
        assert rows[(client, "auto")]["read_fraction"] >= direct - 0.05
        assert rows[(client, "off")]["read_fraction"] == 0 and rows[(client, "off")]["breakpoints_per_request"] == 0
        assert rows[(client, "auto")]["breakpoints_per_request"] == 4
    for r in result["rows"]:
        # What each client was told is what the provider billed: the usage translation is exact.
        assert (r["input_tokens"], r["cache_read_tokens"], r["cache_write_tokens"]) == tuple(r["ledger"].values()), r
    md = cache.markdown(result)
    assert md.count("\n| ") == 6 and "billed as cache reads" in md


def test_billing_mock_reads_only_prefixes_written_at_a_breakpoint():
    mock = cache.BillingAnthropic()
    session = agent_session.build(3)
    first = agent_session.anthropic_request(session, 1, cache.MODEL)
    u1 = mock.bill(first)
    assert u1["cache_read_input_tokens"] == 0 and u1["cache_creation_input_tokens"] > 0
    u2 = mock.bill(agent_session.anthropic_request(session, 2, cache.MODEL))
    assert u2["cache_read_input_tokens"] == u1["cache_creation_input_tokens"]
    # The same prefix without breakpoints reads nothing and writes nothing.
    plain = {**first, "system": [{"type": "text", "text": session.system}],
             "messages": [{**m, "content": [{k: v for k, v in b.items() if k != "cache_control"} for b in m["content"]]}
                          for m in first["messages"]]}
    u3 = mock.bill(plain)
    assert (u3["cache_read_input_tokens"], u3["cache_creation_input_tokens"]) == (0, 0)

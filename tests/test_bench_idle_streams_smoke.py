"""bench.idle_streams on a tiny budget: what idle open streams keep of their requests, by traceback."""

from __future__ import annotations

import asyncio

import pytest

from bench import idle_streams

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

N = 20


def test_an_idle_stream_keeps_no_copy_of_what_was_sent_upstream():
    opts = idle_streams.options(["--streams", str(N), "--silent"])
    result = asyncio.run(idle_streams.run(opts, log=lambda _msg: None))

    runs = {r["pair"]: r for r in result["runs"]}
    assert list(runs) == ["chat->chat", "chat->anthropic"]
    for pair, r in runs.items():
        assert r["errors"] == 0 and r["first_event"] == N, (pair, r["first_error"])
        kinds = {k["where"]: k["bytes"] for k in r["by_kind"]}
        # the classifier sees the copies that stay on purpose: the parsed client body (the stream
        # rules read it, and a retry starts from it) and the bytes aiohttp read
        assert kinds["parsed client body"] > 500 and kinds["client request bytes"] > 500, (pair, kinds)
        assert r["proxy_bytes"] > r["request_copy_bytes"] > 0
        # the request as sent upstream is let go once sent (each was a 4 KiB orjson buffer)
        assert kinds.get("upstream request bytes", 0) < 100, (pair, kinds)
        # every stream ended: no copy of any request is left
        assert r["after_close"]["request_copy_bytes"] < 100, (pair, r["after_close"])
    chat = {k["where"]: k["bytes"] for k in runs["chat->chat"]["by_kind"]}
    # the model name, not orjson's 4 KiB buffer (the quoted name is built once per name and shared)
    assert chat.get("answer model rewriter", 0) < 512, chat
    translated = {k["where"]: k["bytes"] for k in runs["chat->anthropic"]["by_kind"]}
    # the IR and the Anthropic body were ~5.8 KB per stream; what is left is small values the stream shares
    assert translated.get("translated request (IR, provider body)", 0) < 2048, translated

    md = idle_streams.markdown(result)
    size = runs["chat->chat"]["request_bytes"]
    assert f"| chat->chat | {N} | {size} | {N}/{N} |" in md and "request copies B/stream" in md

"""anthropic-beta toward Anthropic providers, end to end with the anthropic SDK (its
`betas=` argument, sent as one comma-joined header), streaming and not: the client's
betas go on except the known-obsolete ones (rules/tables/anthropic_betas.yaml) and those
the provider's `betas: {allow, deny}` does not permit; each one left out is traced."""
from __future__ import annotations

import pytest

from harness import traced
from proxai.mock import Text, Turn

STREAMS = pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
# Claude Code 2.1.328's kind of list: current betas, one obsolete, one it still sends although GA.
CLIENT_BETAS = ["interleaved-thinking-2025-05-14", "prompt-caching-2024-07-31", "advisor-tool-2026-03-01",
                "context-1m-2025-08-07", "mid-conversation-system-2026-04-07"]


def send(client, model, stream):
    kw = dict(model=model, max_tokens=50, messages=[{"role": "user", "content": "hi"}], betas=CLIENT_BETAS)
    if not stream:
        return client.beta.messages.create(**kw).content[0].text
    with client.beta.messages.stream(**kw) as s:
        return s.get_final_message().content[0].text


def sent_betas(mock) -> list | None:
    value = mock.requests[-1].headers.get("anthropic-beta")
    return value.split(",") if value is not None else None


@STREAMS
def test_obsolete_betas_are_not_sent_on(anthropic_client, mock, stream, caplog):
    mock.enqueue(Turn([Text("ok")]))
    with caplog.at_level("DEBUG", logger="proxai"):
        assert send(anthropic_client, "anthropic/claude-opus-4-8", stream) == "ok"
        assert traced(caplog, "anthropic-beta prompt-caching-2024-07-31 not sent: obsolete (prompt caching is generally available)")
    assert sent_betas(mock) == ["interleaved-thinking-2025-05-14", "advisor-tool-2026-03-01", "context-1m-2025-08-07"]


@STREAMS
@pytest.mark.parametrize("betas,expected", [
    ({"deny": ["advisor-tool-*"]}, ["interleaved-thinking-2025-05-14", "context-1m-2025-08-07"]),
    ({"allow": ["context-1m-2025-08-07", "interleaved-*"]}, ["interleaved-thinking-2025-05-14", "context-1m-2025-08-07"]),
    ({"allow": []}, None),
], ids=["deny", "allow", "none"])
def test_the_provider_allow_and_deny_lists(harness, start_proxy, mock, stream, betas, expected, caplog):
    config = harness.default_config()
    config["providers"]["anthropic"]["betas"] = betas
    client = start_proxy(config).anthropic()
    mock.enqueue(Turn([Text("ok")]))
    with caplog.at_level("DEBUG", logger="proxai"):
        assert send(client, "anthropic/claude-opus-4-8", stream) == "ok"
        assert traced(caplog, "anthropic-beta advisor-tool-2026-03-01 not sent: the provider's betas do not permit it")
    assert sent_betas(mock) == expected


@STREAMS
def test_betas_never_reach_other_providers(anthropic_client, mock, stream):
    mock.enqueue(Turn([Text("ok")]))
    assert send(anthropic_client, "chat/gpt-5", stream) == "ok"
    assert sent_betas(mock) is None


def test_betas_is_an_anthropic_provider_setting(harness, start_proxy):
    config = harness.default_config()
    config["providers"]["chat"]["betas"] = {"deny": ["x"]}
    with pytest.raises(Exception, match="only valid for anthropic_messages providers"):
        start_proxy(config)
    config = harness.default_config()
    config["providers"]["anthropic"]["betas"] = {"block": ["x"]}
    with pytest.raises(Exception, match="betas.block"):
        start_proxy(config)

"""Anthropic's context management toward Chat, Responses and Gemini providers, end to end:
the official anthropic SDK's beta client through the real server to the mock providers.
What the provider received (the cleared history, the summarisation call, the history a
compaction block replaces) and what the client got (context_management.applied_edits and
compaction blocks, validated by the SDK's beta types), streaming and not. Toward an
Anthropic provider the same request is forwarded as sent, beta header included.
"""
from __future__ import annotations

import json

import anthropic
import pytest
from anthropic.types.beta import (
    BetaClearThinking20251015EditResponse,
    BetaClearToolUses20250919EditResponse,
    BetaCompactionBlock,
)

from gemini_helpers import gemini_config
from proxai.mock import Text, Turn

PROVIDERS = ["chat", "responses", "gemini"]
MODELS = {"chat": "chat/gpt", "responses": "responses/gpt", "gemini": "gemini/gemini-3-pro-preview"}
BETAS = ["context-management-2025-06-27"]
COMPACT_BETAS = ["compact-2026-01-12"]
PLACEHOLDER = "[Tool result cleared to save context. Call the tool again if you need it.]"
TOOLS = [{"name": name, "description": f"{name} a file", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}
         for name in ("read", "grep")]


@pytest.fixture
def client(start_proxy, harness):
    proxy = start_proxy(gemini_config(harness.mock_url))
    c = proxy.anthropic()
    yield c
    c.close()


def history(uses: int, names=("read",), thinking: bool = False, size: int = 40) -> list[dict]:
    """A conversation of `uses` tool uses; result i reads RESULT-i, input i reads PATH-i."""
    messages: list[dict] = [{"role": "user", "content": "look at the files"}]
    for i in range(uses):
        blocks = [{"type": "thinking", "thinking": f"THINK-{i} " * 5, "signature": f"sig-{i}"}] if thinking else []
        blocks.append({"type": "tool_use", "id": f"toolu_{i}", "name": names[i % len(names)], "input": {"path": f"PATH-{i}"}})
        messages.append({"role": "assistant", "content": blocks})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": f"RESULT-{i} " + "data " * size}]})
    return messages


def wire(mock, n: int = -1) -> str:
    return json.dumps(mock.requests[n].body)


def create(client, stream: bool, **kw):
    """The beta call, streamed or not: the SDK's final message either way."""
    if stream:
        with client.beta.messages.stream(max_tokens=256, **kw) as s:
            for _ in s:
                pass
            return s.get_final_message()
    return client.beta.messages.create(max_tokens=256, **kw)


# --- clear_tool_uses_20250919 ------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_old_tool_results_are_cleared_before_the_provider_and_reported(client, mock, provider, stream):
    mock.enqueue(Turn([Text("done")]))
    edit = {"type": "clear_tool_uses_20250919", "trigger": {"type": "tool_uses", "value": 3},
            "keep": {"type": "tool_uses", "value": 1}}
    out = create(client, stream, model=MODELS[provider], messages=history(4), tools=TOOLS,
                 context_management={"edits": [edit]}, betas=BETAS)
    sent = wire(mock)
    for i in range(3):
        assert f"RESULT-{i}" not in sent
        assert f"PATH-{i}" in sent  # inputs stay unless clear_tool_inputs says otherwise
    assert "RESULT-3" in sent and sent.count(PLACEHOLDER) == 3
    assert "context_management" not in mock.requests[-1].body
    assert out.content[0].text == "done"
    [applied] = out.context_management.applied_edits
    assert isinstance(applied, BetaClearToolUses20250919EditResponse)
    # the proxy's estimate (a token per 4 characters): each result's tokens less the placeholder's
    result = len("RESULT-0 " + "data " * 40)
    assert applied.cleared_tool_uses == 3
    assert applied.cleared_input_tokens == 3 * (-(-result // 4) - -(-len(PLACEHOLDER) // 4))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_excluded_tools_stay_and_inputs_are_cleared_where_asked(client, mock, provider):
    mock.enqueue(Turn([Text("done")]))
    edit = {"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 100},
            "keep": {"type": "tool_uses", "value": 1}, "exclude_tools": ["grep"], "clear_tool_inputs": ["read"]}
    out = create(client, False, model=MODELS[provider], messages=history(5, names=("read", "grep")), tools=TOOLS,
                 context_management={"edits": [edit]}, betas=BETAS)
    sent = wire(mock)
    # read: uses 0 and 2 cleared, result and input; grep: 1 and 3 excluded; 4 kept
    assert "RESULT-0" not in sent and "PATH-0" not in sent and "RESULT-2" not in sent and "PATH-2" not in sent
    assert all(f"RESULT-{i}" in sent and f"PATH-{i}" in sent for i in (1, 3, 4))
    assert out.context_management.applied_edits[0].cleared_tool_uses == 2


def test_below_the_trigger_or_clear_at_least_nothing_is_cleared(client, mock):
    for edit in ({"type": "clear_tool_uses_20250919"},  # the default trigger: 100k input tokens
                 {"type": "clear_tool_uses_20250919", "trigger": {"type": "tool_uses", "value": 1},
                  "clear_at_least": {"type": "input_tokens", "value": 100000}}):
        mock.enqueue(Turn([Text("done")]))
        out = create(client, False, model="chat/gpt", messages=history(4), tools=TOOLS,
                     context_management={"edits": [edit]}, betas=BETAS)
        sent = wire(mock)
        assert all(f"RESULT-{i}" in sent for i in range(4)) and PLACEHOLDER not in sent
        assert out.context_management is not None and out.context_management.applied_edits == []


# --- clear_thinking_20251015 -------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_thinking_of_older_turns_is_cleared(client, mock, stream):
    mock.enqueue(Turn([Text("done")]))
    edits = [{"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 2}},
             {"type": "clear_tool_uses_20250919", "trigger": {"type": "tool_uses", "value": 100}}]
    out = create(client, stream, model="chat/gpt", messages=history(4, thinking=True), tools=TOOLS,
                 thinking={"type": "enabled", "budget_tokens": 2048}, context_management={"edits": edits},
                 betas=BETAS)
    sent = wire(mock)
    assert "THINK-0" not in sent and "THINK-1" not in sent
    assert "THINK-2" in sent and "THINK-3" in sent  # Chat: the turns' reasoning_content
    [applied] = out.context_management.applied_edits
    assert isinstance(applied, BetaClearThinking20251015EditResponse)
    assert applied.cleared_thinking_turns == 2 and applied.cleared_input_tokens > 0


# --- compact_20260112 --------------------------------------------------------------------------


def long_history() -> list[dict]:
    return [{"role": "user", "content": "OLD-REQUEST " + "context " * 800},
            {"role": "assistant", "content": "OLD-ANSWER"},
            {"role": "user", "content": "LATEST-QUESTION"}]


COMPACT = {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 500}}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_compaction_summarises_with_the_routed_model_and_continues(client, mock, provider, stream):
    mock.enqueue(Turn([Text("<summary>SUMMARY-OF-IT-ALL</summary>")]))
    mock.enqueue(Turn([Text("continued from the summary")]))
    before = len(mock.requests)
    out = create(client, stream, model=MODELS[provider], messages=long_history(),
                 context_management={"edits": [{**COMPACT, "instructions": "KEEP-THE-FILE-NAMES"}]}, betas=COMPACT_BETAS)
    assert len(mock.requests) == before + 2
    ask, then = wire(mock, -2), wire(mock, -1)
    # the summarisation call: the whole history, then the prompt and the edit's instructions
    assert "OLD-REQUEST" in ask and "LATEST-QUESTION" in ask and "<summary></summary>" in ask
    assert "KEEP-THE-FILE-NAMES" in ask
    # the answer goes on from the summary alone
    assert "SUMMARY-OF-IT-ALL" in then and "OLD-REQUEST" not in then and "LATEST-QUESTION" not in then
    block, text = out.content
    assert isinstance(block, BetaCompactionBlock) and block.content == "SUMMARY-OF-IT-ALL"
    assert text.text == "continued from the summary" and out.stop_reason == "end_turn"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_pause_after_compaction_answers_with_the_block_and_the_next_turn_expands_it(client, mock, provider, stream):
    mock.enqueue(Turn([Text("<summary>SUMMARY-OF-IT-ALL</summary>")]))
    before = len(mock.requests)
    messages = long_history()
    config = {"edits": [{**COMPACT, "pause_after_compaction": True}]}
    out = create(client, stream, model=MODELS[provider], messages=messages, context_management=config,
                 betas=COMPACT_BETAS)
    assert len(mock.requests) == before + 1
    assert out.stop_reason == "compaction"
    [block] = out.content
    assert block.type == "compaction" and block.content == "SUMMARY-OF-IT-ALL"
    # The client sends the block back: the provider sees the summary, not what it replaced,
    # and the history is short enough again for no new compaction.
    mock.enqueue(Turn([Text("next answer")]))
    follow = [*messages, {"role": "assistant", "content": [block.model_dump(exclude_none=True)]},
              {"role": "user", "content": "NEXT-QUESTION"}]
    again = create(client, stream, model=MODELS[provider], messages=follow, context_management=config,
                   betas=COMPACT_BETAS)
    assert len(mock.requests) == before + 2
    sent = wire(mock)
    assert "SUMMARY-OF-IT-ALL" in sent and "NEXT-QUESTION" in sent
    assert "OLD-REQUEST" not in sent and "OLD-ANSWER" not in sent
    assert [b.type for b in again.content] == ["text"] and again.stop_reason == "end_turn"


def test_a_compaction_block_without_content_is_a_no_op(client, mock):
    mock.enqueue(Turn([Text("ok")]))
    create(client, False, model="chat/gpt", messages=[
        {"role": "user", "content": "FIRST"}, {"role": "assistant", "content": [{"type": "compaction", "content": None}]},
        {"role": "user", "content": "SECOND"}], betas=COMPACT_BETAS)
    sent = mock.requests[-1].body
    assert "FIRST" in json.dumps(sent) and "SECOND" in json.dumps(sent) and "compaction" not in json.dumps(sent)


# --- bad input, and Anthropic providers --------------------------------------------------------


@pytest.mark.parametrize("edits,field", [
    ([{"type": "clear_everything"}], "context_management.edits[0].type"),
    ([{"type": "clear_tool_uses_20250919", "keep": {"type": "tool_uses", "value": -1}}], "context_management.edits[0].keep.value"),
    ([{"type": "clear_thinking_20251015", "keep": {"type": "turns", "value": 1}}], "context_management.edits[0].keep.type"),
    ([{"type": "compact_20260112", "trigger": {"type": "tool_uses", "value": 3}}], "context_management.edits[0].trigger.type"),
])
def test_a_malformed_edit_is_a_400_naming_the_field(client, mock, edits, field):
    before = len(mock.requests)
    with pytest.raises(anthropic.BadRequestError) as err:
        create(client, False, model="responses/gpt", messages=history(1), tools=TOOLS,
               context_management={"edits": edits}, betas=BETAS)
    assert field in err.value.body["error"]["message"]
    assert len(mock.requests) == before  # the provider was not called


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_toward_anthropic_context_management_is_forwarded_with_its_beta(client, mock, stream):
    mock.enqueue(Turn([Text("done")]))
    config = {"edits": [{"type": "clear_tool_uses_20250919", "trigger": {"type": "tool_uses", "value": 1}}, COMPACT]}
    messages = [*history(2), {"role": "assistant", "content": [{"type": "compaction", "content": "EARLIER"}]},
                {"role": "user", "content": "go on"}]
    create(client, stream, model="anthropic/claude-opus-4-6", messages=messages, tools=TOOLS,
           context_management=config, betas=[*BETAS, *COMPACT_BETAS])
    record = mock.requests[-1]
    assert record.body["context_management"] == config and record.body["messages"] == messages
    assert set(record.headers["anthropic-beta"].split(",")) >= {*BETAS, *COMPACT_BETAS}


# --- on-demand compaction (compaction: {type: summarize}) ---------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_compaction_request_answers_with_the_block_alone(client, mock, provider, stream):
    mock.enqueue(Turn([Text("<summary>ON-DEMAND</summary>")]))
    before = len(mock.requests)
    out = create(client, stream, model=MODELS[provider], messages=[{"role": "user", "content": "SHORT-HISTORY"}],
                 compaction={"type": "summarize", "instructions": "ONLY-THIS-PROMPT"}, betas=["compact-2026-09-04"])
    assert len(mock.requests) == before + 1
    ask = wire(mock)
    # whatever the history's size; the instructions replace the proxy's prompt
    assert "SHORT-HISTORY" in ask and "ONLY-THIS-PROMPT" in ask and "<summary></summary>" not in ask
    assert out.stop_reason == "compaction"
    [block] = out.content
    assert isinstance(block, BetaCompactionBlock) and block.content == "ON-DEMAND"


def test_a_compaction_request_with_context_management_is_a_400(client, mock):
    before = len(mock.requests)
    with pytest.raises(anthropic.BadRequestError) as err:
        create(client, False, model="chat/gpt", messages=history(1), tools=TOOLS, compaction={"type": "summarize"},
               context_management={"edits": [COMPACT]}, betas=["compact-2026-09-04"])
    assert "compaction cannot be combined with context_management" in err.value.body["error"]["message"]
    assert len(mock.requests) == before

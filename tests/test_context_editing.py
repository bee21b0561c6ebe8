"""engine/hooks/context_editing.py on the engine: the edges of Anthropic's context editing
and compaction blocks toward a Chat provider (the e2e file, test_context_management_e2e.py,
drives the real server toward every provider protocol)."""
from __future__ import annotations

import json

import pytest

import engine
from engine.hooks import context_editing

ENGINE = engine.Engine.load()
CHAT = "openai_chat_completions"


def translate(body: dict, provider: str = CHAT) -> tuple[dict, engine.Context]:
    ctx = engine.Context(client_protocol="anthropic_messages", provider_protocol=provider, client_body=body)
    return ENGINE.translate_request(ctx, body), ctx


def tool_turns(n: int, size: int = 40, thinking: bool = False) -> list[dict]:
    out: list[dict] = [{"role": "user", "content": "go"}]
    for i in range(n):
        blocks = [{"type": "thinking", "thinking": f"THINK-{i}", "signature": "s"}] if thinking else []
        out.append({"role": "assistant", "content": [*blocks, {"type": "tool_use", "id": f"t{i}", "name": "read", "input": {"p": f"PATH-{i}"}}]})
        out.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": f"RESULT-{i} " + "x " * size}]})
    return out


def body(messages, *edits, **extra) -> dict:
    return {"model": "m", "max_tokens": 10, "messages": messages, "context_management": {"edits": list(edits)}, **extra}


def test_keep_zero_clears_every_tool_result_the_latest_included():
    out, ctx = translate(body(tool_turns(2), {"type": "clear_tool_uses_20250919", "trigger": {"type": "tool_uses", "value": 1},
                                              "keep": {"type": "tool_uses", "value": 0}, "clear_tool_inputs": True}))
    sent = json.dumps(out)
    assert "RESULT-" not in sent and "PATH-" not in sent
    assert ctx.context_management["applied_edits"][0]["cleared_tool_uses"] == 2


def test_the_trigger_counts_the_history_a_compaction_block_leaves():
    # 4 large results before the block: above 200 tokens as sent, below it once the block replaces them
    messages = [*tool_turns(4, size=200), {"role": "assistant", "content": [{"type": "compaction", "content": "S"}]},
                {"role": "user", "content": "on"}]
    edit = {"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 200}}
    out, ctx = translate(body(messages, edit))
    assert ctx.context_management == {"applied_edits": []}
    assert [m["role"] for m in out["messages"]] == ["user"] and "RESULT-" not in json.dumps(out)
    _, ctx = translate(body(tool_turns(4, size=200), {**edit, "keep": {"type": "tool_uses", "value": 1}}))
    assert ctx.context_management["applied_edits"][0]["cleared_tool_uses"] == 3


@pytest.mark.parametrize("keep,kept", [("all", [0, 1, 2]), ({"type": "all"}, [0, 1, 2]),
                                       ({"type": "thinking_turns", "value": 1}, [2]), (None, [2]),
                                       ({"type": "thinking_turns", "value": 0}, [])])
def test_clear_thinking_keeps_the_most_recent_turns(keep, kept):
    edit = {"type": "clear_thinking_20251015", **({"keep": keep} if keep is not None else {})}
    out, ctx = translate(body(tool_turns(3, thinking=True), edit))
    sent = json.dumps(out)
    assert [i for i in range(3) if f"THINK-{i}" in sent] == kept
    applied = ctx.context_management["applied_edits"]
    assert applied == ([] if len(kept) == 3 else
                       [{"type": "clear_thinking_20251015", "cleared_thinking_turns": 3 - len(kept), "cleared_input_tokens": 2 * (3 - len(kept))}])


def test_a_turn_of_thinking_only_goes_altogether():
    messages = [{"role": "user", "content": "a"},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "OLD", "signature": "s"}]},
                {"role": "user", "content": "b"},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "NEW", "signature": "s"}, {"type": "text", "text": "ok"}]},
                {"role": "user", "content": "c"}]
    out, _ = translate(body(messages, {"type": "clear_thinking_20251015"}))
    assert [m["role"] for m in out["messages"]] == ["user", "user", "assistant", "user"]
    assert "OLD" not in json.dumps(out) and "NEW" in json.dumps(out)


def test_a_compaction_block_alone_joins_the_user_turn_after_it():
    messages = [{"role": "user", "content": "OLD"}, {"role": "assistant", "content": [{"type": "compaction", "content": "SUM"}]},
                {"role": "user", "content": "NEW"}]
    out, ctx = translate({"model": "m", "max_tokens": 10, "messages": messages})
    [msg] = out["messages"]
    assert msg["role"] == "user" and "SUM" in json.dumps(msg) and "NEW" in json.dumps(msg) and "OLD" not in json.dumps(out)
    assert ctx.context_management is None  # no context_management asked: nothing reported
    assert any("compaction block" in t for t in ctx.traces)


def test_the_last_compaction_block_wins():
    messages = [{"role": "user", "content": "A"}, {"role": "assistant", "content": [{"type": "compaction", "content": "FIRST"}, {"type": "text", "text": "B"}]},
                {"role": "user", "content": "C"}, {"role": "assistant", "content": [{"type": "compaction", "content": "SECOND"}, {"type": "text", "text": "D"}]},
                {"role": "user", "content": "E"}]
    out, _ = translate({"model": "m", "max_tokens": 10, "messages": messages})
    assert [(m["role"], m["content"] if isinstance(m["content"], str) else None) for m in out["messages"]][1:] == [
        ("assistant", "D"), ("user", "E")]
    assert "SECOND" in json.dumps(out["messages"][0]) and "FIRST" not in json.dumps(out)


@pytest.mark.parametrize("said,summary", [("<summary>\nS1\n</summary>", "S1"), ("notes <summary>S2", "S2"),
                                          ("plain S3", "plain S3"), ("  ", None)])
def test_the_summary_is_what_the_summary_tags_hold(said, summary):
    assert context_editing.summary_of({"content": [{"type": "text", "text": said}]}) == summary


def test_the_summarisation_request_asks_with_no_tool_callable():
    ir = {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]}],
          "tools": [{"type": "function", "name": "read"}], "tool_choice": {"type": "required"}, "stream": True}
    ask = context_editing.summary_request(ir, "  MORE  ", ENGINE.tables)
    assert ask["stream"] is False and ask["tool_choice"] == {"type": "none"} and ask["tools"] == ir["tools"]
    prompt = ask["messages"][-1]["content"][0]["text"]
    assert prompt.endswith("\n\nMORE") and "<summary></summary>" in prompt


@pytest.mark.parametrize("config,param", [
    ("clear", "context_management"),
    ({"edits": {"type": "clear_thinking_20251015"}}, "context_management.edits"),
    ({"edits": [{"type": "clear_thinking_20251015"}, {"type": "clear_thinking_20251015"}]}, "context_management.edits[1].type"),
    ({"edits": [{"type": "clear_tool_uses_20250919", "exclude_tools": "read"}]}, "context_management.edits[0].exclude_tools"),
    ({"edits": [{"type": "clear_tool_uses_20250919", "clear_tool_inputs": [1]}]}, "context_management.edits[0].clear_tool_inputs"),
    ({"edits": [{"type": "clear_tool_uses_20250919", "clear_at_least": {"type": "tool_uses", "value": 1}}]},
     "context_management.edits[0].clear_at_least.type"),
    ({"edits": [{"type": "compact_20260112", "pause_after_compaction": "yes"}]}, "context_management.edits[0].pause_after_compaction"),
])
def test_malformed_configs_name_the_field(config, param):
    with pytest.raises(engine.InvalidRequest) as err:
        translate({"model": "m", "max_tokens": 10, "messages": tool_turns(1), "context_management": config})
    assert err.value.param == param


def test_no_edits_report_nothing_applied_and_say_so():
    out, ctx = translate(body(tool_turns(1)))
    assert ctx.context_management == {"applied_edits": []} and "context_management" not in out
    assert "context_management run by the proxy: no edits" in ctx.traces


@pytest.mark.parametrize("value,param", [({"type": "compact"}, "compaction.type"), ("summarize", "compaction.type"),
                                         ({"type": "summarize", "instructions": 3}, "compaction.instructions")])
def test_a_malformed_compaction_request_names_the_field(value, param):
    with pytest.raises(engine.InvalidRequest) as err:
        translate({"model": "m", "max_tokens": 10, "messages": tool_turns(1), "compaction": value})
    assert err.value.param == param


def test_a_compaction_request_is_marked_whatever_the_size():
    out, ctx = translate({"model": "m", "max_tokens": 10, "messages": tool_turns(1), "compaction": {"type": "summarize"}})
    assert ctx.compaction == {"instructions": None, "pause": True, "replace": True} and "compaction" not in out

"""Anthropic's context management toward a provider without it (docs/context-management.md).

An Anthropic client's ``context_management.edits`` are run by the proxy on the IR of a
translated request (the ``after`` hook of the Anthropic request decoder, so every
provider protocol gets them), in the order the client listed them:

* ``clear_tool_uses_20250919``: once the input reaches the trigger (input tokens, or a
  number of tool uses), the results of all but the ``keep`` most recent tool uses are
  replaced by a placeholder (and their inputs emptied where ``clear_tool_inputs`` says),
  except the uses of ``exclude_tools``, and only when at least ``clear_at_least`` tokens go;
* ``clear_thinking_20251015``: the thinking of all but the ``keep`` most recent assistant
  turns that have some is removed;
* ``compact_20260112``: once the input reaches the trigger, the request is marked for
  compaction (``ctx.compaction``); proxai/endpoints/compaction.py asks the routed model for the
  summary and the client's answer opens with the compaction block.

An on-demand compaction request (the top-level ``compaction: {type: summarize}``) is
marked the same way, whatever the history's size, for the compaction block alone.

A history that carries a compaction block is expanded first, whether or not the request
asks for compaction: the block's summary replaces everything before it, as Anthropic's
API does. Input tokens are the proxy's estimate (proxai/endpoints/token_estimate.py) of the
client's request as the provider would see it. What was cleared is reported on
``ctx.context_management`` and reaches the client as the response's
``context_management.applied_edits`` (streaming: on the final message_delta). Defaults,
the placeholder and the summarisation wording are rules/tables/context_management.yaml.
"""
from __future__ import annotations

import re

from proxai.endpoints import token_estimate
from ..errors import InvalidRequest

SETTINGS = "context_management.setting->value"
TEXTS = "context_management.compaction->text"
CLEAR_TOOL_USES = "clear_tool_uses_20250919"
CLEAR_THINKING = "clear_thinking_20251015"
COMPACT = "compact_20260112"
EDITS = (CLEAR_TOOL_USES, CLEAR_THINKING, COMPACT)
_SUMMARY = re.compile(r"<summary>(.*?)(?:</summary>|\Z)", re.S)


def _table(tables, name, key):
    table = (tables or {}).get(name)
    return table.lookup(key) if table is not None else None


def setting(tables, name):
    return _table(tables, SETTINGS, name)


def text(tables, name) -> str:
    return _table(tables, TEXTS, name) or ""


def tokens(value) -> int:
    return token_estimate.count(value)


# --- the request hook -------------------------------------------------------------------


def apply(scope, tables=None):
    ir, ctx = scope.cur, scope.ctx
    if not isinstance(ir, dict) or ctx is None:
        return ir
    config = ir.pop("context_management", None)
    on_demand = ir.pop("compaction", None)
    messages = ir.get("messages") if isinstance(ir.get("messages"), list) else []
    expanded = expand(messages, tables)
    if expanded is not None:
        messages = expanded
        ir = {**ir, "messages": messages}
        ctx.trace("compaction block: the history before it replaced by its summary")
    if on_demand is not None:
        _compaction_request(on_demand, config, ctx)
        return ir
    if config is None:
        return ir
    edits = validate(config)
    body = ctx.client_body if isinstance(ctx.client_body, dict) else ir
    input_tokens = token_estimate.estimate(_as_provider_sees(body))
    applied, notes = [], []
    for edit in edits:
        kind = edit["type"]
        if kind == COMPACT:
            trigger = int((edit.get("trigger") or {}).get("value", setting(tables, "compact_trigger")))
            if input_tokens >= trigger:
                ctx.compaction = {"instructions": edit.get("instructions"),
                                  "pause": edit.get("pause_after_compaction") is True}
                notes.append(f"{kind} summarises the history (~{input_tokens} tokens, trigger {trigger})")
            else:
                notes.append(f"{kind} not triggered (~{input_tokens} tokens, trigger {trigger})")
            continue
        if kind == CLEAR_TOOL_USES:
            messages, report = clear_tool_uses(messages, edit, input_tokens, tables)
        else:
            messages, report = clear_thinking(messages, edit, tables)
        if report is None:
            notes.append(f"{kind} cleared nothing")
            continue
        input_tokens -= report["cleared_input_tokens"]
        applied.append(report)
        count = report.get("cleared_tool_uses", report.get("cleared_thinking_turns"))
        what = "tool uses" if kind == CLEAR_TOOL_USES else "thinking turns"
        notes.append(f"{kind} cleared {count} {what} (~{report['cleared_input_tokens']} tokens)")
    ctx.context_management = {"applied_edits": applied}
    ctx.trace("context_management run by the proxy: " + "; ".join(notes or ["no edits"]))
    return {**ir, "messages": messages}


apply.reads_tables = True  # type: ignore[attr-defined]  # rules/tables/context_management.yaml


def _as_provider_sees(body: dict) -> dict:
    """The client's request with a compaction block's history left out."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body
    for i in range(len(messages) - 1, -1, -1):
        content = messages[i].get("content") if isinstance(messages[i], dict) else None
        if not isinstance(content, list):
            continue
        for j in range(len(content) - 1, -1, -1):
            block = content[j]
            if isinstance(block, dict) and block.get("type") == "compaction" and block.get("content"):
                rest = [{"role": "user", "content": block["content"]}]
                if content[j + 1:]:
                    rest.append({**messages[i], "content": content[j + 1:]})
                return {**body, "messages": rest + messages[i + 1:]}
    return body


def _compaction_request(value, config, ctx) -> None:
    """``compaction: {type: summarize, instructions}`` (on-demand compaction): the answer is
    the compaction block alone, whatever the history's size; instructions replace the prompt."""
    if not isinstance(value, dict) or value.get("type") != "summarize":
        _fail("compaction must be {type: 'summarize'} (with optional instructions)", "compaction.type")
    if config is not None:
        _fail("compaction cannot be combined with context_management", "compaction")
    instructions = value.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        _fail("compaction.instructions must be a string", "compaction.instructions")
    ctx.compaction = {"instructions": instructions, "pause": True, "replace": True}
    ctx.trace("compaction request: the history is summarised by the routed model")


# --- validation -------------------------------------------------------------------------


def _fail(message: str, param: str):
    raise InvalidRequest(message, param)


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _counted(value, where: str, kinds: tuple) -> None:
    """``{type: <one of kinds>, value: <count>}``."""
    if not isinstance(value, dict):
        _fail(f"{where} must be an object {{type, value}}", where)
    if value.get("type") not in kinds:
        _fail(f"{where}.type must be {' or '.join(repr(k) for k in kinds)}", f"{where}.type")
    if not _is_count(value.get("value")):
        _fail(f"{where}.value must be a non-negative integer", f"{where}.value")


def _names(value, where: str) -> None:
    if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
        _fail(f"{where} must be a list of tool names", where)


def validate(config) -> list[dict]:
    """The edits of ``context_management``; a 400 naming the field when one is malformed."""
    if not isinstance(config, dict):
        _fail("context_management must be an object with edits", "context_management")
    edits = config.get("edits")
    if edits is None:
        return []
    if not isinstance(edits, list):
        _fail("context_management.edits must be a list", "context_management.edits")
    seen: set = set()
    for i, edit in enumerate(edits):
        where = f"context_management.edits[{i}]"
        if not isinstance(edit, dict):
            _fail(f"{where} must be an object", where)
        kind = edit.get("type")
        if kind not in EDITS:
            _fail(f"{where}.type {kind!r} is not a context management edit ({', '.join(EDITS)})", f"{where}.type")
        if kind in seen:
            _fail(f"{where}: {kind} is listed twice", f"{where}.type")
        seen.add(kind)
        if kind == CLEAR_TOOL_USES:
            if edit.get("trigger") is not None:
                _counted(edit["trigger"], f"{where}.trigger", ("input_tokens", "tool_uses"))
            if edit.get("keep") is not None:
                _counted(edit["keep"], f"{where}.keep", ("tool_uses",))
            if edit.get("clear_at_least") is not None:
                _counted(edit["clear_at_least"], f"{where}.clear_at_least", ("input_tokens",))
            if edit.get("exclude_tools") is not None:
                _names(edit["exclude_tools"], f"{where}.exclude_tools")
            inputs = edit.get("clear_tool_inputs")
            if inputs is not None and not isinstance(inputs, bool):
                _names(inputs, f"{where}.clear_tool_inputs")
        elif kind == CLEAR_THINKING:
            keep = edit.get("keep")
            if keep is not None and keep != "all" and not (isinstance(keep, dict) and keep.get("type") == "all"):
                _counted(keep, f"{where}.keep", ("thinking_turns",))
        else:
            if edit.get("trigger") is not None:
                _counted(edit["trigger"], f"{where}.trigger", ("input_tokens",))
            if edit.get("instructions") is not None and not isinstance(edit["instructions"], str):
                _fail(f"{where}.instructions must be a string", f"{where}.instructions")
            if edit.get("pause_after_compaction") is not None and not isinstance(edit["pause_after_compaction"], bool):
                _fail(f"{where}.pause_after_compaction must be a boolean", f"{where}.pause_after_compaction")
    return edits


# --- clearing ---------------------------------------------------------------------------


def clear_tool_uses(messages: list, edit: dict, input_tokens: int, tables) -> tuple[list, dict | None]:
    """The messages with old tool uses cleared, and the applied edit (None: not applied)."""
    uses = [(k, j, part) for k, msg in enumerate(messages) if isinstance(msg, dict) and msg.get("role") == "assistant"
            for j, part in enumerate(msg.get("content") or ())
            if isinstance(part, dict) and part.get("type") == "tool_call"]
    trigger = edit.get("trigger") or {"type": "input_tokens", "value": setting(tables, "clear_tool_uses_trigger")}
    reached = len(uses) if trigger["type"] == "tool_uses" else input_tokens
    if reached < int(trigger["value"]):
        return messages, None
    keep = int((edit.get("keep") or {}).get("value", setting(tables, "clear_tool_uses_keep")))
    excluded = set(edit.get("exclude_tools") or ())
    inputs = edit.get("clear_tool_inputs")
    placeholder = setting(tables, "cleared_tool_result")
    results = {}
    for k, msg in enumerate(messages):
        if isinstance(msg, dict) and msg.get("role") == "tool":
            for j, part in enumerate(msg.get("content") or ()):
                if isinstance(part, dict) and part.get("type") == "tool_result":
                    results[part.get("call_id")] = (k, j)
    cleared_parts: dict = {}  # (message, part) -> the part that replaces it
    count = cleared = 0
    for k, j, call in uses[:max(len(uses) - keep, 0)]:
        if call.get("name") in excluded:
            continue
        done = False
        at = results.get(call.get("id"))
        if at is not None:
            result = messages[at[0]]["content"][at[1]]
            cleared += tokens(result.get("content")) - tokens(placeholder)
            cleared_parts[at] = {**result, "content": [{"type": "text", "text": placeholder}]}
            done = True
        if inputs is True or (isinstance(inputs, list) and call.get("name") in inputs):
            cleared += tokens(call.get("arguments")) - tokens("{}")
            cleared_parts[(k, j)] = {**call, "arguments": "{}"}
            done = True
        count += done
    cleared = max(cleared, 0)
    if not count or cleared < int((edit.get("clear_at_least") or {}).get("value", 0)):
        return messages, None
    out = list(messages)
    for (k, j), part in cleared_parts.items():
        content = list(out[k]["content"])
        content[j] = part
        out[k] = {**out[k], "content": content}
    return out, {"type": CLEAR_TOOL_USES, "cleared_tool_uses": count, "cleared_input_tokens": cleared}


def clear_thinking(messages: list, edit: dict, tables) -> tuple[list, dict | None]:
    """The messages with the thinking of older assistant turns removed, and the applied edit."""
    keep = edit.get("keep")
    if keep == "all" or (isinstance(keep, dict) and keep.get("type") == "all"):
        return messages, None
    keep_turns = int(keep["value"]) if isinstance(keep, dict) else int(setting(tables, "clear_thinking_keep"))
    turns = [k for k, msg in enumerate(messages) if isinstance(msg, dict) and msg.get("role") == "assistant"
             and any(isinstance(p, dict) and p.get("type") == "reasoning" for p in msg.get("content") or ())]
    clear = set(turns[:max(len(turns) - keep_turns, 0)])
    if not clear:
        return messages, None
    out, cleared = [], 0
    for k, msg in enumerate(messages):
        if k not in clear:
            out.append(msg)
            continue
        kept = [p for p in msg["content"] if not (isinstance(p, dict) and p.get("type") == "reasoning")]
        cleared += sum(tokens(p.get("text")) for p in msg["content"] if isinstance(p, dict) and p.get("type") == "reasoning")
        if kept:  # a turn of thinking only goes altogether
            out.append({**msg, "content": kept})
    return out, {"type": CLEAR_THINKING, "cleared_thinking_turns": len(clear), "cleared_input_tokens": cleared}


# --- compaction -------------------------------------------------------------------------


def summary_message(summary: str, tables, then: dict | None = None) -> dict:
    """The user message that stands for the history a summary replaces (merged into the
    user message that follows, if one does)."""
    part = {"type": "text", "text": f"{text(tables, 'summary_prefix')}{summary}"}
    if isinstance(then, dict) and then.get("role") == "user":
        return {**then, "content": [part, *(then.get("content") or ())]}
    return {"role": "user", "content": [part]}


def expand(messages: list, tables) -> list | None:
    """The history from its last compaction block on, the block's summary first; None when
    there is no compaction block. A block without content (a failed compaction) is a no-op."""
    found = None
    for k in range(len(messages) - 1, -1, -1):
        msg = messages[k]
        parts = msg.get("content") if isinstance(msg, dict) else None
        for j in range(len(parts or ()) - 1, -1, -1):
            part = parts[j]
            if isinstance(part, dict) and part.get("type") == "compaction" and part.get("text"):
                found = (k, j)
                break
        if found is not None:
            break
    if found is None and not any(isinstance(p, dict) and p.get("type") == "compaction"
                                 for m in messages if isinstance(m, dict) for p in m.get("content") or ()):
        return None
    rest = messages
    head: list = []
    if found is not None:
        k, j = found
        summary = messages[k]["content"][j]["text"]
        after = [{**messages[k], "content": messages[k]["content"][j + 1:]}, *messages[k + 1:]]
        after = [m for m in after if m.get("content")]
        if after and after[0].get("role") == "user":
            head, rest = [summary_message(summary, tables, after[0])], after[1:]
        else:
            head, rest = [summary_message(summary, tables)], after
    out = head
    for msg in rest:
        parts = msg.get("content")
        if isinstance(parts, list) and any(isinstance(p, dict) and p.get("type") == "compaction" for p in parts):
            parts = [p for p in parts if not (isinstance(p, dict) and p.get("type") == "compaction")]
            if not parts:
                continue
            msg = {**msg, "content": parts}
        out.append(msg)
    return out


def summary_request(ir: dict, instructions, tables, replace: bool = False) -> dict:
    """The IR request that asks the routed model for the summary of ``ir``'s history. The
    edit's instructions follow the prompt; an on-demand request's replace it (``replace``)."""
    prompt = text(tables, "prompt")
    if isinstance(instructions, str) and instructions.strip():
        prompt = instructions.strip() if replace else f"{prompt}\n\n{instructions.strip()}"
    messages = [*(ir.get("messages") or ()), {"role": "user", "content": [{"type": "text", "text": prompt}]}]
    out = {k: v for k, v in ir.items() if k not in ("response_format", "stop", "tool_choice", "parallel_tool_calls")}
    out.update(messages=messages, stream=False)
    if ir.get("tools"):  # the history's tool calls need their tools declared; none may be called
        out["tool_choice"] = {"type": "none"}
    return out


def summary_of(response: dict) -> str | None:
    """The summary in the model's answer: its text, inside <summary> when it is wrapped."""
    said = "".join(p.get("text") or "" for p in response.get("content") or ()
                   if isinstance(p, dict) and p.get("type") == "text").strip()
    match = _SUMMARY.search(said)
    summary = match.group(1).strip() if match else said
    return summary or None


def compacted(ir: dict, summary: str, tables) -> dict:
    """The request after a compaction: the summary in place of the whole history."""
    message = summary_message(summary, tables)
    message["content"].append({"type": "text", "text": text(tables, "continue")})
    return {**ir, "messages": [message]}


# --- the answer's hooks -----------------------------------------------------------------


def report(scope):
    """The response's ``context_management`` (None: the client asked for none)."""
    return getattr(scope.ctx, "context_management", None)


def summary(scope):
    """The summary of the compaction the proxy ran for this answer (None: none ran)."""
    compaction = getattr(scope.ctx, "compaction", None)
    return compaction.get("summary") if isinstance(compaction, dict) else None


def compaction_usage(scope):
    """The IR usage of the summarisation call of the compaction the proxy ran for this
    answer (None: none ran); Anthropic reports it apart, in ``usage.iterations``."""
    compaction = getattr(scope.ctx, "compaction", None)
    return compaction.get("usage") if isinstance(compaction, dict) and compaction.get("summary") else None


HOOKS = {
    "context_editing.apply": apply,
    "context_editing.compaction_usage": compaction_usage,
    "context_editing.report": report,
    "context_editing.summary": summary,
}

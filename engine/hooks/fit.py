"""Fitting an IR request to what the provider and its model can take.

Run as ``before`` hooks of the provider encoders, on the IR:

* ``fit.capabilities``: the route's model capabilities (reasoning dropped; the
  output-token ceiling is ``ceilings.output_limit``);
* ``fit.tools``: tool declarations the provider has no form for. Namespaced tools
  are flattened into plain names, free-form (custom) tools become a function with
  one string parameter where the provider has no free-form tools, hosted tools the
  provider cannot run are left out or rejected (the ``hosted_tools`` policy), and
  deferred tools are sent normally (nothing could load them). The history's
  calls are renamed the same way, and every renamed tool is recorded on the
  context (``ctx.tool_calls``) so the calls that come back are restored to the
  client's form (engine/toolcalls.py).
"""
from __future__ import annotations

import hashlib

import orjson

from ..errors import InvalidRequest
from . import tool_search
from .names import wire_name

# Toward a provider with no free-form tool type (one the table does not name), a custom
# tool goes out as a function whose one string parameter carries the free-form input.
# Chat servers other than OpenAI's have no custom tools, so Chat providers get the
# function form too.
CUSTOM_TABLE = "custom_tools.provider_protocol->native"
CUSTOM_INPUT = "input"




def custom_parameters() -> dict:
    return {
        "type": "object",
        "properties": {CUSTOM_INPUT: {"type": "string", "description": "The tool's free-form input, verbatim (not JSON)."}},
        "required": [CUSTOM_INPUT],
        "additionalProperties": False,
    }


def custom_description(description, fmt) -> str:
    lines = [description] if isinstance(description, str) and description else []
    lines.append(f"Pass the free-form input as the string parameter `{CUSTOM_INPUT}`.")
    if isinstance(fmt, dict) and fmt.get("type") == "grammar":
        # Responses: {type, syntax, definition}; Chat: {type, grammar: {syntax, definition}}.
        grammar = fmt.get("grammar") if isinstance(fmt.get("grammar"), dict) else fmt
        if isinstance(grammar.get("definition"), str):
            syntax = grammar.get("syntax") or "grammar"
            lines.append(f"The input must match this {syntax} grammar:\n```\n{grammar['definition']}\n```")
    return "\n\n".join(lines)


def fit_tools(scope, tables=None):
    ir = scope.cur
    ctx = scope.ctx
    if not isinstance(ir, dict) or ctx is None:
        return ir
    # Deferred tools and tool search first: what is left is fitted below.
    ir = tool_search.fit(ir, ctx, tables)
    provider = ctx.provider_protocol
    native = (tables or {}).get(CUSTOM_TABLE)
    wrap_custom = not (native is not None and isinstance(provider, str) and native.lookup(provider) is True)
    tools = ir.get("tools")
    if isinstance(tools, list) and tools:
        out = []
        for tool in tools:
            if not isinstance(tool, dict):
                out.append(tool)
                continue
            kind = tool.get("type")
            if kind == "hosted":
                hosted = str(tool.get("hosted_type") or tool.get("name") or "?")
                if ctx.hosted_tools == "reject":
                    raise InvalidRequest(f"hosted tool type {hosted!r} cannot be run by this provider "
                                         "(hosted_tools: reject)", tool.get("_path") or "tools")
                ctx.trace(f"hosted tool {hosted} left out: the provider cannot run it (hosted_tools: drop)")
                ctx.dropped_tools.append(hosted)
                continue
            namespace = tool.get("namespace")
            name = tool.get("name")
            about = tool.get("namespace_description")
            if "namespace" in tool or "namespace_description" in tool:
                tool = {k: v for k, v in tool.items() if k not in ("namespace", "namespace_description")}
            else:
                tool = dict(tool)
            if namespace and isinstance(name, str):
                tool["name"] = wire_name(namespace, name)
                # The model saw the namespace's description once for all its tools: each carries it.
                if about:
                    about = f"(One of the {namespace} tools: {about})"
                    tool["description"] = f"{tool['description']}\n\n{about}" if tool.get("description") else about
            custom = kind == "custom" and wrap_custom
            if custom:
                tool = {"type": "function", "name": tool.get("name"),
                        "description": custom_description(tool.get("description"), tool.get("format")),
                        "parameters": custom_parameters(), "strict": False,
                        "_path": tool.get("_path")}
            if namespace or custom:
                ctx.tool_calls[tool["name"]] = {"name": name, "namespace": namespace, "custom": custom}
            out.append(tool)
        # A deferred tool is loaded by a tool search the provider runs; every tool search
        # of another protocol is hosted and left out above, so nothing could load it: it
        # is sent normally (tool_search: eager), or only once a search loaded it (emulate,
        # engine/hooks/tool_search.py).
        for i, tool in enumerate(out):
            if isinstance(tool, dict) and tool.get("defer_loading"):
                out[i] = {k: v for k, v in tool.items() if k != "defer_loading"}
                if ctx.tool_search != "emulate" and not any("deferred tools sent normally" in t for t in ctx.traces):
                    ctx.trace("deferred tools sent normally: no tool search the provider can run (defer_loading)")
        out = _declared_once(ctx, out)
        ir = {**ir, "tools": out} if out else {k: v for k, v in ir.items() if k != "tools"}
        if not out and "tool_choice" in ir:
            ir.pop("tool_choice")
            ir.pop("parallel_tool_calls", None)
    if any(p.get("namespace") or (wrap_custom and p.get("custom")) for p in _calls(ir)):
        ir = {**ir, "messages": [_fit_message(m, wrap_custom) for m in ir.get("messages") or ()]}
    choice = ir.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "custom" and wrap_custom:
        ir = {**ir, "tool_choice": {**choice, "type": "tool"}}
    if isinstance(choice, dict) and choice.get("type") == "hosted" and ctx.dropped_tools:
        ctx.trace("hosted tool_choice left out with its tool")
        ir = {k: v for k, v in ir.items() if k != "tool_choice"}
    return ir


def _declared_once(ctx, tools):
    """Each tool name declared once: Chat and Anthropic reject a repeated name. A
    Responses client repeats one when an additional_tools item (or a deferred tool
    loaded later) declares a tool the request already has; the first declaration is
    kept, where the prompt cache expects it."""
    seen, out = set(), []
    for tool in tools:
        name = tool.get("name") if isinstance(tool, dict) and tool.get("type") != "hosted" else None
        if isinstance(name, str):
            if name in seen:
                ctx.trace(f"tool {name} declared again: sent once")
                continue
            seen.add(name)
        out.append(tool)
    return out


def _calls(ir):
    for m in ir.get("messages") or ():
        if isinstance(m, dict):
            for p in m.get("content") or ():
                if isinstance(p, dict) and p.get("type") == "tool_call":
                    yield p


def _fit_message(msg, wrap_custom: bool):
    if not isinstance(msg, dict) or msg.get("role") != "assistant":
        return msg
    parts = []
    for p in msg.get("content") or ():
        if isinstance(p, dict) and p.get("type") == "tool_call" and (p.get("namespace") or (p.get("custom") and wrap_custom)):
            name = wire_name(p.get("namespace"), p.get("name") or "")
            p = {k: v for k, v in p.items() if k != "namespace"}
            p["name"] = name
            if p.get("custom") and wrap_custom:
                p.pop("custom")
                p["arguments"] = orjson.dumps({CUSTOM_INPUT: p.pop("input", None) or ""}).decode()
        parts.append(p)
    return {**msg, "content": parts}


def fit_capabilities(scope):
    """The model's limits: ``reasoning: drop`` leaves effort and thinking out (the
    output-token ceiling is ``ceilings.output_limit``, engine/hooks/ceilings.py)."""
    ir = scope.cur
    ctx = scope.ctx
    if not isinstance(ir, dict) or ctx is None:
        return ir
    if ctx.reasoning == "drop" and ir.get("reasoning"):
        ctx.trace("reasoning left out: the model takes none (reasoning: drop)")
        ir = {k: v for k, v in ir.items() if k != "reasoning"}
    return ir


fit_tools.reads_tables = True  # type: ignore[attr-defined]  # rules/tables/tool_search.yaml, custom_tools.yaml

HOOKS = {
    "fit.tools": fit_tools,
    "fit.capabilities": fit_capabilities,
}


# --- after hooks, on the provider request ---------------------------------------------


def anthropic_sampling(scope):
    """Anthropic refuses temperature, top_p and top_k together with thinking: with
    thinking on they are left out (a trace names them)."""
    out = scope.cur
    thinking = out.get("thinking") if isinstance(out, dict) else None
    if not isinstance(thinking, dict) or thinking.get("type") == "disabled":
        return out
    dropped = [k for k in ("temperature", "top_p", "top_k") if out.get(k) is not None]
    if not dropped:
        return out
    if scope.ctx is not None:
        scope.ctx.trace(f"{', '.join(dropped)} left out: Anthropic takes no sampling settings with thinking on")
    return {k: v for k, v in out.items() if k not in dropped}


def chat_tool_media(scope):
    """Chat tool messages hold text only. The images and documents of a run of tool
    messages move into one user message right after the run, each labelled with its
    call id, so the model still sees them and the session never becomes a 400."""
    out = scope.cur
    messages = out.get("messages") if isinstance(out, dict) else None
    if not isinstance(messages, list) or not any(isinstance(m, dict) and "_media" in m for m in messages):
        return out
    result: list = []
    pending: list = []
    for msg in messages:
        is_tool = isinstance(msg, dict) and msg.get("role") == "tool"
        if pending and not is_tool:
            result.append({"role": "user", "content": pending})
            pending = []
        if is_tool and "_media" in msg:
            msg = dict(msg)
            media = msg.pop("_media") or []
            if media:
                pending.append({"type": "text", "text": f"Attachments of tool result {msg.get('tool_call_id')}:"})
                pending.extend(media)
        result.append(msg)
    if pending:
        result.append({"role": "user", "content": pending})
    return {**out, "messages": result}


# OpenAI's limit for safety_identifier (and user).
MAX_END_USER_ID = 128


def end_user_id(scope, value=None):
    """An end-user id for OpenAI: as is up to 128 characters, else ``sha256:<hex>``
    of it (stable, so per-user abuse tracking still works; 71 characters)."""
    if not isinstance(value, str) or len(value) <= MAX_END_USER_ID:
        return value
    if scope.ctx is not None:
        scope.ctx.trace("end-user id longer than 128 characters sent as its sha256 hash")
    return "sha256:" + hashlib.sha256(value.encode()).hexdigest()


HOOKS.update({
    "fit.end_user_id": end_user_id,
    "fit.anthropic_sampling": anthropic_sampling,
    "fit.chat_tool_media": chat_tool_media,
})

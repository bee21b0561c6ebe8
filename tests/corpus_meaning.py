"""What a request, response or stream *means*, read straight from each protocol's wire
format (independently of the engine), so a translation can be checked for what it kept:
text, tool calls and their arguments, reasoning and whether its opaque state survived,
the stop reason's class and the token usage."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

CHAT, RESPONSES, ANTHROPIC = "openai_chat_completions", "openai_responses", "anthropic_messages"

STOP_CLASS = {
    CHAT: {"stop": "end", "length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use",
           "content_filter": "refusal"},
    ANTHROPIC: {"end_turn": "end", "stop_sequence": "end", "pause_turn": "end", "max_tokens": "max_tokens",
                "model_context_window_exceeded": "max_tokens", "tool_use": "tool_use", "refusal": "refusal"},
}
_WS = re.compile(r"\s+")
# The continuation envelope Chat carries reasoning state in, at the end of reasoning_content
# (continuation.md, Chat carrier).
_ENVELOPE = re.compile(r"\s*pxc1\.[A-Za-z0-9_-]+\s*$")


def norm(text: str) -> str:
    """Text compared without whitespace: protocols join blocks and parts differently."""
    return _WS.sub("", text or "")


def _args(value):
    if isinstance(value, str):
        try:
            return json.loads(value) if value.strip() else {}
        except ValueError:
            return value
    return value


@dataclass
class Meaning:
    text: str = ""
    calls: list = field(default_factory=list)  # [(name, arguments as JSON value)]
    reasoning: str = ""
    opaque: bool = False
    stop: str | None = None
    usage: tuple | None = None  # (input tokens incl. cached, output tokens)
    error: str | None = None

    def finish(self) -> "Meaning":
        if self.stop == "end" and self.calls:
            self.stop = "tool_use"  # several servers end tool calls with a plain stop
        return self


# --- non-streaming responses -----------------------------------------------------------------


def response(protocol: str, body: dict) -> Meaning:
    return {CHAT: _chat_response, RESPONSES: _responses_response, ANTHROPIC: _anthropic_response}[protocol](body).finish()


def _chat_usage(u):
    return (u.get("prompt_tokens") or 0, u.get("completion_tokens") or 0) if u else None


def _chat_reasoning(m: Meaning, text: str) -> None:
    m.reasoning = _ENVELOPE.sub("", text)
    m.opaque = m.reasoning != text


def _chat_response(body: dict) -> Meaning:
    m = Meaning()
    if "error" in body:
        m.error = str((body["error"] or {}).get("message"))
        return m
    choice = (body.get("choices") or [{}])[0]
    msg = choice.get("message") or {}
    m.text = (msg.get("content") or "") + (msg.get("refusal") or "")
    _chat_reasoning(m, msg.get("reasoning_content") or "")
    m.calls = [((c.get("function") or {}).get("name"), _args((c.get("function") or {}).get("arguments")))
               for c in msg.get("tool_calls") or ()]
    m.stop = STOP_CLASS[CHAT].get(choice.get("finish_reason"), choice.get("finish_reason"))
    m.usage = _chat_usage(body.get("usage"))
    return m


def _responses_output(m: Meaning, output) -> None:
    for item in output or ():
        kind = item.get("type")
        if kind == "message":
            for part in item.get("content") or ():
                m.text += part.get("text") or part.get("refusal") or ""
        elif kind == "function_call":
            m.calls.append((item.get("name"), _args(item.get("arguments"))))
        elif kind == "reasoning":
            m.reasoning += "".join(p.get("text") or "" for p in (item.get("content") or []) + (item.get("summary") or []))
            m.opaque = m.opaque or bool(item.get("encrypted_content"))


def _responses_stop(body: dict) -> str | None:
    status = body.get("status")
    if status == "completed":
        return "end"
    if status == "incomplete":
        reason = (body.get("incomplete_details") or {}).get("reason")
        return {"max_output_tokens": "max_tokens", "content_filter": "refusal"}.get(reason, reason)
    return status


def _responses_response(body: dict) -> Meaning:
    m = Meaning()
    if body.get("error"):
        m.error = str(body["error"].get("message"))
    _responses_output(m, body.get("output"))
    m.stop = _responses_stop(body)
    u = body.get("usage")
    m.usage = (u.get("input_tokens") or 0, u.get("output_tokens") or 0) if u else None
    return m


def _anthropic_usage(u):
    if not u:
        return None
    return ((u.get("input_tokens") or 0) + (u.get("cache_read_input_tokens") or 0)
            + (u.get("cache_creation_input_tokens") or 0), u.get("output_tokens") or 0)


def _anthropic_blocks(m: Meaning, blocks) -> None:
    for b in blocks:
        kind = b.get("type")
        if kind == "text":
            m.text += b.get("text") or ""
        elif kind == "tool_use":
            m.calls.append((b.get("name"), _args(b.get("input"))))
        elif kind == "thinking":
            m.reasoning += b.get("thinking") or ""
            m.opaque = m.opaque or bool(b.get("signature"))
        elif kind == "redacted_thinking":
            m.opaque = m.opaque or bool(b.get("data"))


def _anthropic_response(body: dict) -> Meaning:
    m = Meaning()
    if body.get("type") == "error":
        m.error = str((body.get("error") or {}).get("message"))
        return m
    _anthropic_blocks(m, body.get("content") or ())
    m.stop = STOP_CLASS[ANTHROPIC].get(body.get("stop_reason"), body.get("stop_reason"))
    _refusal_wording(m, body.get("stop_details"))
    m.usage = _anthropic_usage(body.get("usage"))
    return m


def _refusal_wording(m: Meaning, details) -> None:
    """A refusal with no text: its explanation is the wording other protocols show (mappings.md §10)."""
    if m.stop == "refusal" and not m.text and isinstance(details, dict):
        m.text = details.get("explanation") or ""


# --- streams -------------------------------------------------------------------------------


def sse_events(raw: bytes) -> list[tuple[str | None, str]]:
    events, name, data = [], None, []
    for line in raw.decode("utf-8", "replace").replace("\r\n", "\n").split("\n"):
        if not line:
            if data:
                events.append((name, "\n".join(data)))
            name, data = None, []
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" ") if line[5:6] == " " else line[5:])
    if data:
        events.append((name, "\n".join(data)))
    return events


def stream(protocol: str, raw: bytes) -> Meaning:
    payloads = []
    for _, data in sse_events(raw):
        if data.strip() == "[DONE]":
            continue
        try:
            payloads.append(json.loads(data))
        except ValueError:
            continue
    return {CHAT: _chat_stream, RESPONSES: _responses_stream, ANTHROPIC: _anthropic_stream}[protocol](payloads).finish()


def _chat_stream(chunks) -> Meaning:
    m = Meaning()
    calls: dict = {}
    for c in chunks:
        if "error" in c:
            m.error = str((c["error"] or {}).get("message") if isinstance(c["error"], dict) else c["error"])
            return m
        for choice in c.get("choices") or ():
            delta = choice.get("delta") or {}
            m.text += (delta.get("content") or "") + (delta.get("refusal") or "")
            m.reasoning += delta.get("reasoning_content") or ""
            for i, call in enumerate(delta.get("tool_calls") or ()):
                key = call.get("index", call.get("id") or i)
                slot = calls.setdefault(key, ["", ""])
                fn = call.get("function") or {}
                slot[0] = slot[0] or fn.get("name") or ""
                slot[1] += fn.get("arguments") or ""
            if choice.get("finish_reason"):
                m.stop = STOP_CLASS[CHAT].get(choice["finish_reason"], choice["finish_reason"])
        if c.get("usage"):
            m.usage = _chat_usage(c["usage"])
    m.calls = [(name, _args(args)) for name, args in calls.values()]
    _chat_reasoning(m, m.reasoning)
    if m.stop is None:
        m.stop = "end"  # [DONE] without finish_reason (OpenRouter): what the content says
    return m


def _responses_stream(events) -> Meaning:
    final = None
    for e in events:
        kind = e.get("type")
        if kind == "error":
            err = e.get("error") if isinstance(e.get("error"), dict) else e
            m = Meaning()
            m.error = str(err.get("message"))
            return m
        if kind in ("response.completed", "response.incomplete", "response.failed"):
            final = e.get("response") or {}
    if final is None:
        m = Meaning()
        m.error = "no terminal event"
        return m
    return _responses_response(final)


def _anthropic_stream(events) -> Meaning:
    m = Meaning()
    blocks: dict = {}
    usage: dict = {}
    details = None
    for e in events:
        kind = e.get("type")
        if kind == "error":
            m.error = str((e.get("error") or {}).get("message"))
            return m
        if kind == "message_start":
            usage.update({k: v for k, v in ((e.get("message") or {}).get("usage") or {}).items() if v is not None})
        elif kind == "content_block_start":
            blocks[e["index"]] = dict(e.get("content_block") or {}, _json="")
        elif kind == "content_block_delta":
            b, d = blocks.setdefault(e["index"], {"_json": ""}), e.get("delta") or {}
            dt = d.get("type")
            if dt == "text_delta":
                b["text"] = (b.get("text") or "") + d.get("text", "")
            elif dt == "input_json_delta":
                b["_json"] += d.get("partial_json", "")
            elif dt == "thinking_delta":
                b["thinking"] = (b.get("thinking") or "") + d.get("thinking", "")
            elif dt == "signature_delta":
                b["signature"] = (b.get("signature") or "") + d.get("signature", "")
        elif kind == "message_delta":
            reason = (e.get("delta") or {}).get("stop_reason")
            if reason:
                m.stop = STOP_CLASS[ANTHROPIC].get(reason, reason)
                details = (e.get("delta") or {}).get("stop_details")
            usage.update({k: v for k, v in (e.get("usage") or {}).items() if v is not None})
    for index in sorted(blocks):
        b = blocks[index]
        if b.get("type") == "tool_use" and b["_json"]:
            b["input"] = b["_json"]
    _anthropic_blocks(m, [blocks[i] for i in sorted(blocks)])
    _refusal_wording(m, details)
    m.usage = _anthropic_usage(usage) if usage else None
    return m


# --- requests ------------------------------------------------------------------------------


@dataclass
class RequestMeaning:
    texts: list = field(default_factory=list)  # every text the model reads (tool results too), in order
    tools: list = field(default_factory=list)  # function tool names
    deferred: set = field(default_factory=set)  # of those, the ones declared with defer_loading
    calls: list = field(default_factory=list)  # history tool calls: (name, arguments)
    results: int = 0  # tool results in the history


def request(protocol: str, body: dict) -> RequestMeaning:
    r = RequestMeaning()
    {CHAT: _chat_request, RESPONSES: _responses_request, ANTHROPIC: _anthropic_request}[protocol](r, body)
    return r


def _texts(content, kinds=("text", "input_text", "output_text")) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [p.get("text") or "" for p in content or () if isinstance(p, dict) and p.get("type") in kinds]


def _chat_request(r: RequestMeaning, body: dict) -> None:
    for msg in body.get("messages") or ():
        if msg.get("role") == "tool":
            r.results += 1
            r.texts += _texts(msg.get("content"))
            continue
        r.texts += _texts(msg.get("content"))
        for c in msg.get("tool_calls") or ():
            fn = c.get("function") or {}
            r.calls.append((fn.get("name"), _args(fn.get("arguments"))))
    r.tools = [(t.get("function") or {}).get("name") for t in body.get("tools") or () if t.get("type") == "function"]


def _responses_request(r: RequestMeaning, body: dict) -> None:
    if body.get("instructions"):
        r.texts.append(body["instructions"])
    items = body.get("input")
    if isinstance(items, str):
        r.texts.append(items)
        items = []
    for item in items or ():
        kind = item.get("type") or "message"
        if kind == "message":
            r.texts += _texts(item.get("content"))
        elif kind == "function_call":
            name = item.get("name")
            if item.get("namespace"):
                name = _responses_tool_names([{"type": "function", "name": name}], item["namespace"])[0]
            r.calls.append((name, _args(item.get("arguments"))))
        elif kind == "function_call_output":
            r.results += 1
            r.texts += _texts(item.get("output"))
    r.tools = _responses_tool_names(body.get("tools") or ())
    r.deferred = set(_responses_tool_names(body.get("tools") or (), deferred=True))
    # An additional_tools item makes its tools available from that point of the
    # conversation: toward another protocol they are declared with the request's. One
    # it repeats (a deferred tool now loaded) is the same tool.
    for item in items or ():
        if item.get("type") == "additional_tools":
            r.tools += [n for n in _responses_tool_names(item.get("tools") or ()) if n not in r.tools]


def _responses_tool_names(tools, namespace=None, deferred=False) -> list[str]:
    """Function and free-form tools; a namespace's tools as `<namespace>__<name>` (a
    namespace already ending in `_`, like Codex's `mcp__server__`, joined as is), the
    only form the other protocols have. Hosted tools have no counterpart elsewhere.
    `deferred`: only those declared with defer_loading."""
    names = []
    for t in tools:
        if t.get("type") == "namespace":
            names += _responses_tool_names(t.get("tools") or (), t.get("name"), deferred)
        elif t.get("type") in ("function", "custom") and (not deferred or t.get("defer_loading")):
            name = t.get("name") or ""
            if namespace:
                name = re.sub(r"[^A-Za-z0-9_-]", "_", namespace + ("" if namespace.endswith("_") else "__") + name)
            names.append(name)
    return names


def _anthropic_request(r: RequestMeaning, body: dict) -> None:
    system = body.get("system")
    if system:
        r.texts += _texts(system)
    for msg in body.get("messages") or ():
        content = msg.get("content")
        r.texts += _texts(content)
        for b in content if isinstance(content, list) else ():
            if b.get("type") == "tool_use":
                r.calls.append((b.get("name"), _args(b.get("input"))))
            elif b.get("type") == "tool_result":
                r.results += 1
                r.texts += _texts(b.get("content"))
    r.tools = [t.get("name") for t in body.get("tools") or () if t.get("type") in (None, "custom")]
    r.deferred = {t.get("name") for t in body.get("tools") or () if t.get("type") in (None, "custom") and t.get("defer_loading")}

"""One call shape for the three official SDKs as clients of a Gemini provider.

Each adapter turns a neutral conversation into its own SDK's request, runs it
(streaming or not) and reads the answer back into a `Result`; an assistant turn
goes back into the next request exactly as that SDK's users keep it (the answer
object replayed), so continuation state rides in the client's own fields.

Neutral messages: ("user", text | [parts]), ("assistant", Result), ("tool", call_id, text).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai

# The client-neutral stop each protocol's own value means.
STOPS = {
    "chat": {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens", "content_filter": "refusal"},
    "responses": {"completed": "end_turn", "incomplete:max_output_tokens": "max_tokens",
                  "incomplete:content_filter": "refusal"},
    "anthropic": {"end_turn": "end_turn", "tool_use": "tool_use", "max_tokens": "max_tokens", "refusal": "refusal"},
}


class StreamFailed(Exception):
    """A Responses stream that ended in response.failed (its events, as JSON)."""


@dataclass
class Result:
    text: str = ""
    reasoning: list = field(default_factory=list)
    calls: list = field(default_factory=list)  # (id, name, args)
    stop: str | None = None
    usage: dict = field(default_factory=dict)  # input, output, cached, reasoning
    raw: Any = None


class Chat:
    name = "chat"

    def __init__(self, proxy):
        self.client = proxy.openai()

    def _messages(self, messages, system):
        out = [{"role": "system", "content": system}] if system else []
        for m in messages:
            if m[0] == "user":
                content = m[1] if isinstance(m[1], str) else [self._part(p) for p in m[1]]
                out.append({"role": "user", "content": content})
            elif m[0] == "assistant":
                out.append(m[1].raw)
            else:
                out.append({"role": "tool", "tool_call_id": m[1], "content": m[2]})
        return out

    @staticmethod
    def _part(p):
        if p["type"] == "text":
            return {"type": "text", "text": p["text"]}
        return {"type": "image_url", "image_url": {"url": f"data:{p['media_type']};base64,{p['data']}"}}

    def ask(self, model, messages, stream=False, system=None, tools=None, tool_choice=None, max_tokens=None,
            schema=None, effort=None, **extra):
        kw: dict = {"model": model, "messages": self._messages(messages, system)}
        if tools:
            kw["tools"] = [{"type": "function", "function": {k: v for k, v in t.items() if v is not None}} for t in tools]
        if tool_choice:
            kw["tool_choice"] = ({"type": "function", "function": {"name": tool_choice[1]}}
                                 if isinstance(tool_choice, tuple) else tool_choice)
        if max_tokens:
            kw["max_completion_tokens"] = max_tokens
        if schema:
            kw["response_format"] = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
        if effort:
            kw["reasoning_effort"] = effort
        kw.update(extra)
        if not stream:
            r = self.client.chat.completions.create(**kw)
            choice, usage = r.choices[0], r.usage
            msg = choice.message
            reasoning = (msg.model_extra or {}).get("reasoning_content")
            raw = {"role": "assistant", "content": msg.content}
            if reasoning is not None:
                raw["reasoning_content"] = reasoning
            if msg.tool_calls:
                raw["tool_calls"] = [c.model_dump(exclude_none=True) for c in msg.tool_calls]
            calls = [(c.id, c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls or ()]
            text, finish = msg.content or "", choice.finish_reason
        else:
            kw["stream_options"] = {"include_usage": True}
            text, reasoning, tools_acc, finish, usage = "", None, {}, None, None
            for chunk in self.client.chat.completions.create(stream=True, **kw):
                if chunk.usage:
                    usage = chunk.usage
                if not chunk.choices:
                    continue
                delta = chunk.choices[0].delta
                text += delta.content or ""
                more = (delta.model_extra or {}).get("reasoning_content")
                if more:
                    reasoning = (reasoning or "") + more
                for tc in delta.tool_calls or ():
                    acc = tools_acc.setdefault(tc.index, {"id": None, "name": None, "arguments": ""})
                    acc["id"] = tc.id or acc["id"]
                    if tc.function:
                        acc["name"] = tc.function.name or acc["name"]
                        acc["arguments"] += tc.function.arguments or ""
                finish = chunk.choices[0].finish_reason or finish
            ordered = [tools_acc[i] for i in sorted(tools_acc)]
            calls = [(c["id"], c["name"], json.loads(c["arguments"])) for c in ordered]
            raw = {"role": "assistant", "content": text or None}
            if reasoning is not None:
                raw["reasoning_content"] = reasoning
            if ordered:
                raw["tool_calls"] = [{"id": c["id"], "type": "function",
                                      "function": {"name": c["name"], "arguments": c["arguments"]}} for c in ordered]
        u = {}
        if usage is not None:
            details = usage.prompt_tokens_details
            out_details = usage.completion_tokens_details
            u = {"input": usage.prompt_tokens, "output": usage.completion_tokens,
                 "cached": details.cached_tokens if details else None,
                 "reasoning": out_details.reasoning_tokens if out_details else None}
        return Result(text, [reasoning] if reasoning else [], calls, STOPS["chat"].get(finish, finish), u, raw)


class Responses:
    name = "responses"

    def __init__(self, proxy):
        self.client = proxy.openai()

    def _input(self, messages):
        out = []
        for m in messages:
            if m[0] == "user":
                content = m[1] if isinstance(m[1], str) else [self._part(p) for p in m[1]]
                out.append({"role": "user", "content": content})
            elif m[0] == "assistant":
                out.extend(i.model_dump(exclude_none=True) for i in m[1].raw.output)
            else:
                out.append({"type": "function_call_output", "call_id": m[1], "output": m[2]})
        return out

    @staticmethod
    def _part(p):
        if p["type"] == "text":
            return {"type": "input_text", "text": p["text"]}
        return {"type": "input_image", "image_url": f"data:{p['media_type']};base64,{p['data']}", "detail": "auto"}

    def ask(self, model, messages, stream=False, system=None, tools=None, tool_choice=None, max_tokens=None,
            schema=None, effort=None, **extra):
        kw: dict = {"model": model, "input": self._input(messages), "store": False}
        if system:
            kw["instructions"] = system
        if tools:
            kw["tools"] = [{"type": "function", "name": t["name"], "description": t.get("description"),
                            "parameters": t.get("parameters"), "strict": False} for t in tools]
        if tool_choice:
            kw["tool_choice"] = {"type": "function", "name": tool_choice[1]} if isinstance(tool_choice, tuple) else tool_choice
        if max_tokens:
            kw["max_output_tokens"] = max_tokens
        if schema:
            kw["text"] = {"format": {"type": "json_schema", "name": "answer", "schema": schema}}
        if effort:
            kw["reasoning"] = {"effort": effort, "summary": "auto"}
            kw["include"] = ["reasoning.encrypted_content"]
        kw.update(extra)
        if stream:
            with self.client.responses.stream(**kw) as s:
                events = list(s)
                failed = [e for e in events if e.type in ("response.failed", "error")]
                if failed:  # the SDK only says it saw no response.completed
                    raise StreamFailed(json.dumps([e.model_dump() for e in failed]))
                final = [e for e in events if e.type in ("response.completed", "response.incomplete")]
                assert final, "the Responses stream has no terminal event"
                # The SDK's get_final_response knows only response.completed.
                r = s.get_final_response() if final[-1].type == "response.completed" else final[-1].response
        else:
            r = self.client.responses.create(**kw)
        calls = [(i.call_id, i.name, json.loads(i.arguments)) for i in r.output if i.type == "function_call"]
        reasoning = ["".join(c.text for c in (i.content or ())) or "".join(s.text for s in i.summary)
                     for i in r.output if i.type == "reasoning"]
        status = r.status if r.status != "incomplete" else f"incomplete:{r.incomplete_details.reason}"
        stop = STOPS["responses"].get(status, status)
        if stop == "end_turn" and calls:
            stop = "tool_use"
        u = {}
        if r.usage is not None:
            u = {"input": r.usage.input_tokens, "output": r.usage.output_tokens,
                 "cached": r.usage.input_tokens_details.cached_tokens,
                 "reasoning": r.usage.output_tokens_details.reasoning_tokens}
        return Result(r.output_text, [t for t in reasoning if t], calls, stop, u, r)


class Anthropic:
    name = "anthropic"

    def __init__(self, proxy):
        self.client = proxy.anthropic()

    def _messages(self, messages):
        out = []
        for m in messages:
            if m[0] == "user":
                content = m[1] if isinstance(m[1], str) else [self._part(p) for p in m[1]]
                if out and out[-1]["role"] == "user":  # after tool results: the same user turn
                    out[-1]["content"] += [{"type": "text", "text": content}] if isinstance(content, str) else content
                else:
                    out.append({"role": "user", "content": content})
            elif m[0] == "assistant":
                out.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m[1].raw.content]})
            else:
                result = {"type": "tool_result", "tool_use_id": m[1], "content": m[2]}
                if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                    out[-1]["content"].append(result)
                else:
                    out.append({"role": "user", "content": [result]})
        return out

    @staticmethod
    def _part(p):
        if p["type"] == "text":
            return {"type": "text", "text": p["text"]}
        return {"type": "image", "source": {"type": "base64", "media_type": p["media_type"], "data": p["data"]}}

    def ask(self, model, messages, stream=False, system=None, tools=None, tool_choice=None, max_tokens=None,
            schema=None, effort=None, **extra):
        kw: dict = {"model": model, "messages": self._messages(messages), "max_tokens": max_tokens or 1024}
        if system:
            kw["system"] = system
        if tools:
            kw["tools"] = [{"name": t["name"], "description": t.get("description"),
                            "input_schema": t.get("parameters") or {"type": "object", "properties": {}}} for t in tools]
            kw["tools"] = [{k: v for k, v in t.items() if v is not None} for t in kw["tools"]]
        if tool_choice:
            kw["tool_choice"] = ({"type": "tool", "name": tool_choice[1]} if isinstance(tool_choice, tuple)
                                 else {"type": {"required": "any"}.get(tool_choice, tool_choice)})
        body = {}
        if schema:
            body["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
        if "temperature" in extra:  # not a typed argument of this SDK version
            body["temperature"] = extra.pop("temperature")
        if body:
            kw["extra_body"] = body
        if effort:
            kw["thinking"] = {"type": "enabled", "budget_tokens": {"low": 1024, "medium": 4096, "high": 16000}[effort]}
            kw["max_tokens"] = max(kw["max_tokens"], 20000)
        kw.update(extra)
        if stream:
            with self.client.messages.stream(**kw) as s:
                for _ in s:
                    pass
                r = s.get_final_message()
        else:
            r = self.client.messages.create(**kw)
        text = "".join(b.text for b in r.content if b.type == "text")
        calls = [(b.id, b.name, b.input) for b in r.content if b.type == "tool_use"]
        reasoning = [b.thinking for b in r.content if b.type == "thinking" and b.thinking]
        u = r.usage
        usage = {"input": u.input_tokens + (u.cache_read_input_tokens or 0) + (u.cache_creation_input_tokens or 0),
                 "output": u.output_tokens, "cached": u.cache_read_input_tokens,
                 "reasoning": ((u.model_extra or {}).get("output_tokens_details") or {}).get("thinking_tokens")}
        return Result(text, reasoning, calls, STOPS["anthropic"].get(r.stop_reason, r.stop_reason), usage, r)


CLIENTS = {"chat": Chat, "responses": Responses, "anthropic": Anthropic}

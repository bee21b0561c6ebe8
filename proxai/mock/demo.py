"""The answer a mock endpoint gives when no reply was scripted.

A plain model name gets a short friendly text. The demo model names below script
a reply that shows one feature each, in every protocol, so a newcomer can see a
tool call, reasoning, JSON output, a refusal, an error or a slow stream with no
key. The name is read from the request the mock receives, so `anthropic/demo-tools`
through the Chat endpoint shows the same tool call translated.
"""

from __future__ import annotations

import json

from .replies import ANTHROPIC, CHAT, GEMINI, INTERACTIONS, RESPONSES, Error
from .turn import Reasoning, Refusal, Text, ToolCall, Turn, Usage

NAMES = {
    CHAT: "OpenAI Chat Completions",
    RESPONSES: "OpenAI Responses",
    ANTHROPIC: "Anthropic Messages",
    GEMINI: "Gemini generateContent",
    INTERACTIONS: "Gemini Interactions",
}

WEATHER = {"city": "Paris", "temperature_c": 18, "conditions": "sunny"}


def _text_of(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") in ("text", "input_text")
        ).strip()
    return ""


def _gemini_contents(body: dict) -> list:
    return [c for c in body.get("contents") or [] if isinstance(c, dict)]


def _gemini_user_text(body: dict) -> str:
    users = [c for c in _gemini_contents(body) if c.get("role", "user") == "user"]
    parts = users[-1].get("parts") if users else None
    return " ".join(p["text"] for p in parts or [] if isinstance(p, dict) and isinstance(p.get("text"), str)).strip()


def _responses_user_text(body: dict) -> str:
    items = body.get("input")
    if isinstance(items, str):
        return items
    messages = [i for i in items or [] if isinstance(i, dict) and i.get("role") == "user"]
    return _text_of(messages[-1].get("content")) if messages else ""


def _interactions_steps(body: dict) -> list:
    from .interactions_ledger import input_steps

    return [s for s in input_steps(body) if isinstance(s, dict)]


def _interactions_user_text(body: dict) -> str:
    users = [s for s in _interactions_steps(body) if s.get("type") == "user_input"]
    return _text_of(users[-1].get("content")) if users else ""


def _interactions_tool_result(body: dict) -> str | None:
    steps = _interactions_steps(body)
    last = steps[-1] if steps else None
    if last is not None and last.get("type") == "function_result":
        out = last.get("result")
        return out if isinstance(out, str) else json.dumps(out)
    return None


def _messages_user_text(body: dict) -> str:
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "user"]
    return _text_of(messages[-1].get("content")) if messages else ""


def last_user_text(protocol: str, body: dict) -> str:
    return _USER_TEXT.get(protocol, _messages_user_text)(body)


def _gemini_tool_result(body: dict) -> str | None:
    contents = _gemini_contents(body)
    for part in (contents[-1].get("parts") or []) if contents else []:
        response = part.get("functionResponse") if isinstance(part, dict) else None
        if isinstance(response, dict):
            out = (response.get("response") or {}).get("output", response.get("response"))
            return out if isinstance(out, str) else json.dumps(out)
    return None


def _responses_tool_result(body: dict) -> str | None:
    items = body.get("input")
    last = items[-1] if isinstance(items, list) and items else None
    if isinstance(last, dict) and last.get("type") == "function_call_output":
        out = last.get("output")
        return out if isinstance(out, str) else json.dumps(out)
    return None


def _last_message(body: dict) -> dict | None:
    messages = body.get("messages") or []
    last = messages[-1] if messages else None
    return last if isinstance(last, dict) else None


def _chat_tool_result(body: dict) -> str | None:
    last = _last_message(body)
    return _text_of(last.get("content")) if last is not None and last.get("role") == "tool" else None


def _anthropic_tool_result(body: dict) -> str | None:
    last = _last_message(body)
    if last is None:
        return None
    for block in last.get("content") or [] if isinstance(last.get("content"), list) else []:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            content = block.get("content")
            return content if isinstance(content, str) else _text_of(content)
    return None


# Where each protocol's request has the last user text and a tool's result.
_USER_TEXT = {GEMINI: _gemini_user_text, RESPONSES: _responses_user_text, INTERACTIONS: _interactions_user_text}
_TOOL_RESULT = {GEMINI: _gemini_tool_result, RESPONSES: _responses_tool_result, CHAT: _chat_tool_result,
                INTERACTIONS: _interactions_tool_result}


def tool_result(protocol: str, body: dict) -> str | None:
    """The output of the tool call the conversation ends with, if it ends with one."""
    return _TOOL_RESULT.get(protocol, _anthropic_tool_result)(body)


def _words(text: str) -> list[str]:
    words = text.split(" ")
    return [w + " " for w in words[:-1]] + [words[-1]]


def _text_turn(text: str, said: str = "", **kw) -> Turn:
    return Turn([Text(text, chunks=_words(text))],
                usage=Usage(input_tokens=max(1, len(said.split())), output_tokens=len(text.split())), **kw)


def hello(protocol: str, body: dict) -> Turn:
    said = last_user_text(protocol, body)
    text = f"Hello from the ProxAI demo {NAMES.get(protocol, protocol)} upstream!"
    text += f' You said: "{said}"' if said else " You did not say anything yet."
    return _text_turn(text, said)


def tools(protocol: str, body: dict) -> Turn:
    """A get_weather call; once the conversation ends with its result, a text answer quoting it."""
    result = tool_result(protocol, body)
    if result is not None:
        return _text_turn(f"The tool answered: {result}")
    arguments = json.dumps({"city": "Paris"})
    call = ToolCall("call_demo_weather_1", "get_weather", arguments, chunks=[arguments[:5], arguments[5:]])
    return Turn([Text("Let me check the weather. "), call], usage=Usage(input_tokens=12, output_tokens=9))


def think(protocol: str, body: dict) -> Turn:
    reasoning = Reasoning(
        "The user greets me. A short friendly answer is enough.",
        signature="demo-signature-" + "A" * 24,
        encrypted_content="demo-encrypted-reasoning",
        summary=True,
    )
    text = "Hello! I thought about it first."
    return Turn([reasoning, Text(text, chunks=_words(text))],
                usage=Usage(input_tokens=8, output_tokens=20, reasoning_tokens=12))


def json_output(protocol: str, body: dict) -> Turn:
    text = json.dumps(WEATHER)
    return Turn([Text(text, chunks=[text[:12], text[12:30], text[30:]])], usage=Usage(input_tokens=8, output_tokens=14))


def refusal(protocol: str, body: dict) -> Turn:
    return Turn([Refusal("I can't help with that.", explanation="The demo always declines.", category="cyber")],
                usage=Usage(input_tokens=8, output_tokens=7))


def length(protocol: str, body: dict) -> Turn:
    text = "This answer is cut short because it reached the output token"
    return _text_turn(text, stop={CHAT: "length", ANTHROPIC: "max_tokens", RESPONSES: "incomplete:max_output_tokens",
                                  GEMINI: "MAX_TOKENS", INTERACTIONS: "incomplete"})


def slow(protocol: str, body: dict) -> Turn:
    text = "This answer arrives slowly, one word at a time, so you can watch it stream."
    return _text_turn(text, delay_secs=0.15)


def rate_limited(protocol: str, body: dict) -> Error:
    return Error(429, headers={"retry-after": "1"}, message="demo rate limit: retry after 1 second")


def server_error(protocol: str, body: dict) -> Error:
    return Error(500, message="demo upstream failure")


def cut(protocol: str, body: dict) -> Turn:
    """A stream that breaks off mid-answer (non-streaming requests get the whole text)."""
    text = "This stream breaks off in the middle of"
    return _text_turn(text, cut_after=4)


# Model name -> reply; each name is documented in docs/getting-started.md ("Demo models").
MODELS = {
    "demo-tools": tools,
    "demo-think": think,
    "demo-json": json_output,
    "demo-refusal": refusal,
    "demo-length": length,
    "demo-slow": slow,
    "demo-429": rate_limited,
    "demo-500": server_error,
    "demo-cut": cut,
}


def demo_reply(protocol: str, body: dict) -> Turn | Error:
    model = body.get("model")
    script = MODELS.get(model.lower() if isinstance(model, str) else "", hello)
    return script(protocol, body)


def demo_turn(protocol: str, body: dict) -> Turn:
    """The plain greeting (kept for callers that want a Turn whatever the model)."""
    return hello(protocol, body)


# Fields a counting answer has besides its count (InputTokenCountResponse's object).
_COUNT_EXTRA = {RESPONSES: {"object": "response.input_tokens"}}


def token_count(protocol: str, raw: bytes) -> dict:
    """A counting endpoint's answer: one token per 4 bytes of the request body."""
    return {**_COUNT_EXTRA.get(protocol, {}), "input_tokens": max(1, len(raw) // 4)}

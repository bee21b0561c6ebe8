"""What the bench sends and what its mock upstream answers: ~1 KB requests in each
protocol, and one assistant turn (text, then two tool calls) rendered in each protocol.

The turn is the shape of an agent-loop step: some prose, then tool calls. Chat streams
interleave the two calls' argument fragments, as parallel tool calls do on the wire.
"""

from __future__ import annotations

import json

from proxai.mock import Text, ToolCall, Turn, Usage, render

CHAT = "openai_chat_completions"
RESPONSES = "openai_responses"
ANTHROPIC = "anthropic_messages"
PROTOCOLS = (CHAT, RESPONSES, ANTHROPIC)
SHORT = {CHAT: "chat", RESPONSES: "responses", ANTHROPIC: "anthropic"}
PATHS = {CHAT: "/v1/chat/completions", RESPONSES: "/v1/responses", ANTHROPIC: "/v1/messages"}

# The last bytes of a complete stream in each client protocol.
TERMINAL = {CHAT: b"[DONE]", RESPONSES: b"response.completed", ANTHROPIC: b"message_stop"}

MODEL = "bench-model"
DEFAULT_DELTAS = 64
TOOL_SHARE = 0.25  # of the deltas, the part that streams tool-call arguments

_SYSTEM = "You are a careful coding agent. Use the tools to inspect the repository before answering; keep answers short."
_USER = (
    "The test suite fails on the parser module after the last refactor. Find the cause, explain it in two "
    "sentences and propose the smallest fix. Here is the failing output: AssertionError: expected 3 events, got 2 "
    "(tests/test_sse.py::test_split_crlf)."
)
_ARGS = json.dumps({"path": "proxai/http/sse.py", "start_line": 1, "end_line": 120})
_RESULT = "def feed(self, chunk):\n    if not chunk:\n        return []\n    buf = self._buf + chunk\n    ..." * 2
_TOOL = {
    "name": "read_file",
    "description": "Read a range of lines from a file in the repository.",
    "parameters": {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "repository-relative path"},
            "start_line": {"type": "integer"},
            "end_line": {"type": "integer"},
        },
        "required": ["path"],
    },
}


def request(protocol: str, stream: bool, model: str = MODEL) -> dict:
    """A ~1 KB agent-loop request: system prompt, one tool, a previous tool call and its result."""
    if protocol == CHAT:
        body = {
            "model": model,
            "messages": [
                {"role": "system", "content": _SYSTEM},
                {"role": "user", "content": _USER},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": _ARGS}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": _RESULT},
            ],
            "tools": [{"type": "function", "function": _TOOL}],
            "max_tokens": 1024,
        }
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body
    if protocol == RESPONSES:
        body = {
            "model": model,
            "instructions": _SYSTEM,
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": _USER}]},
                {"type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": _ARGS},
                {"type": "function_call_output", "call_id": "call_1", "output": _RESULT},
            ],
            "tools": [{"type": "function", **_TOOL}],
            "max_output_tokens": 1024,
            "store": False,
        }
    else:
        body = {
            "model": model,
            "system": _SYSTEM,
            "messages": [
                {"role": "user", "content": _USER},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": json.loads(_ARGS)}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": _RESULT}]},
            ],
            "tools": [{"name": _TOOL["name"], "description": _TOOL["description"], "input_schema": _TOOL["parameters"]}],
            "max_tokens": 1024,
        }
    if stream:
        body["stream"] = True
    return body


def _split(text: str, parts: int) -> list[str]:
    parts = max(1, min(parts, len(text)))
    size, extra = divmod(len(text), parts)
    out, at = [], 0
    for i in range(parts):
        step = size + (1 if i < extra else 0)
        out.append(text[at:at + step])
        at += step
    return out


def turn(deltas: int = DEFAULT_DELTAS) -> Turn:
    """~550 characters of text and two tool calls; `deltas` stream deltas in all."""
    text = (
        "The parser drops the event that ends exactly at a chunk boundary when the boundary falls between the CR "
        "and the LF of a CRLF line ending: the refactor moved the pending-CR check after the buffer join, so the "
        "LF that starts the next chunk is read as an empty line and the event before it is emitted twice while "
        "the next one is lost. The smallest fix is to strip a leading LF from the new chunk before joining it to "
        "the buffer whenever the previous chunk ended in CR."
    )
    tool_deltas = max(2, round(deltas * TOOL_SHARE))
    text_deltas = max(1, deltas - tool_deltas)
    calls = []
    for i, path in enumerate(("proxai/http/sse.py", "tests/test_sse.py")):
        args = json.dumps({"path": path, "start_line": 1, "end_line": 160})
        calls.append(ToolCall(id=f"call_{i + 2}", name="read_file", arguments=args,
                              chunks=_split(args, max(1, tool_deltas // 2))))
    return Turn(
        [Text(text, chunks=_split(text, text_deltas)), *calls],
        usage=Usage(input_tokens=412, output_tokens=187),
        interleave_tools=True,
        include_usage=True,
        model=MODEL,
    )


def reply(protocol: str, stream: bool, deltas: int = DEFAULT_DELTAS):
    """The turn as `protocol` renders it: a body dict, or a list of (event name, data)."""
    return render(protocol, turn(deltas), request(protocol, stream))

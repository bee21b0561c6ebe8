"""The canonical model (IR) as plain Python types, mirroring schemas/ir.schema.json.

Payloads are ordinary dicts and lists at run time (rules read them with
jmespath); these TypedDicts document their shape for hooks and tests, and
tests/test_ir_conformance.py checks every decoder's output against the schema.
"""
from __future__ import annotations

from typing import Literal, TypedDict, Union

Stop = Literal["end_turn", "stop_sequence", "max_tokens", "context_window_exceeded", "tool_use", "pause_turn",
               "refusal", "incomplete", "failed", "cancelled", "protocol_error"]
BlockKind = Literal["text", "refusal", "reasoning", "redacted_reasoning", "tool_call"]


class Opaque(TypedDict, total=False):
    """Provider-opaque reasoning state, with who produced it: exactly one of
    signature (Anthropic thinking), data (Anthropic redacted thinking) or
    encrypted_content (Responses reasoning item, with its id)."""
    protocol: str
    provider: str | None
    signature: str
    data: str
    encrypted_content: str
    id: str | None
    summary_lengths: list[int] | None


class Part(TypedDict, total=False):
    type: Literal["text", "image", "document", "audio", "refusal", "reasoning", "tool_call", "tool_result", "unsupported"]
    text: str | None                  # text, refusal, reasoning (None: redacted)
    annotations: list                 # text: url_citation annotations
    source: Literal["url", "base64", "file", "text", "content"]   # image, document
    url: str
    media_type: str
    data: str
    file_id: str
    filename: str
    detail: str
    format: str                       # audio
    summary: list[str]                # reasoning from a summary
    opaque: Opaque                    # reasoning
    id: str                           # tool_call: the call id, verbatim across protocols
    name: str
    arguments: str                    # tool_call: JSON text
    custom: bool                      # tool_call: a free-form (custom) tool call, whose input is text
    namespace: str                    # tool_call: the Responses namespace of the called tool
    input: str
    call_id: str                      # tool_result
    content: list["Part"]             # tool_result
    is_error: bool
    what: str                         # unsupported: what the source item was


class Message(TypedDict, total=False):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: list[Part]
    name: str


class Tool(TypedDict, total=False):
    type: Literal["function", "custom", "hosted"]
    name: str
    description: str
    parameters: dict | None
    strict: bool | None
    hosted_type: str
    format: dict                      # custom: text or grammar
    namespace: str                    # the Responses namespace it was declared in
    namespace_description: str
    defer_loading: bool


class ToolChoice(TypedDict, total=False):
    type: Literal["none", "auto", "required", "tool", "custom", "hosted"]
    name: str
    allowed: list[str]


class Reasoning(TypedDict, total=False):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
    summary: Literal["auto", "concise", "detailed"]
    thinking: dict


class ResponseFormat(TypedDict, total=False):
    type: Literal["text", "json_object", "json_schema"]
    name: str
    schema: dict
    strict: bool | None
    description: str


class Usage(TypedDict, total=False):
    input_tokens: int          # total input, cache reads and writes included
    cached_tokens: int
    cache_write_tokens: int
    output_tokens: int
    reasoning_tokens: int


class Request(TypedDict, total=False):
    model: str
    stream: bool
    include_usage: bool
    system: list[Part]         # top-level instructions (Anthropic system, Responses instructions)
    messages: list[Message]
    tools: list[Tool]
    tool_choice: ToolChoice
    parallel_tool_calls: bool
    max_output_tokens: int
    temperature: float
    top_p: float
    top_k: int
    stop: list[str]
    n: int
    seed: int
    presence_penalty: float
    frequency_penalty: float
    logit_bias: dict
    logprobs: bool
    top_logprobs: int
    reasoning: Reasoning
    response_format: ResponseFormat
    verbosity: str
    metadata: dict
    user: str
    service_tier: str
    store: bool
    max_tool_calls: int
    truncation: str
    background: bool
    previous_response_id: str
    conversation: object
    prompt_cache_key: str


class Response(TypedDict, total=False):
    id: str
    model: str
    created: float
    content: list[Part]
    stop: Stop
    stop_sequence: str | None
    stop_details: dict | None
    error: dict | None
    usage: Usage


class MessageStart(TypedDict, total=False):
    type: Literal["message_start"]
    id: str
    model: str
    created: float
    usage: Usage


class BlockStart(TypedDict, total=False):
    type: Literal["block_start"]
    index: int
    kind: BlockKind
    id: str
    name: str
    custom: bool       # tool_call: a free-form call; its deltas are the input text
    namespace: str     # tool_call: the Responses namespace of the called tool
    text: str
    opaque: Opaque


class BlockDelta(TypedDict, total=False):
    type: Literal["block_delta"]
    index: int
    kind: BlockKind
    delta: str


class BlockOpaque(TypedDict, total=False):
    type: Literal["block_opaque"]
    index: int
    opaque: Opaque


class BlockStop(TypedDict, total=False):
    type: Literal["block_stop"]
    index: int


class MessageStop(TypedDict, total=False):
    """Emitted only once the source's own completeness condition holds."""
    type: Literal["message_stop"]
    stop: Stop
    stop_sequence: str | None
    stop_details: dict | None
    usage: Usage


class Error(TypedDict, total=False):
    type: Literal["error"]
    status: int
    error_type: str
    message: str
    code: str | None
    param: str | None


Event = Union[MessageStart, BlockStart, BlockDelta, BlockOpaque, BlockStop, MessageStop, Error]

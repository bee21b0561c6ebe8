"""A protocol-neutral assistant turn that each renderer turns into its own wire format."""

from __future__ import annotations

from dataclasses import dataclass, field

from proxai.mock.replies import Delivery


@dataclass
class Text:
    text: str
    chunks: list[str] | None = None  # how the text is split into stream deltas
    thought_signature: str | None = None  # Gemini: a signature on this part


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # the exact JSON string (a custom call: its free-form input)
    chunks: list[str] | None = None
    # Responses only: a free-form `custom_tool_call`, and the namespace of a namespaced tool.
    custom: bool = False
    namespace: str | None = None
    thought_signature: str | None = None  # Gemini: a signature on this part (an empty id: none sent)


@dataclass
class Reasoning:
    text: str
    signature: str | None = None
    encrypted_content: str | None = None
    summary: bool = False  # Responses: summary_text parts instead of reasoning_text content
    chunks: list[str] | None = None


@dataclass
class Image:
    """Generated image output (base64 data); only the Interactions renderer shows it."""

    data: str
    mime_type: str = "image/png"


@dataclass
class RedactedReasoning:
    data: str


@dataclass
class Refusal:
    text: str
    explanation: str | None = None
    category: str | None = None


@dataclass
class Usage:
    """Canonical counts: input_tokens INCLUDES cached and cache-write tokens."""

    input_tokens: int = 10
    output_tokens: int = 5
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    # Of cache_write_tokens, those at the extended TTL (Anthropic 1h, OpenAI 12h); None: the
    # Responses renderer leaves out the TTL breakdown, Anthropic's reports all at 5m.
    cache_write_long_tokens: int | None = None


@dataclass
class Turn(Delivery):
    blocks: list = field(default_factory=list)
    stop: str | dict | None = None  # protocol-native value, or {protocol: value}
    usage: Usage | None = None
    id: str | None = None
    model: str | None = None
    interleave_tools: bool = False
    include_usage: bool | None = None
    omit_done: bool = False
    error_after: int | None = None
    error: dict | None = None
    stop_sequence: str | None = None  # Anthropic stop_sequence when stop is "stop_sequence"
    headers: dict | None = None

    def stop_for(self, protocol: str) -> str | None:
        if isinstance(self.stop, dict):
            return self.stop.get(protocol)
        return self.stop

    def has_tool_calls(self) -> bool:
        return any(isinstance(b, ToolCall) for b in self.blocks)

    def has_refusal(self) -> bool:
        return any(isinstance(b, Refusal) for b in self.blocks)


def pieces(text: str, chunks: list[str] | None, parts: int = 3) -> list[str]:
    """The deltas a value streams as: the given chunks, or a few roughly equal pieces."""
    if chunks is not None:
        if "".join(chunks) != text:
            raise ValueError("chunks do not join to the full value")
        return list(chunks)
    if not text:
        return []
    size = max(1, -(-len(text) // parts))
    return [text[i : i + size] for i in range(0, len(text), size)]


def model_for(turn: Turn, request: dict) -> str:
    return turn.model or request.get("model") or "mock-model"


def usage_for(turn: Turn) -> Usage:
    return turn.usage or Usage()


def new_id(prefix: str) -> str:
    import uuid

    return prefix + uuid.uuid4().hex[:24]


def refusal_text(r: Refusal) -> str:
    """The wording OpenAI protocols carry in their refusal slot."""
    return r.text or r.explanation or ""


def round_robin(groups: list[list]) -> list:
    """Interleave several sequences one item at a time (parallel tool calls' fragments)."""
    out, step = [], 0
    while any(step < len(g) for g in groups):
        out.extend(g[step] for g in groups if step < len(g))
        step += 1
    return out

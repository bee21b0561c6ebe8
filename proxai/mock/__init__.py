"""Mock upstreams for the built-in protocols: exact wire format, scripted replies, recorded requests."""

from .replies import Error, Hang, Json, Stream, encode_event, native_error_body
from .turn import Reasoning, RedactedReasoning, Refusal, Text, ToolCall, Turn, Usage
from .upstream import MockUpstream, Recorded, protocol_for_path, render, serve_in_thread

__all__ = [
    "MockUpstream", "Recorded", "Json", "Stream", "Error", "Hang", "Turn", "Text", "ToolCall", "Reasoning",
    "RedactedReasoning", "Refusal", "Usage", "encode_event", "native_error_body", "protocol_for_path",
    "serve_in_thread", "render",
]

"""The paths the proxy serves, with and without the `/v1` prefix, and which protocol's
shape an answer on a path takes (errors included)."""

from __future__ import annotations

from typing import Mapping

from proxai.errors import ANTHROPIC, CHAT, GEMINI, RESPONSES

PREFIX = "/v1"

# POST endpoints whose body is a request of the protocol.
GENERATE = {"/v1/chat/completions": CHAT, "/v1/responses": RESPONSES, "/v1/messages": ANTHROPIC}
# POST endpoints that count a request's input tokens.
COUNT_TOKENS = {"/v1/messages/count_tokens": ANTHROPIC, "/v1/responses/input_tokens": RESPONSES}
MODELS = "/v1/models"


def canonical(path: str) -> str:
    """`/messages` and `/v1/messages` are the same endpoint (several clients and proxies
    of this kind leave the prefix out); the canonical form has it."""
    if path == PREFIX or path.startswith(PREFIX + "/"):
        return path
    return PREFIX + path


def unprefixed(path: str) -> str:
    return path[len(PREFIX):]


def anthropic_client(headers: Mapping[str, str]) -> bool:
    """An Anthropic SDK (or Claude Code) sends `anthropic-version`, and its key as
    `x-api-key` unless it uses a bearer token; OpenAI SDKs send neither."""
    return "anthropic-version" in headers or "x-api-key" in headers or "anthropic-beta" in headers


def _gemini_method(path: str) -> bool:
    """`/v1/models/{model}:generateContent` and its siblings are Gemini's."""
    return path.startswith("/v1/models/") and path.rpartition(":")[2] in (
        "generateContent", "streamGenerateContent", "countTokens")


def protocol_for(path: str, headers: Mapping[str, str]) -> str:
    """The protocol whose shape an answer on `path` takes. A path in one API family answers
    in its shape (`/v1/messages/...` and even `/v1/v1/messages` are Anthropic's); shared
    and unknown paths by the client's headers."""
    if path.startswith("/v1beta/") or path == "/v1beta" or _gemini_method(path):
        return GEMINI
    path = canonical(path.rstrip("/") or "/")
    if path in GENERATE:
        return GENERATE[path]
    if path in COUNT_TOKENS:
        return COUNT_TOKENS[path]
    segments = path.split("/")
    if "messages" in segments:
        return ANTHROPIC
    if "responses" in segments:
        return RESPONSES
    if "chat" in segments:
        return CHAT
    return ANTHROPIC if anthropic_client(headers) else CHAT

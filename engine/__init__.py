"""The ProxAI translation engine: rule files (YAML) interpreted over a canonical model.

    client wire --request.decode--> IR --request.encode--> provider wire
    provider wire --response.decode--> IR --response.encode--> client wire
    provider SSE --stream.decode--> IR events --stream.encode--> client SSE

Public API: :class:`Engine`, :class:`Context` and the exceptions in :mod:`engine.errors`.
"""
from __future__ import annotations

from pathlib import Path

from .context import DEFAULT_MAX_TOKENS, Context
from .errors import InvalidRequest, ProxaiError, RuleError, TranslationError, UpstreamProtocolError
from .codec import Codec
from .ruleset import load_rules
from .stream import StreamTranslator
from .toolcalls import restore_response

__all__ = ["Engine", "Context", "ProxaiError", "RuleError", "TranslationError", "InvalidRequest",
           "UpstreamProtocolError", "DEFAULT_MAX_TOKENS"]

PROTOCOLS = ("openai_chat_completions", "openai_responses", "anthropic_messages")


class Engine:
    """Compiled rules for every protocol; build once at startup, share across requests."""

    def __init__(self, codecs: dict, streams: dict, tables: dict, enums: dict):
        self.codecs, self.streams, self.tables, self.enums = codecs, streams, tables, enums

    @classmethod
    def load(cls, override_dir: str | Path | None = None, builtin_dir: str | Path | None = None) -> "Engine":
        rules, problems = load_rules(override_dir, builtin_dir)
        if problems:
            raise problems[0]
        return cls(rules.codecs, rules.streams, rules.tables, rules.enums)

    def _codec(self, kind: str, protocol: str) -> Codec:
        codec = self.codecs.get((kind, protocol))
        if codec is None:
            raise InvalidRequest(f"no {kind} rules for {protocol}")
        return codec

    def decode_request(self, ctx: Context, body: dict) -> dict:
        return self._codec("request.decode", ctx.client_protocol).apply(body, ctx)

    def encode_request(self, ctx: Context, ir: dict) -> dict:
        return self._codec("request.encode", ctx.provider_protocol).apply(ir, ctx)

    def translate_request(self, ctx: Context, body: dict) -> dict:
        return self.encode_request(ctx, self.decode_request(ctx, body))

    def decode_response(self, ctx: Context, body: dict) -> dict:
        return self._codec("response.decode", ctx.provider_protocol).apply(body, ctx)

    def encode_response(self, ctx: Context, ir: dict) -> dict:
        return self._codec("response.encode", ctx.client_protocol).apply(ir, ctx)

    def translate_response(self, ctx: Context, body: dict) -> dict:
        if not isinstance(body, dict):
            raise UpstreamProtocolError("upstream response body is not a JSON object")
        ir = self.decode_response(ctx, body)
        if ctx.tool_calls:
            ir = restore_response(ir, ctx)
        return self.encode_response(ctx, ir)

    def open_stream(self, ctx: Context) -> StreamTranslator:
        decoder = self.streams.get(("stream.decode", ctx.provider_protocol))
        encoder = self.streams.get(("stream.encode", ctx.client_protocol))
        if decoder is None or encoder is None:
            raise InvalidRequest(f"no stream rules for {ctx.provider_protocol} -> {ctx.client_protocol}")
        return StreamTranslator(decoder, encoder, ctx)

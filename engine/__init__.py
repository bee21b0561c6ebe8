"""The ProxAI translation engine: rule files (YAML) interpreted over a canonical model.

    client wire --request.decode--> IR --request.encode--> provider wire
    provider wire --response.decode--> IR --response.encode--> client wire
    provider SSE --stream.decode--> IR events --stream.encode--> client SSE

Public API: :class:`Engine`, :class:`Context` and the exceptions in :mod:`engine.errors`.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from pathlib import Path

import orjson

from .context import DEFAULT_MAX_TOKENS, Context
from .errors import InvalidRequest, ProxaiError, ProxyError, RuleError, TranslationError, UpstreamProtocolError
from .codec import Codec
from .ruleset import load_rules, rule_dirs, rule_files
from .stream import StreamTranslator
from .protocol import run_template
from .toolcalls import restore_response
from .wire import Wire

__all__ = ["Engine", "Context", "ProxaiError", "ProxyError", "RuleError", "TranslationError", "InvalidRequest",
           "UpstreamProtocolError", "DEFAULT_MAX_TOKENS"]


_COMPILED: OrderedDict = OrderedDict()
_COMPILED_MAX = 8


def _fingerprint(dirs: list[Path], hooks: dict) -> bytes | None:
    """A digest of every rule file's path and bytes (and of the hook table), or None when a
    directory is missing (the compile then reports it)."""
    digest = hashlib.blake2b(digest_size=20)
    for name, fn in hooks.items():
        digest.update(f"{name}={id(fn)};".encode())
    for directory in dirs:
        if not directory.is_dir():
            return None
        # a protocol folder's hooks module is part of its rules
        for path in [*rule_files(directory), *sorted(directory.glob("*/*.py"))]:
            digest.update(str(path).encode() + b"\0")
            try:
                digest.update(path.read_bytes())
            except OSError:
                return None
            digest.update(b"\0")
    return digest.digest()


class Engine:
    """Compiled rules for every protocol; build once at startup, share across requests."""

    def __init__(self, codecs: dict, streams: dict, tables: dict, enums: dict, protocols: dict | None = None):
        self.codecs, self.streams, self.tables, self.enums = codecs, streams, tables, enums
        self.protocols = protocols or {}   # protocol -> engine.protocol.Descriptor (rules/<p>/protocol.yaml)
        self.wire = Wire(self.protocols, tables)   # the wire surface: endpoints, headers, upstream URLs

    @classmethod
    def load(cls, override_dir: str | Path | None = None, builtin_dir: str | Path | None = None) -> "Engine":
        """Compile the built-in rules, layered with `override_dir`. Compiled engines are
        immutable, so identical rule files (by content) give back the same engine: a reload
        that changed only the config, and every in-process server of a test run, skip the
        compile."""
        from .registry import HOOKS

        key = _fingerprint(rule_dirs(override_dir, builtin_dir), HOOKS)
        if key is not None and key in _COMPILED:
            _COMPILED.move_to_end(key)
            return _COMPILED[key]
        rules, problems = load_rules(override_dir, builtin_dir)
        if problems:
            raise problems[0]
        eng = cls(rules.codecs, rules.streams, rules.tables, rules.enums, rules.protocols)
        if key is not None:
            _COMPILED[key] = eng
            while len(_COMPILED) > _COMPILED_MAX:
                _COMPILED.popitem(last=False)
        return eng

    # --- what the server reads off bodies, by each protocol's protocol.yaml -----------

    def summary(self, protocol: str, body) -> dict:
        """{usage, stop, model, id} of a response body (parsed, or raw JSON) in the IR's
        names, by the protocol's `summary:` rules: what logs, metrics, traces and the
        inspector report. Absent or unreadable fields are None."""
        if isinstance(body, (bytes, bytearray)):
            try:
                body = orjson.loads(body)
            except orjson.JSONDecodeError:
                return {}
        descriptor = self.protocols.get(protocol)
        if descriptor is None or not isinstance(body, dict):
            return {}
        return descriptor.summarise(body)

    def http_error(self, protocol: str, err: ProxyError) -> dict:
        """The HTTP error body a client of `protocol` expects for `err`, by the protocol's
        `errors.encode` rule over the IR error."""
        return run_template(self.protocols[protocol].error_encode, self._ir_error(protocol, err), protocol)

    def failure(self, protocol: str, err: ProxyError) -> dict:
        """The error object of a response that ended failed (a background run's), by the
        protocol's `errors.failure` rule over the IR error."""
        descriptor = self.protocols[protocol]
        return run_template(descriptor.error_rules.get("failure"), self._ir_error(protocol, err), protocol,
                            "errors.failure")

    def stream_error(self, protocol: str, err: ProxyError, sequence_number: int = 0, response=None) -> list[dict]:
        """The events of an in-stream error the server writes outside the stream rules (a
        stored response's state failing under a translated stream), by the protocol's
        `errors.stream` rule over the IR error with `sequence_number` (the next unused one)
        and `response` (the last snapshot, or None)."""
        descriptor = self.protocols[protocol]
        ir = {**self._ir_error(protocol, err), "sequence_number": sequence_number, "response": response}
        events = run_template(descriptor.error_rules.get("stream"), ir, protocol, "errors.stream")
        return events if isinstance(events, list) else [events]

    def model_list(self, protocol: str, models: list[dict], has_more: bool = False) -> dict:
        """A model list in the protocol's shape (`models:` item and list rules); each
        served model is {id, provider, max_tokens}."""
        rules = self.protocols[protocol].model_rules
        items = [run_template(rules.get("item"), m, protocol, "models") for m in models]
        page = {"models": items, "has_more": has_more,
                "first_id": models[0]["id"] if models else None, "last_id": models[-1]["id"] if models else None}
        return run_template(rules.get("list"), page, protocol, "models")

    def model_item(self, protocol: str, model: dict) -> dict:
        """One served model {id, provider, max_tokens} in the protocol's shape."""
        return run_template(self.protocols[protocol].model_rules.get("item"), model, protocol, "models")

    def _ir_error(self, protocol: str, err: ProxyError) -> dict:
        """The IR error of `err`. Its own type goes in only when it is of the protocol's
        vocabulary (another protocol's type would be a wrong value)."""
        ir = {"status": err.status, "message": err.message, "code": err.code, "param": err.param, "kind": err.kind}
        if err.error_type and err.type_family == self.protocols[protocol].error_vocabulary:
            ir["error_type"] = err.error_type
        return ir

    def parse_error(self, protocol: str, status: int, body) -> dict:
        """A provider's error body as the IR error {status, message, error_type, code, param,
        retry_after} by the protocol's `errors.decode` rule; `vocabulary` names the
        vocabulary of error_type. Fields the body does not have are absent."""
        descriptor = self.protocols[protocol]
        out = {}
        if body is not None and descriptor.error_decode is not None:
            try:
                out = run_template(descriptor.error_decode, body, protocol) or {}
            except (TranslationError, TypeError, ValueError, AttributeError, KeyError, IndexError):
                out = {}  # an error body the rules cannot read: the caller words its own message
        return {**out, "status": status, "vocabulary": descriptor.error_vocabulary}

    def gen_ai(self, protocol: str) -> tuple[str | None, str | None]:
        """(gen_ai.system, gen_ai.operation.name) of the protocol's spans."""
        descriptor = self.protocols.get(protocol)
        section = descriptor.section("gen_ai") if descriptor is not None else {}
        return section.get("system"), section.get("operation")

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
        return self.encode_answer(ctx, self.decode_response(ctx, body))

    def encode_answer(self, ctx: Context, ir: dict) -> dict:
        """An IR response as the client's answer: the client's model name and tool names."""
        if ctx.response_model is not None:
            ir["model"] = ctx.response_model
        if ctx.tool_calls:
            ir = restore_response(ir, ctx)
        return self.encode_response(ctx, ir)

    def open_stream(self, ctx: Context) -> StreamTranslator:
        decoder = self.streams.get(("stream.decode", ctx.provider_protocol))
        encoder = self.streams.get(("stream.encode", ctx.client_protocol))
        if decoder is None or encoder is None:
            raise InvalidRequest(f"no stream rules for {ctx.provider_protocol} -> {ctx.client_protocol}")
        return StreamTranslator(decoder, encoder, ctx)

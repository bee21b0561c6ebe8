"""``proxai translate``: run one payload through the same rules the server uses, offline.

    proxai translate --from openai_chat_completions --to anthropic_messages request.json
    proxai translate --response --from anthropic_messages --to openai_chat_completions message.json
    proxai translate --stream --from anthropic_messages --to openai_responses recorded.sse

``--from`` is the protocol the file is written in, ``--to`` the one to produce:
for a request the client's and the provider's, for a response or a stream the
provider's and the client's.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import engine
from proxai.http.sse import SSEParser

def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Any protocol of the rules (a --rules-dir may add one): checked once they are loaded.
    parser.add_argument("--from", dest="source", required=True, help="protocol the file is in")
    parser.add_argument("--to", dest="target", required=True, help="protocol to translate into")
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument("--response", action="store_true", help="the file is a non-streaming response body")
    kind.add_argument("--stream", action="store_true", help="the file is a recorded SSE stream")
    parser.add_argument("--rules-dir", help="an override rules directory, as `rules_dir` in the config")
    parser.add_argument("--provider-name", default="provider", help="provider name recorded in continuation envelopes")
    parser.add_argument("--thinking-mode", choices=("adaptive", "budget"), default="adaptive",
                        help="toward Anthropic: how a reasoning effort asks for thinking, as the provider option")
    parser.add_argument("--client-request", help="(responses/streams) the client's request JSON, for echoed fields and include_usage")
    parser.add_argument("--prompt-caching", choices=("auto", "passthrough", "off"), default="auto",
                        help="the provider's prompt_caching policy (default auto)")
    parser.add_argument("--model", help="(Gemini requests) the model, which Gemini clients put in the URL")
    parser.add_argument("file", help="the JSON body or SSE file ('-' for standard input)")


def run(args: argparse.Namespace, out=None) -> int:
    out = out or sys.stdout
    raw = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    try:
        eng = engine.Engine.load(args.rules_dir)
    except engine.RuleError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for flag, name in (("--from", args.source), ("--to", args.target)):
        if name not in eng.wire:
            print(f"error: {flag}: no protocol {name!r} in the rules (one of {', '.join(eng.wire.names)})",
                  file=sys.stderr)
            return 2
    kind = "stream" if args.stream else "response" if args.response else "request"
    client_body = json.loads(Path(args.client_request).read_text()) if args.client_request else None
    try:
        result, traces = translate(eng, kind, args.source, args.target, raw, client_body, args.provider_name,
                                   prompt_caching=args.prompt_caching, thinking_mode=args.thinking_mode,
                                   model=getattr(args, "model", None))
        out.write(result)
    except (ValueError, UnicodeDecodeError) as err:
        print(f"error: {args.file} is not valid JSON: {err}", file=sys.stderr)
        return 2
    except engine.TranslationError as err:
        if isinstance(err, StreamFailure):
            out.write(err.output)  # the stream as the client would see it, ending in its error
        where = f" (at {err.param})" if err.param else ""
        rule = f" [rule {err.rule}]" if err.rule else ""
        print(f"error: {err.message}{where}{rule}", file=sys.stderr)
        return 1
    for line in traces:
        print(f"trace: {line}", file=sys.stderr)
    return 0


class StreamFailure(engine.TranslationError):
    """A recorded stream the rules could not translate: ``output`` is what a client would
    have received (up to the error event), ``rule`` the rule file:line that failed."""

    def __init__(self, message: str, rule: str | None, output: str):
        super().__init__(message, None, rule)
        self.output = output


def translate(eng: engine.Engine, kind: str, source: str, target: str, raw: bytes,
              client_body: dict | None = None, provider_name: str = "provider",
              prompt_caching: str = "auto", thinking_mode: str = "adaptive", model: str | None = None) -> tuple[str, list[str]]:
    """One payload through the rules: `kind` is request, response or stream; `source` the
    protocol it is written in. Returns the output text and the engine's trace lines.
    Raises ValueError / UnicodeDecodeError (not JSON) or engine.TranslationError (for a
    stream, a StreamFailure)."""
    request_side = kind == "request"
    client, provider = (source, target) if request_side else (target, source)
    ctx = engine.Context(client_protocol=client, provider_protocol=provider, provider_name=provider_name,
                         client_body=client_body, prompt_caching=prompt_caching, thinking_mode=thinking_mode)
    if kind == "stream":
        if client == provider:
            return raw.decode("utf-8", "replace"), ctx.traces
        translator = eng.open_stream(ctx)
        parser = SSEParser()
        chunks = [chunk for event in parser.feed(raw) for chunk in translator.feed(event)]
        chunks.extend(translator.eof())
        output = b"".join(chunks).decode()
        if translator.translation_failed:
            raise StreamFailure((translator.error or {}).get("message") or "the stream could not be translated",
                                translator.error_rule, output)
        return output, ctx.traces
    body = json.loads(raw)
    if request_side and model_in_path(eng.wire, source) and isinstance(body, dict):
        # The server takes these from the URL (models/{model}:streamGenerateContent).
        body = {**body, "model": model or body.get("model") or "model", "stream": bool(body.get("stream"))}
    if client == provider:
        result = body
    elif request_side:
        result = eng.translate_request(ctx, body)
        ctx.traces.extend(_caching_traces(eng.wire, ctx, prompt_caching))
    else:
        result = eng.translate_response(ctx, body)
    return json.dumps(result, indent=2, ensure_ascii=False) + "\n", ctx.traces


def model_in_path(wire, protocol: str) -> bool:
    """Whether the protocol's clients name the model in the URL, not the body (Gemini)."""
    return "{model}" in ((wire.endpoint(protocol, "generate") or {}).get("path") or "")


def _caching_traces(wire, ctx: engine.Context, policy: str) -> list[str]:
    """Where prompt caching put breakpoints (toward a protocol that marks them: Anthropic's
    cache_control) or what a key came from (from one)."""
    if wire.has(ctx.provider_protocol, "cache_control"):
        where = ", ".join(ctx.cache_breakpoints) or "none"
        return [f"prompt caching ({policy}): cache breakpoints at {where}"]
    if wire.has(ctx.client_protocol, "cache_control"):
        source = f"derived from {ctx.cache_key_source}" if ctx.cache_key_source else "none"
        return [f"prompt caching ({policy}): prompt_cache_key {source}"]
    return []

"""Answers carry the model name the client asked for (`routing.routes[].response_model`).

When a route (or one of its fallbacks or balanced providers) sends another model name
upstream, the provider answers under that name. Clients compare it with the name they
asked for: Claude Code drops its signed thinking blocks from the history when the two
differ, and `--continue` switches the session to the upstream name. So by default
(`response_model: client`) an answer names the client's model; `upstream` keeps the
provider's. A route that does not rename the model leaves answers as the provider sent them.

Translated answers get the name in the IR (the engine's `Context.response_model`).
Pass-through answers are relayed byte for byte, so only the bytes of the model's value
change: the first `"<key>": "<value>"` of the body or of each stream event, where
`<key>` is the protocol's (table `protocol->answer_model_key`). The first occurrence is
the top-level one in every protocol's answers (it precedes the output, whose nested
objects, such as an image tool's own `model`, come later); tool arguments are JSON
strings in Chat, Responses and Anthropic, so their keys are escaped and never match.
Gemini's are objects before `modelVersion`: only an argument itself named
`modelVersion` would be taken for it.
"""

from __future__ import annotations

import functools
import re
from typing import Callable

import orjson

TABLE = "protocol->answer_model_key"


def answer_model(match, client_model: object) -> str | None:
    """The model name answers must carry, or None to leave the provider's."""
    if not isinstance(client_model, str) or match.upstream_model == client_model:
        return None
    route = match.config
    if route is not None and route.response_model == "upstream":
        return None
    return client_model


def answer_key(tables, protocol: str) -> str:
    table = tables.get(TABLE)
    return table.lookup(protocol) if table is not None else "model"


@functools.lru_cache(maxsize=256)  # a route's few model names, every request
def _parts(key: str, model: str) -> tuple[bytes, re.Pattern[bytes], bytes]:
    quoted = b'"' + key.encode() + b'"'
    pattern = re.compile(rb'(?<!\\)' + re.escape(quoted) + rb'(\s*:\s*)"(?:[^"\\]|\\.)*"')
    # orjson allocates at least 4 KiB for its output, kept as long as the bytes are: a
    # stream holds this rewriter to its end, so it keeps an exact-size copy.
    return quoted, pattern, bytes(memoryview(orjson.dumps(model)))


def rewriter(key: str, model: str) -> Callable[[bytes], bytes]:
    """bytes -> the same bytes with the first `"key": "..."` value replaced by `model`."""
    quoted, pattern, value = _parts(key, model)

    def replace(m: re.Match[bytes]) -> bytes:
        return quoted + m.group(1) + value

    seen: list[bytes] = []  # the last `"key": "value"` replaced: a stream repeats it in every event

    def rewrite(data: bytes) -> bytes:
        at = data.find(quoted)
        if at < 0:  # most stream events (content deltas): one substring search
            return data
        if seen and data.startswith(seen[0], at) and data[at - 1:at] != b"\\":
            # The first occurrence of the key is the one the pattern would take: no regex.
            return data[:at] + seen[1] + data[at + len(seen[0]):]
        m = pattern.search(data)
        if m is None:
            return data
        new = replace(m)
        seen[:] = [m.group(0), new]
        return data[:m.start()] + new + data[m.end():]

    return rewrite

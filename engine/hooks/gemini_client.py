"""Gemini generateContent as the client's protocol: the steps its rules cannot say.

* ``normalize`` (request.decode ``before``): the body as proto3 JSON parsing reads it.
  Field names in either spelling become camelCase (the SDK sends ``thinking_budget``,
  ``mime_type``, ``parameters_json_schema`` inside camelCase JSON); user data (call
  arguments, responses, schemas) is left as is. Bytes fields arrive in either base64
  alphabet and leave in the standard one. Consecutive model turns (the SDK's chat history
  keeps one per stream chunk) are one turn; in it, consecutive thought parts are one
  reasoning block (its signature the one that ends them) and consecutive text parts one text. Function calls without an id get a
  stable minted one, and function responses without one are linked to their call.
* ``step_signature``: a reasoning part's opaque state as a ``thoughtSignature``, on the first
  part after the reasoning with its text (Gemini CLI keeps no thought parts in its history,
  only the parts Gemini signs).
* ``json_schema``: Gemini's OpenAPI ``Schema`` as the JSON Schema other providers take.
* ``stream.*``: per-stream block state for the stream encoder (whole function calls,
  a reasoning block's signature at its end).
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import re

import orjson

from . import continuation

# Values that are user data, not proto messages: their keys are never renamed.
_OPAQUE = frozenset({"args", "response", "parametersJsonSchema", "responseJsonSchema", "responseJsonSchemaLegacy",
                     "parameters", "responseSchema", "labels", "default", "example", "enum"})
_SNAKE = re.compile(r"_([a-z0-9])")


def _camel(key: str) -> str:
    return _SNAKE.sub(lambda m: m.group(1).upper(), key) if "_" in key else key


def _rename(value):
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            name = _camel(key) if isinstance(key, str) else key
            out[name] = item if name in _OPAQUE else _rename(item)
        return out
    if isinstance(value, list):
        return [_rename(item) for item in value]
    return value


def standard_b64(text):
    """Either base64 alphabet, padded or not -> standard base64 (None when not base64)."""
    raw = decode_b64(text)
    return base64.b64encode(raw).decode() if raw is not None else None


def decode_b64(text):
    if not isinstance(text, str):
        return None
    compact = text.strip().replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(compact + "=" * (-len(compact) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None


def _envelope(signature):
    """A thoughtSignature that carries one of our continuation envelopes -> the envelope text."""
    raw = decode_b64(signature)
    if raw is None or not raw.startswith(continuation.PREFIX.encode()):
        return None
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        return None


def mint_call_id(turn: int, ordinal: int, name) -> str:
    """The same history always mints the same ids: providers see one conversation."""
    digest = hashlib.sha256(f"{turn}.{ordinal}.{name}".encode()).hexdigest()[:24]
    return f"call_{digest}"


def normalize(scope):
    body = _rename(scope.cur)
    contents = body.get("contents")
    if isinstance(contents, dict):  # a single Content, as the REST API also takes
        contents = [contents]
    if not isinstance(contents, list):
        return body
    merged: list = []
    for i, content in enumerate(contents):
        if not isinstance(content, dict):
            merged.append(content)
            continue
        content = dict(content, _index=i)
        if isinstance(content.get("parts"), list):
            content["parts"] = [dict(part, _src=f"contents[{i}].parts[{j}]") if isinstance(part, dict) else part
                                for j, part in enumerate(content["parts"])]
        if content.get("role") == "model" and merged and isinstance(merged[-1], dict) \
                and merged[-1].get("role") == "model" and isinstance(content.get("parts"), list) \
                and isinstance(merged[-1].get("parts"), list):
            merged[-1] = dict(merged[-1], parts=merged[-1]["parts"] + content["parts"])
            continue
        merged.append(content)
    body["contents"] = [_turn(scope, c) if isinstance(c, dict) else c for c in merged]
    _link_calls(scope, body["contents"])
    return body


def _plain_text(part: dict, carrier: bool = False) -> bool:
    return isinstance(part.get("text"), str) and part.get("thought") is not True \
        and (carrier and "_carried" in part or "_envelope" not in part) \
        and not any(key in part for key in ("functionCall", "functionResponse", "inlineData", "fileData"))


def _turn(scope, content: dict) -> dict:
    parts = content.get("parts")
    if not isinstance(parts, list):
        return content
    model = content.get("role") == "model"
    out: list = []
    for part in parts:
        if not isinstance(part, dict):
            out.append(part)
            continue
        part = dict(part)
        inline = part.get("inlineData")
        if isinstance(inline, dict) and "data" in inline:
            data = standard_b64(inline["data"])
            if data is None:
                _fail(scope, "inlineData.data is not base64", f"{part['_src']}.inlineData.data")
            part["inlineData"] = dict(inline, data=data)
        signature = part.pop("thoughtSignature", None)
        if signature is not None:
            envelope = _envelope(signature)
            if envelope is None:
                # Gemini's own signatures (a Gemini provider is passed through, never translated).
                scope.ctx.trace("foreign thoughtSignature skipped")
            else:
                part["_envelope"] = envelope
                if part.get("thought") is not True:
                    part["_carried"] = continuation.carried(scope.ctx, envelope) or []
                    # The thought parts just before it are the visible copy of what it carries.
                    if any(r.get("text") is not None for r in part["_carried"]):
                        while out and isinstance(out[-1], dict) and out[-1].get("thought") is True \
                                and "_envelope" not in out[-1]:
                            out.pop()
        previous = out[-1] if out and isinstance(out[-1], dict) else None
        if previous is not None and part.get("thought") is True and previous.get("thought") is True \
                and "_envelope" not in previous and ("text" in part or "_envelope" in part):
            previous["text"] = (previous.get("text") or "") + (part.get("text") or "")
            if "_envelope" in part:
                previous["_envelope"] = part["_envelope"]
            continue
        # A streamed answer kept as one part per chunk is one text block, as the model wrote it
        # (the reasoning state its first part carries stays in front of it).
        if model and previous is not None and _plain_text(part) and _plain_text(previous, carrier=True):
            previous["text"] += part["text"]
            continue
        out.append(part)
    return dict(content, parts=out)


def _link_calls(scope, contents: list) -> None:
    """Ids for calls without one; each response without one answers the earliest open call
    of its name (parallel calls of one name are answered in order)."""
    open_calls: list = []  # [name, id] of calls not yet answered, in call order
    for turn in contents:
        if not isinstance(turn, dict) or not isinstance(turn.get("parts"), list):
            continue
        ordinal = 0
        for part in turn["parts"]:
            if not isinstance(part, dict):
                continue
            call = part.get("functionCall")
            if isinstance(call, dict):
                if not call.get("id"):
                    call = part["functionCall"] = dict(call, id=mint_call_id(turn["_index"], ordinal, call.get("name")))
                open_calls.append([call.get("name"), call["id"]])
                ordinal += 1
            answer = part.get("functionResponse")
            if isinstance(answer, dict):
                wanted = answer.get("id")
                for k, (name, call_id) in enumerate(open_calls):
                    if (call_id == wanted) if wanted else (name == answer.get("name")):
                        del open_calls[k]
                        if not wanted:
                            part["functionResponse"] = dict(answer, id=call_id)
                        break
                else:
                    if not wanted:
                        _fail(scope, f"functionResponse {answer.get('name')!r} answers no earlier functionCall of that name",
                              f"{part['_src']}.functionResponse.name")


def _fail(scope, message: str, param: str):
    raise scope.run.error_class(message, param, None)


def signature(scope, part=None):
    """A reasoning part's opaque state as a thoughtSignature: the envelope's ASCII in
    standard base64 (the field is bytes). None when there is nothing to carry."""
    return _b64_envelope(continuation.wrap(scope, part=part))


# Parts a step's reasoning state rides on toward a Gemini client.
_CARRIERS = frozenset({"text", "refusal", "tool_call"})


def step_signature(scope, parts=None, index=None):
    """The thoughtSignature of part `index` of an IR turn. Gemini CLI keeps no thought parts in
    its history, so a step's reasoning state rides where Gemini puts its own signature: on the
    first part after the reasoning (the step's first functionCall, or its first text when no
    call comes first), one envelope for the reasoning blocks since the previous such part,
    their text included (the client replays no reasoning text, and a signature covers it).
    Reasoning with no such part after it keeps its state on its own thought part."""
    if not isinstance(parts, list) or not isinstance(index, int) or not 0 <= index < len(parts):
        return None
    part = parts[index]
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "reasoning":
        if any(isinstance(p, dict) and p.get("type") in _CARRIERS for p in parts[index + 1:]):
            return None
        return signature(scope, part)
    if kind not in _CARRIERS:
        return None
    step = []
    for p in reversed(parts[:index]):
        if isinstance(p, dict) and p.get("type") in _CARRIERS:
            break
        if isinstance(p, dict) and p.get("type") == "reasoning":
            step.insert(0, p)
    return _b64_envelope(continuation.carry(scope.ctx, step))


def _b64_envelope(envelope):
    """thoughtSignature is bytes: the envelope's ASCII in standard base64."""
    return base64.b64encode(envelope.encode()).decode() if envelope else None


def function_response(scope, response=None):
    """A functionResponse's `response` object as the tool result's text."""
    if isinstance(response, str):
        return response
    return orjson.dumps(response if response is not None else {}).decode()


def one_name(scope, mode=None, names=None, any=False):
    """allowedFunctionNames: with ANY and one name it is that tool; otherwise (`any`) it
    narrows the choice to those names."""
    if not isinstance(names, list) or not names or mode == "none":
        return False
    return True if any else (mode == "required" and len(names) == 1)


def budget_band(scope, budget=None):
    """thinkingBudget -> a band of the effort scale (docs/mappings.md §9); None: the provider's default."""
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
        return None
    if budget == 0:
        return "off"
    for band, below in (("low", 2048), ("medium", 8192), ("high", 32768)):
        if budget < below:
            return band
    return "xhigh"


# --- OpenAPI Schema -> JSON Schema ------------------------------------------------

_SCHEMA_KEYS = {"anyOf": "anyOf", "properties": "properties", "items": "items", "required": "required",
                "description": "description", "enum": "enum", "format": "format", "title": "title",
                "minItems": "minItems", "maxItems": "maxItems", "minimum": "minimum", "maximum": "maximum",
                "minLength": "minLength", "maxLength": "maxLength", "pattern": "pattern", "default": "default",
                "example": "examples", "minProperties": "minProperties", "maxProperties": "maxProperties"}


def _schema(node):
    if not isinstance(node, dict):
        return node
    out: dict = {}
    for key, value in node.items():
        name = _camel(key)
        if name == "type" and isinstance(value, str):
            out["type"] = value.lower()
        elif name == "properties" and isinstance(value, dict):
            out["properties"] = {k: _schema(v) for k, v in value.items()}
        elif name == "items":
            out["items"] = _schema(value)
        elif name == "anyOf" and isinstance(value, list):
            out["anyOf"] = [_schema(v) for v in value]
        elif name == "example":
            out["examples"] = [value]
        elif name in _SCHEMA_KEYS:
            out[_SCHEMA_KEYS[name]] = value
        # nullable is folded in below; propertyOrdering only orders output: no JSON Schema slot.
    if node.get("nullable") is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


def json_schema(scope, schema=None):
    return _schema(schema) if isinstance(schema, dict) else None


# --- stream encoder state -----------------------------------------------------------


class Blocks:
    """The stream encoder's open blocks: a function call is held until its block closes
    (Gemini sends calls whole), and a reasoning block's text and opaque state are kept for
    the signature owed when it closes."""

    __slots__ = ("open", "ctx", "pending")

    def __init__(self, ctx):
        self.open: dict = {}
        self.ctx = ctx
        # Closed reasoning blocks whose state waits for the next text or functionCall part.
        self.pending: list = []

    def start(self, index=None, kind=None, id=None, name=None, text=None, opaque=None) -> None:
        self.open[index] = {"kind": kind, "id": id, "name": name, "text": text or "", "opaque": opaque}

    def delta(self, index=None, delta=None):
        """Accumulate a block's text or arguments; returns the block's kind (null if unknown)."""
        block = self.open.get(index)
        if block is None:
            return None
        if isinstance(delta, str):
            block.setdefault("chunks", []).append(delta)  # joined at the stop: += on a dict entry copies it all
        return block["kind"]

    def opaque(self, index=None, opaque=None) -> None:
        block = self.open.get(index)
        if block is not None:
            block["opaque"] = opaque

    def stop(self, index=None):
        """The closed block ({kind, id, name, text, opaque}), or null if it was never started.
        A reasoning block's state is held for the next part that carries it (step_signature)."""
        block = self.open.pop(index, None)
        if block is not None and "chunks" in block:
            block["text"] += "".join(block.pop("chunks"))
        if block is not None and block["opaque"] and block["kind"] in ("reasoning", "redacted_reasoning"):
            self.pending.append({"type": "reasoning", "opaque": block["opaque"],
                                 "text": block["text"] if block["kind"] == "reasoning" else None})
        return block

    def carry(self):
        """The held reasoning state as the thoughtSignature of the part about to be sent (null
        when none is held); it is carried once."""
        if not self.pending:
            return None
        step, self.pending = self.pending, []
        return _b64_envelope(continuation.carry(self.ctx, step))

    def left(self):
        """At the end of the turn: the signatures of held reasoning no part carried, each on its
        own (sent on empty thought parts)."""
        step, self.pending = self.pending, []
        return [sig for sig in (_b64_envelope(continuation.envelope(self.ctx, p)) for p in step) if sig]


OBJECTS = {"gemini_client.blocks": Blocks}


HOOKS = {
    "gemini_client.normalize": normalize,
    "gemini_client.step_signature": step_signature,
    "gemini_client.function_response": function_response,
    "gemini_client.json_schema": json_schema,
    "gemini_client.one_name": one_name,
    "gemini_client.budget_band": budget_band,
}
